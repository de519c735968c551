"""The float32 random-Fourier feature map of cate (issue 24): public, row-local, deterministic,
and of norm ≤ 1 whatever cos/sin return (dpcausal/commands/cate/rff_features.py Notes)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcausal.commands.cate.rff_features import FourierFeatures, clip_pairs


def _exact_norms_squared(z32: np.ndarray) -> list[float]:
    """‖z‖² of each float32 row, exactly rounded (float32 squares are exact in float64)."""
    z = z32.astype(np.float64)
    return [math.fsum(row) for row in z * z]


@pytest.mark.parametrize(("q", "m", "bandwidth"), [(5, 500, 0.3), (1, 1, 0.05), (3, 7, 1e-3),
                                                   (9, 64, 2.0)])
def test_every_feature_vector_has_norm_at_most_one(q: int, m: int, bandwidth: float) -> None:
    feats = FourierFeatures.draw(q, m, bandwidth, seed=q * m)
    s = np.random.default_rng(1).uniform(size=(3000, q))
    s[:4] = [[0.0] * q, [1.0] * q, [0.5] * q, [np.nextafter(1.0, 0.0)] * q]
    z = feats.transform32(s)
    assert z.dtype == np.float32 and z.shape == (3000, 2 * m)
    norms = _exact_norms_squared(z)
    assert max(norms) <= 1.0
    assert min(norms) >= (1.0 - 2.0**-19) ** 2  # the clip shrinks by ~1e-6, no more
    # within ~1e-5 of the exact float64 map m^{-1/2}(cos Ωᵀs, sin Ωᵀs)
    proj = s @ feats.omega
    exact = np.hstack([np.cos(proj), np.sin(proj)]) / math.sqrt(m)
    assert np.max(np.abs(z - exact)) <= 1e-5 * max(1.0, float(np.max(np.abs(proj))))


def test_the_map_is_row_local_and_deterministic() -> None:
    """A row's features depend on that row alone: not on its block, position or neighbours."""
    feats = FourierFeatures.draw(4, 300, 0.4, seed=3)
    s = np.random.default_rng(2).uniform(size=(1001, 4))
    full = feats.transform32(s)
    perm = np.random.default_rng(5).permutation(1001)
    assert np.array_equal(feats.transform32(s[perm]), full[perm])
    for i0, i1 in ((0, 1), (7, 8), (3, 130), (127, 129), (1000, 1001)):
        assert np.array_equal(feats.transform32(s[i0:i1]), full[i0:i1])
    assert np.array_equal(feats.transform32(np.asfortranarray(s)), full)
    assert np.array_equal(feats.transform(s), full.astype(np.float64))


def test_the_clip_holds_the_norm_for_any_cos_and_sin_values() -> None:
    """Even adversarial 'cos/sin' values (too large, tiny, NaN, inf, the float32 neighbours of the
    unit circle) give pairs of norm ≤ 1/√m: the bound does not rest on cos/sin's accuracy."""
    rng = np.random.default_rng(7)
    m = 1000
    radius = FourierFeatures.draw(1, m, 1.0, seed=0)._radius
    cos = rng.uniform(-1.0, 1.0, size=(64, m)).astype(np.float32)
    sin = np.sqrt(np.float32(1.0) - cos * cos)
    sin *= np.float32(1.0) + np.float32(2.0**-23) * rng.integers(-8, 9, size=sin.shape)
    cos[0, :6] = [np.nan, np.inf, 0.0, 1e-30, 3e38, np.float32(np.nextafter(np.float32(1.0), 2))]
    sin[0, :6] = [0.5, 0.0, 0.0, 1e-30, 3e38, np.float32(np.nextafter(np.float32(1.0), 2))]
    cos[1], sin[1] = np.float32(np.sqrt(0.5)), np.float32(np.sqrt(0.5)) * np.float32(1 + 2**-22)
    out = np.empty((64, 2 * m), np.float32)
    clip_pairs(cos, sin, radius, out, np.empty_like(cos), np.empty_like(cos))
    z = out.astype(np.float64)
    pairs = z[:, :m] ** 2 + z[:, m:] ** 2  # exact: float32 squares, one float64 addition
    assert np.all(np.isfinite(z))
    assert np.all(pairs * (1 + 2.0**-52) <= 1.0 / m)
    assert np.all(z[0, :5] == 0.0) and np.all(z[0, m:m + 5] == 0.0)
    assert np.max(np.asarray(_exact_norms_squared(out))) <= 1.0
