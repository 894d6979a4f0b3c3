"""The admin side of dome: the only holder of the signing key.

Imports ledger and registry; never imports torch or klayout.

The public face (imported on first use, so `import coordinator` stays cheap):

    from coordinator import RunLoop, RunContext, load_work_queue, verify_run
    loop = RunLoop.start(Path("work.queue.json"), RunContext(ledger=..., ops_root=..., signer=..., keyring=...))
    outcome = loop.run()

Everything else is internal to its subpackage (cli, runloop, integration,
gateway, executors, mcp, report) and may change without notice.
"""
from __future__ import annotations

from registry.faces import lazy_face

_FACE = {
    "RunLoop": "coordinator.runloop.loop", "RunContext": "coordinator.runloop.loop",
    "RunOutcome": "coordinator.runloop.loop",
    "WorkQueue": "coordinator.workqueue", "WorkQueueError": "coordinator.workqueue",
    "load_work_queue": "coordinator.workqueue",
    "RunState": "coordinator.runstate", "fold": "coordinator.runstate",
    "verify_run": "coordinator.integration.verify", "grant_consent": "coordinator.integration.consent",
    "issue_profile": "coordinator.grants", "GrantVerifier": "coordinator.grants",
    "load_or_create_signing_key": "coordinator.keys", "load_keyring": "coordinator.keys",
    "build_report": "coordinator.report.build",
}

__all__ = sorted(_FACE)


__getattr__ = lazy_face(__name__, _FACE)
