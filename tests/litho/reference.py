"""Direct full-resolution SOCS reference: 24 full-size FFTs per corner (numpy, no shortcuts).

I_corner = sum_k w_k |IFFT2(FFT2(d * M) . H_k)|^2 with H_k placed on the N x N
spectrum centred on DC. numpy's pocketfft is used, so the torch CPU FFT bug
cannot touch the reference.
"""
from __future__ import annotations

import numpy as np


def place_kernel(h: np.ndarray, size: int) -> np.ndarray:
    n = h.shape[-1]
    half = n // 2
    full = np.zeros((size, size), dtype=h.dtype)
    idx = np.arange(-half, half + 1) % size
    full[np.ix_(idx, idx)] = h
    return full


def aerial(mask: np.ndarray, kernels: np.ndarray, weights: np.ndarray, dose: float = 1.0,
           dtype=np.complex128) -> np.ndarray:
    size = mask.shape[-1]
    spec = np.fft.fft2((dose * mask).astype(dtype))
    out = np.zeros(mask.shape, dtype=np.float64 if dtype == np.complex128 else np.float32)
    for h, w in zip(kernels, weights):
        field = np.fft.ifft2(spec * place_kernel(h.astype(dtype), size))
        out += w * (field.real ** 2 + field.imag ** 2)
    return out


def corners(mask: np.ndarray, kernel_sets: dict, dtype=np.complex128) -> dict[str, np.ndarray]:
    f, d = kernel_sets["focus"], kernel_sets["defocus"]
    return {
        "nominal": aerial(mask, f.kernels, f.weights, 1.00, dtype),
        "max": aerial(mask, f.kernels, f.weights, 1.02, dtype),
        "min": aerial(mask, d.kernels, d.weights, 0.98, dtype),
    }
