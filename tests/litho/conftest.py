"""Fixtures of the litho tests: kernels and models built once per session."""
from __future__ import annotations

from pathlib import Path

import pytest

from worker_sdk.cancel import CancellationToken


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


TWO_LINES_GLP = ("BEGIN\nEQUIV 1 1000 MICRON +X,+Y\nCNAME Temp_Top\nLEVEL M1\n\nCELL Temp_Top PRIME\n"
                 "   RECT N M1 0 0 80 400\n   RECT N M1 140 0 80 400\nENDMSG\n")


def two_lines_with_masks(root: Path) -> dict:
    """Two 80 nm lines 60 nm apart (two_lines.glp), their clean mask (clean.png) and a mask that
    bridges them (bridged.png), whose print joins the lines at every ICCAD corner. Returns a
    *.litho.json report naming the clean mask."""
    import numpy as np

    from worker_sdk.litho.layout import load_layout, placement, rasterize, save_mask_png

    (root / "two_lines.glp").write_text(TWO_LINES_GLP)
    layout = load_layout(root / "two_lines.glp")
    target = rasterize(layout, "lithobench", 2048, placement(layout, "lithobench", 2048))
    save_mask_png(target, root / "clean.png")
    ys, xs = np.nonzero(target)
    mid = (ys.min() + ys.max()) // 2
    bridged = target.copy()
    bridged[mid - 20:mid + 20, xs.min():xs.max() + 1] = 1
    save_mask_png(bridged, root / "bridged.png")
    return {"layout": "two_lines.glp", "mask": "clean.png", "fill": "lithobench", "metrics": {}}


class CountingToken(CancellationToken):
    """Cancels itself after `cancel_after` checks: where cancellation is checked, and how often."""

    def __init__(self, cancel_after: int) -> None:
        super().__init__()
        self.checks = 0
        self.cancel_after = cancel_after

    def check(self) -> None:
        self.checks += 1
        if self.checks > self.cancel_after:
            self.cancel("test")
        super().check()


def wait_until_iterating(job, iterations: int = 3, timeout_s: float = 600) -> None:
    """Block until a running litho job has made `iterations` ILT iterations (it must not end first)."""
    import time

    deadline = time.monotonic() + timeout_s
    while job.progress.get("iteration", 0) < iterations:
        assert job.status == "running", job.poll()
        assert time.monotonic() < deadline
        time.sleep(0.02)
