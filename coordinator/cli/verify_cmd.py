"""`dome verify RUN_ID [--json]`: re-check a run offline.

Exit 0 when every check passes, 1 with the failed checks otherwise, 2 on
bad input (no ledger there), 3 when the ledger cannot be opened or read.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from coordinator.cli.main import add_common_arguments, ledger_exit_code, open_ledger
from registry.errors import DomeError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", help="the run to verify")
    parser.add_argument("--repo", default=None,
                        help="repository holding the run's commits (default: the one recorded)")
    add_common_arguments(parser)


def exit_code(exc: DomeError) -> int:
    """The exit code for an error that stopped verification, by its type: no ledger there 2,
    a ledger that cannot be opened or read 3, anything else 1."""
    from ledger import LedgerError
    return ledger_exit_code(exc) if isinstance(exc, LedgerError) else 1


# checks that fail for every blocked run by design: it was not promoted
BLOCKED_BY_DESIGN = frozenset({"promotion_outcome", "evidence_chain", "target_ref", "run_finished_agrees"})


def render_text(rep) -> list[str]:
    """The human report. A blocked run whose record is intact is said to be
    exactly that; "promoted head" is printed only for a run that was promoted."""
    failed = rep.failures
    if rep.outcome == "blocked" and failed and all(c.kind.value in BLOCKED_BY_DESIGN for c in failed):
        integrity = [c for c in rep.checks if c.kind.value not in BLOCKED_BY_DESIGN]
        lines = [f"run {rep.run_id}: the evidence chain is valid and the run is blocked (not promoted)",
                 f"  {sum(c.ok for c in integrity)}/{len(integrity)} integrity checks passed",
                 "  blocked because:"]
        lines += [f"    - {c.detail}" for c in failed if c.kind.value == "promotion_outcome"]
        return lines
    lines = [f"run {rep.run_id}: {'VALID' if rep.valid else 'INVALID'}"]
    if rep.head_ref and rep.outcome == "promoted":
        lines.append(f"  promoted head {rep.head_ref} -> {rep.to_ref}")
        if rep.tasks_not_landed:
            lines.append("  partial: promoted without " + ", ".join(
                f"{t.get('node_id')} ({t.get('status')})" for t in rep.tasks_not_landed))
    elif rep.outcome:
        lines.append(f"  the run is {rep.outcome} (not promoted)")
    lines.append(f"  {sum(c.ok for c in rep.checks)}/{len(rep.checks)} checks passed")
    lines.extend(f"  x {r}" for r in rep.reasons())
    return lines


def run(args: argparse.Namespace) -> int:
    from coordinator.integration.verify import verify_run
    from coordinator.keys import load_keyring
    try:
        ledger = open_ledger(args)
        try:
            keyring = load_keyring(args.ops_root)
            rep = verify_run(ledger, args.run_id, keyring,
                             repo=Path(args.repo) if args.repo else None, ops_root=Path(args.ops_root))
        finally:
            ledger.close()
    except DomeError as exc:
        if args.json:
            print(json.dumps({"run_id": args.run_id, "valid": False, "error": exc.to_object()}))
        else:
            print(f"dome verify: {exc.code}: {exc.message}", file=sys.stderr)
        return exit_code(exc)
    if args.json:
        print(json.dumps(rep.to_dict(), sort_keys=True))
    else:
        print("\n".join(render_text(rep)))
    return 0 if rep.valid else 1
