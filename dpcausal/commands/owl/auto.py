"""owl's ``lambda: auto``: λ chosen from a public grid by a private selection on the sensitive
rows, then the rule released at the chosen λ (proof: docs/proofs/owl.md, "lambda: auto").

**Why not a public rule.** Which λ gives the best rule depends on the data (a flat effect wants
the heavily penalised mean-difference rule, a varied one the unpenalised hinge fit), which the
``total`` rule cannot see. Non-private cross-validation on the sensitive rows leaks (spec owl
P6); this is the spec's §3.6 route (Chaudhuri, Monteleoni & Sarwate 2011, §6 private parameter
tuning) with the utility the spec prescribes for OWL and a refit on all rows.

**The candidates** are the spec's grid values above λ₀, the ``total`` rule's λ at the release's
ε_f (:func:`dpcausal.commands.owl.penalty.choose_lambda`), plus λ₀ itself: a smaller λ has a
predicted margin noise above κ = ½ at ε_f, and at moderate ε the selection cannot tell such a
pure-noise rule from a good one. Public (n, ε, d, α): at ε → ∞, λ₀ → 10⁻⁸ and every grid value
stays.

**The selection** (ε_s = share·ε). A public split (a secret random permutation by default) puts
m = ⌊validation_share·n⌋ rows in a validation part V and the other n_T in a training part T.
For each of the k grid values λ_i: φ_i = λ_i·θ̂_{λ_i}(T), the weighted-hinge fit on T scaled by
its penalty, released to the selection with ℓ2-Laplace noise at ε_s/k (never published). Then the
exponential mechanism at ε_s picks i with probability ∝ exp(ε_s·u_i/(2Δ_u)),

    u_i = (1/m) Σ_{v ∈ V} min(w_v/W, 1)·1(the noisy rule φ̃_i agrees with A_v),  Δ_u = 1/m,

the inverse-probability-weighted value of trial rule i on V (spec §3.6's utility, divided by W).

**The release** (ε_f = (1 − share)·ε). φ = λ*·θ̂_{λ*}(all rows) plus ℓ2-Laplace noise; the
released θ is φ̃ (a positive multiple of the rule at λ*: the same recommendations).

**Why λ·θ̂.** Δ₂(θ̂_λ) = (2 + slack)/(n_rows·λ) in the unit-free form, so Δ₂(λθ̂_λ) is the same
for every λ (up to the solver slack: the maximum over the grid is used). The noise of each trial
and of the release is therefore fixed before the data is read, and the plan states it exactly
whatever λ the selection picks.

**Known limit.** A trial is noisier than the release (ε_s/k on n_T rows against ε_f on n), so at
moderate ε the selection judges each λ by a noisier rule than the one released and leans towards
larger λ (the less noise-sensitive, mean-difference end). As ε → ∞ the trials are the non-private
fits on T and the selection is the best validation value: the non-private choice on one split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.commands.common import row_split
from dpcausal.commands.owl.penalty import choose_lambda, gamma_of
from dpcausal.commands.owl.setup import OwlSetup, Prepared, fit_nonprivate
from dpcausal.commands.owl.spec import AutoSpec, OwlSpec
from dpcausal.errors import DataError, SpecError
from dpcausal.mechanisms import ExponentialMechanism, L2LaplaceMechanism, NoiseGuard

FloatArray = npt.NDArray[np.float64]
SPLIT = "owl.auto"
TRAIN_PART = f"{SPLIT}/train"
VALID_PART = f"{SPLIT}/valid"
MIN_PART = 10
"""Fewest rows in either part."""


def settings(spec: OwlSpec) -> AutoSpec:
    """The spec's ``owl.auto`` (its defaults when omitted)."""
    return spec.owl.auto or AutoSpec()


