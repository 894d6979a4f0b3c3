"""Regression test for the torch CPU normalised-FFT bug (pytorch#169670) and the start-up self-test."""
from __future__ import annotations

import numpy as np
import torch

from worker_sdk.litho import fftsafe


def test_engine_transforms_correct_in_the_buggy_configuration():
    """Single, unbatched 2048x2048 complex64 on 2 threads: exactly where the bug bites."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.zeros(2048, 2048, dtype=torch.complex64)
        x[0, 0] = 1.0
        x[3, 5] = 2.0 - 1.0j
        got = fftsafe.ifft2_unnorm(x)  # the engine's inverse: conj(fft2(conj(x))), no scaling
        want = np.fft.ifft2(x.numpy().astype(np.complex128)) * 2048 * 2048
        assert np.abs(got.numpy() - want).max() < 1e-4
        fwd = fftsafe.fft2_unnorm(got) / (2048 * 2048)
        assert np.abs(fwd.numpy() - x.numpy()).max() < 1e-5
        # the probe's answer matches what torch's own normalised ifft2 does to a DC impulse here
        dc = torch.zeros(2048, 2048, dtype=torch.complex64)
        dc[0, 0] = 2048 * 2048
        wrong_here = np.abs(torch.fft.ifft2(dc).numpy() - 1.0).max() > 1e-3
        assert fftsafe.affected_by_known_bug() is bool(wrong_here)
    finally:
        torch.set_num_threads(threads)


def test_bug_probe_tells_a_wrong_ifft2_from_a_right_one(monkeypatch):
    """The probe reports the bug exactly when the normalised ifft2 misses the 1/N^2 factor."""
    right = lambda x: torch.from_numpy(np.fft.ifft2(x.numpy()).astype(np.complex64))  # noqa: E731
    monkeypatch.setattr(torch.fft, "ifft2", right)
    assert fftsafe.affected_by_known_bug(256) is False
    monkeypatch.setattr(torch.fft, "ifft2", lambda x: right(x) * (256 * 256))
    assert fftsafe.affected_by_known_bug(256) is True


def test_self_test_passes_and_catches_a_wrong_transform(monkeypatch):
    fftsafe.self_test(2048)
    fftsafe._passed.clear()
    real = fftsafe.irfft_unnorm
    monkeypatch.setattr(fftsafe, "irfft_unnorm", lambda x, n, dim=-1: real(x, n, dim) / (n * n))
    try:
        fftsafe.self_test(2048, dtypes=(torch.float32,))
    except fftsafe.FFTSelfTestError as exc:
        assert exc.code == "LITHO_FFT_SELFTEST"
    else:  # pragma: no cover
        raise AssertionError("self-test accepted a transform off by N^2")
    finally:
        fftsafe._passed.clear()
