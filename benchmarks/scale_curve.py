"""The coordinator's cost as the run grows: N one-file tasks on a 200-file repository.

    python benchmarks/scale_curve.py [--sizes 10,100,1000] [--db sqlite,postgres] [--sandbox none]
                                     [--executor local,ray,container] [--max-parallel 4] [--verify] [--json]
                                     [--project-dir DIR|tmp]

Each (N, database, executor) runs in a fresh Python process (so peak RSS is that run's):
`dome run`'s own path (RunLoop.start + run, the executor, integration,
promotion, export) on a fresh copy of the repository. Executors: local (the
default), ray (a local Ray cluster the run starts) and container (podman,
the worker image of ops/container/build.sh, or --image). Every task writes one
file (`echo i > out/iNNNNN.txt`). Files go where `dome run` puts them: the
repository and its ops/ (ledger, event files, blobs) in a fresh folder under
--project-dir (default: the current directory, as in a user's project; `tmp`:
the temp dir), the attempts' scratch in $DOME_SCRATCH_DIR or the temp dir.
Reported per configuration:

- coordinator CPU per task: user + system CPU of the coordinator process
  (every thread: run loop, gateway, integration) over the run, divided by
  N; the workers are other processes
  and are not counted; and of it the kernel's part (`sys_cpu_ms_per_task`:
  creating files, syncing the ledger), which depends on the file system more
  than on dome;
- the run loop's own thread CPU per task (`loop_cpu_ms_per_task`: its
  ticks, scheduling and dispatch included), of which handing the attempts to
  the executor (`launch_cpu_ms_per_task`), and the CPU of the local
  executor's spawner thread, which starts the workers
  (`spawner_cpu_ms_per_task`); `--spawn-threads 0` starts them on the loop's
  thread instead, as before, for a side-by-side baseline;
- peak RSS of the coordinator process (ru_maxrss);
- peak scratch disk: the largest size of the run's work folder (attempt
  folders and checkouts, the base mirror), sampled every 100 ms by a
  process of its own;
- ledger bytes per task: the canonical JSON size of the run's ledger records
  divided by N, and the blob store's growth divided by N; and the largest
  integration record's payload (stack plan, reports, gate and promotion
  decisions), which stays the same size whatever N;
- wall time, and the run's status; with --verify, what `dome verify`'s
  checks conclude about the run (run after the figures are taken).

`--records 100,1000,10000` runs no task: it builds the stack plan, gate and
promotion decision and run.finished of N proposals as a run records them
(signed, long lists chained), reads them back and verifies them, and prints
each record's payload size: the cheap way to see N = 10,000.

`--telemetry off,on` runs each configuration twice: as is, and with live telemetry on as
`dome run` turns it on (the ledger follower feeding OTLP spans to a sink in the parent
process, and Prometheus metrics); the coordinator CPU per task of the two rows is the
telemetry's cost (docs/benchmarks.md, live telemetry).

SQLite is the default ledger (WAL, synchronous=FULL); PostgreSQL is a
throwaway local server (fsync off, as in the tests) started for the run.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FILES = 200


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@dome", *args], cwd=cwd, check=True,
                   capture_output=True, timeout=300)


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for i in range(FILES):
        (repo / f"src{i:03d}.txt").write_text(f"file {i}\n" + "x" * 2000 + "\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "200 files")
    return repo


def write_queue(root: Path, repo: Path, n: int, max_parallel: int) -> Path:
    tasks = [{"node_id": f"t{i:05d}", "containers": [], "required_capabilities": ["write"],
              "required_outputs": ["patch_proposal"], "dependencies": [],
              "action_spec": {"intent": "command", "argv": ["sh", "-c", f"mkdir -p out && echo {i} > out/i{i:05d}.txt"]}}
             for i in range(n)]
    q = {"artifact_kind": "dome.work.queue/v1", "repo": str(repo), "base_ref": "main", "determinism_seed": 1,
         "policy": "default", "promote_to": "refs/heads/dome/scale", "tasks": tasks,
         "validations": [{"suite": "command", "name": "tests", "argv": ["true"]}],
         "scheduling": {"max_parallel": max_parallel, "endgame_max_duplicates": 0, "default_timeout_s": 600}}
    path = root / "work.queue.json"
    path.write_text(json.dumps(q))
    return path


def tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


SAMPLE_INTERVAL_S = 0.1


def start_sampler(root: Path) -> subprocess.Popen:
    """The peak-scratch sampler, in a process of its own: walking the work folder is not the
    coordinator's work, so neither its CPU nor its hold on the interpreter lock lands in the figure."""
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--sample-dir", str(root)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def stop_sampler(proc: subprocess.Popen) -> int:
    """Close the sampler's stdin (its signal to stop) and read the largest size it saw, in bytes."""
    out, _ = proc.communicate(timeout=60)
    return int(out.decode().strip() or 0)


