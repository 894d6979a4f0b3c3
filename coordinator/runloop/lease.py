"""The run loop's hold on its run: take the lease, keep it alive, notice losing it.

    keeper = LeaseKeeper.take(ledger, run_id, ttl_s)   # RunLeaseHeld while another lives
    keeper.start()                                     # heartbeat thread
    keeper.check()                                     # before writing: RunLeaseLost if taken over
    keeper.stop()                                      # stop the heartbeat, give the run back

The heartbeat renews every third of the time to live from its own thread,
so a long validation does not lose the run. `check()` costs nothing while
the last renewal is fresh; when it is not (the process was stopped or
starved for a whole time to live) it renews synchronously first, so a
coordinator that lost the run finds out before it writes.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from ledger import Ledger
from ledger.lease import DEFAULT_TTL_S, RunLeaseLost, new_holder


class LeaseKeeper:
    def __init__(self, ledger: Ledger, run_id: str, holder: dict[str, Any], ttl_s: float) -> None:
        self.ledger, self.run_id, self.holder, self.ttl_s = ledger, run_id, holder, float(ttl_s)
        self._valid_until = time.monotonic() + self.ttl_s
        self._lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def take(cls, ledger: Ledger, run_id: str, ttl_s: float | None = None) -> "LeaseKeeper":
        me = new_holder()
        ttl = float(ttl_s or DEFAULT_TTL_S)
        t0 = time.monotonic()
        ledger.lease_acquire(run_id, me, ttl)
        keeper = cls(ledger, run_id, me, ttl)
        keeper._valid_until = t0 + ttl
        return keeper

    def _renew(self) -> bool:
        t0 = time.monotonic()
        ok = self.ledger.lease_renew(self.run_id, self.holder["holder"], self.ttl_s)
        if ok:
            self._valid_until = t0 + self.ttl_s
        else:
            self._lost = True
        return ok

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                if not self._renew():
                    return
            except Exception:  # noqa: BLE001 - a busy database: check() renews or gives up
                continue

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self.run_id}", daemon=True)
        self._thread.start()

    def check(self) -> None:
        if not self._lost and time.monotonic() >= self._valid_until:
            self._renew()
        if self._lost:
            raise RunLeaseLost(f"another coordinator took run {self.run_id} over; this one stops "
                               "without writing", details={"run_id": self.run_id, **self.holder})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not self._lost:
            try:
                self.ledger.lease_release(self.run_id, self.holder["holder"])
            except Exception:  # noqa: BLE001 - the lease expires by itself
                pass
