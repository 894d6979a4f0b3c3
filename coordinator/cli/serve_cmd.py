"""`dome serve`: a read-only web page over the ledger, and /metrics.

    dome serve [--bind HOST:PORT] [--ops-root DIR] [--db URL] [--log-format text|json]

Binds 127.0.0.1:8780 by default ($DOME_SERVE_BIND). Every request needs the bearer
token: $DOME_SERVE_TOKEN, else OPS_ROOT/serve.token (created 0600 on first use); a
browser opens /login?token=TOKEN once. Exit codes: 0 stopped, 2 bad settings or no
ledger, 3 internal failure.
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from registry.errors import DomeError

from .main import EXIT_OK, EXIT_USAGE, add_common_arguments, open_ledger, refuse, report_error


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bind", default=None, metavar="HOST:PORT",
                        help="address of the page and /metrics (default $DOME_SERVE_BIND, else 127.0.0.1:8780)")
    parser.add_argument("--log-format", choices=["text", "json"], default=None,
                        help="stderr: plain lines or one JSON object per line (default $DOME_LOG_FORMAT, else text)")
    add_common_arguments(parser)


def serve_token(ops_root: Path) -> str:
    """$DOME_SERVE_TOKEN, else OPS_ROOT/serve.token (made 0600 on first use)."""
    env = os.environ.get("DOME_SERVE_TOKEN")
    if env:
        return env
    path = ops_root / "serve.token"
    if not path.exists():
        ops_root.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def run(args: argparse.Namespace) -> int:
    from coordinator.observe.live import configured

    try:
        cfg = configured("serve", args)
    except DomeError as exc:
        report_error("serve", exc, as_json=args.json)
        return EXIT_USAGE
    try:
        ledger = open_ledger(args)
    except DomeError as exc:
        return refuse("serve", args, exc)
    import uvicorn

    from coordinator.serve.app import ServeState, build_app

    host, port = cfg["serve_bind"]
    ops_root = Path(args.ops_root)
    state = ServeState(ledger, ops_root, serve_token(ops_root))
    if cfg["log_format"] == "json":
        from coordinator.observe.logs import emit
        emit({"level": "info", "msg": "serve.listening", "bind": f"{host}:{port}"})
    else:
        print(f"dome serve: http://{host}:{port}/ (token: $DOME_SERVE_TOKEN or {ops_root / 'serve.token'})",
              file=sys.stderr)
    try:
        uvicorn.run(build_app(state, json_logs=cfg["log_format"] == "json"), host=host, port=port,
                    log_level="warning", lifespan="off")
    finally:
        ledger.close()
    return EXIT_OK
