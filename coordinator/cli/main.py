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
from typing import Any, NoReturn, Sequence

from coordinator.cli import GLOBAL_OPTIONS

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
    "gc": ("coordinator.cli.gc_cmd", "prune the refs old runs left in a repository"),
    "serve": ("coordinator.cli.serve_cmd", "read-only web page over the ledger (live runs, /metrics)"),
}

EXIT_OK = 0
EXIT_INVALID = 1  # a check ran and found a problem (verify, registry check)
EXIT_USAGE = 2  # bad arguments or input
EXIT_INTERNAL = 3  # an unexpected failure inside dome


_VALUED = {"--ops-root": "ops_root", "--db": "db"}


def split_global_options(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """The options before the command name, and the rest (command first). Pure. Raises ValueError
    naming an option that is not one of `--ops-root DIR`, `--db URL`, `--json` or lacks its value."""
    opts: dict[str, Any] = {}
    rest = list(argv)
    while rest and rest[0].startswith("--") and rest[0] not in ("--help", "--version"):
        flag, eq, value = rest.pop(0).partition("=")
        if flag == "--json" and not eq:
            opts["json"] = True
        elif flag in _VALUED:
            if not eq:
                if not rest:
                    raise ValueError(f"{flag} needs a value")
                value = rest.pop(0)
            opts[_VALUED[flag]] = value
        else:
            raise ValueError(f"unknown option {flag!r} before the command")
    return opts, rest


def default_ops_root() -> str:
    return GLOBAL_OPTIONS.get("ops_root") or os.environ.get("DOME_OPS_ROOT", "./ops")


def default_db() -> str | None:
    """The ledger URL a command uses when --db is not given: a --db before the command, else
    $DOME_DB, else None (which `ledger.Ledger.open` reads as sqlite:///OPS_ROOT/dome.db). The
    one place that reads DOME_DB."""
    return GLOBAL_OPTIONS.get("db") or os.environ.get("DOME_DB") or None


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options every command takes (after the command; before it, `split_global_options`)."""
    parser.add_argument("--ops-root", default=default_ops_root(),
                        help="run artifacts, keys and the default ledger (default: ./ops or $DOME_OPS_ROOT)")
    parser.add_argument("--db", default=default_db(),
                        help="SQLAlchemy URL of the ledger (default: $DOME_DB, else sqlite:///OPS_ROOT/dome.db)")
    parser.add_argument("--json", action="store_true", default=bool(GLOBAL_OPTIONS.get("json")),
                        help="machine-readable output")


def open_ledger(args: argparse.Namespace, *, migrate: bool = False) -> Any:
    """The ledger of an existing run (--db, else $DOME_DB, else OPS_ROOT/dome.db): never created, and
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
    """Say why `dome COMMAND` cannot go on (the typed error on stdout under --json)
    and return its exit code."""
    report_error(command, exc, as_json=bool(getattr(args, "json", False)))
    return ledger_exit_code(exc)


# error codes that mean the caller asked for something that is not there or not valid
BAD_INPUT_CODES = frozenset({"LEDGER_NOT_FOUND", "RUN_NOT_FOUND", "USAGE", "UNKNOWN_COMMAND"})


def error_object(code: str, message: str, *, hints: Sequence[str] = (), details: dict | None = None) -> Any:
    """A typed error for a problem found in the CLI itself (bad flags, unknown command)."""
    from registry.errors import DomeError
    return DomeError(message, code=code, hints=list(hints), details=details or {})


def report_error(command: str, err: Any, *, as_json: bool, extra: dict | None = None,
                 prog: str | None = None) -> None:
    """Print an error the one way every command does: with --json one object
    `{"error": {code, message, details, hints, retry}}` on stdout, otherwise
    `dome COMMAND: CODE: message` (or `PROG: CODE: message`) and its hints on stderr."""
    obj = err.to_object()
    if as_json:
        print(json.dumps({**(extra or {}), "error": obj}, sort_keys=True))
        return
    print(f"{prog or f'dome {command}'}: {obj.get('code')}: {obj.get('message')}", file=sys.stderr)
    for h in obj.get("hints") or []:
        print(f"  hint: {h}", file=sys.stderr)


def exit_code_for(err: Any, default: int = EXIT_INTERNAL) -> int:
    return EXIT_USAGE if getattr(err, "code", None) in BAD_INPUT_CODES else default


def run_not_found(run_id: str) -> Any:
    from registry.errors import DomeError
    return DomeError(f"no run {run_id!r} in the ledger", code="RUN_NOT_FOUND", details={"run_id": run_id},
                     hints=["dome status lists the runs of this ledger"])


class _Parser(argparse.ArgumentParser):
    """argparse whose errors follow the CLI contract: exit 2, and with --json
    a JSON error object on stdout."""

    json_errors = False  # set per invocation; sub-command parsers share it

    def error(self, message: str) -> NoReturn:
        if not self.json_errors:
            self.print_usage(sys.stderr)
        report_error("", error_object("USAGE", message, hints=[f"{self.prog} --help lists the options"]),
                     as_json=self.json_errors, prog=self.prog)
        sys.exit(EXIT_USAGE)


def _usage_error(message: str, as_json: bool) -> int:
    report_error("", error_object("USAGE", message, hints=["dome --help lists the commands and options"]),
                 as_json=as_json, prog="dome")
    return EXIT_USAGE


def _top_help() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = ["usage: dome COMMAND [options]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "dome COMMAND --help shows a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except BrokenPipeError:
        # the reader went away (`dome events RUN | head`): stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return EXIT_OK


def _main(argv: list[str]) -> int:
    as_json = "--json" in argv
    try:
        opts, argv = split_global_options(argv)
    except ValueError as exc:
        return _usage_error(str(exc), as_json)
    GLOBAL_OPTIONS.clear()
    GLOBAL_OPTIONS.update(opts)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_top_help())
        return EXIT_OK
    if argv[0] == "--version":
        from importlib.metadata import version
        print(version("dome"))
        return EXIT_OK
    name = argv[0]
    if name not in COMMANDS:
        err = error_object("UNKNOWN_COMMAND", f"unknown command {name!r}", hints=["dome --help lists the commands"])
        report_error(name, err, as_json=as_json, prog="dome")
        if not as_json:
            print(f"\n{_top_help()}", file=sys.stderr)
        return EXIT_USAGE
    module_name, text = COMMANDS[name]
    module = importlib.import_module(module_name)
    _Parser.json_errors = as_json
    parser = _Parser(prog=f"dome {name}", description=text)
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    from registry.errors import DomeError
    try:
        return int(module.run(args) or 0)
    except BrokenPipeError:
        raise
    except DomeError as exc:  # a typed error a command did not handle itself
        report_error(name, exc, as_json=bool(getattr(args, "json", as_json)))
        return exit_code_for(exc, ledger_exit_code(exc))
    except Exception as exc:  # noqa: BLE001 - the contract: exit 3, still a typed error
        report_error(name, error_object("INTERNAL_ERROR", f"{type(exc).__name__}: {exc}",
                                        hints=["this is a bug in dome; please report it"]),
                     as_json=bool(getattr(args, "json", as_json)))
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
