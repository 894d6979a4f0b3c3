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


def run(args: argparse.Namespace) -> int:
    rest = list(args.rest or [])
    if not rest:
        rest = ["--help"]
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "worker_sdk.litho", *rest], env)
    return 3  # pragma: no cover - execve does not return
