"""Run leases: at most one coordinator drives a run at a time.

A lease row names its holder (a random id, the host, the pid and the pid's
start time) and when it expires; the holder renews it with a heartbeat.
Another coordinator may take a run over only when the lease has lapsed:
it expired, or its holder was on this host and that process is gone (a
kill -9 frees the run at once on the same machine; elsewhere it frees it
after the time to live). Decisions are pure (`is_live`); `acquire`, `renew`,
`release` and `read` run inside the ledger's write/read transactions.
"""
from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Connection, delete, select, update

from .errors import LedgerError
from .models import run_leases

DEFAULT_TTL_S = 30.0


class RunLeaseHeld(LedgerError):
    """Another coordinator holds the run's lease and is alive."""

    code = "RUN_LEASE_HELD"
    retry = "light"


class RunLeaseLost(LedgerError):
    """This coordinator's lease lapsed and another one took the run over."""

    code = "RUN_LEASE_LOST"


@dataclass(frozen=True)
class Lease:
    run_id: str
    holder: str
    host: str
    pid: int
    pid_start: str | None
    acquired_at: str
    heartbeat_at: str
    expires_at: float
    ttl_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def process_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (tells a live process from a reused pid), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def process_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process, but it exists
    return start is None or process_start(pid) in (None, start)


def is_live(lease: Lease | None, now: float, host: str) -> bool:
    """Does `lease` still bind its run (pure but for the process check on this host)?"""
    if lease is None or now >= lease.expires_at:
        return False
    return lease.host != host or process_alive(lease.pid, lease.pid_start)


def utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}Z"


def new_holder() -> dict[str, Any]:
    pid = os.getpid()
    return {"holder": "coord-" + secrets.token_hex(8), "host": socket.gethostname(), "pid": pid,
            "pid_start": process_start(pid)}


def read(conn: Connection, run_id: str) -> Lease | None:
    row = conn.execute(select(run_leases).where(run_leases.c.run_id == run_id)).mappings().first()
    return None if row is None else Lease(**dict(row))


def acquire(conn: Connection, run_id: str, me: dict[str, Any], ttl_s: float, now: float) -> Lease:
    """Take the run's lease for `me`, or raise RunLeaseHeld while another live holder has it."""
    cur = read(conn, run_id)
    if cur is not None and cur.holder != me["holder"] and is_live(cur, now, me["host"]):
        raise RunLeaseHeld(
            f"run {run_id} is driven by another coordinator (pid {cur.pid} on {cur.host}, "
            f"lease expires in {cur.expires_at - now:.0f} s)",
            details={"run_id": run_id, "holder": cur.holder, "host": cur.host, "pid": cur.pid,
                     "heartbeat_at": cur.heartbeat_at, "expires_at": utc(cur.expires_at)},
            hints=["wait for that coordinator to finish, or stop it; once its lease lapses "
                   f"`dome run --resume {run_id}` takes over"])
    row = {**me, "run_id": run_id, "acquired_at": utc(now), "heartbeat_at": utc(now),
           "expires_at": now + ttl_s, "ttl_s": ttl_s}
    if cur is None:
        conn.execute(run_leases.insert(), row)
    else:
        conn.execute(update(run_leases).where(run_leases.c.run_id == run_id).values(**row))
    return Lease(**row)


def renew(conn: Connection, run_id: str, holder: str, ttl_s: float, now: float) -> bool:
    """Move the expiry on; False when `holder` no longer holds the lease."""
    res = conn.execute(update(run_leases)
                       .where(run_leases.c.run_id == run_id, run_leases.c.holder == holder)
                       .values(heartbeat_at=utc(now), expires_at=now + ttl_s))
    return res.rowcount == 1


def release(conn: Connection, run_id: str, holder: str) -> None:
    conn.execute(delete(run_leases).where(run_leases.c.run_id == run_id, run_leases.c.holder == holder))
