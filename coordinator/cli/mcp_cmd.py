"""`dome mcp`: the MCP front door (stdio by default, `--http HOST:PORT` streamable HTTP).

    dome mcp                          serve MCP on stdin/stdout
    dome mcp --http 127.0.0.1:8765    streamable HTTP; bearer token from $DOME_MCP_TOKEN
                                      or OPS_ROOT/mcp/http.token (created 0600)
    dome mcp consent --tool promote --scope RUN_ID     mint a single-use consent token
    dome mcp call TOOL '{"json": "args"}' --json       call a tool directly (no MCP framing)
    dome mcp tools --json                              print tools/list

This module imports nothing heavy at import time: the first thing `run`
does for stdio is take fd 1 away from everything but the protocol.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from coordinator.cli.main import add_common_arguments

    parser.add_argument("action", nargs="?", default="serve", choices=["serve", "consent", "call", "tools"],
                        help="serve (default), consent, call, tools")
    parser.add_argument("rest", nargs="*", help="call: TOOL [JSON_ARGS]")
    parser.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--stateless", action="store_true", help="HTTP: stateless mode (no session ids)")
    parser.add_argument("--no-auth", action="store_true",
                        help="HTTP on a loopback address only: serve without the bearer token (for local test "
                             "harnesses such as the MCP conformance suite); refused for any other address")
    parser.add_argument("--consent-mode", choices=["strict", "lenient", "off"], default=None,
                        help="destructive-tool consent (default: $CONSENT_MODE or strict)")
    parser.add_argument("--allow", default=os.environ.get("DOME_MCP_ALLOW", ""),
                        help="comma-separated allow-list of tools and/or capability classes (read, write, admin); "
                             "tools/list and calls see only these (default: all; $DOME_MCP_ALLOW)")
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
    if args.action == "serve" and not args.http:
        from registry.stdio_guard import claim_stdout

        claim_stdout()  # before any further import can print
        if os.environ.get("DOME_MCP_NO_FASTPATH") != "1":
            from coordinator.mcp.fastpath import serve

            return serve(args.ops_root, args.consent_mode, args.db, allow=_allow(args))
    from coordinator.mcp.dispatch import ToolHost

    host = ToolHost(ops_root=args.ops_root, consent_mode=args.consent_mode, db_url=args.db,
                    rollout_signal=args.action == "serve", allow=_allow(args))
    host.supervisor.call_timeout_s = cfg["call_timeout_s"]
    from coordinator.observe.tracing import tracing_wanted
    if cfg["log_format"] == "json" or tracing_wanted(os.environ):
        from coordinator.observe.mcp_door import instrument
        instrument(host, log_format=cfg["log_format"])
    if args.action == "consent":
        if not args.scope:
            print("dome mcp consent: --scope RUN_ID is required", file=sys.stderr)
            return 2
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

        try:
            serve_http(host, args.http, stateless=args.stateless, auth=not args.no_auth)
        except ValueError as exc:
            print(f"dome mcp: {exc}", file=sys.stderr)
            return 2
        return 0
    from coordinator.mcp.server import run_stdio

    run_stdio(host)
    return 0


def _allow(args: argparse.Namespace) -> list[str] | None:
    items = [x.strip() for x in (args.allow or "").split(",") if x.strip()]
    return items or None


def _call(host, args: argparse.Namespace) -> int:
    import anyio

    if not args.rest:
        print("dome mcp call: TOOL [JSON_ARGS]", file=sys.stderr)
        return 2
    name = args.rest[0]
    try:
        arguments = json.loads(args.rest[1]) if len(args.rest) > 1 else {}
    except json.JSONDecodeError as exc:
        print(f"dome mcp call: arguments are not JSON: {exc}", file=sys.stderr)
        return 2

    async def go():
        async with host.running():
            return await host.call(name, arguments)

    res = anyio.run(go)
    if args.json:
        print(json.dumps(res.structured, ensure_ascii=False, separators=(",", ":")))
    else:
        print(res.text)
    return 2 if res.is_error else 0
