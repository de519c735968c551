"""``audit privacy``'s K-arm cate adapter (dpcausal/commands/cate/audit_multi_arm.py): its gray-box
values are the inputs the run's mechanisms receive — the nuisances exactly, and the K − 1
contrasts stacked as the one joint draw takes them — and its planted control row moves the stack
by ≈ √(K − 1)·Δ_ℋ given the audit's fixed nuisances."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from cli_tests.unit.test_cate_multi_arm import make_spec
from dpcausal.audit.blackbox import recorded_run
from dpcausal.audit.estimators import event_loss
from dpcausal.commands.cate import audit_multi_arm as adapter
from dpcausal.commands.cate import multi_arm
from dpcausal.commands.cate.audit import ADAPTER, audit_spec
from dpcausal.commands.cate.method import METHOD
from dpcausal.commands.cate.queries import query_points
from dpcausal.commands.cate.setup import build_setup

N = 120
STAGE = adapter.STAGE_FUNCTION


def _fixed_nuisances(spec: Any, setup: Any) -> tuple[Any, Any]:
    """The audit's fixed second-stage nuisances (π̂ at the clip, μ̂ at the centre)."""
    from dpcausal.commands.cate.privacy import arm_nuisance_learners

    arms = len(spec.cate.labels())
    prop = adapter._ClippedPropensities(setup.kappa, arms,
                                        multi_arm.contrast_indices(spec)[1])
    out_l = arm_nuisance_learners(spec, setup)[1]
    return prop, out_l.model(np.zeros((arms, setup.box.dim)))


@pytest.mark.parametrize("features", ["rff", "exact"])
def test_pre_noise_is_what_the_run_draws_noise_for(monkeypatch: pytest.MonkeyPatch,
                                                   features: str) -> None:
    """The run (its noised nuisances swapped, after their draws, for the audit's fixed ones)
    draws its noise at exactly the adapter's values: Θ̂, the stacked ridges, and the contrasts'
    weights flattened in declared order (rff) or values at the queries (exact kernel)."""
    spec = audit_spec(make_spec(features=features, rff_dim=20, ridge=0.05, plot=False))
    frame = ADAPTER.synthesize(spec, N, np.random.default_rng(0))
    plan = METHOD.plan(spec, N, {}, rng=np.random.default_rng(0))
    setup = build_setup(spec, N)
    real = multi_arm._nuisances

    def nuisances(*args: Any) -> Any:
        real(*args)  # the two nuisance draws, as planned
        return _fixed_nuisances(spec, setup)

    monkeypatch.setattr(multi_arm, "_nuisances", nuisances)
    guard = recorded_run(METHOD, spec, frame, plan, {}, seed=0)
    values = ADAPTER.pre_noise(spec, frame, plan, {})
    assert set(values) == {ev.stage for ev in plan.events}
    for stage in ("cate.nuisance.propensity", "cate.nuisance.outcome"):
        np.testing.assert_array_equal(values[stage], guard.draws[stage].value)
    drawn = np.asarray(guard.draws[STAGE].value)
    r = len(spec.cate.contrast_arms())
    if features == "rff":
        assert drawn.shape == (r, 2 * 20)
        np.testing.assert_array_equal(values[STAGE], drawn.ravel())
    else:
        sq = setup.box.unit(query_points(spec, setup, {})[list(setup.covariates)].to_numpy())
        stacked = values[STAGE]
        assert len(stacked.parts) == r
        np.testing.assert_allclose(np.vstack([p.fit.predict(sq) for p in stacked.parts]), drawn,
                                   rtol=0, atol=1e-12)


@pytest.mark.parametrize("features", ["rff", "exact"])
def test_the_planted_control_row_reaches_the_joint_sensitivity(features: str) -> None:
    """The first pair (the quiet control-row flip) moves the stacked contrasts by ≥ 0.95 of the
    joint √(K − 1)·Δ_ℋ, never more."""
    spec = audit_spec(make_spec(features=features, rff_dim=20, ridge=0.05, huber_c=0.1,
                                sensitivity_formula="corrected"))
    rng = np.random.default_rng(1)
    frame = ADAPTER.synthesize(spec, N, rng)
    plan = METHOD.plan(spec, N, {}, rng=rng)
    name, d, d_prime = next(iter(ADAPTER.neighbours(spec, frame, rng, 1)))
    assert "control" in name and d is not None
    loss = event_loss(plan.event(STAGE), ADAPTER.pre_noise(spec, d, plan, {})[STAGE],
                      ADAPTER.pre_noise(spec, d_prime, plan, {})[STAGE])
    ratio = loss.shift / loss.sensitivity
    assert 0.95 <= ratio <= 1.0
    per_contrast = loss.sensitivity / math.sqrt(len(spec.cate.contrast_arms()))
    assert loss.shift > per_contrast  # so the √(K − 1) is needed: without it, a violation


def test_two_arm_specs_keep_the_two_arm_adapter() -> None:
    spec = make_spec()
    two = spec.model_copy(update={"cate": spec.cate.model_copy(
        update={"arms": None, "control": 0, "treated": 1})})
    frame = ADAPTER.synthesize(two, N, np.random.default_rng(0))
    assert set(frame["A"]) == {0, 1}
    assert set(ADAPTER.synthesize(spec, N, np.random.default_rng(0))["A"]) == set(
        spec.cate.labels())
