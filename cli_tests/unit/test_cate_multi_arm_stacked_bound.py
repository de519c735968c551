"""Independent review of the K-arm joint release (docs/proofs/cate.md §10) with K = 5: planted rows
at a box corner, outcomes at their bounds, nuisances at the propensity clip. Every contrast moves
by at most the two-arm Δ_ℋ, the stacked r = K − 1 contrasts by at most √r·Δ_ℋ, and a control row
whose outcome flips attains √r·Δ_ℋ (so the √(K − 1) factor is needed, not just sufficient)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from cli_tests.unit.test_cate_multi_arm import make_spec
from dpcausal.commands.cate.krr import fit_krr, rkhs_distance
from dpcausal.commands.cate.multi_arm import contrast_inputs
from dpcausal.commands.cate.privacy import function_mechanism
from dpcausal.commands.cate.setup import build_setup
from dpcausal.mechanisms.gaussian_process import gaussian_kernel

K = 5
LABELS = [f"arm{i}" for i in range(K)]


def _fits(setup, s, codes, y, pi, mu, learner, arms, control):  # type: ignore[no-untyped-def]
    kmat = gaussian_kernel(s, s, setup.bandwidth)
    return [fit_krr(s, *contrast_inputs(learner, codes, y, pi, mu, k, control, setup.kappa),
                    bandwidth=setup.bandwidth, lam0=setup.lam0, huber_c=setup.huber_c,
                    accuracy=setup.krr_accuracy, kmat=kmat) for k in arms]


@pytest.mark.parametrize("learner", ["r", "dr"])
def test_five_arms_every_contrast_within_delta_and_the_stack_attains_sqrt_r_delta(
        learner: str) -> None:
    n, control = 20, 2
    spec = make_spec(arms=LABELS, control=LABELS[control], learner=learner, loss="huber",
                     huber_c=0.5, ridge=500.0, bandwidth=0.05, sensitivity_formula="corrected")
    setup = build_setup(spec, 2 * n)
    r = K - 1
    delta_h = setup.rkhs_sensitivity
    assert function_mechanism(spec, setup).rkhs_sensitivity == pytest.approx(
        math.sqrt(r) * (delta_h + setup.query_rounding))  # + the exact kernel's query rounding
    arms = [i for i in range(K) if i != control]
    rng = np.random.default_rng(11)
    s = rng.uniform(size=(n, 2))
    s[0] = 0.0  # the planted row, at a corner of the box
    codes = rng.integers(0, K, n)
    y = rng.choice([0.0, 1.0], n)
    kap = setup.kappa
    pi = np.full((n, K), 1.0 - kap)
    pi[:, control] = kap  # R: each conditional propensity at its clip; DR: 1/π_c at its largest
    mu = rng.choice([0.0, 1.0], (n, K))
    worst = worst_control = 0.0
    for a_old, a_new in itertools.product(range(K), range(K)):
        c1, c2, y1, y2 = codes.copy(), codes.copy(), y.copy(), y.copy()
        c1[0], c2[0], y1[0], y2[0] = a_old, a_new, 0.0, 1.0
        mu1, mu2 = mu.copy(), mu.copy()
        mu1[0], mu2[0] = 1.0, 0.0  # the residual Y − μ at its largest, of opposite signs
        base = _fits(setup, s, c1, y1, pi, mu1, learner, arms, control)
        moved = _fits(setup, s, c2, y2, pi, mu2, learner, arms, control)
        d = [rkhs_distance(a, b) for a, b in zip(base, moved, strict=True)]
        assert max(d) <= delta_h
        stacked = math.sqrt(sum(x * x for x in d))
        assert stacked <= math.sqrt(r) * delta_h
        worst = max(worst, stacked)
        if a_old == a_new == control:
            worst_control = stacked
    assert worst_control >= 0.99 * math.sqrt(r) * delta_h
    assert worst == pytest.approx(worst_control)
