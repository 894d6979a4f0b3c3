"""`dome run WORK_QUEUE` and `dome run --resume RUN_ID`.

Exit codes: 0 completed or promoted, 2 bad input (work queue, arguments),
3 internal failure or no sandbox, 4 blocked, 5 failed, 6 cancelled,
7 promoted partially (`if_tasks_fail: promote_rest`: the rest landed, some tasks did not).
With --json, stdout carries exactly one JSON object:
{run_id, status, head, promoted_ref, ops_path, counts, awaiting_consent,
consent_token_file, why} (awaiting_consent and consent_token_file say a run
is held at the human gate; `why` holds the reasons the verdict block prints).
The live view and the verdict block go to stderr, with or without --json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from registry.errors import DomeError, SchemaValidationError

from coordinator.workqueue import WorkQueueError

from .main import add_common_arguments

STATUS_EXIT = {"completed": 0, "promoted": 0, "blocked": 4, "failed": 5, "cancelled": 6}
EXIT_PARTIAL = 7


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("work_queue", nargs="?", help="path of a dome.work.queue/v1 JSON file")
    add_common_arguments(parser)
    parser.add_argument("--executor", choices=["local", "container", "ray"], default="local",
                        help="where attempts run: local sandboxes, OCI containers (podman), or a Ray cluster")
    parser.add_argument("--image", default=None, metavar="NAME[@sha256:DIGEST]",
                        help="worker image: of --executor container (default $DOME_WORKER_IMAGE; "
                             "ops/container/build.sh prints the pinned ref), or with --executor ray "
                             "the image Ray starts each task's worker in (runtime_env image_uri)")
    parser.add_argument("--gateway-bind", default=None, metavar="HOST[:PORT]",
                        help="with --executor ray: serve the worker gateway over TCP with TLS on HOST "
                             "(an address the Ray nodes reach), so workers run on other hosts")
    parser.add_argument("--seed", type=int, default=None, help="override the work queue's determinism_seed")
    parser.add_argument("--resume", metavar="RUN_ID", default=None, help="carry on a run from its ledger")
    parser.add_argument("--sandbox", choices=["bwrap", "none"], default="bwrap",
                        help="worker sandbox (default bwrap; `none` must be asked for explicitly)")
    parser.add_argument("--tool-dir", action="append", default=None, metavar="DIR",
                        help="show this host folder read-only to workers and validations, at its own path "
                             "(a tool's virtualenv, node_modules, a toolchain); repeatable; adds to the "
                             "queue's tool_dirs")
    parser.add_argument("--max-parallel", type=int, default=None, help="attempts in flight at once")
    parser.add_argument("--egress", metavar="CONFIG", default=None,
                        help="egress gate routes for agent workers (JSON: host -> upstream, key env var, prices); "
                             "default OPS_ROOT/egress.json when it exists")
    parser.add_argument("--require-consent", action="append", default=[], metavar="REASON",
                        help="hold any promotion at the human gate whatever the risk, for REASON "
                             "(the MCP front door's ref policy sets it; repeatable)")
    parser.add_argument("--agent-refs", default=None, metavar="PREFIX",
                        help="the run was submitted by an agent: it may promote on its own only onto a new ref "
                             "under PREFIX (else it is held at the human gate; the MCP front door sets it)")
    parser.add_argument("--agent-risk-floor", default=None, metavar="LEVEL",
                        help="with --agent-refs: the lowest risk the queue counts as (default medium)")
    parser.add_argument("--read-roots", default=None, metavar="ROOTS",
                        help="the queue file and its repository must lie under these folders (os.pathsep-"
                             "separated, links and .. resolved first); the MCP front door sets it")
    parser.add_argument("--submitted-by", default=None, metavar="CLIENT",
                        help="the client that submitted the run (in run.started, and carried by every "
                             "record of the run; the MCP front door sets it)")
    parser.add_argument("--log-format", choices=["text", "json"], default=None,
                        help="stderr: the live view (text) or one JSON object per ledger event (json); "
                             "default $DOME_LOG_FORMAT, else text")
    parser.add_argument("--lease-ttl", type=float, default=None, metavar="SECONDS",
                        help="time to live of the run's lease (default 30): how long after this "
                             "coordinator stops renewing it another one may take the run over")


def _check_executor_options(args: argparse.Namespace) -> None:
    """--image and --gateway-bind belong to certain executors; a bind must be one address and port."""
    from coordinator.executors.ray_executor import GatewayBindInvalid, RayImageInvalid, parse_bind

    if args.gateway_bind is not None:
        if args.executor != "ray":
            raise GatewayBindInvalid("--gateway-bind is for --executor ray (workers on other hosts)",
                                     details={"executor": args.executor})
        parse_bind(args.gateway_bind)
    if args.image is not None and args.executor == "local":
        raise RayImageInvalid("--image is for --executor container or ray", details={"executor": args.executor})


def run(args: argparse.Namespace) -> int:
    from coordinator.preflight import prepare

    from .main import error_object, report_error
    from .status_cmd import run_reasons

    if not args.work_queue and not args.resume:
        report_error("run", error_object("USAGE", "give a WORK_QUEUE or --resume RUN_ID",
                                         hints=["dome run examples/hello.queue.json"]), as_json=args.json)
        return 2
    ops_root = Path(args.ops_root)
    view = executor = loop = None
    try:
        from coordinator.observe.live import configured
        cfg = configured("run", args)  # bad settings are refused before anything exists
    except DomeError as exc:
        report_error("run", exc, as_json=args.json)
        return 2
    args.max_parallel, watch = cfg["max_parallel"], None
    try:
        # pre-flight first, before the run loop is even imported: bad input is refused
        # in well under a second, before the ledger, keys or ops/ exist
        tool_dirs = tuple(args.tool_dir or ())
        # a container worker sees its image, not the host: only bubblewrap's view is resolved up front
        seen_as = args.sandbox if args.executor != "container" else "container"
        prepared = None if args.resume else prepare(args.work_queue, integrate=True, tool_dirs=tool_dirs,
                                                    sandbox=seen_as, ops_root=ops_root)
        if args.submitted_by is not None:  # a name every record can carry, refused before anything exists
            from ledger.record import check_submitter
            check_submitter(args.submitted_by)
        if prepared is not None and args.read_roots is not None:  # the loaded queue and repo, not a copy
            from registry.pathpolicy import check_run_inputs, split_roots
            check_run_inputs(split_roots(args.read_roots), prepared.queue_path, prepared.repo)
        reasons = list(args.require_consent)
        if prepared is not None and args.agent_refs:
            from coordinator.mcp.refpolicy import RefPolicy, reasons_for
            try:
                agent = RefPolicy.from_env(args.agent_refs, args.agent_risk_floor)
            except ValueError as exc:
                raise DomeError(str(exc), code="AGENT_REFS_INVALID") from None
            reasons += reasons_for(prepared, agent)
        if prepared is not None and reasons:
            prepared = replace(prepared, wq=replace(prepared.wq, human_gate_reasons=tuple(reasons)))
        _check_executor_options(args)  # before the ledger or ops/ exist
        from coordinator.keys import load_keyring, load_or_create_signing_key
        from coordinator.runloop.finish import integration_finish
        from coordinator.runloop.loop import RunContext, RunLoop
        from coordinator.runloop.view import make_view
        from ledger import Ledger

        # on stderr, so it shows with --json too; JSON logs take stderr's place instead
        view = make_view(sys.stderr if cfg["log_format"] == "text" else open(os.devnull, "w"))
        # read before anything is created: a bad egress configuration is refused up front
        egress_path = args.egress or (ops_root / "egress.json" if (ops_root / "egress.json").is_file() else None)
        egress = None
        if egress_path is not None:
            from coordinator.egress.config import EgressConfig
            egress = EgressConfig.load(egress_path)
        agents = [n for n, t in prepared.wq.graph.nodes.items() if t.action_spec.get("intent") == "agent"] \
            if prepared is not None else []
        if agents and egress is None:  # they could not reach any model: refuse before the run starts
            raise DomeError("the work queue has agent nodes but the run has no egress configuration",
                            code="EGRESS_NOT_CONFIGURED", details={"nodes": sorted(agents)},
                            hints=["pass --egress CONFIG or put it at OPS_ROOT/egress.json (docs/agent-swarm.md)"])
        if prepared is not None:  # can this host run the attempts? Refused before anything is written
            from coordinator.runloop.contracts import make_run_executor
            executor = make_run_executor(prepared.wq, kind=args.executor, sandbox=args.sandbox,
                                         max_parallel=args.max_parallel, image=args.image,
                                         gateway_bind=args.gateway_bind,
                                         tool_dirs=(*prepared.wq.tool_dirs, *tool_dirs))
        ops_root.mkdir(parents=True, exist_ok=True)
        ledger = Ledger.open(args.db, ops_root)
        signer = load_or_create_signing_key(ops_root)
        from coordinator.observe.live import ViewTap, start_run_telemetry
        # records reach the telemetry through the view: no ledger query per poll
        watch = start_run_telemetry(ledger, None if not args.resume else args.resume, log_format=cfg["log_format"])
        if watch is not None:
            view = ViewTap(view, watch)
        ctx = RunContext(ledger=ledger, ops_root=ops_root, signer=signer, keyring=load_keyring(ops_root),
                         executor_kind=args.executor, sandbox=args.sandbox, seed=args.seed,
                         max_parallel=args.max_parallel, finish=integration_finish, view=view, egress=egress,
                         lease_ttl_s=args.lease_ttl, image=args.image, gateway_bind=args.gateway_bind,
                         executor=executor, tool_dirs=tool_dirs, submitted_by=args.submitted_by)
        loop = RunLoop.resume(args.resume, ctx) if args.resume else RunLoop.start(args.work_queue, ctx, prepared=prepared)
        try:
            outcome = loop.run()
        finally:
            if watch is not None:
                watch.close()
    except DomeError as exc:
        if view is not None:
            view.close()
        if executor is not None and loop is None:  # built, never run: nothing of it stays behind
            executor.shutdown()
        report_error("run", exc, as_json=args.json)
        bad_input = isinstance(exc, (SchemaValidationError, WorkQueueError)) or exc.code.startswith((
            "BASE_REF", "RUN_NOT_FOUND", "EGRESS_", "AGENT_REFS", "GATEWAY_BIND", "RAY_IMAGE", "CONTAINER_IMAGE", "SCRATCH_DIR",
            "INVALID_EVENT", "PATH_OUTSIDE_ROOTS"))
        return 2 if bad_input else 3
    view.close()
    why = run_reasons(ledger, outcome.run_id, sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps({**outcome.to_json(), "why": why}, sort_keys=True))
        if cfg["log_format"] == "json":
            from coordinator.observe.logs import emit
            emit({"level": "info", "msg": "run.verdict", "run_id": outcome.run_id, "lines": why["verdict"]})
        else:
            print("\n".join(why["verdict"]), file=sys.stderr)  # the person watching stderr reads it too
    else:
        print("\n".join(why["verdict"]))
        print(f"  ledger: {outcome.ops_path}   next: dome report {outcome.run_id} --html report.html")
    if outcome.status == "promoted" and why.get("partial"):
        return EXIT_PARTIAL  # a script that checks for 0 never takes a partial promotion for a whole one
    return STATUS_EXIT.get(outcome.status, 3)
