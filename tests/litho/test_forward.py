"""The band-limited SOCS model against the direct full-resolution reference (24 full FFTs per corner)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from worker_sdk.litho.forward import CORNERS, SOCSModel

from . import reference


@pytest.fixture(scope="module")
def small(kernel_sets):
    return SOCSModel(kernel_sets, 256, dtype=torch.float64), SOCSModel(kernel_sets, 256, dtype=torch.float32)


def test_matches_reference_to_float_rounding(kernel_sets, small):
    m64, m32 = small
    rng = np.random.default_rng(7)
    masks = (rng.random((2, 256, 256)) > 0.6).astype(np.float64)
    got64 = m64.aerial(torch.tensor(masks))
    got32 = m32.aerial(torch.tensor(masks, dtype=torch.float32))
    for b in range(2):
        ref = reference.corners(masks[b], kernel_sets)
        for c in CORNERS:
            assert np.abs(got64[c.name][b].numpy() - ref[c.name]).max() < 1e-12
            assert np.abs(got32[c.name][b].numpy() - ref[c.name]).max() < 2e-6
    # grey-level masks too (ILT feeds sigmoids)
    grey = rng.random((256, 256))
    ref = reference.aerial(grey, kernel_sets["defocus"].kernels, kernel_sets["defocus"].weights, 0.98)
    assert np.abs(m64.aerial(torch.tensor(grey))["min"][0].numpy() - ref).max() < 1e-12


def test_clear_field_intensity(small):
    m64, _ = small
    i = m64.aerial(torch.ones(1, 256, 256, dtype=torch.float64))
    assert float(i["nominal"].mean()) == pytest.approx(0.9515, abs=1e-4)
    assert float(i["min"].mean()) / 0.98 ** 2 == pytest.approx(0.9417, abs=1e-4)
    assert float(i["max"].mean()) == pytest.approx(0.9515 * 1.02 ** 2, abs=1e-4)


def test_coarse_mask_and_coarse_sampling_are_exact(small):
    m64, _ = small
    rng = np.random.default_rng(3)
    coarse = (rng.random((128, 128)) > 0.5).astype(np.float64)
    fine = np.kron(coarse, np.ones((2, 2)))
    full = m64.aerial(torch.tensor(fine))["nominal"][0].numpy()
    # a 2 nm mask (nearest-upsampled) gives the same image as its 1 nm copy
    assert np.abs(m64.aerial(torch.tensor(coarse))["nominal"][0].numpy() - full).max() < 1e-13
    # sampling at 2 nm pitch with a 1 nm offset picks exactly the odd pixels
    sub = m64.aerial(torch.tensor(coarse), out=128, offset=1.0)["nominal"][0].numpy()
    assert np.abs(sub - full[1::2, 1::2]).max() < 1e-13


def test_gradient_is_the_exact_adjoint(small):
    """Directional derivative of a loss through the model equals autograd's gradient (float64)."""
    m64, _ = small
    rng = np.random.default_rng(11)
    base = torch.tensor(rng.random((256, 256)), dtype=torch.float64)
    direction = torch.tensor(rng.standard_normal((256, 256)), dtype=torch.float64)
    target = torch.tensor((rng.random((256, 256)) > 0.5).astype(np.float64))

    def loss(m):
        i = m64.aerial(m)
        return sum(((torch.sigmoid(50 * (i[c.name][0] - 0.225)) - target) ** 2).sum() for c in CORNERS)

    x = base.clone().requires_grad_(True)
    loss(x).backward()
    analytic = float((x.grad * direction).sum())
    eps = 1e-6
    with torch.no_grad():
        numeric = float((loss(base + eps * direction) - loss(base - eps * direction)) / (2 * eps))
    assert analytic == pytest.approx(numeric, rel=1e-6)


def test_batched_masks_share_the_model(small):
    m64, _ = small
    rng = np.random.default_rng(5)
    masks = torch.tensor((rng.random((3, 256, 256)) > 0.5).astype(np.float64))
    batched = m64.aerial(masks)["min"]
    for b in range(3):
        assert torch.allclose(batched[b], m64.aerial(masks[b])["min"][0], atol=1e-14)
