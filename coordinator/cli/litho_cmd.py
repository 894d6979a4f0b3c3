"""`dome litho ...`: hands off to the litho engine in its own process.

The coordinator never imports torch: this command replaces the current
process with `python -m worker_sdk.litho ...` (os.execv), so stdout, stderr,
signals and the exit code are the engine's own.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER,
                        help="eval | optimize | simulate | capabilities | selftest, then its options "
                             "(dome litho eval --help)")


def engine_argv(rest: list[str], *, as_json: bool) -> list[str]:
    """The engine's arguments from what followed `dome litho`. Pure. The options every dome
    command takes are accepted here too: `--ops-root` and `--db` name nothing the engine reads
    (it keeps no ledger) and are dropped; `--json` given before the command is passed on after
    the engine's sub-command."""
    out: list[str] = []
    it = iter(rest)
    for arg in it:
        if arg in ("--ops-root", "--db"):
            next(it, None)
        elif not arg.startswith(("--ops-root=", "--db=")):
            out.append(arg)
    if as_json and out and not out[0].startswith("-") and "--json" not in out:
        out.insert(1, "--json")
    return out or ["--help"]


def run(args: argparse.Namespace) -> int:
    from . import GLOBAL_OPTIONS
    rest = engine_argv(list(args.rest or []), as_json=bool(GLOBAL_OPTIONS.get("json")))
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "worker_sdk.litho", *rest], env)
    return 3  # pragma: no cover - execve does not return
