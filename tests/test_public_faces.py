"""Each package's public face: every name it offers resolves, and importing the package
itself pulls in nothing heavy (no torch, no KLayout, no subpackage)."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.parametrize("package", ["registry", "ledger", "coordinator", "worker_sdk"])
def test_every_public_name_resolves(package: str) -> None:
    mod = importlib.import_module(package)
    assert mod.__all__ and len(mod.__all__) <= 40
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{package}.{name}"
    with pytest.raises(AttributeError):
        getattr(mod, "no_such_name")


def test_importing_the_faces_is_cheap() -> None:
    code = ("import sys, json; import coordinator, worker_sdk; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'klayout', 'coordinator', 'worker_sdk', 'ledger'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["coordinator", "worker_sdk"]
