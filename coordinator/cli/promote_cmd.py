"""`dome promote RUN_ID --consent TOKEN`: approve a run held at the human
gate. The token is single-use; the run is promoted only if the rest of the
evidence chain is still complete. Exit 0 promoted, 1 token refused, 4 blocked.
"""
from __future__ import annotations

import argparse
import json
import sys

from coordinator.cli.main import add_common_arguments, ledger_exit_code, open_ledger
from ledger import LedgerError
from registry.errors import DomeError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id")
    parser.add_argument("--consent", required=True, help="the consent token printed by `dome run`")
    parser.add_argument("--approved-by", default="", help="who approves (recorded)")
    add_common_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from coordinator.integration.consent import grant_consent
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from .main import run_not_found
    try:
        ledger = open_ledger(args, migrate=True)
        if not ledger.events(args.run_id, limit=1):
            raise run_not_found(args.run_id)
        key = load_or_create_signing_key(args.ops_root)
        res = grant_consent(ledger, args.run_id, args.consent, key=key, ops_root=args.ops_root,
                            keyring=load_keyring(args.ops_root), approved_by=args.approved_by)
    except DomeError as exc:
        if args.json:
            print(json.dumps({"run_id": args.run_id, "error": exc.to_object()}))
        else:
            print(f"dome promote: {exc.code}: {exc.message}", file=sys.stderr)
        if exc.code == "RUN_NOT_FOUND":
            return 2
        return ledger_exit_code(exc) if isinstance(exc, LedgerError) else 1
    if args.json:
        print(json.dumps(res.to_dict(), sort_keys=True))
    else:
        print(f"run {res.run_id}: {res.status}" + (f" at {res.head_ref}" if res.head_ref else ""))
        for m in res.missing:
            print(f"  missing: {m}")
    return res.exit_code
