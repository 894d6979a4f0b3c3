"""What a litho request names, loaded: the engine's name, the SOCS model (kernels folder, device),
the process window, and the layout with its mask. The tools in api.py and the tiled job in
tiledjob.py start from these; provenance.py names the engine."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from registry.canonical import digest_bytes
from registry.datasets import iccad13_data

from .errors import BadRequest
from .layout import FILLS, Layout, load_layout, load_mask_png

ENGINE = "dome.litho"
ENGINE_VERSION = "0.1.0"


def kernels_dir(request: dict[str, Any]) -> Path:
    """The ICCAD 2013 data folder for a request: its `kernels`, else the one resolver's answer."""
    d = iccad13_data(request.get("kernels"))
    if d is None:
        raise BadRequest("no ICCAD 2013 data folder", code="LITHO_KERNELS_NOT_FOUND",
                         hints=["pass kernels=<dir> or set DOME_ICCAD13_DATA"])
    return d


def load_model(request: dict[str, Any], dtype: str = "float64"):
    """The SOCS model for a request (its kernels folder, kernel source and device), cached per process."""
    import torch

    from . import fftsafe
    from .forward import get_model
    from .threads import apply_threads

    apply_threads(request.get("threads"))

    d = kernels_dir(request)
    if not (d / "kernels_bin").is_dir() and not (d / "kernels_pt").is_dir():
        raise BadRequest(f"no ICCAD 2013 kernels under {d}", code="LITHO_KERNELS_NOT_FOUND",
                         hints=["pass kernels=<dir> or set DOME_ICCAD13_DATA"])
    source = request.get("kernel_source", "bin")
    device = request.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    model = get_model(d, 2048, device=device, dtype=getattr(torch, dtype), kernel_source=source)
    fftsafe.self_test(model.size, model.device, (model.dtype,))  # again if the thread count changed
    return model


def window(request: dict[str, Any], model):
    from .process import process_window

    return process_window(request.get("corners"), request.get("pvb_grid"), model.kernel_names)


@dataclass
class Inputs:
    layout: Layout
    layout_path: str
    mask: np.ndarray | None
    mask_layout: Layout | None
    mask_desc: dict[str, Any]
    fill: str


def load_inputs(request: dict[str, Any]) -> Inputs:
    fill = request.get("fill", "lithobench")
    if fill not in FILLS:
        raise BadRequest(f"unknown fill {fill!r}", hints=["lithobench or exact"])
    lpath = request["layout"]
    layout = load_layout(lpath, request.get("layer"))
    mask = None
    mask_layout = None
    desc: dict[str, Any] = {"kind": "target"}
    mp = request.get("mask")
    if mp:
        p = Path(mp)
        if p.suffix.lower() == ".png":
            mask = load_mask_png(p)
            desc = {"kind": "png", "path": str(mp), "digest": digest_bytes(p.read_bytes()), "threshold": 127}
        else:
            mask_layout = load_layout(p, request.get("mask_layer"))
            desc = {"kind": "layout", "path": str(mp), "digest": digest_bytes(p.read_bytes()),
                    "layer": mask_layout.layer, "mask_fill": "exact"}
    return Inputs(layout, str(lpath), mask, mask_layout, desc, fill)
