"""The coordinator's memory does not grow with every event of the run.

The readers that walk a whole run at its end (the export of event and task
files, the integration stage's scans for its own records and derived bases,
the gate) read the events a page at a time and keep only what they need; the
grants verifier keeps the verified tokens of attempts in flight only. Each
test here fails on a reader that loads the whole run at once or keeps every
attempt's token."""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import ledger.paging as paging
from coordinator.integration import finish as ifinish
from coordinator.integration.recorder import INTEGRATION_PREFIXES, integration_records, records_of
from coordinator.runloop.export import task_files, write_run_files
from coordinator.workqueue import parse_work_queue
from ledger import Ledger
from ledger.export import event_path
from ledger.paging import iter_events
from registry.signing import SigningKey
from tests.conftest import REPO_ROOT, make_repo
from tests.grants.conftest import World, world  # noqa: F401 - the fixture
from tests.grants.test_verify import CALL

RUN = "run-mem"
PAGE = 50
PAD = 16_000  # a large grant.call payload: the kind of event the task projection never keeps


class PagedOnly:
    """A ledger that refuses a read of more than one page of a run's events."""

    def __init__(self, inner: Ledger) -> None:
        self._inner = inner
        self.reads = 0

    def events(self, run_id: str, since: int = 0, limit: int | None = None) -> list[Any]:
        assert limit is not None and limit <= PAGE, f"an unpaged read of the run's events (limit={limit})"
        self.reads += 1
        return self._inner.events(run_id, since=since, limit=limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paging, "PAGE", PAGE)


def _queue(n: int) -> Any:
    tasks = [{"node_id": f"t{i:04d}", "containers": [], "required_capabilities": ["write"],
              "required_outputs": ["patch_proposal"], "dependencies": [],
              "action_spec": {"intent": "command", "argv": ["true"]}} for i in range(n)]
    return parse_work_queue({"artifact_kind": "dome.work.queue/v1", "repo": "/nonexistent", "base_ref": "main",
                             "determinism_seed": 1, "policy": "default", "promote_to": "refs/heads/out", "tasks": tasks,
                             "scheduling": {"max_parallel": 4}})


def _run(ledger: Ledger, n: int) -> None:
    """A run of n tasks as the ledger holds it: a dispatch, a large grant.call and a result each,
    and a few integration records and derived bases between them."""
    with ledger.transaction() as tx:
        tx.append(RUN, "run.started", {"run_id": RUN, "determinism_seed": 1})
        for i in range(n):
            nid, neid = f"t{i:04d}", f"ne-{i:04d}"
            keys = {"node_id": nid, "node_execution_id": neid, "task_id": nid, "wave_id": "w1"}
            tx.append(RUN, "task.dispatched", {"node_execution_id": neid, "attempt": 1, "kind": "first",
                                               "wave_id": "w1"}, **keys)
            tx.append(RUN, "grant.call", {"node_execution_id": neid, "pad": "x" * PAD}, **keys)
            tx.append(RUN, "task.completed", {"node_execution_id": neid, "outcome": "failed",
                                              "error": {"code": "E"}}, **keys)
            if i % 100 == 0:
                tx.append(RUN, "integration.apply_result", {"proposal_id": f"pp-{i}", "applied": True})
                tx.append(RUN, "task.base_derived", {"parent": "a" * 40, "base_ref": f"{i:040x}",
                                                     "applied": []})


def test_iter_events_reads_pages_and_misses_nothing(tmp_path: Path) -> None:
    with Ledger.open(None, tmp_path) as ledger:
        for i in range(23):
            ledger.append(RUN, "x.y", {"i": i})
        src = PagedOnly(ledger)
        assert [e.payload["i"] for e in iter_events(src, RUN, page=5)] == list(range(23))
        assert src.reads == 5
        assert [e.payload["i"] for e in iter_events(src, RUN, since=20, page=3)] == [20, 21, 22]
        assert list(iter_events(src, "no-such-run", page=5)) == []
        walk, seen = iter_events(src, RUN, page=10), []
        for e in walk:  # appended during the walk: included, in order
            seen.append(e.payload["i"])
            if e.payload["i"] == 0:
                ledger.append(RUN, "x.y", {"i": 23})
        assert seen == list(range(24))
        with pytest.raises(ValueError):
            next(iter_events(src, RUN, page=0))


