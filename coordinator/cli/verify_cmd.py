"""`dome verify RUN_ID [--json]`: re-check a promoted run offline.

Exit 0 when every check passes, 1 with the reasons otherwise, 2 on bad
input, 3 on an internal failure.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from coordinator.cli.main import add_common_arguments
from registry.errors import DomeError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", help="the run to verify")
    parser.add_argument("--repo", default=None,
                        help="repository holding the run's commits (default: the one recorded)")
    add_common_arguments(parser)


# checks that fail for every blocked run by design: it was not promoted
BLOCKED_BY_DESIGN = frozenset({"promotion_outcome", "evidence_chain", "target_ref"})


def render_text(rep, outcome: str | None) -> list[str]:
    """The human report. A blocked run whose record is intact is said to be
    exactly that, never "promoted head"; a promoted head is named only when it was."""
    checks = [c if isinstance(c, dict) else c.to_dict() for c in rep.checks]
    failed = [c for c in checks if not c["ok"]]
    if outcome == "blocked" and failed and all(c["check"].split(":")[0] in BLOCKED_BY_DESIGN for c in failed):
        integrity = [c for c in checks if c["check"].split(":")[0] not in BLOCKED_BY_DESIGN]
        lines = [f"run {rep.run_id}: the evidence chain is valid and the run is blocked (not promoted)",
                 f"  {sum(c['ok'] for c in integrity)}/{len(integrity)} integrity checks passed",
                 "  blocked because:"]
        lines += [f"    - {c['detail']}" for c in failed if c["check"] == "promotion_outcome"]
        return lines
    lines = [f"run {rep.run_id}: {'VALID' if rep.valid else 'INVALID'}"]
    if rep.head_ref and outcome == "promoted":
        lines.append(f"  promoted head {rep.head_ref} -> {rep.to_ref}")
    elif outcome:
        lines.append(f"  the run is {outcome} (not promoted)")
    lines.append(f"  {sum(c['ok'] for c in checks)}/{len(checks)} checks passed")
    lines += [f"  x {c['check']}: {c['detail']}" if c["detail"] else f"  x {c['check']}" for c in failed]
    return lines


def run(args: argparse.Namespace) -> int:
    from coordinator.integration.verify import verify_run
    from coordinator.keys import load_keyring
    from coordinator.report.explain import explain

    from .main import open_ledger_for_reading
    try:
        ledger = open_ledger_for_reading(args)
        outcome = explain(args.run_id, [r.to_json() for r in ledger.events(args.run_id)]).status
        keyring = load_keyring(args.ops_root)
        rep = verify_run(ledger, args.run_id, keyring,
                         repo=Path(args.repo) if args.repo else None)
    except DomeError as exc:
        if args.json:
            print(json.dumps({"run_id": args.run_id, "valid": False, "error": exc.to_object()}))
        else:
            print(f"dome verify: {exc.code}: {exc.message}", file=sys.stderr)
        if exc.code == "LEDGER_NOT_FOUND":
            return 2
        return 3 if exc.code in ("LEDGER_UNAVAILABLE",) else 1
    if args.json:
        print(json.dumps(rep.to_dict(), sort_keys=True))
    else:
        print("\n".join(render_text(rep, outcome)))
    return 0 if rep.valid else 1
