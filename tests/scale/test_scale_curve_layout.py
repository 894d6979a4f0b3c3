"""The scale curve lays a run's files out as `dome run` does: the repository and its ops/
in a folder under --project-dir, the attempts' scratch in the temp dir; and it removes
each configuration's folder only after the last configuration has run."""
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
    row = scale_curve.one(3, None, "none", 2, project_dir=str(project), keep=True)
    assert row["status"] == "promoted"
    root = Path(row["root"])
    assert root.parent == project
    assert (root / "ops" / "dome.db").is_file()  # the ledger beside the repository, as in a project
    assert any((root / "ops" / "runs").iterdir())  # the export under the project's ops/
    assert not any(p.name.startswith("dome-scale-") for p in temp.iterdir())  # nothing of the project in temp


def test_folders_are_removed_after_the_last_configuration_and_not_between(tmp_path: Path) -> None:
    """A logging stand-in for `--one` records which folders exist when each run starts."""
    project = tmp_path / "project"
    project.mkdir()
    seen = tmp_path / "seen.txt"
    shim = tmp_path / "shim.py"
    shim.write_text(
        "import json, os, sys, tempfile\n"
        f"seen, project = {str(seen)!r}, {str(project)!r}\n"
        "with open(seen, 'a') as f: f.write(json.dumps(sorted(os.listdir(project))) + '\\n')\n"
        "root = tempfile.mkdtemp(prefix='dome-scale-', dir=project)\n"
        "n = int(sys.argv[sys.argv.index('--one') + 1])\n"
        "print(json.dumps({'n': n, 'db': 'sqlite', 'executor': 'local', 'status': 'promoted', 'root': root,"
        " 'cpu_ms_per_task': 1, 'sys_cpu_ms_per_task': 0, 'peak_rss_mb': 1, 'peak_scratch_mb': 0,"
        " 'ledger_bytes_per_task': 1, 'blob_bytes_per_task': 1, 'wall_s': 0}))\n")
    code = (f"import sys; sys.path.insert(0, {str(Path(scale_curve.__file__).parents[1])!r})\n"
            "from benchmarks import scale_curve\n"
            f"scale_curve.__file__ = {str(shim)!r}\n"
            f"sys.exit(scale_curve.main(['--sizes', '1,2,3', '--db', 'sqlite', '--project-dir', {str(project)!r}, '--json']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    starts = [json.loads(line) for line in seen.read_text().splitlines()]
    assert [len(s) for s in starts] == [0, 1, 2]  # each run started beside the earlier runs' folders
    assert list(project.iterdir()) == []  # and all of them went after the last one
    assert [r["n"] for r in json.loads(proc.stdout)] == [1, 2, 3]
    assert all("root" not in r for r in json.loads(proc.stdout))
