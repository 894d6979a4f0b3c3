"""`dome mcp`: the MCP front door (stdio by default, `--http HOST:PORT` streamable HTTP).

    dome mcp                          serve MCP on stdin/stdout
    dome mcp --http 127.0.0.1:8765    streamable HTTP; bearer token from $DOME_MCP_TOKEN
                                      or the SHA-256 kept in OPS_ROOT/mcp/http.token
    dome mcp consent --tool promote --scope RUN_ID     mint a single-use consent token
    dome mcp call TOOL '{"json": "args"}' --json       call a tool directly (no MCP framing)
    dome mcp tools --json                              print tools/list
    dome mcp token create --name NAME --allow read|run|promote   a named client's bearer token (shown once)
    dome mcp token list | dome mcp token revoke --name NAME

This module imports nothing heavy at import time: the first thing `run`
does for stdio is take fd 1 away from everything but the protocol.
"""
from __future__ import annotations

import argparse
import json
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from coordinator.cli.main import add_common_arguments

    parser.add_argument("action", nargs="?", default="serve", choices=["serve", "consent", "call", "tools", "token"],
                        help="serve (default), consent, call, tools, token")
    parser.add_argument("rest", nargs="*", help="call: TOOL [JSON_ARGS]; token: create | list | revoke")
    parser.add_argument("--name", help="token: the client's name (telemetry and ownership use it)")
    parser.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--stateless", action="store_true", help="HTTP: stateless mode (no session ids)")
    parser.add_argument("--no-auth", action="store_true",
                        help="HTTP on a loopback address only: serve without the bearer token (for local test "
                             "harnesses such as the MCP conformance suite); refused for any other address")
    parser.add_argument("--consent-mode", choices=["strict", "lenient", "off"], default=None,
                        help="destructive-tool consent (default: $CONSENT_MODE or strict)")
    parser.add_argument("--allow", default=os.environ.get("DOME_MCP_ALLOW", ""),
                        help="comma-separated allow-list of tools and/or capability classes (read, write, execute, admin); "
                             "tools/list and calls see only these (default: all; $DOME_MCP_ALLOW); "
                             "token create: the client's scope, read | run | promote")
    parser.add_argument("--call-timeout", type=float, default=None, metavar="SECONDS",
                        help="seconds a tool call may run (default $DOME_MCP_CALL_TIMEOUT_S, else 600)")
    parser.add_argument("--artifact-root", default=None, metavar="DIR",
                        help="where layout tools write (default $DOME_MCP_ARTIFACT_ROOT, else OPS_ROOT/mcp/klayout)")
    parser.add_argument("--log-format", choices=["text", "json"], default=None,
                        help="stderr: plain lines or one JSON object per line (default $DOME_LOG_FORMAT, else text)")
    parser.add_argument("--tool", default="promote", help="consent: the tool the token allows")
    parser.add_argument("--scope", "--run-id", dest="scope", help="consent: the run id the token is bound to")
    parser.add_argument("--ttl", type=int, default=900, help="consent: token lifetime in seconds")
    add_common_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from coordinator.observe.live import configured
    from registry.errors import DomeError

    try:  # every setting checked before anything starts (docs/operations.md, configuration)
        cfg = configured("mcp", args)
    except DomeError as exc:
        from coordinator.cli.main import report_error
        report_error("mcp", exc, as_json=args.json)
        return 2
    if cfg["mcp_bind"] is not None and not args.http:
        args.http = "{}:{}".format(*cfg["mcp_bind"])
    args.consent_mode = cfg["consent_mode"]
    if cfg["artifact_root"] is not None:  # the layout tools' worker reads it from its environment
        os.environ["KLAYOUT_MCP_ARTIFACT_ROOT"] = str(cfg["artifact_root"].absolute())
    if args.action == "token":
        return _token(args)
    refused = _refuse_unsafe_roots(args) if args.action in ("serve", "call") else 0
    if refused:
        return refused
    if args.action == "serve" and not args.http:
        from registry.stdio_guard import claim_stdout

        claim_stdout()  # before any further import can print
        if os.environ.get("DOME_MCP_NO_FASTPATH") != "1":
            from coordinator.mcp.fastpath import serve

            return serve(args.ops_root, args.consent_mode, args.db, allow=_allow(args), log_format=cfg["log_format"])
    from coordinator.mcp.dispatch import ToolHost

    host = ToolHost(ops_root=args.ops_root, consent_mode=args.consent_mode, db_url=args.db,
                    rollout_signal=args.action == "serve", allow=_allow(args))
    host.supervisor.call_timeout_s = cfg["call_timeout_s"]
    from coordinator.mcp.fastpath import close_observation, observe
    observe(host, cfg["log_format"])
    if args.action == "consent":
        if not args.scope:
            return _usage(args, "--scope RUN_ID is required", "dome mcp consent TOOL --scope RUN_ID")
        token = host.consent.mint(args.tool, args.scope, ttl_s=args.ttl)
        print(json.dumps({"consent_token": token, "tool": args.tool, "scope": args.scope}) if args.json else token)
        return 0
    if args.action == "tools":
        tools = host.list_tools()
        print(json.dumps({"tools": tools}, indent=None if args.json else 1))
        return 0
    if args.action == "call":
        return _call(host, args)
    if args.http:
        from coordinator.mcp.server import serve_http

        from registry.errors import DomeError

        try:
            serve_http(host, args.http, stateless=args.stateless, auth=not args.no_auth)
        except ValueError as exc:
            return _usage(args, str(exc), "dome mcp --http 127.0.0.1:PORT --no-auth, or drop --no-auth")
        except DomeError as exc:  # TOKEN_FILE_UNSAFE: the token file was found with another mode or owner
            from .main import report_error

            report_error("mcp", exc, as_json=bool(args.json))
            return 2
        return 0
    from coordinator.mcp.server import run_stdio

    try:
        run_stdio(host)
    finally:
        close_observation(host)
    return 0


