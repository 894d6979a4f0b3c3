from __future__ import annotations

import struct

import numpy as np
import pytest

from worker_sdk.litho.errors import KernelFormatError
from worker_sdk.litho.kernels import load_iccad13, parse_bin, parse_scales


def _bin(values: np.ndarray) -> bytes:
    n = values.shape[0]
    payload = values.T.reshape(-1)  # column-major on disk
    inter = np.empty(2 * payload.size, dtype=">f4")
    inter[0::2], inter[1::2] = payload.real, payload.imag
    return struct.pack(">iii", n, n, 2) + b"\0" * 8 + inter.tobytes() + b"\0" * 4


def test_parse_bin_orientation_is_column_major():
    h = (np.arange(35 * 35).reshape(35, 35) + 1j * np.arange(35 * 35).reshape(35, 35) * 2).astype(np.complex64)
    data = _bin(h)
    assert len(data) == 9824
    got = parse_bin(data)
    assert np.array_equal(got, h)  # H[r, c] = payload[c*35 + r]


def test_parse_bin_rejects_bad_header():
    with pytest.raises(KernelFormatError):
        parse_bin(struct.pack(">iii", 35, 35, 3) + b"\0" * 9812)
    with pytest.raises(KernelFormatError):
        parse_bin(b"\0" * 10)


def test_scales_parse_and_count_check():
    assert parse_scales("2\n1.5\n0.5\n").tolist() == [1.5, 0.5]
    with pytest.raises(KernelFormatError):
        parse_scales("3\n1.0\n")


def _openilt_pt_dir(iccad13, tmp_path):
    """A kernels_pt folder: the real one when the data folder has it, else one written from
    the .bin kernels in OpenILT's tensor layout ((n, n, K) complex64 kernels, (K,) float32 scales)."""
    if (iccad13 / "kernels_pt").is_dir():
        return iccad13
    import torch

    out = tmp_path / "iccad13"
    (out / "kernels_pt").mkdir(parents=True)
    for name, ks in load_iccad13(iccad13, "bin").items():
        torch.save(torch.from_numpy(ks.kernels).permute(1, 2, 0).contiguous(), out / "kernels_pt" / f"kernel_{name}.pt")
        torch.save(torch.from_numpy(ks.weights.astype(np.float32)), out / "kernels_pt" / f"scales_{name}.pt")
    return out


def test_pt_kernels_in_openilt_layout_load_as_the_bin_kernels(iccad13, tmp_path):
    a, b = load_iccad13(iccad13, "bin"), load_iccad13(_openilt_pt_dir(iccad13, tmp_path), "pt")
    for name in ("focus", "defocus"):
        assert a[name].kernels.shape == (24, 35, 35)
        assert np.array_equal(a[name].kernels, b[name].kernels)
        assert np.abs(a[name].weights - b[name].weights).max() < 5e-7
    assert a["focus"].weights[0] == pytest.approx(86.943428, abs=1e-5)
    assert float(a["defocus"].weights.sum()) == pytest.approx(206.38, abs=0.01)
