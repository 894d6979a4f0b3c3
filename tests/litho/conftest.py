"""Fixtures of the litho tests: kernels and models built once per session."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def kernel_sets(iccad13: Path):
    from worker_sdk.litho.kernels import load_iccad13

    return load_iccad13(iccad13)


@pytest.fixture(scope="session")
def model64(iccad13: Path):
    import torch

    from worker_sdk.litho.forward import get_model

    return get_model(iccad13, 2048, dtype=torch.float64)


@pytest.fixture(scope="session")
def model32(iccad13: Path):
    import torch

    from worker_sdk.litho.forward import get_model

    return get_model(iccad13, 2048, dtype=torch.float32)


@pytest.fixture
def litho_env(iccad13: Path, tmp_path: Path, monkeypatch) -> dict[str, str]:
    """Environment for CLI subprocesses: kernels and a private pin store."""
    monkeypatch.setenv("DOME_ICCAD13_DATA", str(iccad13))
    monkeypatch.setenv("DOME_LITHO_PINS", str(tmp_path / "pins"))
    return {"DOME_ICCAD13_DATA": str(iccad13), "DOME_LITHO_PINS": str(tmp_path / "pins")}


def glp(n: int, iccad13: Path) -> Path:
    return iccad13 / "layouts" / f"M1_test{n}.glp"
