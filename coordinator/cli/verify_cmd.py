"""`dome verify RUN_ID [--json]`: re-check a promoted run offline.

Exit 0 when every check passes, 1 with the reasons otherwise, 2 on bad
input, 3 on an internal failure.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from coordinator.cli.main import add_common_arguments, ledger_exit_code, open_ledger
from ledger import LedgerError
from registry.errors import DomeError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", help="the run to verify")
    parser.add_argument("--repo", default=None,
                        help="repository holding the run's commits (default: the one recorded)")
    add_common_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from coordinator.integration.verify import verify_run
    from coordinator.keys import load_keyring
    try:
        ledger = open_ledger(args)
        keyring = load_keyring(args.ops_root)
        rep = verify_run(ledger, args.run_id, keyring,
                         repo=Path(args.repo) if args.repo else None)
    except DomeError as exc:
        if args.json:
            print(json.dumps({"run_id": args.run_id, "valid": False, "error": exc.to_object()}))
        else:
            print(f"dome verify: {exc.code}: {exc.message}", file=sys.stderr)
        if isinstance(exc, LedgerError):
            return ledger_exit_code(exc)
        return 1
    if args.json:
        print(json.dumps(rep.to_dict(), sort_keys=True))
    else:
        print(f"run {rep.run_id}: {'VALID' if rep.valid else 'INVALID'}")
        if rep.head_ref:
            print(f"  promoted head {rep.head_ref} -> {rep.to_ref}")
        print(f"  {sum(c['ok'] for c in rep.checks)}/{len(rep.checks)} checks passed")
        for r in rep.reasons:
            print(f"  x {r}")
    return 0 if rep.valid else 1
