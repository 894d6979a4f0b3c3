"""Direct full-resolution SOCS reference: 24 full-size FFTs per corner, no band-limit shortcuts.

I_corner = sum_k w_k |IFFT2(FFT2(d * M) . H_k)|^2 with H_k placed on the N x N
spectrum centred on DC. complex128 throughout, kernels batched: neither is
touched by the torch CPU FFT bug (single unbatched complex64 only), and the
arithmetic follows SOURCE.md's formula literally.
"""
from __future__ import annotations

import numpy as np
import torch


def place_kernels(h: np.ndarray, size: int) -> np.ndarray:
    n = h.shape[-1]
    half = n // 2
    full = np.zeros(h.shape[:-2] + (size, size), dtype=np.complex128)
    idx = np.arange(-half, half + 1) % size
    full[..., idx[:, None], idx[None, :]] = h
    return full


def aerial(mask: np.ndarray, kernels: np.ndarray, weights: np.ndarray, dose: float = 1.0) -> np.ndarray:
    size = mask.shape[-1]
    spec = torch.fft.fft2(torch.tensor(dose * mask.astype(np.float64), dtype=torch.complex128))
    out = torch.zeros(mask.shape, dtype=torch.float64)
    for start in range(0, len(kernels), 8):  # 8 kernels per batch bounds memory at 2048^2
        hk = torch.tensor(place_kernels(kernels[start:start + 8], size))
        field = torch.fft.ifft2(spec[None] * hk)
        w = torch.tensor(weights[start:start + 8].astype(np.float64))
        out += (w[:, None, None] * (field.real ** 2 + field.imag ** 2)).sum(0)
    return out.numpy()


def corners(mask: np.ndarray, kernel_sets: dict) -> dict[str, np.ndarray]:
    f, d = kernel_sets["focus"], kernel_sets["defocus"]
    return {
        "nominal": aerial(mask, f.kernels, f.weights, 1.00),
        "max": aerial(mask, f.kernels, f.weights, 1.02),
        "min": aerial(mask, d.kernels, d.weights, 0.98),
    }


def aerial_at(mask: np.ndarray, kernels: np.ndarray, weights: np.ndarray, dose: float, y: int, x: int) -> float:
    """The reference intensity at one pixel: the full spectrum's kernel block, summed directly."""
    size = mask.shape[-1]
    spec = np.fft.fft2(dose * mask.astype(np.float64))
    n = kernels.shape[-1]
    half = n // 2
    f = np.arange(-half, half + 1)
    block = spec[np.ix_(f % size, f % size)]
    ey = np.exp(2j * np.pi * f * y / size)
    ex = np.exp(2j * np.pi * f * x / size)
    fields = np.einsum("u,kuv,v->k", ey, block[None] * kernels.astype(np.complex128), ex) / size ** 2
    return float(np.sum(weights.astype(np.float64) * np.abs(fields) ** 2))
