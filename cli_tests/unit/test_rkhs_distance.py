"""``rkhs_distance`` of two neighbouring fits (audit privacy's gray box for cate, and the
sensitivity tests): a point both fits share enters once with the difference of its coefficients
(issue 24: a Gram of about (n + 1)² instead of (2n)²), which also keeps the distance accurate when
the fits are nearly equal — the stacked form lost up to 4e-4 of it to cancellation."""

from __future__ import annotations

import numpy as np

from dpcausal.commands.cate.krr import KrrFit, rkhs_distance


def _reference(a: KrrFit, b: KrrFit) -> float:
    """The stacked quadratic form in extended precision."""
    pts = np.vstack([a.points, b.points]).astype(np.longdouble)
    v = np.concatenate([a.alpha, -b.alpha]).astype(np.longdouble)
    sq = ((pts[:, None, :] - pts[None, :, :]) ** 2).sum(-1)
    kmat = np.exp(-sq / (2 * np.longdouble(a.bandwidth) ** 2))
    return float(np.sqrt(max(v @ (kmat @ v), 0)))


def test_neighbouring_fits_distance_matches_extended_precision() -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        n, q = int(rng.integers(1, 80)), int(rng.integers(1, 6))
        pa = rng.uniform(size=(n, q))
        pb = pa.copy()
        k = int(rng.integers(0, min(n, 2) + 1))  # rows replaced (0: same rows, new weights)
        idx = rng.choice(n, size=k, replace=False)
        pb[idx] = rng.uniform(size=(k, q))
        aa = rng.normal(size=n)
        ab = aa + rng.normal(size=n) * 10.0 ** rng.uniform(-8, 0)
        fa, fb = KrrFit(aa, pa, 0.3, 0.0, 1), KrrFit(ab, pb, 0.3, 0.0, 1)
        ref = _reference(fa, fb)
        assert abs(rkhs_distance(fa, fb) - ref) <= 1e-9 * ref


def test_fits_on_different_point_counts_use_the_stacked_form() -> None:
    rng = np.random.default_rng(8)
    fa = KrrFit(rng.normal(size=5), rng.uniform(size=(5, 2)), 0.5, 0.0, 1)
    fb = KrrFit(rng.normal(size=7), rng.uniform(size=(7, 2)), 0.5, 0.0, 1)
    ref = _reference(fa, fb)
    assert abs(rkhs_distance(fa, fb) - ref) <= 1e-12 * ref
    assert rkhs_distance(fa, fa) == 0.0
