"""MCP front door latency, beside a minimal MCP SDK server measured in the same run.

    python benchmarks/mcp_latency.py [--runs 7] [--calls 300] [--json]

1. cold start to tools/list: spawn -> initialize -> tools/list answered, over stdio
   (dome mcp with its fast path and a warm answer cache; dome mcp without the fast
   path; a minimal SDK low-level server with one tool).
2. a trivial call over stdio (raw JSON-RPC over pipes, sequential): p50 / p99 of
   `health` on dome, of an `echo` tool on the minimal SDK server.
3. input validation: dome's compiled closed-schema check of an `evaluate` request,
   beside the generic registry.schema_store.validate of the same request.
4. query_region on a small layout: the KLayout API called directly in this process,
   beside the same request through `dome mcp` over stdio (host + worker), interleaved
   in rounds so machine load hits both alike; then the front door again with the
   worker's direct lane off (DOME_MCP_DIRECT=0: MCP on the host-worker hop too). CPU
   time per call (user + system, host and worker together) is printed beside the
   wall-clock figures: it does not count waiting for a core, so it is the steadier
   figure on a loaded machine.

Targets: cold start <= 300 ms, trivial call p50 <= 2 ms, validation <= 0.1 ms,
query_region through the front door <= 2 x direct + 2 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MINIMAL_SERVER = r'''
import anyio, mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema={"type": "object"})])
async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")], structured_content={"ok": True})
server = Server("minimal", on_list_tools=list_tools, on_call_tool=call_tool)
async def main():
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())
anyio.run(main)
'''

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _frame(obj: dict) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _read_id(proc: subprocess.Popen, rid: int) -> dict:
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("server closed stdout")
        msg = json.loads(line)
        if msg.get("id") == rid:
            return msg


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env, cwd=REPO)


def cold_start(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = _spawn(argv, env)
    proc.stdin.write(_frame(INIT) + _frame(INITIALIZED) + _frame({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    proc.stdin.flush()
    _read_id(proc, 2)
    dt = time.perf_counter() - t0
    proc.stdin.close()
    proc.wait(timeout=30)
    return dt


def call_latency(argv: list[str], env: dict[str, str], tool: str, calls: int) -> list[float]:
    proc = _spawn(argv, env)
    proc.stdin.write(_frame(INIT) + _frame(INITIALIZED))
    proc.stdin.flush()
    _read_id(proc, 1)
    out = []
    for i in range(calls + 20):
        req = _frame({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call", "params": {"name": tool, "arguments": {}}})
        t0 = time.perf_counter()
        proc.stdin.write(req)
        proc.stdin.flush()
        _read_id(proc, 100 + i)
        if i >= 20:  # warm-up excluded
            out.append(time.perf_counter() - t0)
    proc.stdin.close()
    proc.wait(timeout=30)
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def validation_times(n: int = 20000) -> tuple[float, float]:
    from coordinator.mcp.catalog import default_specs
    from coordinator.toolcore import InputSchema
    from registry import schema_store

    spec = default_specs(include_test=False)["evaluate"]
    tool = InputSchema(spec.name, spec.input_schema, spec.contract_id)
    req = {"layout": "/data/iccad13/M1_test1.glp", "report_level": "detailed", "fill": "lithobench"} \
        if "fill" in spec.fields else {"layout": "/data/iccad13/M1_test1.glp", "report_level": "detailed"}
    tool.validate(req)
    t0 = time.perf_counter()
    for _ in range(n):
        tool.validate(req)
    ours = (time.perf_counter() - t0) / n
    schema_store.validate("litho/evaluate_request", req)
    m = max(n // 10, 100)
    t0 = time.perf_counter()
    for _ in range(m):
        schema_store.validate("litho/evaluate_request", req)
    generic = (time.perf_counter() - t0) / m
    return ours, generic


def _bars_gds(path: Path) -> None:
    import klayout.db as kdb

    ly = kdb.Layout()
    ly.dbu = 0.001
    top = ly.create_cell("TOP")
    layer = ly.layer(1, 0)
    for i in range(50):
        top.shapes(layer).insert(kdb.Box(i * 3000, 0, i * 3000 + 2000, 10000))
    ly.write(str(path))


def _cpu_s(pid: int, children: bool = True) -> float:
    """CPU seconds (user + system) a process and its live children have used, from /proc."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir() if children else ():
                pids += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def query_region_overhead(tmp: Path, env: dict[str, str], calls: int, rounds: int = 5,
                          cpu: dict[str, float] | None = None) -> tuple[list[float], list[float]]:
    """(direct, front door) seconds per query_region call, measured in this one process.

    `cpu` (when given) receives CPU seconds per call: `direct` (this process, around the direct
    calls) and `front_door` (host + worker processes, around the front-door calls). CPU time does
    not count the time a process waits for a core, so it is the steadier figure on a loaded machine."""
    data = tmp / "data"  # the read root: beside the ops root, never holding it (the host refuses that)
    data.mkdir(exist_ok=True)
    gds = data / "bars.gds"
    _bars_gds(gds)
    env = {**env, "KLAYOUT_MCP_ALLOWED_ROOTS": str(data), "DOME_MCP_NO_FASTPATH": "1"}
    os.environ.update(KLAYOUT_MCP_ALLOWED_ROOTS=str(data), KLAYOUT_MCP_ARTIFACT_ROOT=str(tmp / "direct-artifacts"))
    from worker_sdk.klayout_tools import api
    from worker_sdk.klayout_tools.sessions import SessionStore

    store = SessionStore()
    box = {"left": 0, "bottom": 0, "right": 20, "top": 10}
    direct_req = {"session_id": api.open_layout({"path": str(gds)}, store=store)["session_id"], "box": box}
    proc = _spawn([sys.executable, "-m", "coordinator.cli.main", "mcp", "--ops-root", str(tmp / "ops-q")], env)
    proc.stdin.write(_frame(INIT) + _frame(INITIALIZED))
    proc.stdin.flush()
    _read_id(proc, 1)
    proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                             "params": {"name": "open_layout", "arguments": {"path": str(gds)}}}))
    proc.stdin.flush()
    sid = _read_id(proc, 2)["result"]["structuredContent"]["session_id"]
    direct: list[float] = []
    door: list[float] = []
    rid = 10
    cpu_direct = cpu_door = 0.0
    for r in range(rounds):
        c0 = time.process_time()
        for i in range(calls // rounds + (5 if r == 0 else 0)):
            t0 = time.perf_counter()
            api.query_region(direct_req, store=store)
            dt = time.perf_counter() - t0
            if r or i >= 5:
                direct.append(dt)
        cpu_direct += time.process_time() - c0
        c0 = _cpu_s(proc.pid)
        for i in range(calls // rounds + (5 if r == 0 else 0)):
            rid += 1
            req = _frame({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                          "params": {"name": "query_region", "arguments": {"session_id": sid, "box": box}}})
            t0 = time.perf_counter()
            proc.stdin.write(req)
            proc.stdin.flush()
            _read_id(proc, rid)
            dt = time.perf_counter() - t0
            if r or i >= 5:
                door.append(dt)
        cpu_door += _cpu_s(proc.pid) - c0
    if cpu is not None:
        n = calls + 5
        cpu.update(direct=cpu_direct / n, front_door=cpu_door / n)
    proc.stdin.close()
    proc.wait(timeout=30)
    return direct, door


def plot_samples(samples_ms: dict[str, list[float]]) -> str:
    """SVG: one latency histogram per kind of call, log-spaced bins (pure)."""
    from benchmarks.svgplot import histogram

    return histogram(samples_ms, title="MCP front door: latency per call over stdio",
                     x_label="wall time per call (ms, log scale)", y_label="calls", bins=48, log_x=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--svg", metavar="PATH", help="also plot the per-call latency distributions into PATH")
    ap.add_argument("--samples", metavar="JSON", help="also save the per-call latencies (ms) into JSON")
    ap.add_argument("--svg-from", metavar="JSON", help="only plot: latencies as --samples saved them, into --svg's PATH")
    a = ap.parse_args()
    if a.svg_from:
        if not a.svg:
            ap.error("--svg-from needs --svg PATH")
        Path(a.svg).write_text(plot_samples(json.loads(Path(a.svg_from).read_text())["samples_ms"]))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="dome-mcp-bench-"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOME_MCP_CACHE_DIR": str(tmp / "cache")}
    dome = [sys.executable, "-m", "coordinator.cli.main", "mcp", "--ops-root", str(tmp / "ops")]
    minimal = [sys.executable, "-c", MINIMAL_SERVER]
    cold_start(dome, env)  # fills the answer cache (as the first start after an install does)
    res: dict[str, float] = {}
    runs = {"dome_fast": [], "dome_sdk_only": [], "minimal_sdk": []}
    for _ in range(a.runs):  # interleaved, so machine load hits all three alike
        runs["dome_fast"].append(cold_start(dome, env))
        runs["dome_sdk_only"].append(cold_start(dome, {**env, "DOME_MCP_NO_FASTPATH": "1"}))
        runs["minimal_sdk"].append(cold_start(minimal, env))
    for k, v in runs.items():
        res[f"cold_start_ms_{k}"] = statistics.median(v) * 1e3
    ours = call_latency(dome, env, "health", a.calls)
    base = call_latency(minimal, env, "echo", a.calls)
    res.update({"call_p50_ms_dome": pct(ours, 0.5) * 1e3, "call_p99_ms_dome": pct(ours, 0.99) * 1e3,
                "call_p50_ms_minimal_sdk": pct(base, 0.5) * 1e3, "call_p99_ms_minimal_sdk": pct(base, 0.99) * 1e3})
    q_cpu: dict[str, float] = {}
    q_direct, q_door = query_region_overhead(tmp, env, a.calls, cpu=q_cpu)
    mcp_cpu: dict[str, float] = {}  # the same calls with the worker's direct lane off (MCP on both hops)
    _, q_mcp = query_region_overhead(tmp, {**env, "DOME_MCP_DIRECT": "0"}, a.calls, cpu=mcp_cpu)
    res.update({"query_region_p50_ms_front_door_mcp_only": pct(q_mcp, 0.5) * 1e3,
                "query_region_cpu_ms_front_door_mcp_only": mcp_cpu["front_door"] * 1e3})
    res.update({"query_region_cpu_ms_direct": q_cpu["direct"] * 1e3,
                "query_region_cpu_ms_front_door": q_cpu["front_door"] * 1e3,
                "query_region_p50_ms_direct": pct(q_direct, 0.5) * 1e3,
                "query_region_p50_ms_front_door": pct(q_door, 0.5) * 1e3,
                "query_region_p90_ms_front_door": pct(q_door, 0.9) * 1e3})
    res["query_region_target_ms"] = 2 * res["query_region_p50_ms_direct"] + 2.0
    v_ours, v_generic = validation_times()
    res.update({"validation_ms_dome": v_ours * 1e3, "validation_ms_generic_jsonschema": v_generic * 1e3})
    load = os.getloadavg()[0]
    res["load_avg_1m"] = load
    samples = {"dome health": ours, "minimal SDK echo": base, "query_region, KLayout API direct": q_direct,
               "query_region, through dome mcp": q_door}
    samples_ms = {k: [round(v * 1e3, 4) for v in vs] for k, vs in samples.items()}
    if a.samples:
        Path(a.samples).write_text(json.dumps({"load_avg_1m": load, "calls": a.calls, "samples_ms": samples_ms}) + "\n")
    if a.svg:
        Path(a.svg).write_text(plot_samples(samples_ms))
    if a.json:
        print(json.dumps({k: round(v, 4) for k, v in res.items()}))
        return 0
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f}")
    print(f"cold start to tools/list (median of {a.runs}):")
    print(f"  dome mcp (fast path)        {res['cold_start_ms_dome_fast']:8.1f} ms   target <= 300")
    print(f"  dome mcp (SDK only)         {res['cold_start_ms_dome_sdk_only']:8.1f} ms")
    print(f"  minimal SDK server          {res['cold_start_ms_minimal_sdk']:8.1f} ms")
    print(f"trivial call over stdio ({a.calls} sequential):")
    print(f"  dome health                 p50 {res['call_p50_ms_dome']:6.2f} ms  p99 {res['call_p99_ms_dome']:6.2f} ms   target p50 <= 2")
    print(f"  minimal SDK echo            p50 {res['call_p50_ms_minimal_sdk']:6.2f} ms  p99 {res['call_p99_ms_minimal_sdk']:6.2f} ms")
    print(f"query_region, small layout ({a.calls} calls each, interleaved rounds):")
    print(f"  direct API call (this process) p50 {res['query_region_p50_ms_direct']:6.2f} ms")
    print(f"  through dome mcp over stdio    p50 {res['query_region_p50_ms_front_door']:6.2f} ms  "
          f"p90 {res['query_region_p90_ms_front_door']:6.2f} ms   target <= {res['query_region_target_ms']:.2f}")
    print(f"  CPU per call: direct {res['query_region_cpu_ms_direct']:.2f} ms, "
          f"front door (host + worker) {res['query_region_cpu_ms_front_door']:.2f} ms")
    print(f"  direct lane off (DOME_MCP_DIRECT=0) p50 {res['query_region_p50_ms_front_door_mcp_only']:6.2f} ms, "
          f"CPU per call {res['query_region_cpu_ms_front_door_mcp_only']:.2f} ms")
    print("input validation (evaluate request):")
    print(f"  dome compiled closed schema {res['validation_ms_dome'] * 1e3:8.1f} us   target <= 100")
    print(f"  generic jsonschema validate {res['validation_ms_generic_jsonschema'] * 1e3:8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
