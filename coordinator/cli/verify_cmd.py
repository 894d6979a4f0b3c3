"""`dome verify RUN_ID [--json]`: re-check a run offline.

Exit 0 when every check passes, whatever the run's outcome (promoted,
blocked, awaiting consent, failed, completed): the record is intact and says
what happened. 1 when a check fails (the run is invalid; each failed check
named), 2 on bad input (no ledger there, no such run), 3 when the ledger cannot be opened
or read.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from coordinator.cli.main import EXIT_USAGE, add_common_arguments, ledger_exit_code, open_ledger, run_not_found
from registry.errors import DomeError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", help="the run to verify")
    parser.add_argument("--repo", default=None,
                        help="repository holding the run's commits (default: the one recorded)")
    add_common_arguments(parser)


def exit_code(exc: DomeError) -> int:
    """The exit code for an error that stopped verification, by its type: no ledger there or no
    such run 2, a ledger that cannot be opened or read 3, anything else 1."""
    from ledger import LedgerError
    if exc.code == "RUN_NOT_FOUND":
        return EXIT_USAGE
    return ledger_exit_code(exc) if isinstance(exc, LedgerError) else 1


CONCLUSION = {
    "blocked": "the evidence chain is valid and the run is blocked (not promoted)",
    "awaiting_consent": "the evidence chain is valid and the run awaits consent (not promoted)",
    "failed": "the evidence chain is valid and the run failed (not promoted)",
    "completed": "the evidence chain is valid and the run completed with nothing to promote",
}


def render_text(rep) -> list[str]:
    """The human report, by the report's status. "promoted head" is printed only
    for a run that was promoted; a valid record of a run that was not says what
    it shows and why."""
    status = rep.status.value
    passed = f"{sum(c.ok for c in rep.checks)}/{len(rep.checks)}"
    if status == "promoted":
        lines = [f"run {rep.run_id}: VALID", f"  promoted head {rep.head_ref} -> {rep.to_ref}"]
        if rep.tasks_not_landed:
            lines.append("  partial: promoted without " + ", ".join(
                f"{t.get('node_id')} ({t.get('status')})" for t in rep.tasks_not_landed))
        return lines + [f"  {passed} checks passed"]
    if status in CONCLUSION:
        lines = [f"run {rep.run_id}: {CONCLUSION[status]}", f"  {passed} integrity checks passed"]
        if rep.blocked_by:
            lines.append("  blocked because:" if status == "blocked" else "  missing:")
            lines += [f"    - {m}" for m in rep.blocked_by]
        if status == "awaiting_consent":
            lines.append(f"  next: dome promote {rep.run_id} --consent TOKEN")
        if status == "failed" and rep.run_reason:
            lines.append(f"  reason: {rep.run_reason}")
        return lines
    lines = [f"run {rep.run_id}: INVALID"]
    if rep.outcome:
        lines.append(f"  the recorded outcome is {rep.outcome}")
    lines.append(f"  {passed} checks passed")
    lines.extend(f"  x {r}" for r in rep.reasons())
    return lines


def run(args: argparse.Namespace) -> int:
    from coordinator.integration.verify import verify_run
    from coordinator.keys import load_keyring
    from ledger import RecordUnreadable
    try:
        ledger = open_ledger(args)
        try:
            if args.run_id not in ledger.run_ids():
                raise run_not_found(args.run_id)
            keyring = load_keyring(args.ops_root)
            rep = verify_run(ledger, args.run_id, keyring,
                             repo=Path(args.repo) if args.repo else None, ops_root=Path(args.ops_root))
            try:
                risk = risk_of(ledger, args.run_id)
            except RecordUnreadable:  # verify_run already names the record; the verdicts cannot be read
                risk = None
        finally:
            ledger.close()
    except DomeError as exc:
        if args.json:
            print(json.dumps({"run_id": args.run_id, "valid": False, "error": exc.to_object()}))
        else:
            print(f"dome verify: {exc.code}: {exc.message}", file=sys.stderr)
        return exit_code(exc)
    if args.json:
        print(json.dumps({**rep.to_dict(), "risk_sources": risk.risk_sources if risk else [],
                          "policy_preset": risk.domain if risk else ""}, sort_keys=True))
    else:
        from coordinator.report.explain import risk_lines
        print("\n".join([*render_text(rep), *(risk_lines(risk) if risk else [])]))
    return 0 if rep.valid else 1


def risk_of(ledger, run_id: str):
    """Which proposals raised the run's risk, by which rule and figures (from its verdicts)."""
    from coordinator.integration.policy import risk_sources
    from coordinator.report.explain import Explanation
    ex = Explanation(run_id=run_id)
    verified = []
    for e in ledger.events(run_id):
        if e.topic == "integration.proposal_verified":
            verified.append(dict(e.payload))
        elif e.topic == "integration.policy":
            ex.domain = str((e.payload.get("policy") or {}).get("domain") or "")
    ex.risk_sources = risk_sources(verified)
    return ex