def sample_until_stdin_closes(root: Path) -> None:
    import select
    peak = 0
    while True:
        peak = max(peak, tree_bytes(root))
        if select.select([sys.stdin], [], [], SAMPLE_INTERVAL_S)[0]:
            break  # stdin closed (or written to): the run is over
    print(peak, flush=True)


def start_ray(max_parallel: int) -> None:
    """A local Ray cluster for the ray rows (the benchmark's own, stopped with its process)."""
    import ray
    ray.init(num_cpus=max_parallel, include_dashboard=False, log_to_driver=False, configure_logging=False,
             object_store_memory=100 * 1024 * 1024)


class _QuietView:
    """A live view that shows nothing (the benchmark's runs have no terminal)."""

    def on_record(self, rec, loop=None) -> None:
        pass

    def on_step(self, text: str) -> None:
        pass

    def tick(self, loop) -> None:
        pass

    def close(self) -> None:
        pass


def one(n: int, db: str | None, sandbox: str, max_parallel: int, executor: str = "local",
        image: str | None = None, verify: bool = False, spawn_threads: int | None = None,
        project_dir: str | None = None, keep: bool = False, telemetry: bool = False) -> dict:
    """One run in this process; the figures as a dict. The repository and its ops/ go in a
    fresh folder under `project_dir` (None: the temp dir); the attempts' scratch is where a
    run puts it ($DOME_SCRATCH_DIR, else the temp dir). With `keep` the folder stays (its
    path is `root` in the dict) for the caller to remove after its last run: on an ext4
    without a journal, files created among inodes deleted in the minutes before cost several
    times the CPU, so removing one run's 14,000 event files just before the next run starts
    would be measured as the next run's cost."""
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from coordinator.runloop.finish import integration_finish
    from coordinator.runloop.loop import RunContext, RunLoop
    from ledger import Ledger
    from registry.canonical import canonical_json

    root = Path(tempfile.mkdtemp(prefix="dome-scale-", dir=project_dir))
    try:
        repo = make_repo(root)
        queue = write_queue(root, repo, n, max_parallel)
        ops = root / "ops"
        ops.mkdir()
        ledger = Ledger.open(db, ops)
        if executor == "ray":
            start_ray(max_parallel)
        ctx = RunContext(ledger=ledger, ops_root=ops, signer=load_or_create_signing_key(ops),
                         keyring=load_keyring(ops), sandbox=sandbox, finish=integration_finish,
                         executor_kind=executor, image=image if executor == "container" else None)
        if spawn_threads is not None and executor == "local":  # 0: workers started on the run loop's thread
            from coordinator.executors.local import LocalExecutor
            ctx.executor = LocalExecutor(sandbox=sandbox, max_concurrency=max_parallel, spawn_threads=spawn_threads)
        blobs0 = tree_bytes(ops / "blobs")
        follower = None
        if telemetry:  # live spans to $OTEL_EXPORTER_OTLP_ENDPOINT and Prometheus metrics, as `dome run` does:
            # the records reach the follower through the run's view (here one that prints nothing)
            from coordinator.observe.follow import Follower
            from coordinator.observe.live import ViewTap
            from coordinator.observe.metrics import Metrics
            from coordinator.observe.tracing import sink_from_env
            follower = Follower(ledger, None, spans=sink_from_env(), metrics=Metrics(), tapped=True).start()
            ctx.view = ViewTap(_QuietView(), follower)
        loop = RunLoop.start(queue, ctx)
        sampler = start_sampler(loop.work)
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        out = loop.run()
        if follower is not None:
            follower.close()  # its drain and the last export are the run's cost too
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        peak_bytes = stop_sampler(sampler)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        sys_cpu = r1.ru_stime - r0.ru_stime  # the kernel's share (file creation, fsync)
        records = ledger.events(out.run_id)
        by_topic: dict[str, int] = {}
        largest = 0  # the largest integration record's payload: constant whatever N
        for r in records:
            size = len(canonical_json(r.to_json() if hasattr(r, "to_json") else r.__dict__))
            by_topic[r.topic] = by_topic.get(r.topic, 0) + size
            if r.topic.split(".")[0] in ("integration", "gate", "promotion"):
                largest = max(largest, len(canonical_json(r.payload)))
        event_bytes = sum(by_topic.values())
        blob_bytes = tree_bytes(ops / "blobs") - blobs0
        verified = None
        if verify:  # `dome verify`'s checks, in this process, after the figures above were taken
            from coordinator.integration.verify import verify_run
            t1 = time.perf_counter()
            rep = verify_run(ledger, out.run_id, load_keyring(ops), ops_root=ops)
            verified = {"valid": rep.valid, "status": str(rep.status.value), "seconds": round(time.perf_counter() - t1, 1)}
        ledger.close()
        return {"n": n, "db": "postgres" if db else "sqlite", "executor": executor, "sandbox": sandbox, "status": out.status,
                **({"root": str(root)} if keep else {}),
                "succeeded": out.counts.get("succeeded"), "wall_s": round(wall, 1),
                "cpu_ms_per_task": round(1000 * cpu / n, 1),
                "sys_cpu_ms_per_task": round(1000 * sys_cpu / n, 1),
                "loop_cpu_ms_per_task": round(1000 * loop.timings.get("coordinator_cpu_s", 0.0) / n, 2),
                "launch_cpu_ms_per_task": round(1000 * loop.timings.get("launch_cpu_s", 0.0) / n, 2),
                "spawner_cpu_ms_per_task": round(1000 * getattr(getattr(loop.executor, "spawner", None), "cpu_s", 0.0)
                                                 / n, 2),
                "peak_rss_mb": round(r1.ru_maxrss / 1024, 1),
                "peak_scratch_mb": round(peak_bytes / 2**20, 1), "events": len(records),
                "ledger_bytes_per_task": round(event_bytes / n), "blob_bytes_per_task": round(blob_bytes / n),
                "largest_integration_record_bytes": largest, "verified": verified,
                "max_parallel": max_parallel, "telemetry": telemetry,
                **({"spans_exported": follower.spans.exporter.exported, "gap_reads": follower.gap_reads,
                    "export_failures": follower.spans.failures} if follower is not None else {}),
                "bytes_per_task_by_topic": {t: round(b / n) for t, b in
                                            sorted(by_topic.items(), key=lambda kv: -kv[1])[:6]}}
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def records_only(n: int) -> dict:
    """The integration records and run.finished of an n-proposal run, built without
    running the tasks: the stack plan, the gate and the promotion decision as the
    run's Emitter writes them (signed, lists chained), then read back and verified."""
    from coordinator.integration.evidence import T_GATE, T_PLAN, T_PROMOTION, verify_artifact
    from coordinator.integration.recorder import Emitter, records_of
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from coordinator.run_payloads import finish_lists, offload_finish_lists
    from ledger import Ledger
    from registry.canonical import canonical_json

    root = Path(tempfile.mkdtemp(prefix="dome-scale-records-"))
    try:
        ops = root / "ops"
        with Ledger.open(None, ops) as ledger:
            key = load_or_create_signing_key(ops)
            keyring = load_keyring(ops)
            ids = [f"pp-{i:024x}" for i in range(n)]
            layers = [{"proposal_id": p, "diff_digest": "sha256:" + f"{i:064x}", "layer": i} for i, p in enumerate(ids)]
            refs = [{"kind": "dome.apply_result/v1", "object_id": p, "digest": "sha256:" + f"{i:064x}",
                     "event_sequence": i} for i, p in enumerate(ids)]
            blobs0 = tree_bytes(ops / "blobs")
            t0 = time.perf_counter()
            emit = Emitter(ledger, "run-records", key, lambda: "2026-11-25T00:00:00Z")
            emit(T_PLAN, {"stack_plan_id": "sp-1", "base_ref": "b" * 40, "ordered_proposals": layers,
                          "selection_scores": [{"proposal_id": p, "score": 1.0} for p in ids]})
            emit(T_GATE, {"decision_id": "gate-1", "passed": True, "head_ref": "c" * 40, "included_proposals": ids,
                          "links": [{"link": f"apply_result:{p}", "status": "ok", "detail": "", "refs": [r]}
                                    for p, r in zip(ids, refs)], "evidence_refs": refs})
            emit(T_PROMOTION, {"decision_id": "promo-1", "outcome": "promoted", "from_head_ref": "c" * 40,
                               "to_ref": "refs/heads/out", "included_proposals": ids, "evidence_refs": refs})
            fin = offload_finish_lists(ledger.blobs, {"status": "promoted", "proposals": ids,
                                                      "included_proposals": ids, "counts": {"succeeded": n}})
            ledger.append("run-records", "run.finished", fin)
            write_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            faults: list = []
            recs = records_of(ledger, "run-records", faults)
            for r in recs:
                if r.topic != "run.finished":
                    verify_artifact(r.artifact, keyring)
            assert not faults and len(recs[1].artifact["links"]) == n
            assert len(finish_lists(ledger.blobs, recs[-1].artifact)["proposals"]) == n
            read_s = time.perf_counter() - t1
            sizes = {e.topic: len(canonical_json(e.payload)) for e in ledger.events("run-records")}
            # the baseline: the same records with their lists inline (as signed, before chaining)
            inline = {r.topic: len(canonical_json(dict(r.artifact))) for r in recs if r.topic != "run.finished"}
            inline["run.finished"] = len(canonical_json({**recs[-1].artifact, **finish_lists(ledger.blobs, fin)}))
            return {"n": n, "record_bytes": sizes, "inline_bytes": inline, "blob_bytes_per_proposal": round(
                (tree_bytes(ops / "blobs") - blobs0) / n), "write_s": round(write_s, 2),
                    "read_and_verify_s": round(read_s, 2)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


class Postgres:
    """A throwaway local PostgreSQL server on a Unix socket (fsync off)."""

    def __enter__(self) -> str:
        debian = ":".join(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
        path = os.pathsep.join(p for p in (os.environ.get("PATH", ""), debian) if p)
        self.initdb, self.pg_ctl = shutil.which("initdb", path=path), shutil.which("pg_ctl", path=path)
        if not self.initdb or not self.pg_ctl:
            raise SystemExit("PostgreSQL server binaries (initdb, pg_ctl) not installed")
        self.base = Path(tempfile.mkdtemp(prefix="dome-pg-"))
        data, sock = self.base / "data", self.base / "sock"
        sock.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres")
            shutil.chown(sock, "postgres")
        self._pg(self.initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        self._pg(self.pg_ctl, "-D", str(data), "-w", "-l", str(self.base / "log"), "-o",
                 f"-k {sock} -c listen_addresses='' -c fsync=off", "start")
        self.data = data
        return f"postgresql+psycopg://postgres@/postgres?host={sock}"

    def _pg(self, *cmd: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=120)

    def __exit__(self, *exc) -> None:
        try:
            self._pg(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--db", default="sqlite,postgres")
    ap.add_argument("--sandbox", default="none", choices=["none", "bwrap"])
    ap.add_argument("--max-parallel", type=int, default=4)
    ap.add_argument("--executor", default="local", help="comma-separated: local, ray, container")
    ap.add_argument("--image", default=os.environ.get("DOME_WORKER_IMAGE"),
                    help="the container rows' worker image (built with ops/container/build.sh when not given)")
    ap.add_argument("--verify", action="store_true", help="run dome verify's checks on each run afterwards")
    ap.add_argument("--project-dir", default=".",
                    help="where each run's repository and ops/ go (a fresh folder in it, removed after), as a "
                         "user's project folder holds them; 'tmp' puts them in the temp dir beside the scratch")
    ap.add_argument("--records", default=None,
                    help="comma-separated N: build only the integration records and run.finished of N proposals")
    ap.add_argument("--telemetry", default="off",
                    help="off, on or off,on: live traces (OTLP/HTTP to a sink in this process) and metrics")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: one run in this process
    ap.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)  # internal: the caller removes the folder
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--sample-dir", default=None, help=argparse.SUPPRESS)  # internal: the scratch sampler
    ap.add_argument("--spawn-threads", type=int, default=None,
                    help="local executor: threads that start workers (0: on the run loop's thread, as before)")
    a = ap.parse_args(argv)
    if a.sample_dir:
        sample_until_stdin_closes(Path(a.sample_dir))
        return 0
    if a.one:
        print(json.dumps(one(a.one, a.url, a.sandbox, a.max_parallel, a.executor, a.image, a.verify,
                             a.spawn_threads, None if a.project_dir == "tmp" else a.project_dir, a.keep,
                             a.telemetry == "on")))
        return 0
    if a.records:
        for n in (int(x) for x in a.records.split(",")):
            print(json.dumps(records_only(n)), flush=True)
        return 0
    rows: list[dict] = []
    kept: list[str] = []
    try:
        return _configurations(a, rows, kept)
    finally:
        for root in kept:
            shutil.rmtree(root, ignore_errors=True)


def otlp_sink():
    """An OTLP/HTTP endpoint in this (the parent) process that accepts every batch: the
    child's exporter does all of its work, and none of the receiving is counted."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _configurations(a: argparse.Namespace, rows: list[dict], kept: list[str]) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kinds = [k for k in a.executor.split(",") if k]
    image = a.image
    if "container" in kinds and not image:
        image = subprocess.run(["bash", str(ROOT / "ops" / "container" / "build.sh")], check=True,
                               capture_output=True, text=True).stdout.strip().splitlines()[-1]
    sink = None
    if "on" in a.telemetry.split(","):
        sink = otlp_sink()
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{sink.server_address[1]}"
    for db, kind, tel in ((d, k, t) for d in a.db.split(",") for k in kinds for t in a.telemetry.split(",")):
        pg = Postgres() if db == "postgres" else None
        url = pg.__enter__() if pg else None
        try:
            for n in (int(x) for x in a.sizes.split(",")):
                cmd = [sys.executable, __file__, "--one", str(n), "--sandbox", a.sandbox, "--executor", kind,
                       "--max-parallel", str(a.max_parallel), *(["--url", url] if url else []),
                       *(["--image", image] if image else []), *(["--verify"] if a.verify else []),
                       "--project-dir", a.project_dir, "--keep", "--telemetry", tel]
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    print(proc.stderr[-3000:], file=sys.stderr)
                    return 1
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                kept.append(row.pop("root"))  # removed after the last configuration (see `one`)
                rows.append(row)
                if not a.json:
                    print(json.dumps(row), flush=True)
        finally:
            if pg:
                pg.__exit__()
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"\n{'db':>8} {'executor':>9} {'N':>6} {'status':>9} {'CPU ms/task':>11} {'of it sys':>9} {'peak RSS MB':>11} {'scratch MB':>10} "
              f"{'ledger B/task':>13} {'blob B/task':>11} {'largest rec B':>13} {'wall s':>7}")
        for r in rows:
            print(f"{r['db']:>8} {r['executor']:>9} {r['n']:>6} {r['status']:>9} {r['cpu_ms_per_task']:>11} {r['sys_cpu_ms_per_task']:>9} {r['peak_rss_mb']:>11} "
                  f"{r['peak_scratch_mb']:>10} {r['ledger_bytes_per_task']:>13} {r['blob_bytes_per_task']:>11} "
                  f"{r.get('largest_integration_record_bytes', ''):>13} "
                  f"{r['wall_s']:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