@dataclass(frozen=True)
class AutoPlan:
    """The public quantities of one selection: grid, part sizes, ε shares, φ sensitivities."""

    grid: tuple[float, ...]
    n: int
    n_train: int
    n_valid: int
    eps_select: float
    eps_fit: float
    trial_sensitivity: float
    fit_sensitivity: float

    @property
    def trial_epsilon(self) -> float:
        """ε_s/k: each trial's share."""
        return self.eps_select / len(self.grid)

    @property
    def utility_sensitivity(self) -> float:
        """Δ_u = 1/m: one validation row moves each u_i by at most 1/m."""
        return 1.0 / self.n_valid


def phi_sensitivity(setup: OwlSetup, grid: tuple[float, ...], n: int) -> float:
    """max over the grid of λ·Δ₂(θ̂_λ) on n rows: the ℓ2 sensitivity of φ = λθ̂_λ whichever λ.

    Raises
    ------
    SpecError
        When a grid value has no float64 solve the certificate covers (named by its value).
    """
    out = 0.0
    for lam in grid:
        gamma = gamma_of(lam, n, setup)
        problem = setup.accuracy(gamma, n).problem()
        if problem is not None:
            raise SpecError(f"owl.auto.grid: λ = {lam:g} on {n} rows: {problem}; remove it",
                            field="owl.auto.grid")
        out = max(out, lam * setup.sensitivity(gamma, n))
    return out


def auto_plan(spec: OwlSpec, setup: OwlSetup, n: int) -> AutoPlan:
    """The selection's public plan, from the spec and the public n alone."""
    auto = settings(spec)
    n_valid = math.floor(auto.validation_share * n)
    n_train = n - n_valid
    if min(n_valid, n_train) < MIN_PART:
        raise DataError(f"{spec.data.path}: {n} rows give {n_train} training and {n_valid} "
                        f"validation rows to owl's lambda: auto; it needs >= {MIN_PART} of each "
                        "(more rows, or give lambda)")
    eps = spec.privacy.epsilon
    floor = choose_lambda(setup, n=n, epsilon=(1.0 - auto.share) * eps,
                          alpha=spec.accuracy.alpha).lam
    grid = tuple(sorted({floor, *(lam for lam in auto.grid if lam > floor)}))
    return AutoPlan(grid, n, n_train, n_valid, auto.share * eps, (1.0 - auto.share) * eps,
                    phi_sensitivity(setup, grid, n_train), phi_sensitivity(setup, grid, n))


def trial_mechanism(setup: OwlSetup, ap: AutoPlan, i: int) -> L2LaplaceMechanism:
    """The noise on trial φ_i = λ_i·θ̂_{λ_i}(T), never published (only the selection is).

    Notes
    -----
    Neighbouring relation: replace one row of the data (n public); the split is public or a secret
    permutation independent of the data. Sensitivity: a replaced row of T moves θ̂_λ(T) by at most
    (2W + 2(τ + A))/γ, γ = λ·n_T·W (:func:`dpcausal.commands.owl.privacy.mechanism`), so φ_i by at
    most :attr:`AutoPlan.trial_sensitivity`; a row of V does not move it. Guarantee: pure
    (ε_s/k)-DP in T, ε_s for the k trials together (sequential composition within T).
    """
    return L2LaplaceMechanism(ap.trial_epsilon, ap.trial_sensitivity, setup.fmap.dim,
                              stage=f"owl.auto.trial[{i}]")


def selection_mechanism(ap: AutoPlan) -> ExponentialMechanism:
    """The exponential mechanism over the trials' validation values.

    Notes
    -----
    Neighbouring relation: as :func:`trial_mechanism`. Sensitivity: with the noisy trials fixed,
    u_i = (1/m) Σ_V min(w_v/W, 1)·1(agree_v) is a mean of m terms in [0, 1/m]·m, so replacing one
    row of V moves every u_i by at most 1/m (Δ_u); a row of T moves no term of V, only the trials,
    which are covered by their own ε. Guarantee: pure ε_s-DP in V (McSherry & Talwar 2007); with
    the trials, ε_s for the selection on all rows by parallel composition over T and V.
    """
    return ExponentialMechanism(ap.eps_select, ap.utility_sensitivity, stage="owl.auto.select")


