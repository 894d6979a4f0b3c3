"""The ICCAD 2013 data folder has one resolver: a named folder, the environment, or the copy the
checkout ships. A data folder sitting next to the checkout is never picked up."""
from __future__ import annotations

from pathlib import Path

import pytest

from registry import datasets
from registry.datasets import iccad13_data


@pytest.fixture
def clean_env(monkeypatch):
    for name in (datasets.ENV, datasets.LEGACY_ENV, "DOME_SHARED"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_shipped_copy_is_the_default_and_has_what_the_engine_and_tests_read(clean_env) -> None:
    data = iccad13_data()
    assert data == datasets.SHIPPED and data.is_relative_to(Path(datasets.__file__).resolve().parents[1])
    assert len(list((data / "kernels_bin" / "focus").glob("fh*.bin"))) == 24
    assert len(list((data / "layouts").glob("M1_test*.glp"))) == 10
    assert len(list((data / "targets_png_a2ilt").glob("t*_0_mask.png"))) == 10
    assert {p.name for p in (data / "licenses").iterdir()} >= {"OpenILT_LICENSE_MIT.txt", "A2-ILT_LICENSE_CU-SD.txt"}


def test_named_folder_wins_then_the_environment(clean_env, tmp_path: Path) -> None:
    clean_env.setenv(datasets.LEGACY_ENV, str(tmp_path / "legacy"))
    assert iccad13_data() == tmp_path / "legacy"
    clean_env.setenv(datasets.ENV, str(tmp_path / "env"))
    assert iccad13_data() == tmp_path / "env"
    assert iccad13_data(tmp_path / "arg") == tmp_path / "arg"  # returned as named, even when missing


def test_nothing_outside_the_installation_is_searched(clean_env, tmp_path: Path) -> None:
    """With no shipped copy and nothing named there is no answer, even when a sibling
    shared/data/iccad13 (or $DOME_SHARED) holds the data."""
    (tmp_path / "shared" / "data" / "iccad13" / "kernels_bin").mkdir(parents=True)
    clean_env.setenv("DOME_SHARED", str(tmp_path / "shared"))
    clean_env.setattr(datasets, "SHIPPED", tmp_path / "checkout" / "examples" / "iccad13" / "data")
    assert iccad13_data() is None
