"""A coordinator process for the gateway's one-commit crash tests: it starts the real worker
gateway over a run, gives one attempt a grant, and sends that attempt's whole request
(complete_task carrying put_artifact and submit_patch) through the real SDK client. The
process is killed (`os._exit(137)`, as kill -9) at the boundary named on the command line:

    gateway_crash_child.py OPS_ROOT WORKDIR (between|before_commit|none)

between: as call 2 (submit_patch) starts, after call 1 was kept by its savepoint;
before_commit: after the last call's writes, before the request's commit;
none: not here (DOME_CRASH_AFTER_TOPIC then kills it right after the commit).
The attempt's node_execution_id is "ne-crash"; its grant is in the ledger (grant.issued)."""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from coordinator.keys import load_keyring, load_or_create_signing_key
from ledger import Ledger
from ledger.crashpoint import EXIT_STATUS
from tests.conftest import git, make_repo
from tests.runloop.conftest import open_attempt, start_gateway

RUN, NEID = "run-crash", "ne-crash"


def _kill_at(gw, tool: str, *, after: bool) -> None:
    spec = gw.dispatcher.specs[tool]

    def handler(args, call):
        if not after:
            os._exit(EXIT_STATUS)
        out = spec.handler(args, call)
        os._exit(EXIT_STATUS)
        return out  # pragma: no cover

    gw.dispatcher.specs[tool] = dataclasses.replace(spec, handler=handler)


def main() -> None:
    ops, work, where = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    ledger = Ledger.open(None, ops)
    signer, keyring = load_or_create_signing_key(ops), load_keyring(ops)
    repo = make_repo(work / "repo")
    started = start_gateway(ledger, keyring, signer, work / "gw.sock", RUN, git(repo, "rev-parse", "HEAD").strip())
    gw = started[0]
    c, proposal, diff, _ = open_attempt(started, signer, repo, RUN, NEID)
    if where == "between":
        _kill_at(gw, "submit_patch", after=False)
    elif where == "before_commit":
        _kill_at(gw, "complete_task", after=True)
    c.put_artifact_carried(diff, "text/x-diff", "patch.diff")
    pid = c.submit_patch_carried(proposal)
    print("answered", c.complete_task("succeeded", summary={}, proposal_id=pid), flush=True)
    gw.stop()
    ledger.close()


if __name__ == "__main__":
    main()
