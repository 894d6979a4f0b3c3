"""Record and replay JSON-RPC transcripts of agent flows against `dome mcp` over stdio.

    python examples/mcp/transcript.py record evaluate_optimize   # writes transcripts/evaluate_optimize.json
    python examples/mcp/transcript.py replay evaluate_optimize   # replays it against a fresh server, checks it

A transcript is the exact frames a client sent and the server answered
(`frames`, raw JSON-RPC, in wire order), plus the `steps` that produced them.
Replay sends the same client frames to a fresh `dome mcp` (substituting
values captured from earlier answers: job ids, run ids, temp paths) and
checks each answer against the recorded one on its stable projection: error
or not, result keys, status / error code, and every deterministic metric.

Placeholders in steps: {ICCAD13} the ICCAD 2013 data folder, {TMP} a fresh
temporary folder, {QUEUE} a work queue on a fresh git repo, {<name>} a value
captured by an earlier step.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from registry.datasets import iccad13_data  # noqa: E402

TERMINAL = ["succeeded", "failed", "cancelled"]
STABLE_KEYS = ("status", "code", "schema_version", "report_level", "cancelled", "consent_mode", "tool")

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "dome-transcript", "version": "1"}}}

# name -> description, steps. A step: {"call": tool, "args": {...}} with optional "capture" ({var: dotted path
# in structuredContent}), "repeat_until" ({"path": dotted, "in": [...]}), "progress": true (send a progressToken).
SCENARIOS: dict[str, dict[str, Any]] = {
    "evaluate_optimize": {
        "description": "evaluate a clip with violations, then optimize its mask (progress notifications), then poll",
        "steps": [
            {"call": "evaluate", "args": {"layout": "{ICCAD13}/layouts/M1_test1.glp", "report_level": "detailed"}},
            {"call": "optimize", "args": {"layout": "{ICCAD13}/layouts/M1_test1.glp", "iterations": 4, "seed": 1,
                                          "out": "{TMP}/mask.oas"}, "progress": True,
             "capture": {"job": "job_id"}},
            {"call": "poll", "args": {"job_id": "{job}"}},
        ],
    },
    "evaluate_cancel": {
        "description": "start an evaluate as a job (wait=false), cancel it, read the job back",
        "steps": [
            {"call": "evaluate", "args": {"layout": "{ICCAD13}/layouts/M1_test2.glp", "report_level": "detailed",
                                          "wait": False}, "capture": {"job": "job_id"}},
            {"call": "cancel", "args": {"job_id": "{job}", "reason": "the agent changed its plan"}},
            {"call": "poll", "args": {"job_id": "{job}"}},
        ],
    },
    "run_submit_poll_promote": {
        "description": "submit a work queue, poll the run's job to its end, read its status, ask to promote "
                       "(refused without the run's consent token: CONSENT_MODE=strict)",
        "steps": [
            {"call": "run_submit", "args": {"work_queue": "{QUEUE}", "idempotency_key": "transcript-submit-1"},
             "capture": {"job": "job_id", "run": "run_id"}},
            {"call": "poll", "args": {"job_id": "{job}"}, "repeat_until": {"path": "status", "in": TERMINAL}},
            {"call": "run_status", "args": {"run_id": "{run}"}},
            {"call": "promote", "args": {"run_id": "{run}", "idempotency_key": "transcript-promote-1"}},
        ],
    },
}


def _fill(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, str):
        return re.sub(r"\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {k: _fill(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, env) for v in value]
    return value


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _make_queue(tmp: Path) -> str:
    repo = tmp / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "initial"]):
        if args[0] == "add":
            (repo / "README.md").write_text("hello\n")
        subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)
    q = json.loads((REPO / "examples" / "hello.queue.json").read_text())
    q["repo"] = str(repo)
    path = tmp / "work.queue.json"
    path.write_text(json.dumps(q))
    return str(path)


class _Server:
    def __init__(self, tmp: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "CONSENT_MODE": "strict",
               "DOME_MCP_CACHE_DIR": str(tmp / "cache"),
               # the operator lets agents' runs promote under refs/heads/dome/ (the example's ref)
               "DOME_MCP_AGENT_REFS": "refs/heads/dome/",
               # the path policy: agents read dome's checkout (the ICCAD data) and the work folder,
               # and write only there (and in their artifact folder)
               "DOME_MCP_READ_ROOTS": os.pathsep.join([str(REPO), str(tmp / "work")]),
               "DOME_MCP_WRITE_ROOTS": str(tmp / "work")}
        self.proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "mcp", "--ops-root",
                                      str(tmp / "ops")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=REPO, env=env)
        self.frames: list[dict[str, Any]] = []

    def send(self, msg: dict[str, Any]) -> None:
        self.frames.append({"dir": "client", "msg": msg})
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self, rid: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        notes = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("server closed stdout")
            msg = json.loads(line)  # every line is a frame, or this raises
            self.frames.append({"dir": "server", "msg": msg})
            if msg.get("id") == rid:
                return msg, notes
            notes.append(msg)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def run(name: str) -> dict[str, Any]:
    """Run a scenario against a fresh server; return the transcript."""
    scen = SCENARIOS[name]
    tmp = Path(tempfile.mkdtemp(prefix=f"dome-mcp-{name}-"))
    work = tmp / "work"  # what the agent may read and write: apart from the server's ops root
    work.mkdir()
    env = {"ICCAD13": str(iccad13_data()), "TMP": str(work)}
    if any("{QUEUE}" in json.dumps(s) for s in scen["steps"]):
        env["QUEUE"] = _make_queue(work)
    server = _Server(tmp)
    try:
        server.send(INIT)
        server.answer(0)
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        rid = 0
        steps_out = []
        for step in scen["steps"]:
            deadline = time.monotonic() + 600
            while True:
                rid += 1
                params: dict[str, Any] = {"name": step["call"], "arguments": _fill(step["args"], env)}
                if step.get("progress"):
                    params["_meta"] = {"progressToken": f"p{rid}"}
                server.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
                answer, notes = server.answer(rid)
                sc = (answer.get("result") or {}).get("structuredContent") or {}
                until = step.get("repeat_until")
                if not until or _dig(sc, until["path"]) in until["in"] or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
            meta = (answer.get("result") or {}).get("_meta") or {}
            for var, path in (step.get("capture") or {}).items():
                # a long call's job id rides in _meta (the tool's result is untouched)
                value = _dig(sc, path) if path in sc or "." in path else meta.get(f"dome/{path}")
                env[var] = str(value)
            steps_out.append({"step": step, "id": rid, "notifications": notes, "answer": answer})
        return {"name": name, "description": scen["description"], "steps": steps_out, "frames": server.frames}
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)


def projection(answer: dict[str, Any]) -> dict[str, Any]:
    """The stable part of an answer: what a replay must reproduce."""
    if "error" in answer:
        return {"jsonrpc_error": answer["error"].get("code")}
    res = answer["result"]
    sc = res.get("structuredContent") or {}
    out: dict[str, Any] = {"isError": bool(res.get("isError")), "keys": sorted(sc)}
    for k in STABLE_KEYS:
        if k in sc:
            out[k] = sc[k]
    if isinstance(sc.get("metrics"), dict):
        out["metrics"] = sc["metrics"]
    if isinstance(sc.get("violations"), list):
        out["violations"] = len(sc["violations"])
    if isinstance(sc.get("result"), dict) and isinstance(sc["result"].get("metrics"), dict):
        out["result_metrics"] = sc["result"]["metrics"]
    return out


def check_replay(recorded: dict[str, Any], replayed: dict[str, Any]) -> list[str]:
    problems = []
    for a, b in zip(recorded["steps"], replayed["steps"]):
        pa, pb = projection(a["answer"]), projection(b["answer"])
        if pa != pb:
            problems.append(f"step {a['step']['call']}: recorded {pa} != replayed {pb}")
        prog = [n["params"]["progress"] for n in b["notifications"] if n.get("method") == "notifications/progress"]
        if any(y <= x for x, y in zip(prog, prog[1:])):
            problems.append(f"step {a['step']['call']}: progress not strictly increasing: {prog}")
        if a["step"].get("progress") and not prog:
            problems.append(f"step {a['step']['call']}: no progress notifications")
    if len(recorded["steps"]) != len(replayed["steps"]):
        problems.append("different number of steps")
    return problems


def compact(t: dict[str, Any]) -> dict[str, Any]:
    """For storage: answers and notifications live once, in `frames`."""
    return {**t, "steps": [{"step": s["step"], "id": s["id"]} for s in t["steps"]]}


def expand(t: dict[str, Any]) -> dict[str, Any]:
    answers = {f["msg"]["id"]: f["msg"] for f in t["frames"] if f["dir"] == "server" and "id" in f["msg"]}
    return {**t, "steps": [{**s, "answer": answers[s["id"]], "notifications": []} for s in t["steps"]]}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("record", "replay") or argv[1] not in SCENARIOS:
        print(f"usage: transcript.py record|replay {'|'.join(SCENARIOS)}", file=sys.stderr)
        return 2
    path = HERE / "transcripts" / f"{argv[1]}.json"
    if argv[0] == "record":
        t = run(argv[1])
        path.write_text(json.dumps(compact(t), indent=1) + "\n")
        print(f"wrote {path} ({len(t['frames'])} frames)")
        return 0
    problems = check_replay(expand(json.loads(path.read_text())), run(argv[1]))
    for p in problems:
        print(p)
    print("replay ok" if not problems else f"replay FAILED ({len(problems)} problems)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
