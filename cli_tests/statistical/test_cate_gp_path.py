"""Corrected Algorithm 2 (spec T9): the iterative GP path has the batch law; repeats are stable."""

from __future__ import annotations

import numpy as np
import pytest

from dpcausal.mechanisms import GaussianProcessMechanism, GaussianProcessPath
from dpcausal.mechanisms.gaussian_process import gaussian_kernel

pytestmark = pytest.mark.statistical
H = 0.35
PTS = np.random.default_rng(31).uniform(size=(6, 2))


def test_sequential_answers_have_the_batch_law() -> None:
    mech = GaussianProcessMechanism(1.0, 1e-5, 0.05, bandwidth=H)
    f = np.sin(PTS.sum(1))
    rng = np.random.default_rng(32)
    seq = np.empty((2500, 6))
    for r in range(2500):
        path = GaussianProcessPath(mech)
        seq[r, :2] = path.release(f[:2], PTS[:2], rng=rng)
        for i in range(2, 6):
            seq[r, i] = path.release(f[i:i + 1], PTS[i:i + 1], rng=rng)[0]
    target = mech.sigma**2 * gaussian_kernel(PTS, PTS, H)
    assert np.allclose(seq.mean(0), f, atol=4 * mech.sigma / np.sqrt(2500))
    assert np.linalg.norm(np.cov(seq.T) - target) / np.linalg.norm(target) < 0.09


def test_repeated_queries_return_the_stored_value_and_cost_nothing_more() -> None:
    mech = GaussianProcessMechanism(1.0, 1e-5, 0.05, bandwidth=H)
    path = GaussianProcessPath(mech)
    rng = np.random.default_rng(33)
    first = path.release(np.zeros(3), PTS[:3], rng=rng)
    again = path.release(np.zeros(4), np.vstack([PTS[1], PTS[3], PTS[0], PTS[1]]), rng=rng)
    assert again[0] == first[1] and again[2] == first[0] and again[3] == first[1]
    assert path.n_points == 4
    # a point very close to a stored one gets almost the same noise (conditional variance → 0)
    near = path.release(np.zeros(1), PTS[:1] + 1e-6, rng=rng)
    assert abs(near[0] - first[0]) < 1e-3 * mech.sigma
    with pytest.raises(ValueError, match="dimension"):
        path.release(np.zeros(1), np.zeros((1, 3)), rng=rng)
