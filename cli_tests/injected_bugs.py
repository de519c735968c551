"""Known privacy bugs, injected into the real code for tests that ``audit privacy`` must fail
(exit 4). Test fixtures only: nothing here is ever shipped or imported by dpcausal."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dpcausal.commands.owl import audit as owl_audit
from dpcausal.commands.owl import estimate as owl_estimate
from dpcausal.commands.owl.setup import OwlSetup
from dpcausal.commands.synth_control.capped import CappedScales
from dpcausal.errors import SolverError
from dpcausal.mechanisms import L2LaplaceMechanism


def bad_radius_noise(mech: L2LaplaceMechanism, rng: np.random.Generator,
                     count: int | None = None) -> np.ndarray:
    """The synth-control reference code's bug: a 1-D Laplace radius instead of Gamma(d, Δ/ε)."""
    rows = 1 if count is None else count
    direction = rng.standard_normal((rows, mech.dim))
    radius = np.abs(rng.laplace(0.0, mech.scale, size=rows))
    noise = (radius / np.linalg.norm(direction, axis=1))[:, None] * direction
    return noise[0] if count is None else noise


def one_d_radius(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ℓ2-Laplace draw (owl's θ, synth-control's coefficients) uses the 1-D radius."""
    monkeypatch.setattr(L2LaplaceMechanism, "sample_noise",
                        lambda self, *, rng, count=None: bad_radius_noise(self, rng, count))


def halve_owl_sensitivity(monkeypatch: pytest.MonkeyPatch) -> None:
    """owl's Δ = (2W + 2τ)/γ understated by half (plan and run alike)."""
    real = OwlSetup.sensitivity
    monkeypatch.setattr(OwlSetup, "sensitivity", lambda self, g, n: real(self, g, n) / 2)


def halve_capped_sensitivity(monkeypatch: pytest.MonkeyPatch) -> None:
    """synth-control method: capped with its per-period sensitivity understated by half (plan
    and run alike): the noise of the average, path and fit is half what one donor can move."""
    real = CappedScales.per_period
    monkeypatch.setattr(CappedScales, "per_period", property(lambda self: real.fget(self) / 2))


def refuse_on_odd_treated(monkeypatch: pytest.MonkeyPatch) -> None:
    """A data-dependent refusal: owl's fit refuses (exit 2) when the number of treated rows is odd.

    Flipping one row's arm flips the parity, so a neighbouring pair exits 0 on one side and 2 on
    the other: the exit code then leaks that row's arm, unbounded and uncharged."""
    real = owl_estimate.fit_nonprivate

    def fit(setup: Any, data: Any, gamma: float) -> Any:
        if int(np.sum(data.y > 0)) % 2:
            raise SolverError("the solver did not converge; nothing was released")
        return real(setup, data, gamma)

    for module in (owl_estimate, owl_audit):  # the run and the audit's pre-noise values
        monkeypatch.setattr(module, "fit_nonprivate", fit)


def halve_synth_control_sensitivity(monkeypatch: pytest.MonkeyPatch) -> None:
    """synth-control's coefficient Δ = √(2T0/λ) understated by half (plan and run alike)."""
    from dpcausal.commands.synth_control import dpsc

    real = dpsc.coefficient_sensitivity
    monkeypatch.setattr(dpsc, "coefficient_sensitivity",
                        lambda *a: (real(*a)[0] / 2, real(*a)[1]))


def halve_two_stage_sensitivity(monkeypatch: pytest.MonkeyPatch) -> None:
    """two-stage's noise-term sensitivity ζ·W̄₁ˢ understated by half (plan and run alike): W̄₁ˢ,
    the sup of how far one replaced row moves the weights, taken as half its proven value."""
    import dataclasses

    from dpcausal.commands.two_stage import plan, stage2
    from dpcausal.commands.two_stage.privacy import stability_bounds

    def halved(*args: Any) -> Any:
        real = stability_bounds(*args)
        return dataclasses.replace(real, w1s=real.w1s / 2)

    for module in (plan, stage2):
        monkeypatch.setattr(module, "stability_bounds", halved)


def halve_cate_rkhs_sensitivity(monkeypatch: pytest.MonkeyPatch) -> None:
    """cate's second-stage RKHS sensitivity understated by half (plan and run alike)."""
    from dpcausal.commands.cate.setup import CateSetup

    real = CateSetup.rkhs_sensitivity
    monkeypatch.setattr(CateSetup, "rkhs_sensitivity",
                        property(lambda self: real.fget(self) / 2))  # type: ignore[attr-defined]


def halve_select_policy_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    """select-policy's utility sensitivity Δ_cert understated by half (plan and run alike)."""
    import dataclasses

    from dpcausal.commands.select_policy import certify, penalty

    real = penalty.certify_spillover

    def halved(**kw: Any) -> Any:
        cert = real(**kw)
        return dataclasses.replace(cert, delta_cert=cert.delta_cert / 2)

    for module in (penalty, certify):  # two arms: penalty.py; K arms: certify.py
        monkeypatch.setattr(module, "certify_spillover", halved)


def halve_cate_ate_estimate_sensitivity(monkeypatch: pytest.MonkeyPatch) -> None:
    """cate's ATE (estimand: ate): the Laplace release of the score sum Σu calibrated to half its
    sensitivity R (plan and run alike): its per-unit mechanism given sensitivity ½ instead of 1."""
    import dataclasses

    from dpcausal.commands.cate import ate_estimate, ate_plan, ate_setup
    from dpcausal.mechanisms import LaplaceMechanism

    real = ate_setup.unit_mechanisms

    def halved(setup: Any) -> Any:
        mechs = real(setup)
        est = mechs.estimate
        return dataclasses.replace(mechs, estimate=LaplaceMechanism(
            est.epsilon, est.l1_sensitivity / 2, stage=est.stage))

    for module in (ate_plan, ate_estimate):  # the plan and the release
        monkeypatch.setattr(module, "unit_mechanisms", halved)


def drop_joint_contrast_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    """cate with K ≥ 3 arms: the joint release of the K − 1 contrasts calibrated to the
    per-contrast Δ_ℋ instead of √(K − 1)·Δ_ℋ (plan and run alike), as if no row entered more than
    one contrast (a control row enters every one: docs/proofs/cate.md §10)."""
    import dataclasses
    import math

    from dpcausal.commands.cate import multi_arm, plan, privacy

    real = privacy.function_mechanism

    def per_contrast(*args: Any) -> Any:
        mech = real(*args)
        return dataclasses.replace(mech,
                                   rkhs_sensitivity=mech.rkhs_sensitivity / math.sqrt(mech.paths))

    for module in (plan, multi_arm, privacy):  # privacy: the noise sd the release reports
        monkeypatch.setattr(module, "function_mechanism", per_contrast)