def final_mechanism(setup: OwlSetup, ap: AutoPlan) -> L2LaplaceMechanism:
    """The released φ = λ*·θ̂_{λ*} on all rows.

    Notes
    -----
    Neighbouring relation: replace one row (n public). Sensitivity: for every λ on the grid
    λ·Δ₂(θ̂_λ) ≤ :attr:`AutoPlan.fit_sensitivity`, so whichever λ* the (already private) selection
    returned, φ moves by at most that. Guarantee: pure ε_f-DP given λ*; with the selection,
    ε_s + ε_f = ε by adaptive sequential composition.
    """
    return L2LaplaceMechanism(ap.eps_fit, ap.fit_sensitivity, setup.fmap.dim, stage="owl.theta")


def events(setup: OwlSetup, ap: AutoPlan) -> list[PrivacyEvent]:
    """The plan's events: k trials on T, the selection on V, the release on all rows."""
    out = []
    for i, lam in enumerate(ap.grid):
        ev = trial_mechanism(setup, ap, i).event()
        out.append(PrivacyEvent(**{**ev.to_dict(), "partition": TRAIN_PART, "params": {
            **ev.params, "lambda": lam, "rows": ap.n_train,
            "released": False, "what": "lambda * theta_hat(lambda) on the training part"}}))
    ev = selection_mechanism(ap).event()
    out.append(PrivacyEvent(**{**ev.to_dict(), "partition": VALID_PART, "params": {
        **ev.params, "candidates": list(ap.grid), "rows": ap.n_valid,
        "utility": "(1/m) sum over validation rows of min(w/W, 1) * 1(trial rule agrees with A)"}}))
    ev = final_mechanism(setup, ap).event()
    out.append(PrivacyEvent(**{**ev.to_dict(), "params": {
        **ev.params, "what": "lambda* * theta_hat(lambda*) on all rows (lambda* selected)"}}))
    return out


def validation_value(phi: FloatArray, valid: Prepared, weight_bound: float) -> float:
    """u = (1/m) Σ min(w/W, 1)·1(A agrees with the rule φ) on the validation rows (ties: control)."""
    agree = (valid.y > 0) == (valid.v @ phi > 0.0)
    share = np.minimum(np.maximum(valid.w / weight_bound, 0.0), 1.0)
    return float(np.sum(share * agree)) / valid.y.size


def subset(data: Prepared, rows: npt.NDArray[np.intp]) -> Prepared:
    """The prepared rows ``rows``."""
    return Prepared(data.v[rows], data.y[rows], data.b_shifted[rows], data.pi_received[rows])


def select_and_release(spec: OwlSpec, setup: OwlSetup, data: Prepared, ids: Any,
                       noise: NoiseGuard) -> tuple[FloatArray, float]:
    """Run the selection and the release (module docstring); return (released φ, λ*)."""
    ap = auto_plan(spec, setup, data.y.size)
    valid_rows, train_rows = row_split.parts(settings(spec).split, ap.n, ap.n_valid, ids)
    train, valid = subset(data, train_rows), subset(data, valid_rows)
    utilities = np.empty(len(ap.grid))
    for i, lam in enumerate(ap.grid):
        phi = lam * fit_nonprivate(setup, train, gamma_of(lam, ap.n_train, setup))
        noisy = noise.release(trial_mechanism(setup, ap, i), phi)
        utilities[i] = validation_value(noisy, valid, setup.weight_bound)
    chosen = ap.grid[int(noise.release(selection_mechanism(ap), utilities))]
    phi = chosen * fit_nonprivate(setup, data, gamma_of(chosen, ap.n, setup))
    return noise.release(final_mechanism(setup, ap), phi), chosen
