"""Tests that need a CUDA device: collected only where torch sees one.

They are not skipped elsewhere but left out of collection, so a run without a GPU (CI on
this project's machines) neither runs nor counts them; `bash benchmarks/gpu_figures.sh`
runs them on a GPU machine and keeps their output with the figures."""
from __future__ import annotations


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, no GPU
        return False


collect_ignore_glob = [] if _cuda() else ["test_*.py"]
