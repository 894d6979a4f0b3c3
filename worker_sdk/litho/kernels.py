"""SOCS kernel sets: loading the ICCAD 2013 `.bin`/`scales.txt` files and the `.pt` tensors.

A KernelSet holds K frequency-domain kernels H[k, r, c] (35x35, DC at [17, 17],
row = y frequency, column = x frequency, in cycles per canvas) and weights w[k].
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import KernelFormatError

BIN_HEADER = 20


@dataclass(frozen=True)
class KernelSet:
    name: str
    kernels: np.ndarray  # complex64 [K, n, n], DC at centre
    weights: np.ndarray  # float32 [K]

    @property
    def size(self) -> int:
        return int(self.kernels.shape[-1])

    @property
    def half(self) -> int:
        return self.size // 2

    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.kernels).tobytes())
        h.update(np.ascontiguousarray(self.weights).tobytes())
        return "sha256:" + h.hexdigest()


def parse_bin(data: bytes) -> np.ndarray:
    """One fh{k}.bin file -> complex64 [35, 35] with H[r, c] = payload[c*35 + r]."""
    if len(data) < BIN_HEADER + 8:
        raise KernelFormatError("kernel file too short", details={"bytes": len(data)})
    nx, ny, comps = np.frombuffer(data[:12], dtype=">i4")
    if comps != 2 or nx <= 0 or ny <= 0 or nx != ny:
        raise KernelFormatError("unexpected kernel header", details={"nx": int(nx), "ny": int(ny), "components": int(comps)})
    need = BIN_HEADER + nx * ny * 8
    if len(data) < need:
        raise KernelFormatError("kernel payload truncated", details={"bytes": len(data), "need": need})
    vals = np.frombuffer(data[BIN_HEADER:need], dtype=">f4").astype(np.float32)
    payload = (vals[0::2] + 1j * vals[1::2]).astype(np.complex64)
    return np.ascontiguousarray(payload.reshape(int(nx), int(ny)).T)


def parse_scales(text: str) -> np.ndarray:
    toks = text.split()
    if not toks:
        raise KernelFormatError("empty scales file")
    k = int(float(toks[0]))
    vals = [float(t) for t in toks[1:1 + k]]
    if len(vals) != k:
        raise KernelFormatError("scales file lists fewer weights than announced", details={"announced": k, "found": len(vals)})
    return np.asarray(vals, dtype=np.float32)


def load_bin_dir(directory: Path, name: str | None = None) -> KernelSet:
    directory = Path(directory)
    weights = parse_scales((directory / "scales.txt").read_text())
    kernels = np.stack([parse_bin((directory / f"fh{k}.bin").read_bytes()) for k in range(len(weights))])
    return KernelSet(name or directory.name, kernels, weights)


def load_pt(kernel_path: Path, scales_path: Path, name: str) -> KernelSet:
    import torch

    h = torch.load(str(kernel_path))
    w = torch.load(str(scales_path))
    if h.ndim != 3:
        raise KernelFormatError("kernel tensor must be (n, n, K)", details={"shape": list(h.shape)})
    kernels = h.permute(2, 0, 1).contiguous().numpy().astype(np.complex64)
    return KernelSet(name, kernels, w.numpy().astype(np.float32).reshape(-1))


def load_iccad13(data_dir: Path, source: str = "bin") -> dict[str, KernelSet]:
    """{'focus': KernelSet, 'defocus': KernelSet} from the ICCAD 2013 data folder."""
    data_dir = Path(data_dir)
    if source == "bin":
        return {n: load_bin_dir(data_dir / "kernels_bin" / n, n) for n in ("focus", "defocus")}
    if source == "pt":
        d = data_dir / "kernels_pt"
        return {n: load_pt(d / f"kernel_{n}.pt", d / f"scales_{n}.pt", n) for n in ("focus", "defocus")}
    raise KernelFormatError(f"unknown kernel source {source!r}", hints=["use 'bin' or 'pt'"])
