"""The scale curve lays a run's files out as `dome run` does: the repository and its ops/
in a folder under --project-dir (a relative one too: the queue names the repository by its
absolute path), the attempts' scratch in the temp dir; it removes each configuration's
folder only after the last configuration has run, a failed run's folder included."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import scale_curve


def test_a_run_keeps_its_repository_and_ops_in_the_project_folder(tmp_path: Path, monkeypatch) -> None:
    project, temp = tmp_path / "project", tmp_path / "temp"
    project.mkdir()
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.chdir(project)
    root = scale_curve.prepare(3, 2, ".")  # the documented default, `--project-dir .`
    assert root.is_absolute() and root.parent == project
    assert json.loads((root / "work.queue.json").read_text())["repo"] == str(root / "repo")
    monkeypatch.chdir(tmp_path)  # the run resolves nothing against the folder it was started in
    row = scale_curve.one(root, 3, None, "none", 2)
    assert row["status"] == "promoted", row
    assert (root / "ops" / "dome.db").is_file()  # the ledger beside the repository, as in a project
    assert any((root / "ops" / "runs").iterdir())  # the export under the project's ops/
    assert not any(p.name.startswith("dome-scale-") for p in temp.iterdir())  # nothing of the project in temp
    assert row["cost"]["workers_measured_by"] == "process" and row["cost"]["workers_cpu_s"] > 0


SHIM = """import json, os, sys
seen, project, fail_at = {seen!r}, {project!r}, {fail_at!r}
if '--analyse' in sys.argv:
    print(json.dumps({{'events': 0}}))
    sys.exit(0)
with open(seen, 'a') as f: f.write(json.dumps(sorted(os.listdir(project))) + '\\n')
n = int(sys.argv[sys.argv.index('--one') + 1])
if n == fail_at:
    sys.exit('the run failed')
print(json.dumps({{'run_id': 'run-x', 'status': 'promoted', 'succeeded': n, 'run_wall_s': 0, 'cost': None,
                  'sampler_cpu_s': 0, 'run_cpu_s': 0, 'loop_cpu_s': 0, 'launch_cpu_s': 0, 'spawner_cpu_s': 0,
                  'peak_rss_mb': 1, 'peak_scratch_mb': 0, 'process_cpu_s': 0.1, 'process_sys_s': 0,
                  'children_cpu_s': 0}}))
"""


def _main_with_shim(tmp_path: Path, project: Path, fail_at: int) -> tuple[subprocess.CompletedProcess, Path]:
    """`main` with a logging stand-in for its children (the timed `--one` and `--analyse`)."""
    seen = tmp_path / "seen.txt"
    shim = tmp_path / "shim.py"
    shim.write_text(SHIM.format(seen=str(seen), project=str(project), fail_at=fail_at))
    code = (f"import sys; sys.path.insert(0, {str(Path(scale_curve.__file__).parents[1])!r})\n"
            "from benchmarks import scale_curve\n"
            f"scale_curve.__file__ = {str(shim)!r}\n"
            "sys.exit(scale_curve.main(['--sizes', '1,2,3', '--db', 'sqlite', '--project-dir', '.', '--json',"
            " '--idle-seconds', '0.1']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy(),
                          cwd=project, timeout=300)
    return proc, seen


def test_folders_are_removed_after_the_last_configuration_and_not_between(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    proc, seen = _main_with_shim(tmp_path, project, fail_at=0)
    assert proc.returncode == 0, proc.stderr
    starts = [json.loads(line) for line in seen.read_text().splitlines()]
    assert [len(s) for s in starts] == [1, 2, 3]  # each run started beside the earlier runs' folders (and its own)
    assert list(project.iterdir()) == []  # and all of them went after the last one
    rows = json.loads(proc.stdout)
    assert [r["n"] for r in rows] == [1, 2, 3]
    assert all("root" not in r for r in rows)


def test_a_failed_run_leaves_no_folder_behind(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    proc, seen = _main_with_shim(tmp_path, project, fail_at=2)
    assert proc.returncode == 1 and "the run failed" in proc.stderr
    assert list(project.iterdir()) == []


def test_per_task_figures_take_the_idle_machine_and_the_sampler_off() -> None:
    run = {"process_cpu_s": 2.0, "process_sys_s": 0.5, "children_cpu_s": 1.0, "sampler_cpu_s": 0.5,
           "run_cpu_s": 1.5, "loop_cpu_s": 0.2, "launch_cpu_s": 0.0, "spawner_cpu_s": 0.1,
           "cost": {"workers_cpu_s": 6.0, "workers_measured_by": "cgroup", "total_cpu_s": 9.0}}
    f = scale_curve.figures(100, run, {"wall_s": 10.0, "machine_busy_s": 20.5, "tree_group_cpu_s": 9.5}, idle=1.0)
    assert f["machine_cpu_ms_per_task"] == 100.0  # (20.5 - 1.0 x 10 - 0.5) / 100 tasks
    assert f["tree_cpu_ms_per_task"] == 90.0  # the run's cgroup, less the benchmark's sampler
    assert f["coordinator_cpu_ms_per_task"] == 20.0 and f["waited_cpu_ms_per_task"] == 10.0
    assert f["workers_cgroup_cpu_ms_per_task"] == 60.0 and f["reported_total_cpu_ms_per_task"] == 90.0