def test_run_files_are_written_from_pages_with_the_same_bytes(tmp_path: Path, small_pages: None) -> None:
    n = 120
    graph = _queue(n).graph
    with Ledger.open(None, tmp_path / "ops") as ledger:
        _run(ledger, n)
        stray = event_path(tmp_path / "ops", RUN, 99_999)
        stray.parent.mkdir(parents=True, exist_ok=True)
        stray.write_text("{}")
        src = PagedOnly(ledger)
        write_run_files(src, RUN, tmp_path / "ops", graph)  # type: ignore[arg-type]
        assert src.reads >= ledger.head(RUN) // PAGE
        expected = task_files(ledger.events(RUN), graph, RUN, ledger.blobs.get)
        run_dir = tmp_path / "ops" / "runs" / RUN
        assert len(expected) == n
        for rel, data in expected.items():
            assert (run_dir / rel).read_bytes() == data, rel
        assert sorted(p.name for p in (run_dir / "events").iterdir()) == \
            sorted(f"event.{s}.json" for s in range(1, ledger.head(RUN) + 1))  # the stray is gone


def _export_peak(ops: Path, n: int) -> int:
    """Peak traced bytes of exporting an n-task run, in this process."""
    graph = _queue(n).graph
    with Ledger.open(None, ops) as ledger:
        _run(ledger, n)
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            write_run_files(ledger, RUN, ops, graph)
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()


def test_exporting_a_run_holds_a_page_not_the_run(tmp_path: Path) -> None:
    """Peak memory of the export stays under a fraction of the run's bytes (a reader that
    loads every event holds each large payload twice: parsed, and in the record's bytes).
    Measured in a fresh interpreter: the peak counts every thread's allocations, and threads
    other tests leave behind (servers, committers) would be counted too."""
    n = 400
    script = ("import sys; from pathlib import Path; import ledger.paging as paging; "
              f"paging.PAGE = {PAGE}; from tests.scale.test_bounded_memory import _export_peak; "
              f"print(_export_peak(Path(sys.argv[1]), {n}))")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "ops")], cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    peak = int(proc.stdout.strip().splitlines()[-1])
    run_bytes = n * PAD
    assert peak < run_bytes / 2, f"export peak {peak / 2**20:.1f} MB for a run of {run_bytes / 2**20:.1f} MB"


def test_integration_reads_its_records_from_pages(tmp_path: Path, small_pages: None) -> None:
    with Ledger.open(None, tmp_path / "ops") as ledger:
        _run(ledger, 300)
        src = PagedOnly(ledger)
        everything = records_of(ledger, RUN)
        mine = records_of(src, RUN, prefixes=INTEGRATION_PREFIXES)
        assert [r.sequence for r in mine] == [r.sequence for r in everything
                                              if r.topic.split(".")[0] in INTEGRATION_PREFIXES]
        assert len(mine) == 3
        assert [r.sequence for r in integration_records(src, RUN)] == [r.sequence for r in mine]
        assert sorted(ifinish.derived_bases(src, RUN, "a" * 40)) == [f"{i:040x}" for i in (0, 100, 200)]
        assert ifinish.recorded_result(src, RUN) is None


def test_the_grant_cache_holds_attempts_in_flight_only(world: World) -> None:
    """A verified token stays warm while its attempt runs and leaves with the attempt's
    call key: after K attempts the cache holds none of them."""
    v = world.verifier
    grants = []
    for i in range(40):
        g = world.issue(node_id=f"n{i}", node_execution_id=f"n{i}.1")
        v.bind_call_key(g.jti, SigningKey.generate())
        assert v.verify(g.token, method="read_file", **CALL).warm is False
        assert v.verify(g.token, method="read_file", **CALL).warm is True
        grants.append(g)
    for g in grants:
        v.drop_call_key(g.jti)
    assert len(v._cache) == 0 and len(v._token_of) == 0
    assert v.verify(grants[0].token, method="read_file", **CALL).warm is False  # verified afresh if it comes back


def _head(repo: Path) -> str:
    from tests.conftest import git
    return git(repo, "rev-parse", "HEAD")