def _usage(args: argparse.Namespace, message: str, hint: str) -> int:
    """Bad input to `dome mcp`: a typed USAGE error (JSON on stdout under --json), exit 2."""
    from coordinator.cli.main import EXIT_USAGE, error_object, report_error

    report_error("mcp", error_object("USAGE", message, hints=[hint]), as_json=bool(args.json))
    return EXIT_USAGE


def _token(args: argparse.Namespace) -> int:
    """Named clients of the HTTP door: create (prints the token once), list, revoke."""
    from pathlib import Path

    from coordinator.mcp.identity import ClientBook
    from registry.errors import DomeError

    from .main import report_error

    book = ClientBook(Path(args.ops_root).absolute() / "mcp")
    sub = args.rest[0] if args.rest else "list"
    try:
        if sub == "create":
            if not args.name or not args.allow:
                raise DomeError("token create needs --name NAME and --allow read|run|promote", code="USAGE")
            token = book.create(args.name, args.allow)
            print(json.dumps({"name": args.name, "allow": args.allow, "token": token}) if args.json else token)
        elif sub == "revoke":
            if not args.name:
                raise DomeError("token revoke needs --name NAME", code="USAGE")
            book.revoke(args.name)
            print(json.dumps({"name": args.name, "revoked": True}) if args.json else f"revoked {args.name}")
        elif sub == "list":
            rows = book.list()
            if args.json:
                print(json.dumps({"clients": rows}))
            else:
                for r in rows:
                    print(f"{r['name']}\t{r['allow']}\t{'revoked' if r['revoked'] else 'active'}")
        else:
            raise DomeError(f"unknown token action {sub!r}", code="USAGE", hints=["create, list or revoke"])
    except DomeError as exc:
        report_error("mcp", exc, as_json=args.json)
        return 2
    return 0


def _refuse_unsafe_roots(args: argparse.Namespace) -> int:
    """2 (and the typed error, JSON under --json) when a root of the path policy holds the host's secrets."""
    from pathlib import Path

    from coordinator.mcp.paths import check_secrets, host_policy
    from registry.errors import DomeError

    from .main import report_error

    ops_root = Path(args.ops_root).absolute()
    try:
        check_secrets(host_policy(ops_root, os.environ), ops_root)
    except DomeError as exc:
        report_error("mcp", exc, as_json=bool(args.json))
        return 2
    return 0


def _allow(args: argparse.Namespace) -> list[str] | None:
    items = [x.strip() for x in (args.allow or "").split(",") if x.strip()]
    return items or None


def _call(host, args: argparse.Namespace) -> int:
    import anyio

    if not args.rest:
        return _usage(args, "give a TOOL", "dome mcp call TOOL [JSON_ARGS]")
    name = args.rest[0]
    try:
        arguments = json.loads(args.rest[1]) if len(args.rest) > 1 else {}
    except json.JSONDecodeError as exc:
        return _usage(args, f"arguments are not JSON: {exc}", "dome mcp call TOOL '{\"n\": 1}'")

    async def go():
        async with host.running():
            return await host.call(name, arguments)

    res = anyio.run(go)
    if args.json:
        print(json.dumps(res.structured, ensure_ascii=False, separators=(",", ":")))
    else:
        print(res.text)
    return 2 if res.is_error else 0
