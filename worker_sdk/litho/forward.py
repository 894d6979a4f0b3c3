"""Fast SOCS (Hopkins) forward model that exploits the kernels' band limit.

Aerial image of one kernel set (canvas N x N, 1 nm pixels):

    I(y, x) = sum_k w_k |a_k(y, x)|^2,   a_k = IFFT2(FFT2(M) . H_k)

with H_k a (2h+1)^2 kernel (h = 17) centred on DC. Only the (2h+1)^2 block of
the mask spectrum around DC reaches the image, and I is band-limited to
|u|, |v| <= 2h (|a|^2 doubles the band). So, exactly:

1. the mask spectrum block S is computed with an rfft along x (kept columns
   0..h) followed by an fft along y over those h+1 columns only;
2. each kernel field a_k is synthesised on a small P x P grid (P >= 4h+1 = 69;
   here 72), where |a_k|^2 is sampled without aliasing;
3. one small FFT gives the Fourier coefficients c of I for |u|,|v| <= 2h;
4. I is synthesised at full (or any) resolution from c by a separable inverse
   transform that touches only the 2h+1 non-zero columns.

Dose multiplies the mask, so a corner with dose d has intensity d^2 * I: the
nominal and max corners share one intensity, and all corners share S.
All transforms are unnormalised (see fftsafe). Gradients flow through every
step (torch autograd), so ILT gets the exact adjoint of this model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from worker_sdk.cancel import NEVER, CancellationToken

from . import fftsafe
from .kernels import KernelSet

THRESHOLD = 0.225
SIGMOID_STEEPNESS = 50.0


@dataclass(frozen=True)
class Corner:
    name: str
    kernel: str
    dose: float


CORNERS: tuple[Corner, ...] = (
    Corner("nominal", "focus", 1.00),
    Corner("max", "focus", 1.02),
    Corner("min", "defocus", 0.98),
)
CORNER_BY_NAME = {c.name: c for c in CORNERS}


def _complex(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype == torch.float64 else torch.complex64


class SOCSModel:
    """The band-limited SOCS model for a canvas of `size` pixels (1 nm each)."""

    def __init__(self, kernel_sets: dict[str, KernelSet], size: int = 2048, *,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64,
                 grid: int | None = None, self_test: bool = True) -> None:
        self.size = int(size)
        self.device = torch.device(device)
        self.dtype = dtype
        self.cdtype = _complex(dtype)
        first = next(iter(kernel_sets.values()))
        self.n = first.size
        self.h = first.half
        self.band = 2 * self.h  # intensity band limit
        self.grid = int(grid or max(72, 4 * self.h + 4))
        if self.grid < 4 * self.h + 1:
            raise ValueError("grid must be at least 4h+1 to sample |a|^2 without aliasing")
        if self.size < 2 * self.band + 2:
            raise ValueError("canvas too small for the kernel band")
        if self_test:
            fftsafe.self_test(self.size, self.device, (dtype,))
        self.kernel_names = tuple(kernel_sets)
        self._kernels: dict[str, torch.Tensor] = {}
        self._weights: dict[str, torch.Tensor] = {}
        for name, ks in kernel_sets.items():
            self._kernels[name] = torch.tensor(ks.kernels, device=self.device).to(self.cdtype)
            self._weights[name] = torch.tensor(ks.weights, device=self.device).to(dtype)
        self.digests = {name: ks.digest() for name, ks in kernel_sets.items()}

    # ---- step 1: mask spectrum block ------------------------------------------------
    def mask_spectrum(self, mask: torch.Tensor) -> torch.Tensor:
        """[B, Ns, Ns] real mask (pixel = N/Ns nm, nearest upsampling) -> [B, 2h+1, 2h+1] spectrum block.

        Row index h+u holds frequency u (cycles per canvas) along y, likewise columns along x.
        """
        if mask.ndim == 2:
            mask = mask.unsqueeze(0)
        ns = mask.shape[-1]
        if mask.shape[-2] != ns or self.size % ns:
            raise ValueError(f"mask must be square with a size dividing {self.size}")
        h = self.h
        m = mask.to(self.dtype)
        r = fftsafe.rfft_unnorm(m, dim=-1)[..., : h + 1]  # [B, Ns, h+1], v = 0..h
        f = fftsafe.fft_unnorm(r, dim=-2)  # [B, Ns, h+1]
        rows = torch.arange(-h, h + 1, device=self.device) % ns
        pos = f.index_select(-2, rows)  # [B, 2h+1, h+1]: u = -h..h, v = 0..h
        # v < 0 from Hermitian symmetry: S[u, -v] = conj(S[-u, v])
        neg = torch.conj(torch.flip(pos[..., 1:], dims=(-2, -1)))  # v = -h..-1 after flip
        spec = torch.cat([neg, pos], dim=-1).resolve_conj()
        s = self.size // ns
        if s > 1:
            u = torch.arange(-h, h + 1, device=self.device, dtype=self.dtype)
            t = torch.arange(s, device=self.device, dtype=self.dtype)
            box = torch.exp(torch.complex(torch.zeros((), dtype=self.dtype, device=self.device),
                                          -2 * math.pi * torch.outer(u, t) / self.size)).sum(-1)
            spec = spec * box[:, None] * box[None, :]
        return spec

    # ---- steps 2-3: intensity coefficients ---------------------------------------------
    def intensity_coeffs(self, spec: torch.Tensor, kernel: str) -> torch.Tensor:
        """Fourier coefficients of the dose-1 aerial image, [B, P, P] (index u mod P), valid for |u|,|v| <= 2h."""
        hk = self._kernels[kernel]
        w = self._weights[kernel]
        p, n, h = self.grid, self.n, self.h
        g = spec.unsqueeze(-3) * hk  # [B, K, n, n]
        g = torch.nn.functional.pad(g, (0, p - n, 0, p - n))
        g = torch.roll(g, shifts=(-h, -h), dims=(-2, -1))
        a = fftsafe.ifft2_unnorm(g)  # N^2 * field samples on the P grid
        inten = (w[:, None, None] * (a.real ** 2 + a.imag ** 2)).sum(-3)
        inten = inten / float(self.size) ** 4
        return fftsafe.fft2_unnorm(inten.to(self.cdtype)) / float(p * p)

    # ---- step 4: synthesis -----------------------------------------------------------
    def synthesize(self, coeffs: torch.Tensor, out: int | None = None, offset: float = 0.0) -> torch.Tensor:
        """Sample I at y = j*N/out + offset, x = l*N/out + offset (j, l < out). Real [B, out, out]."""
        out = int(out or self.size)
        if self.size % out or out < 2 * self.band + 2:
            raise ValueError("output size must divide the canvas and exceed the band")
        b2, p = self.band, self.grid
        idx = torch.arange(-b2, b2 + 1, device=self.device) % p
        c = coeffs.index_select(-2, idx).index_select(-1, idx[b2:])  # [B, 2b+1 (u=-b..b), b+1 (v=0..b)]
        if offset:
            f = torch.arange(-b2, b2 + 1, device=self.device, dtype=self.dtype)
            ph = torch.exp(torch.complex(torch.zeros((), dtype=self.dtype, device=self.device),
                                         2 * math.pi * f * offset / self.size))
            c = c * ph[:, None] * ph[None, b2:]
        col = torch.zeros(c.shape[:-2] + (out, b2 + 1), dtype=self.cdtype, device=self.device)
        col = col.index_copy(-2, torch.arange(-b2, b2 + 1, device=self.device) % out, c)
        x = fftsafe.ifft_unnorm(col, dim=-2)  # [B, out, b+1]
        return fftsafe.irfft_unnorm(x, n=out, dim=-1)

    # ---- conveniences ----------------------------------------------------------------
    def aerial(self, mask: torch.Tensor, corners: Sequence[Corner] = CORNERS, *, out: int | None = None,
               offset: float = 0.0, token: CancellationToken = NEVER) -> dict[str, torch.Tensor]:
        """Aerial images per corner, sharing the mask spectrum and the per-kernel-set intensity."""
        token.check()
        spec = self.mask_spectrum(mask)
        base: dict[str, torch.Tensor] = {}
        result: dict[str, torch.Tensor] = {}
        for corner in corners:
            token.check()
            if corner.kernel not in base:
                base[corner.kernel] = self.synthesize(self.intensity_coeffs(spec, corner.kernel), out, offset)
            result[corner.name] = base[corner.kernel] * (corner.dose ** 2)
        return result

    def printed(self, mask: torch.Tensor, corners: Sequence[Corner] = CORNERS, *, threshold: float = THRESHOLD,
                token: CancellationToken = NEVER) -> dict[str, torch.Tensor]:
        """Constant-threshold resist: printed = I >= threshold, per corner (bool [B, N, N])."""
        # I*d^2 >= t, computed as the product (not I >= t/d^2) to match a direct model
        return {name: image >= threshold for name, image in self.aerial(mask, corners, token=token).items()}


def sigmoid_resist(intensity: torch.Tensor, threshold: float = THRESHOLD, steepness: float = SIGMOID_STEEPNESS) -> torch.Tensor:
    return torch.sigmoid(steepness * (intensity - threshold))


_MODEL_CACHE: dict[tuple, SOCSModel] = {}


def get_model(data_dir, size: int = 2048, *, device: str = "cpu", dtype: torch.dtype = torch.float64,
              kernel_source: str = "bin") -> SOCSModel:
    """A cached model for the ICCAD 2013 kernels (runs the FFT self-test once)."""
    from .kernels import load_iccad13

    key = (str(data_dir), size, device, str(dtype), kernel_source)
    if key not in _MODEL_CACHE:
        _MODEL_CACHE[key] = SOCSModel(load_iccad13(data_dir, kernel_source), size, device=device, dtype=dtype)
    return _MODEL_CACHE[key]
