"""What a run costs as it grows: N one-file tasks on a 200-file repository.

    python benchmarks/scale_curve.py [--sizes 10,100,1000] [--db sqlite,postgres] [--sandbox none]
                                     [--executor local,ray,container] [--max-parallel 4] [--verify] [--json]
                                     [--project-dir DIR|tmp] [--tree DIR[,DIR]] [--idle-seconds 5]

Each (N, database, executor) is one `dome run`, in a fresh Python process timed from
outside (`--one`: pre-flight, ledger, keys, RunLoop.start + run, the executor,
integration, promotion, export; interpreter start-up included), on a fresh copy of the
repository that the parent made beforehand; the ledger figures are read afterwards by
another process (`--analyse`), outside the window. Executors: local (the default), ray
(a local Ray cluster the run starts) and container (podman, the worker image of
ops/container/build.sh, or --image). Every task writes one file
(`echo i > out/iNNNNN.txt`). Files go where `dome run` puts them: the repository and
its ops/ (ledger, event files, blobs) in a fresh folder under --project-dir (default:
the current directory, as in a user's project, made absolute; `tmp`: the temp dir),
the attempts' scratch in $DOME_SCRATCH_DIR or the temp dir. Every folder is removed
when the last configuration is done (a failed run's too); not between runs, see `prepare`.
`--tree A,B` runs each N once per dome source tree, alternating (a before/after pair
measured on the same machine in the same minutes).

Reported per configuration, per task:

- machine CPU (`machine_cpu_ms_per_task`): every core's busy time from /proc/stat over
  the run process's window, less the idle machine's rate (measured for --idle-seconds
  before the first run) times the window, less the benchmark's own scratch sampler. On a
  machine others are using, the idle rate swings and this figure with it; where the
  idle rate is near the core count it means nothing, and the benchmark says so;
- the run's process tree CPU (`tree_cpu_ms_per_task`): the run process starts in a
  cpuacct cgroup of its own (cgroup v1), which counts every process of its tree, the
  sandboxed workers that nobody waits for included, and nothing of anyone else: the
  figure to compare on a shared machine;
- container rows: the CPU that podman's default cgroup parent (`libpod_parent`, cgroup v1,
  cgroupfs) counted over the run's window (`podman_outside_cpu_ms_per_task`): containers and
  their conmon processes started outside the run's tree, which a container executor that
  names no cgroup parent leaves there (anyone's containers, so measure on a machine where
  no one else starts any); add it to the tree figure to compare such a run;
- coordinator CPU (`coordinator_cpu_ms_per_task`): user + system CPU of the whole
  `dome run` process, of which the kernel's part (`sys_cpu_ms_per_task`); and
  `run_cpu_ms_per_task`, only RunLoop.start + run (what the earlier tables called
  the coordinator's CPU);
- the CPU of the processes the coordinator waited for (`waited_cpu_ms_per_task`:
  git, the attempts' launchers and bwrap's outer processes; the workers themselves
  without a sandbox), and the workers' CPU that the run's own accounting counted in
  the attempts' cgroups (`workers_cgroup_cpu_ms_per_task`), and the total that
  `dome run` reports (`reported_total_cpu_ms_per_task`, see coordinator.run_cost);
- the run loop's own thread (`loop_cpu_ms_per_task`), handing attempts to the
  executor (`launch_cpu_ms_per_task`), the local executor's spawner thread
  (`spawner_cpu_ms_per_task`; `--spawn-threads 0` starts workers on the loop's thread);
- peak RSS of the run process (ru_maxrss); peak scratch disk (the run's work
  folder, sampled every 100 ms by a process of its own);
- ledger bytes per task (canonical JSON of the run's records), the blob store per
  task, the largest integration record's payload (the same size whatever N);
- wall time of the whole process, and the run's status; with --verify, what
  `dome verify`'s checks conclude.

`--records 100,1000,10000` runs no task: it builds the stack plan, gate and
promotion decision and run.finished of N proposals as a run records them
(signed, long lists chained), reads them back and verifies them, and prints
each record's payload size: the cheap way to see N = 10,000.

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
TREE = Path(os.environ.get("DOME_BENCH_TREE") or ROOT)  # the dome source the runs use (--tree)
sys.path.insert(0, str(TREE))

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


def stop_sampler(proc: subprocess.Popen) -> tuple[int, float]:
    """Close the sampler's stdin (its signal to stop): the largest size it saw, in bytes, and its
    own CPU seconds (taken off the machine's figure: the sampler is the benchmark's, not dome's)."""
    out, _ = proc.communicate(timeout=60)
    peak, _, cpu = out.decode().strip().partition(" ")
    return int(peak or 0), float(cpu or 0.0)


def sample_until_stdin_closes(root: Path) -> None:
    import select
    peak = 0
    while True:
        peak = max(peak, tree_bytes(root))
        if select.select([sys.stdin], [], [], SAMPLE_INTERVAL_S)[0]:
            break  # stdin closed (or written to): the run is over
    me = resource.getrusage(resource.RUSAGE_SELF)
    print(peak, me.ru_utime + me.ru_stime, flush=True)


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy since boot, all cores (/proc/stat: user,
    nice, system, irq, softirq, steal; guest time is already in user)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def idle_rate(seconds: float = 5.0) -> float:
    """The machine's busy CPU seconds per second while this benchmark runs nothing (other
    users, daemons): taken off each run's machine figure."""
    b0, t0 = machine_busy_s(), time.perf_counter()
    time.sleep(seconds)
    return (machine_busy_s() - b0) / (time.perf_counter() - t0)


CPUACCT = Path("/sys/fs/cgroup/cpuacct")
# where podman (cgroupfs manager, cgroup v1) starts containers and their conmon processes when
# nobody names a cgroup parent: outside the run's tree, so counted beside it
PODMAN_DEFAULT_GROUP = CPUACCT / "libpod_parent"


def group_cpu_s(group: Path) -> float | None:
    try:
        return int((group / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return None


def tree_group() -> Path | None:
    """A fresh cgroup v1 cpuacct group for one timed process (nested under this process's own),
    or None where there is none: it counts the CPU of every process of the run's tree, the
    sandboxed workers included, whoever waits for them, and nothing of other users."""
    try:
        own = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                   if "cpuacct" in line.split(":", 2)[1].split(","))
        group = CPUACCT / own.lstrip("/") / f"dome-bench-{os.getpid()}-{time.monotonic_ns()}"
        group.mkdir()
        return group
    except (OSError, StopIteration, IndexError):
        return None


def remove_group(group: Path) -> None:
    for sub in sorted((d for d in group.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        try:
            sub.rmdir()
        except OSError:
            pass
    try:
        group.rmdir()
    except OSError:
        pass


def timed_process(cmd: list[str], env: dict[str, str], timeout: float = 7200) -> tuple[int, str, str, dict]:
    """Run `cmd` and measure it from outside: its wall time, its own CPU and that of the children
    it waited for (wait4), the CPU of its whole process tree (a cpuacct group it starts in), and
    the machine's busy CPU over the same window."""
    out_f, err_f = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    import threading
    group = tree_group()
    if group is not None:  # joined before the interpreter starts: its start-up is counted too
        cmd = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(group), *cmd]
    p0 = group_cpu_s(PODMAN_DEFAULT_GROUP)
    b0, t0 = machine_busy_s(), time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=env)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        _pid, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        timer.cancel()
    wall, busy = time.perf_counter() - t0, machine_busy_s() - b0
    p1 = group_cpu_s(PODMAN_DEFAULT_GROUP)
    proc.returncode = os.waitstatus_to_exitcode(status)
    tree_s = None
    if group is not None:
        try:
            tree_s = int((group / "cpuacct.usage").read_text()) / 1e9
        finally:
            remove_group(group)
    out_f.seek(0)
    err_f.seek(0)
    return proc.returncode, out_f.read().decode(), err_f.read().decode(), {
        "wall_s": wall, "machine_busy_s": busy, "process_tree_cpu_s": usage.ru_utime + usage.ru_stime,
        "tree_group_cpu_s": tree_s, "podman_default_group_cpu_s": None if p0 is None or p1 is None else p1 - p0}


def start_ray(max_parallel: int) -> None:
    """A local Ray cluster for the ray rows (the benchmark's own, stopped with its process)."""
    import ray
    ray.init(num_cpus=max_parallel, include_dashboard=False, log_to_driver=False, configure_logging=False,
             object_store_memory=100 * 1024 * 1024)


def prepare(n: int, max_parallel: int, project_dir: str | None) -> Path:
    """A fresh folder (absolute: the queue names the repository by its path) holding the
    repository and the work queue of an N-task run. It stays until the last configuration is
    done: on an ext4 without a journal, files created among inodes deleted in the minutes
    before cost several times the CPU, so removing one run's 14,000 event files just before
    the next run starts would be measured as the next run's cost."""
    parent = None if project_dir is None else os.path.abspath(project_dir)
    root = Path(tempfile.mkdtemp(prefix="dome-scale-", dir=parent)).resolve()
    try:
        write_queue(root, make_repo(root), n, max_parallel)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root


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


def one(root: Path, n: int, db: str | None, sandbox: str, max_parallel: int, executor: str = "local",
        image: str | None = None, spawn_threads: int | None = None, telemetry: bool = False) -> dict:
    """The run, in this process (`--one`): what `dome run` does (pre-flight, ledger, keys,
    RunLoop.start + run, the executor, integration, promotion, export) on the repository
    `prepare` made in `root`. The caller times this whole process from outside; the figures
    here are what only the process itself can see."""
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from coordinator.preflight import prepare as preflight
    from coordinator.runloop.finish import integration_finish
    from coordinator.runloop.loop import RunContext, RunLoop
    from ledger import Ledger

    queue = root / "work.queue.json"
    prepared = preflight(queue, integrate=True)
    ops = root / "ops"
    ops.mkdir(exist_ok=True)
    ledger = Ledger.open(db, ops)
    if executor == "ray":
        start_ray(max_parallel)
    ctx = RunContext(ledger=ledger, ops_root=ops, signer=load_or_create_signing_key(ops),
                     keyring=load_keyring(ops), sandbox=sandbox, finish=integration_finish,
                     executor_kind=executor, image=image if executor == "container" else None)
    if spawn_threads is not None and executor == "local":  # 0: workers started on the run loop's thread
        from coordinator.executors.local import LocalExecutor
        ctx.executor = LocalExecutor(sandbox=sandbox, max_concurrency=max_parallel, spawn_threads=spawn_threads)
    follower = None
    if telemetry:  # live spans to $OTEL_EXPORTER_OTLP_ENDPOINT and Prometheus metrics, as `dome run` does:
        # the records reach the follower through the run's view (here one that prints nothing)
        from coordinator.observe.follow import Follower
        from coordinator.observe.live import ViewTap
        from coordinator.observe.metrics import Metrics
        from coordinator.observe.tracing import sink_from_env
        follower = Follower(ledger, None, spans=sink_from_env(), metrics=Metrics(), tapped=True).start()
        ctx.view = ViewTap(_QuietView(), follower)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    loop = RunLoop.start(queue, ctx, prepared=prepared)
    sampler = start_sampler(loop.work)
    out = loop.run()
    if follower is not None:
        follower.close()  # its drain and the last export are the run's cost too
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    peak_bytes, sampler_cpu = stop_sampler(sampler)
    ledger.close()
    return {"run_id": out.run_id, "status": out.status, "succeeded": out.counts.get("succeeded"),
            "run_wall_s": round(wall, 1), "cost": getattr(out, "cost", None), "sampler_cpu_s": sampler_cpu,
            "run_cpu_s": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
            "loop_cpu_s": loop.timings.get("coordinator_cpu_s", 0.0),
            "launch_cpu_s": loop.timings.get("launch_cpu_s", 0.0),
            "spawner_cpu_s": getattr(getattr(loop.executor, "spawner", None), "cpu_s", 0.0),
            "peak_rss_mb": round(r1.ru_maxrss / 1024, 1), "peak_scratch_mb": round(peak_bytes / 2**20, 1),
            "telemetry": telemetry,
            **({"spans_exported": follower.spans.exporter.exported, "gap_reads": follower.gap_reads,
                "export_failures": follower.spans.failures} if follower is not None else {})}


def analyse(root: Path, n: int, db: str | None, run_id: str, verify: bool) -> dict:
    """The run's ledger figures (`--analyse`), read after the timed process has ended: ledger
    bytes per task by topic, the blob store, the largest integration record; `dome verify`'s
    checks with `verify`."""
    from coordinator.keys import load_keyring
    from ledger import Ledger
    from registry.canonical import canonical_json

    ops = root / "ops"
    ledger = Ledger.open(db, ops)
    records = ledger.events(run_id)
    by_topic: dict[str, int] = {}
    largest = 0  # the largest integration record's payload: constant whatever N
    for r in records:
        size = len(canonical_json(r.to_json() if hasattr(r, "to_json") else r.__dict__))
        by_topic[r.topic] = by_topic.get(r.topic, 0) + size
        if r.topic.split(".")[0] in ("integration", "gate", "promotion"):
            largest = max(largest, len(canonical_json(r.payload)))
    verified = None
    if verify:
        from coordinator.integration.verify import verify_run
        t1 = time.perf_counter()
        rep = verify_run(ledger, run_id, load_keyring(ops), ops_root=ops)
        verified = {"valid": rep.valid, "status": str(rep.status.value), "seconds": round(time.perf_counter() - t1, 1)}
    ledger.close()
    return {"events": len(records), "ledger_bytes_per_task": round(sum(by_topic.values()) / n),
            "blob_bytes_per_task": round(tree_bytes(ops / "blobs") / n),
            "largest_integration_record_bytes": largest, "verified": verified,
            "bytes_per_task_by_topic": {t: round(b / n) for t, b in sorted(by_topic.items(), key=lambda kv: -kv[1])[:6]}}


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
                    help="the container rows' worker image (built with ops/container/build.sh when not given); "
                         "with --tree, one per tree (comma-separated, in the same order) when the image is part "
                         "of what is compared")
    ap.add_argument("--verify", action="store_true", help="run dome verify's checks on each run afterwards")
    ap.add_argument("--project-dir", default=".",
                    help="where each run's repository and ops/ go (a fresh folder in it, removed after), as a "
                         "user's project folder holds them; 'tmp' puts them in the temp dir beside the scratch")
    ap.add_argument("--records", default=None,
                    help="comma-separated N: build only the integration records and run.finished of N proposals")
    ap.add_argument("--idle-seconds", type=float, default=5.0,
                    help="how long to measure the idle machine's CPU rate before the runs")
    ap.add_argument("--tree", default=str(ROOT),
                    help="comma-separated dome source trees to run (default: this one); with several, each N "
                         "runs once per tree, alternating, so the arms see the same machine")
    ap.add_argument("--telemetry", default="off",
                    help="off, on or off,on: live traces (OTLP/HTTP to a sink in this process) and metrics")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--svg", metavar="PATH", help="also plot coordinator CPU per task against N into PATH")
    ap.add_argument("--svg-from", metavar="JSON", help="only plot: rows as --json prints them (a row may name "
                    "its 'series'), into --svg's PATH")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: the timed run, in its own process
    ap.add_argument("--analyse", default=None, help=argparse.SUPPRESS)  # internal: RUN_ID, the ledger figures
    ap.add_argument("--root", default=None, help=argparse.SUPPRESS)  # internal: the folder `prepare` made
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--sample-dir", default=None, help=argparse.SUPPRESS)  # internal: the scratch sampler
    ap.add_argument("--spawn-threads", type=int, default=None,
                    help="local executor: threads that start workers (0: on the run loop's thread, as before)")
    a = ap.parse_args(argv)
    if a.svg_from:
        if not a.svg:
            ap.error("--svg-from needs --svg PATH")
        Path(a.svg).write_text(plot_rows(json.loads(Path(a.svg_from).read_text())))
        return 0
    if a.sample_dir:
        sample_until_stdin_closes(Path(a.sample_dir))
        return 0
    if a.one:
        row = one(Path(a.root), a.one, a.url, a.sandbox, a.max_parallel, a.executor, a.image, a.spawn_threads,
                  a.telemetry == "on")
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        row.update(process_cpu_s=me.ru_utime + me.ru_stime, process_sys_s=me.ru_stime,
                   children_cpu_s=kids.ru_utime + kids.ru_stime)  # the whole process, interpreter start-up included
        print(json.dumps(row))
        return 0
    if a.analyse:
        n = len(json.loads((Path(a.root) / "work.queue.json").read_text())["tasks"])
        print(json.dumps(analyse(Path(a.root), n, a.url, a.analyse, a.verify)))
        return 0
    if a.records:
        for n in (int(x) for x in a.records.split(",")):
            print(json.dumps(records_only(n)), flush=True)
        return 0
    rows: list[dict] = []
    kept: list[Path] = []
    try:
        return _configurations(a, rows, kept)
    finally:
        for root in kept:  # every run's folder, a failed run's too
            shutil.rmtree(root, ignore_errors=True)


def _child(args: list[str], env: dict[str, str], timed: bool) -> tuple[dict, dict]:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    if timed:
        rc, out, err, window = timed_process(cmd, env)
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=7200)
        rc, out, err, window = proc.returncode, proc.stdout, proc.stderr, {}
    if rc != 0:
        raise RuntimeError(f"{' '.join(args[:2])} exited with {rc}:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1]), window


def figures(n: int, run: dict, window: dict, idle: float) -> dict:
    """Per-task figures (ms) of one timed run (pure)."""
    cost = run.get("cost") or {}
    machine = window["machine_busy_s"] - idle * window["wall_s"] - run["sampler_cpu_s"]
    per = lambda seconds: None if seconds is None else round(1000 * seconds / n, 2)  # noqa: E731
    tree = window.get("tree_group_cpu_s")
    return {"machine_cpu_ms_per_task": per(machine),
            "tree_cpu_ms_per_task": per(None if tree is None else tree - run["sampler_cpu_s"]),
            # containers podman started outside the run's tree (anyone's, over the run's window)
            "podman_outside_cpu_ms_per_task": per(window.get("podman_default_group_cpu_s")),
            "coordinator_cpu_ms_per_task": per(run["process_cpu_s"]),
            "sys_cpu_ms_per_task": per(run["process_sys_s"]),
            "waited_cpu_ms_per_task": per(run["children_cpu_s"]),
            "workers_cgroup_cpu_ms_per_task": per(cost.get("workers_cpu_s")) if cost.get(
                "workers_measured_by") == "cgroup" else None,
            "reported_total_cpu_ms_per_task": per(cost.get("total_cpu_s")),
            "run_cpu_ms_per_task": per(run["run_cpu_s"]),  # start + run only, as the earlier tables measured
            "loop_cpu_ms_per_task": per(run["loop_cpu_s"]), "launch_cpu_ms_per_task": per(run["launch_cpu_s"]),
            "spawner_cpu_ms_per_task": per(run["spawner_cpu_s"]),
            "wall_s": round(window["wall_s"], 1), "idle_machine_cpu_per_s": round(idle, 3)}


def series_label(row: dict) -> str:
    """The line a row belongs to: its own 'series', else its configuration."""
    if row.get("series"):
        return row["series"]
    tree = f", {Path(row['tree']).name}" if row.get("tree") else ""
    return f"{row['db']}, {row['executor']}, sandbox {row['sandbox']}, telemetry {row.get('telemetry', 'off')}{tree}"


def plot_rows(rows: list[dict]) -> str:
    """SVG: the coordinator's CPU per task against N, one line per configuration (pure)."""
    from benchmarks.svgplot import Series, line_plot

    lines: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r.get("coordinator_cpu_ms_per_task") is not None:
            lines.setdefault(series_label(r), []).append((r["n"], r["coordinator_cpu_ms_per_task"]))
    return line_plot([Series(k, v) for k, v in lines.items()], title="Coordinator CPU per task against N",
                     x_label="N (tasks in the run, log scale)", y_label="coordinator CPU per task (ms)", log_x=True)


def _configurations(a: argparse.Namespace, rows: list[dict], kept: list[Path]) -> int:
    trees = [os.path.abspath(t) for t in a.tree.split(",") if t]
    kinds = [k for k in a.executor.split(",") if k]
    image = a.image
    if "container" in kinds and not image:
        image = subprocess.run(["bash", str(ROOT / "ops" / "container" / "build.sh")], check=True,
                               capture_output=True, text=True, timeout=7200).stdout.strip().splitlines()[-1]
    images = (image or "").split(",")
    if len(images) > 1 and len(images) != len(trees):
        ap_error = f"--image names {len(images)} images for {len(trees)} trees"
        print(ap_error, file=sys.stderr)
        return 2
    image_of = {t: images[i] if len(images) > 1 else image for i, t in enumerate(trees)}
    project_dir = None if a.project_dir == "tmp" else os.path.abspath(a.project_dir)
    idle = idle_rate(a.idle_seconds)
    sink = None  # the OTLP sink of `--telemetry on`, started on first use
    if idle > 0.8 * (os.cpu_count() or 1):
        print(f"note: the idle machine is busy ({idle:.2f} of {os.cpu_count()} cores): the machine figure means "
              "little now; the process tree's cgroup figure does not depend on it", file=sys.stderr)
    for db, kind in ((d, k) for d in a.db.split(",") for k in kinds):
        pg = Postgres() if db == "postgres" else None
        url = pg.__enter__() if pg else None
        try:
            for n, tree, tel in ((int(x), t, m) for x in a.sizes.split(",") for t in trees
                                 for m in a.telemetry.split(",")):
                env = {**os.environ, "PYTHONPATH": tree, "DOME_BENCH_TREE": tree}
                if tel == "on" and "OTEL_EXPORTER_OTLP_ENDPOINT" not in env:
                    sink = sink or otlp_sink()  # spans go somewhere that accepts them, outside the timed tree
                    env.update(OTEL_TRACES_EXPORTER="otlp",
                               OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink.server_address[1]}")
                root = prepare(n, a.max_parallel, project_dir)
                kept.append(root)  # removed after the last configuration (see `one`)
                common = [*(["--url", url] if url else []), "--root", str(root)]
                try:
                    run, window = _child(["--one", str(n), "--sandbox", a.sandbox, "--executor", kind,
                                          "--telemetry", tel,
                                          "--max-parallel", str(a.max_parallel), *common,
                                          *(["--image", image_of[tree]] if image_of[tree] else []),
                                          *(["--spawn-threads", str(a.spawn_threads)]
                                            if a.spawn_threads is not None else [])], env, timed=True)
                    ledger, _ = _child(["--analyse", run["run_id"], *common, *(["--verify"] if a.verify else [])],
                                       env, timed=False)
                except RuntimeError as exc:
                    print(exc, file=sys.stderr)
                    return 1
                row = {"n": n, "db": "postgres" if url else "sqlite", "executor": kind, "sandbox": a.sandbox,
                       "telemetry": tel,
                       **({"tree": tree} if len(trees) > 1 else {}),
                       **({"image": image_of[tree]} if kind == "container" else {}),
                       "status": run["status"], "succeeded": run["succeeded"], **figures(n, run, window, idle),
                       "peak_rss_mb": run["peak_rss_mb"], "peak_scratch_mb": run["peak_scratch_mb"],
                       "max_parallel": a.max_parallel, **ledger}
                rows.append(row)
                if not a.json:
                    print(json.dumps(row), flush=True)
        finally:
            if pg:
                pg.__exit__()
    if a.svg and rows:
        Path(a.svg).write_text(plot_rows(rows))
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        cols = [("db", "db", 8), ("executor", "executor", 9), ("N", "n", 6), ("status", "status", 9),
                ("tree ms/task", "tree_cpu_ms_per_task", 12), ("machine ms/task", "machine_cpu_ms_per_task", 15), ("coord ms/task", "coordinator_cpu_ms_per_task", 13),
                ("waited ms/task", "waited_cpu_ms_per_task", 14), ("workers ms/task", "workers_cgroup_cpu_ms_per_task", 15),
                ("podman outside ms/task", "podman_outside_cpu_ms_per_task", 22),
                ("RSS MB", "peak_rss_mb", 7), ("ledger B/task", "ledger_bytes_per_task", 13), ("wall s", "wall_s", 7)]
        print("\n" + " ".join(f"{h:>{w}}" for h, _, w in cols))
        for r in rows:
            print(" ".join(f"{str(r.get(k, '')):>{w}}" for _, k, w in cols))
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