def test_checkpoints_share_the_stack_and_keep_its_digest(tmp_path: Path) -> None:
    """Each checkpoint names the whole stack under it (its count and digest are in the
    checkpoint record): a copy of the stack per checkpoint made memory grow as N squared
    and hashing it again at each made CPU per proposal grow with N."""
    from coordinator.integration.canvas import Attempt, Canvas
    from registry.canonical import digest_json

    n = 1500
    ids = [f"pp-{i:024x}" for i in range(n)]
    repo = make_repo(tmp_path / "repo")
    canvas = Canvas(repo, _head(repo), run_id="r", create_worktree=False)
    try:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            for pid in ids:
                canvas.commit(Attempt(), [pid])
                canvas.checkpoint({})
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        # one tuple of the stack per checkpoint would be n * n / 2 pointers: 9 MB more here
        assert grown < 5 * 2**20, f"{grown / 2**20:.1f} MB for {n} checkpoints"
        cps = canvas.checkpoints
        for k in (0, 1, 63, 64, 65, 1000, n - 1):
            d = cps[k].to_dict()
            assert list(cps[k].included) == ids[:k + 1]
            assert d["included_count"] == k + 1 and d["included_digest"] == digest_json(ids[:k + 1])
        canvas.rollback(cps[499].checkpoint_id)  # the stack as it was; later checkpoints keep theirs
        canvas.commit(Attempt(), ["pp-other"])
        cp = canvas.checkpoint({})
        assert list(cp.included) == [*ids[:500], "pp-other"]
        assert cp.to_dict()["included_digest"] == digest_json([*ids[:500], "pp-other"])
        assert list(cps[1000].included) == ids[:1001]
    finally:
        canvas.close()


def test_a_growing_stack_flushes_its_objects_as_it_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every checkpoint writes the tree of each directory it changed, as large as the
    directory: N proposals that each add a file to one directory write N trees whose
    sizes add up as N squared. The canvas's object store sends them to the repository
    once FLUSH_BYTES are pending instead of holding the whole stack's objects."""
    from coordinator.integration import gitio
    from coordinator.integration.canvas import Attempt, Canvas
    from tests.conftest import git

    monkeypatch.setattr(gitio.ObjectStore, "FLUSH_BYTES", 256 * 1024)
    n = 400
    repo = make_repo(tmp_path / "repo")
    canvas = Canvas(repo, _head(repo), run_id="r", create_worktree=False)
    try:
        blob = canvas.store.write("blob", b"x\n")
        most = 0
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            for i in range(n):
                att = Attempt()
                att.changes[f"out/i{i:05d}.txt"] = ("100644", blob)
                canvas.commit(att, [f"pp-{i}"])
                canvas.checkpoint({})
                most = max(most, canvas.store._pending_bytes)
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        trees = sum(38 * k for k in range(1, n + 1))  # what the stack's out/ trees add up to
        assert most < gitio.ObjectStore.FLUSH_BYTES
        assert grown < trees / 3, f"{grown / 2**20:.1f} MB held for {trees / 2**20:.1f} MB of trees"
        canvas.publish_head()
        canvas.flush_refs()
        listed = git(repo, "ls-tree", "--name-only", f"{canvas.head}:out").split()
        assert len(listed) == n and listed[0] == "i00000.txt"
        assert git(repo, "cat-file", "-t", canvas.checkpoints[10].commit) == "commit"  # flushed early, readable
    finally:
        canvas.close()


FILE_LINES, LINE = 400, 240  # one proposal: a new file of about 96 KB (under the size rule's 500 lines)


def _finish_peak(tmp_path: Path, n: int) -> tuple[int, Any]:
    """tracemalloc's peak over `finish_run` of n proposals that each add a file of about
    96 KB, read from disk by the diff loader, stored in a real (SQLite and file) ledger."""
    from coordinator.integration import gitio
    from coordinator.integration.policy import IntegrationPolicy
    from tests.integration.conftest import head, make_proposal

    root = tmp_path / f"n{n}"
    repo = make_repo(root / "repo")
    props, paths = [], {}
    for i in range(n):
        def add(r: Path, i: int = i) -> None:
            (r / "tiles").mkdir(exist_ok=True)
            (r / "tiles" / f"t{i:03d}.txt").write_text(
                "".join(f"{i:03d} {k:04d} " + "m" * (LINE - 10) + "\n" for k in range(FILE_LINES)))
        p, canonical = make_proposal(repo, f"pp-{i:03d}", add)
        paths[p["proposal_id"]] = root / f"{p['proposal_id']}.diff"
        paths[p["proposal_id"]].write_bytes(canonical)
        props.append(p)
    with Ledger.open(None, root / "ops") as ledger:
        ctx = ifinish.FinishContext(
            run_id=RUN, repo=repo, base_ref=head(repo), proposals=props, ledger=ledger,
            signing_key=SigningKey(b"\x05" * 32), ops_root=root / "ops",
            policy=IntegrationPolicy(suites_by_risk={}, promote_to="refs/heads/out"),
            diff_loader=lambda p: paths[p["proposal_id"]].read_bytes(), validator=lambda cp, s: {})
        assert gitio.ObjectStore.FLUSH_BYTES == 256 * 1024  # the canvas holds at most that of new objects
        tracemalloc.start()
        try:
            res = ifinish.finish_run(ctx)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return peak, res


