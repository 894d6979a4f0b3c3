"""`dome` command-line entry point.

Each command lives in its own module that defines
`add_arguments(parser)` and `run(args) -> int`. Only the module of the
command being run is imported, so `dome --help` and `dome mcp` start fast
and never import torch or klayout.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("coordinator.cli.run_cmd", "run a work queue (or --resume a run)"),
    "status": ("coordinator.cli.status_cmd", "show runs and their state"),
    "events": ("coordinator.cli.events_cmd", "print or follow a run's ledger events"),
    "verify": ("coordinator.cli.verify_cmd", "re-check a run's evidence chain offline"),
    "promote": ("coordinator.cli.promote_cmd", "promote a run held at a human gate"),
    "ledger": ("coordinator.cli.ledger_cmd", "whole-ledger checks"),
    "report": ("coordinator.cli.report_cmd", "human report of a run"),
    "mcp": ("coordinator.cli.mcp_cmd", "serve the MCP front door"),
    "litho": ("coordinator.cli.litho_cmd", "lithography engine (evaluate, optimize)"),
    "registry": ("coordinator.cli.registry_cmd", "tool registry: check, openrpc, gen-client"),
}

EXIT_OK = 0
EXIT_INVALID = 1  # a check ran and found a problem (verify, registry check)
EXIT_USAGE = 2  # bad arguments or input
EXIT_INTERNAL = 3  # an unexpected failure inside dome


def default_ops_root() -> str:
    return os.environ.get("DOME_OPS_ROOT", "./ops")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options every command takes."""
    parser.add_argument("--ops-root", default=default_ops_root(),
                        help="run artifacts, keys and the default ledger (default: ./ops or $DOME_OPS_ROOT)")
    parser.add_argument("--db", default=None,
                        help="SQLAlchemy URL of the ledger (default: sqlite:///OPS_ROOT/dome.db)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def open_ledger(args: argparse.Namespace, *, migrate: bool = False) -> Any:
    """The ledger of an existing run (--db, else OPS_ROOT/dome.db): never created, and
    migrated only for a command that writes (`migrate`). Raises LedgerNotFound /
    LedgerUnavailable; `ledger_exit_code` turns either into the command's exit code."""
    from ledger import Ledger

    return Ledger.open(args.db, Path(args.ops_root), migrate_schema=migrate, must_exist=True)


def ledger_exit_code(exc: Exception) -> int:
    """Why a command could not open its ledger, as an exit code: a missing ledger is bad
    input (the wrong --ops-root or --db); one that cannot be opened is an internal failure."""
    from ledger import LedgerNotFound

    return EXIT_USAGE if isinstance(exc, LedgerNotFound) else EXIT_INTERNAL


def refuse(command: str, args: argparse.Namespace, exc: Any) -> int:
    """Say on stderr why `dome COMMAND` cannot go on (the typed error under --json) and
    return its exit code."""
    print(json.dumps({"error": exc.to_object()}) if args.json else f"dome {command}: {exc}", file=sys.stderr)
    return ledger_exit_code(exc)


def _top_help() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = ["usage: dome COMMAND [options]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "dome COMMAND --help shows a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_top_help())
        return EXIT_OK
    if argv[0] == "--version":
        from importlib.metadata import version
        print(version("dome"))
        return EXIT_OK
    name = argv[0]
    if name not in COMMANDS:
        print(f"dome: unknown command {name!r}\n\n{_top_help()}", file=sys.stderr)
        return EXIT_USAGE
    module_name, text = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        print(f"dome {name}: not available in this build", file=sys.stderr)
        return EXIT_USAGE
    parser = argparse.ArgumentParser(prog=f"dome {name}", description=text)
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    return int(module.run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
