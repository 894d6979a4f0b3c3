"""FFT helpers that avoid the torch CPU normalised-FFT bug, and the start-up self-test.

torch 2.13.0+cpu on 2 threads returns results off by N^-2 for a single
unbatched 2048x2048 complex64 FFT with a normalisation (ifft2, fft2 with
norm="forward"/"ortho"; pytorch/pytorch#169670). This module only uses
*unnormalised* forward transforms (norm="backward" forward FFTs) and an
unnormalised inverse built as conj(fft(conj(x))); every scale factor is
applied by hand. `self_test()` checks the exact transforms the engine uses at
the canvas size against float64 numpy on start-up; `affected_by_known_bug()`
probes the buggy call itself, so a regression test can show the trap is real
(or gone) on the machine at hand.
"""
from __future__ import annotations

import threading

import numpy as np
import torch

from .errors import FFTSelfTestError


def fft_unnorm(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.fft.fft(x, dim=dim)


def ifft_unnorm(x: torch.Tensor, dim: int) -> torch.Tensor:
    """sum_u x[u] exp(+2 pi i u j / n), no 1/n."""
    return torch.conj(torch.fft.fft(torch.conj(x), dim=dim)).resolve_conj()


def fft2_unnorm(x: torch.Tensor) -> torch.Tensor:
    return torch.fft.fft2(x)


def ifft2_unnorm(x: torch.Tensor) -> torch.Tensor:
    return torch.conj(torch.fft.fft2(torch.conj(x))).resolve_conj()


def rfft_unnorm(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.fft.rfft(x, dim=dim)


def irfft_unnorm(x: torch.Tensor, n: int, dim: int = -1) -> torch.Tensor:
    """Real inverse of a Hermitian half spectrum, no 1/n (scaled by hand from the default)."""
    return torch.fft.irfft(x, n=n, dim=dim) * n


_lock = threading.Lock()
_passed: set[tuple[int, str, str, int]] = set()


def self_test(size: int = 2048, device: str | torch.device = "cpu", dtypes=(torch.float32, torch.float64)) -> None:
    """Check the transforms the engine uses at `size` against float64 numpy; raise FFTSelfTestError.

    Passing results are remembered per thread count: the torch bug depends on it."""
    dev = torch.device(device)
    for dtype in dtypes:
        key = (size, str(dev), str(dtype), torch.get_num_threads())
        if key in _passed:
            continue
        with _lock:
            rng = np.random.default_rng(1234)
            img = rng.random((size, size))
            x = torch.tensor(img, dtype=dtype, device=dev)
            tol = 1e-4 if dtype == torch.float32 else 1e-10
            want_r = np.fft.rfft(img, axis=-1)[:, :8]
            got_r = rfft_unnorm(x)[:, :8].cpu().numpy()
            _check("rfft", got_r, want_r, tol)
            want_c = np.fft.fft(want_r, axis=0)
            got_c = fft_unnorm(rfft_unnorm(x)[:, :8], dim=0).cpu().numpy()
            _check("fft", got_c, want_c, tol)
            spec = np.zeros((size, 8), dtype=np.complex128)
            spec[:5, :5] = rng.standard_normal((5, 5)) + 1j * rng.standard_normal((5, 5))
            spec[:, 0] = spec[:, 0].real
            t = torch.tensor(spec, dtype=torch.complex64 if dtype == torch.float32 else torch.complex128, device=dev)
            col = ifft_unnorm(t, dim=0)
            _check("ifft", col.cpu().numpy(), np.fft.ifft(spec, axis=0) * size, tol * size)
            got_i = irfft_unnorm(col, n=size).cpu().numpy()
            want_i = np.fft.irfft(np.fft.ifft(spec, axis=0) * size, n=size, axis=-1) * size
            _check("irfft", got_i, want_i, tol * size)
            small = torch.tensor(rng.standard_normal((3, 72, 72)), dtype=dtype, device=dev).to(
                torch.complex64 if dtype == torch.float32 else torch.complex128)
            back = fft2_unnorm(ifft2_unnorm(small)) / (72 * 72)
            _check("fft2 round trip", back.cpu().numpy(), small.cpu().numpy(), tol)
            _passed.add(key)


def _check(name: str, got: np.ndarray, want: np.ndarray, tol: float) -> None:
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got - want).max()) / scale
    if not np.isfinite(err) or err > tol:
        raise FFTSelfTestError(f"FFT self-test failed for {name}: relative error {err:.3g}",
                               details={"transform": name, "relative_error": err, "tolerance": tol},
                               hints=["this torch build computes wrong FFTs on this machine; try torch.set_num_threads(1) or another torch build"])


def affected_by_known_bug(size: int = 2048) -> bool:
    """True when a single unbatched normalised complex64 ifft2 is wrong here (pytorch#169670)."""
    x = torch.zeros(size, size, dtype=torch.complex64)
    x[0, 0] = size * size  # ifft2 of this is exactly 1 everywhere
    got = torch.fft.ifft2(x)
    return not bool(torch.allclose(got.real, torch.ones(size, size), atol=1e-3))