def test_the_integration_holds_one_proposals_diff_not_every_one(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a proposal is checked and its canonical diff stored, the integration keeps its
    digest, touched files, fingerprints and risk only, and reads the diff back from the blob
    store to apply it: 24 more proposals of 96 KB each (2.3 MB of diffs, more than twice
    that parsed) add 0.35 MB to the peak. A finish that held every checked diff until the
    stack was built peaked 5.2 MB higher with 32 than with 8."""
    from coordinator.integration import gitio

    monkeypatch.setattr(gitio.ObjectStore, "FLUSH_BYTES", 256 * 1024)
    small, res_small = _finish_peak(tmp_path, 8)
    large, res_large = _finish_peak(tmp_path, 32)
    assert len(res_small.included) == 8 and len(res_large.included) == 32, (res_large.status, res_large.missing)
    size = FILE_LINES * LINE
    assert large - small < 6 * size, (f"peak {small / 2**20:.1f} MB for 8 proposals, {large / 2**20:.1f} MB "
                                      f"for 32 ({size / 2**10:.0f} KB each)")


def test_a_replay_forgets_the_objects_the_repository_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Verify's replay writes nothing, so its object store once held every object the
    replay made (the block's 161 layers: 107 MB of mask blobs). Past FLUSH_BYTES it drops
    those the repository holds byte for byte (read back from there when needed) and keeps
    those it lacks."""
    from coordinator.integration import gitio
    from tests.conftest import git

    monkeypatch.setattr(gitio.ObjectStore, "FLUSH_BYTES", 64 * 1024)
    repo = make_repo(tmp_path / "repo")
    stored = [f"stored {i} ".encode() * 2000 for i in range(12)]  # 18 KB each, written to git first
    for i, data in enumerate(stored):
        (repo / f"s{i}.bin").write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "stored")
    with gitio.ObjectReader(repo, verify=True) as reader:
        store = gitio.ObjectStore(repo, reader, persist=False)
        lacking = store.write("blob", b"only in this replay\n" * 1000)
        oids = [store.write("blob", d) for d in stored]
        assert store._pending_bytes < 64 * 1024 + len(stored[0])  # not the 216 KB written
        assert lacking in store._pending  # the repository lacks it: still held
        assert [store.read(o) for o in oids] == [("blob", d) for d in stored]  # read back alike
        assert store.read(lacking) == ("blob", b"only in this replay\n" * 1000)
    assert subprocess.run(["git", "cat-file", "-e", lacking], cwd=repo, timeout=30).returncode != 0  # nothing written


def test_the_base_inspector_keeps_the_last_bases_only_and_reads_others_again(tmp_path: Path) -> None:
    """A derived base per task made the proposal checks hold an index of the whole tree
    per task (146 on the fullchip block, 25 MB). The inspector keeps CACHED_BASES of them;
    a base let go is indexed again from git with the same blob ids, modes and links."""
    from coordinator.integration.proposals import BaseInspector
    from tests.conftest import git

    repo = make_repo(tmp_path / "repo")
    trees, commits = [], []
    for i in range(BaseInspector.CACHED_BASES + 4):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"c{i}")
        commits.append(_head(repo))
        trees.append(git(repo, "rev-parse", "HEAD^{tree}"))
    insp = BaseInspector(repo)
    first, first_modes = [], []
    for c in commits:
        first.append(insp.base(c))
        first_modes.append(dict(insp.modes(c)))
    assert all(first_modes)
    for i, t in enumerate(trees):
        insp.register_virtual_base(f"{i:040x}", t)
    assert len(insp._cache) == BaseInspector.CACHED_BASES and len(insp._modes) <= BaseInspector.CACHED_BASES
    assert [insp.base(c) for c in commits] == first  # read again from git: the same facts
    assert [insp.modes(c) for c in commits] == first_modes
    for i, c in enumerate(commits):  # a derived base let go keeps its tree, not a commit's
        assert insp.base(f"{i:040x}")[1:] == insp.base(c)[1:]
    assert insp.base("f" * 40)[0] is False
