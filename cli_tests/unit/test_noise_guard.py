"""The noise guard: a draw happens only through a planned mechanism, each planned stage exactly once."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.mechanisms import (
    ExponentialMechanism,
    GaussianMechanism,
    GaussianProcessMechanism,
    L2LaplaceMechanism,
    LaplaceMechanism,
    NoiseGuard,
    NoiseGuardError,
    ObjectivePerturbation,
)
from dpcausal.mechanisms.gaussian_vector import GaussianNoiseVector

COEF = L2LaplaceMechanism(1.0, 2.0, 3, stage="a.coef")
VALUE = LaplaceMechanism(0.5, 1.0, stage="a.value")


def _plan(*mechs: object) -> PrivacyPlan:
    return PrivacyPlan("t", tuple(m.event() for m in mechs), {}, "pure", True)  # type: ignore[attr-defined]


def test_planned_draws_pass_and_are_recorded() -> None:
    guard = NoiseGuard(_plan(COEF, VALUE), test_seed=1)
    out = guard.release(COEF, np.zeros(3))
    assert out.shape == (3,) and np.any(out != 0)
    guard.release(VALUE, np.array([0.0]))
    guard.check_all_drawn()
    assert guard.drawn == ("a.coef", "a.value")
    assert guard.source == "chacha20/seeded-test"
    assert NoiseGuard(_plan(COEF)).source == "chacha20/os-entropy"


def test_seeded_guards_repeat_and_unseeded_do_not() -> None:
    a = NoiseGuard(_plan(COEF), test_seed=3).release(COEF, np.zeros(3))
    b = NoiseGuard(_plan(COEF), test_seed=3).release(COEF, np.zeros(3))
    c = NoiseGuard(_plan(COEF)).release(COEF, np.zeros(3))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("drawn", [
    L2LaplaceMechanism(1.0, 1.0, 3, stage="a.coef"),            # sensitivity halved
    L2LaplaceMechanism(2.0, 2.0, 3, stage="a.coef"),            # ε (and so the scale) doubled
    L2LaplaceMechanism(1.0, 2.0, 4, stage="a.coef"),            # another dimension
    LaplaceMechanism(1.0, 2.0, stage="a.coef"),                 # another kind (1-D Laplace)
    GaussianMechanism(1.0, 1e-6, 2.0, stage="a.coef"),          # another kind, δ > 0
])
def test_a_draw_that_does_not_match_its_planned_event_is_refused(drawn: object) -> None:
    guard = NoiseGuard(_plan(COEF), test_seed=0)
    with pytest.raises(NoiseGuardError, match="does not match its planned event"):
        guard.release(drawn, np.zeros(3))
    assert guard.drawn == ()


def test_unplanned_twice_missing_and_late_draws_are_refused() -> None:
    guard = NoiseGuard(_plan(COEF, VALUE), test_seed=0)
    with pytest.raises(NoiseGuardError, match="which the plan does not contain"):
        guard.release(LaplaceMechanism(0.5, 1.0, stage="a.other"), np.zeros(1))
    guard.release(COEF, np.zeros(3))
    with pytest.raises(NoiseGuardError, match="drawn twice"):
        guard.release(COEF, np.zeros(3))
    with pytest.raises(NoiseGuardError, match=r"\['a.value'\] were charged but never drawn"):
        guard.check_all_drawn()
    with pytest.raises(NoiseGuardError, match="after the run finished"):
        guard.release(VALUE, np.zeros(1))
    with pytest.raises(NoiseGuardError, match="names a stage twice"):
        NoiseGuard(_plan(COEF, COEF))


def test_every_release_form_goes_through_the_guard() -> None:
    gp = GaussianProcessMechanism(1.0, 1e-6, 0.5, 0.3, stage="f")
    pick = ExponentialMechanism(1.0, 1.0, stage="k")
    obj = ObjectivePerturbation(L2LaplaceMechanism(0.4, 1.0, 2, stage="o"), 1.0, 0.0)
    guard = NoiseGuard(_plan(gp, pick, obj), test_seed=2)
    assert guard.release(gp, np.zeros(2), points=np.array([[0.0], [1.0]])).shape == (2,)
    assert guard.release(pick, np.array([0.0, 5.0])) in (0, 1)
    assert guard.objective_noise(obj).shape == (2,)
    guard.check_all_drawn()
    weights = NoiseGuard(_plan(gp), test_seed=2)
    assert weights.release_weights(gp, np.zeros(4)).shape == (4,)
    # an objective perturbation's noise law drawn as if it were the claim is a mismatch (its ε)
    bare = NoiseGuard(_plan(obj), test_seed=2)
    with pytest.raises(NoiseGuardError, match=r"epsilon: planned 1\.0, drawn 0\.4"):
        bare.release(obj.noise, np.zeros(2))
    with pytest.raises(NoiseGuardError, match="needs an ObjectivePerturbation"):
        bare.objective_noise(obj.noise)  # type: ignore[arg-type]


def test_an_objective_draw_must_be_planned_as_objective_perturbation() -> None:
    """A plan event with the objective draw's kind, ε, δ, sensitivity and scale but without the
    ``perturbation: objective`` marker is a mismatch: an accountant would compose it as a plain
    release of its noise (two-stage's plan lacked the marker, issue 13)."""
    obj = ObjectivePerturbation(L2LaplaceMechanism(0.4, 1.0, 2, stage="o"), 1.0, 0.0)
    unmarked = dataclasses.replace(obj.event(), params=dict(obj.noise.event().params))
    guard = NoiseGuard(PrivacyPlan("t", (unmarked,), {}, "pure", True), test_seed=0)
    with pytest.raises(NoiseGuardError, match="perturbation: planned None, drawn 'objective'"):
        guard.objective_noise(obj)


def test_objective_perturbation_event_is_the_noise_law_with_the_claim() -> None:
    noise = GaussianNoiseVector(0.3, 1e-6, 2.0, 5.0, 3, stage="o")
    ev = ObjectivePerturbation(noise, 1.0, 1e-6).event()
    assert ev == dataclasses.replace(noise.event(), epsilon=1.0,
                                     params={**noise.event().params, "perturbation": "objective"})
    assert ev.noise_scale == 5.0 and ev.params["dim"] == 3


def test_resample_draws_the_same_mechanism_at_the_same_input() -> None:
    guard = NoiseGuard(_plan(COEF), test_seed=0)
    seen = []
    real = NoiseGuard._draw

    def spy(self: NoiseGuard, draw: object) -> object:
        seen.append(draw)
        return real(self, draw)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(NoiseGuard, "_draw", spy)
        guard.release(COEF, np.ones(3))
    many = seen[0].resample(500, test_seed=1)
    assert many.shape == (500, 3)
    radii = np.linalg.norm(many - 1.0, axis=1)
    assert radii.mean() == pytest.approx(COEF.expected_norm, rel=0.1)
