"""Sandbox judgement on both sides, on counter files laid out as the kernel does: the
worker's own check before it reports (worker_sdk.sandbox_limits) and the local
executor's sweep after the attempt exits. A limit hit once is a violation; a reused
cgroup's earlier counts are not charged again. Fast: no bubblewrap needed."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from worker_sdk import sandbox_limits as sl


def _cgroup(root: Path, *, forks: int = 0, ooms: int = 0, v1: bool = True) -> Path:
    if v1:
        (root / "pids").mkdir(parents=True)
        (root / "memory").mkdir(parents=True)
        (root / "pids" / "pids.events").write_text(f"max {forks}\n")
        (root / "memory" / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {ooms}\n")
    else:
        root.mkdir(parents=True)
        (root / "pids.events").write_text(f"max {forks}\n")
        (root / "memory.events").write_text(f"low 0\nhigh 0\nmax 2\noom 1\noom_kill {ooms}\n")
    return root


BUDGET = {"max_processes": 64, "memory_mb": 256}


@pytest.mark.parametrize("v1", [True, False])
@pytest.mark.parametrize("forks, counted, want", [(0, 0, None), (1, 0, 1), (3, 3, None), (4, 3, 1), (9, 3, 6)])
def test_one_refused_fork_more_than_counted_is_a_process_limit_violation(tmp_path: Path, v1: bool, forks: int,
                                                                          counted: int, want: int | None) -> None:
    root = _cgroup(tmp_path / "cg", forks=forks, v1=v1)
    found = sl.violations({**BUDGET, "counted": {"refused_forks": counted}}, cgroup_root=root,
                          tmp=str(tmp_path), scratch=str(tmp_path))
    got = [v for v in found if v["kind"] == "process_limit"]
    assert got == ([] if want is None else [{"kind": "process_limit", "limit": 64, "refused_forks": want}])


@pytest.mark.parametrize("v1", [True, False])
@pytest.mark.parametrize("ooms, counted, want", [(0, 0, None), (1, 0, 1), (2, 2, None), (3, 2, 1)])
def test_one_oom_kill_more_than_counted_is_a_memory_limit_violation(tmp_path: Path, v1: bool, ooms: int,
                                                                     counted: int, want: int | None) -> None:
    root = _cgroup(tmp_path / "cg", ooms=ooms, v1=v1)
    found = sl.violations({**BUDGET, "counted": {"oom_kills": counted}}, cgroup_root=root,
                          tmp=str(tmp_path), scratch=str(tmp_path))
    got = [v for v in found if v["kind"] == "memory_limit"]
    assert got == ([] if want is None else [{"kind": "memory_limit", "limit_mb": 256, "oom_kills": want}])


def test_a_full_capped_tmpfs_is_a_violation_and_an_uncapped_one_is_not(tmp_path: Path, monkeypatch) -> None:
    root = _cgroup(tmp_path / "cg")
    free = {str(tmp_path / "tmp"): sl.FULL_BELOW_BYTES - 1, str(tmp_path / "scratch"): sl.FULL_BELOW_BYTES}
    monkeypatch.setattr(sl, "_free_bytes", lambda p: free.get(p))
    kw = dict(cgroup_root=root, tmp=str(tmp_path / "tmp"), scratch=str(tmp_path / "scratch"))
    got = sl.violations({**BUDGET, "tmp_mb": 16, "disk_mb": 64}, **kw)
    assert got == [{"kind": "tmp_limit", "path": str(tmp_path / "tmp"), "limit_mb": 16}]
    assert sl.violations(BUDGET, **kw) == []  # no cap named: nothing to have filled
    free[str(tmp_path / "scratch")] = 0
    assert [v["kind"] for v in sl.violations({**BUDGET, "tmp_mb": 16, "disk_mb": 64}, **kw)] == ["tmp_limit",
                                                                                             "disk_limit"]


def test_check_raises_inside_the_sandbox_only(tmp_path: Path) -> None:
    root = _cgroup(tmp_path / "cg", forks=2)
    sl.check({})  # outside dome's sandbox: nothing to judge
    budget = {**BUDGET, "cgroup_root": str(root), "counted": {"refused_forks": 1}}
    with pytest.raises(sl.SandboxViolation) as exc:
        sl.check({"DOME_LIMITS": json.dumps(budget)})
    assert exc.value.details["violations"][0] == {"kind": "process_limit", "limit": 64, "refused_forks": 1}
    assert exc.value.retry == "none"
    sl.check({"DOME_LIMITS": json.dumps({**budget, "counted": {"refused_forks": 2}})})


def _sweep(tmp_path: Path, *, forks: int, ooms: int, counted: dict[str, int], procs: str = ""):
    from coordinator.executors.local import LocalExecutor, _Slot
    pids, mem = tmp_path / "pids", tmp_path / "memory"
    for d in (pids, mem):
        d.mkdir(exist_ok=True)
        (d / "cgroup.procs").write_text(procs)
    (pids / "pids.events").write_text(f"max {forks}\n")
    (mem / "memory.events").write_text(f"oom_kill {ooms}\n")
    slot = _Slot({"pids": pids, "memory": mem}, dict(counted))
    ex = SimpleNamespace(limits=SimpleNamespace(max_processes=32, memory_mb=128), memory_version="v2",
                         _lock=threading.Lock(), _free=[])
    proc = SimpleNamespace(slot=slot)
    return LocalExecutor._sweep(ex, proc), slot, ex, proc  # type: ignore[arg-type]


@pytest.mark.parametrize("forks, ooms, counted, want", [
    (0, 0, {"refused_forks": 0, "oom_kills": 0}, []),
    (1, 0, {"refused_forks": 0, "oom_kills": 0}, [{"kind": "process_limit", "limit": 32, "refused_forks": 1}]),
    (5, 2, {"refused_forks": 5, "oom_kills": 2}, []),
    (6, 3, {"refused_forks": 5, "oom_kills": 2}, [{"kind": "process_limit", "limit": 32, "refused_forks": 1},
                                                 {"kind": "memory_limit", "limit_mb": 128, "oom_kills": 1}]),
])
def test_the_executor_sweep_charges_each_attempt_what_it_added(tmp_path: Path, forks, ooms, counted, want) -> None:
    got, slot, ex, proc = _sweep(tmp_path, forks=forks, ooms=ooms, counted=counted)
    assert got == want
    # the next attempt starts from here (no CPU group in this slot: nothing of CPU was counted)
    assert slot.counted == {"refused_forks": forks, "oom_kills": ooms, "cpu_ns": 0}
    assert ex._free == [slot] and proc.slot is None  # an empty slot is handed out again
    again = _sweep_again(ex, slot)
    assert again == []  # the same counters judged again charge nothing


def _sweep_again(ex, slot):
    from coordinator.executors.local import LocalExecutor
    return LocalExecutor._sweep(ex, SimpleNamespace(slot=slot))  # type: ignore[arg-type]


def test_the_sweep_of_an_attempt_without_a_slot_finds_nothing(tmp_path: Path) -> None:
    from coordinator.executors.local import LocalExecutor
    assert LocalExecutor._sweep(SimpleNamespace(), SimpleNamespace(slot=None)) == []  # type: ignore[arg-type]
