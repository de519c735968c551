"""Public constants of one ``cate`` run, derived from the spec and the public row count alone."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dpcausal.commands.cate.krr_accuracy import KrrAccuracy
from dpcausal.commands.cate.rff import FourierFeatures
from dpcausal.commands.cate.rff_accuracy import RffAccuracy, feature_error
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common.columns import ArmColumns
from dpcausal.errors import DataError, MissingBoundsError, SpecError, UncertifiedModeError
from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.penalty import (
    GRID,
    OUTCOME_EFFECT,
    PenaltyChoice,
    choose_penalty,
    given_penalty,
    outcome_penalty,
    propensity_penalty,
)
from dpcausal.learners.rounding import cholesky_completes, gamma
from dpcausal.mechanisms import GaussianProcessMechanism
from dpcausal.mechanisms.gaussian_process import JITTER_START

FloatArray = npt.NDArray[np.float64]
MIN_N_FUNCTION = 20
MIN_N_QUERIES = 100
MAX_SECOND_STAGE = 12_000
"""The exact kernel ridge holds n × n matrices (≈ 3 GB at n = 12,000): larger second halves are refused."""
SPLIT = "cate.halves"
NUISANCE_PART = f"{SPLIT}/nuisance"
SECOND_PART = f"{SPLIT}/second-stage"


@dataclass(frozen=True)
class CateSetup:
    """Everything public about a run: sizes, kernel, ridge, Lipschitz bound, noise factors."""

    columns: ArmColumns
    box: BoxFeatures
    n_total: int
    n_nuisance: int
    n: int
    bandwidth: float
    lam0: float
    kappa: float
    learner: Literal["r", "dr"]
    loss: Literal["huber", "squared"]
    huber_c: float | None
    lipschitz_w: float
    lipschitz_derivation: str
    sup_g: float | None
    accuracy: RffAccuracy | KrrAccuracy
    """The second-stage solve's public accuracy: :class:`RffAccuracy` (``features: rff``) or
    :class:`KrrAccuracy` (the exact kernel)."""
    propensity_l2: PenaltyChoice
    """The propensity model's penalty: the spec's, or the total-error rule's (learners/penalty)."""
    outcome_l2: PenaltyChoice
    """The outcome models' penalty: the spec's, or the total-error rule's."""
    ridge_choice: PenaltyChoice | None = None
    """λ0 when the total-error rule chose it (:func:`second_stage_ridge`); None when given or
    the 1/√n default of queries mode."""

    @property
    def rff_accuracy(self) -> RffAccuracy | None:
        """The random-feature solve's accuracy (None for the exact kernel)."""
        return self.accuracy if isinstance(self.accuracy, RffAccuracy) else None

    @property
    def krr_accuracy(self) -> KrrAccuracy | None:
        """The exact-kernel solve's accuracy (None for random features)."""
        return self.accuracy if isinstance(self.accuracy, KrrAccuracy) else None

    @property
    def covariates(self) -> tuple[str, ...]:
        """The covariate columns, in order."""
        return self.columns.covariates

    @property
    def y_bounds(self) -> tuple[float, float]:
        """The public outcome bounds."""
        return self.columns.outcome_bounds

    @property
    def q(self) -> int:
        """Number of covariates."""
        return len(self.covariates)

    def box_bounds(self, name: str) -> tuple[float, float]:
        """The public [lo, hi] of covariate ``name``."""
        i = self.covariates.index(name)
        return float(self.box.lo[i]), float(self.box.hi[i])

    @property
    def delta_y(self) -> float:
        """y_hi − y_lo."""
        return self.y_bounds[1] - self.y_bounds[0]

    @property
    def log_c_k(self) -> float:
        """log c_K = −q log(√(2π)h): the normalised kernel's diagonal (may underflow if exponentiated)."""
        return -self.q * math.log(math.sqrt(2.0 * math.pi) * self.bandwidth)

    @property
    def printed_factor(self) -> float:
        """4√c_K: the printed Thm 3 noise over the corrected (Eq. 64) one, at equal L_w."""
        return math.exp(math.log(4.0) + 0.5 * self.log_c_k)

    @property
    def grad_tol(self) -> float:
        """Second-stage solver tolerance τ on ‖∇J‖_ℋ: 1e-6·L_w/n, raised to 4A by the solve's
        proven rounding allowance (:attr:`RffAccuracy.tol`, :attr:`KrrAccuracy.tol`)."""
        return self.accuracy.tol

    @property
    def rkhs_sensitivity(self) -> float:
        """Δ_ℋ = L_w/(λ0 n) + tol/λ0 (corrected Lemma 1, Eq. 64, with k0(x,x) = 1, plus solver slack)."""
        return self.lipschitz_w / (self.lam0 * self.n) + self.grad_tol / self.lam0

    @property
    def query_rounding(self) -> float:
        """2ε_f/√(1e-10), added to the function release's sensitivity (exact kernel; 0 for random
        features, whose noise is added to the weights): the released values fl(K̂_q α) are each
        within ε_f of ĝ(x_q) (:attr:`KrrAccuracy.f_error`), a perturbation outside ℋ; under the
        release's covariance σ²(k0(X, X) + τI), τ ≥ 1e-10·d (``JITTER_START``), its Mahalanobis
        norm is ≤ √d·ε_f/√τ ≤ ε_f/√1e-10 on each side of a neighbouring pair."""
        acc = self.krr_accuracy
        return 0.0 if acc is None else 2.0 * acc.f_error / math.sqrt(JITTER_START)

    def public_dict(self) -> dict[str, Any]:
        """The receipt's view of the setup."""
        return {
            "n_total": self.n_total, "n_nuisance_half": self.n_nuisance, "n_second_half": self.n,
            "bandwidth_h": self.bandwidth, "ridge_lambda0": self.lam0,
            "ridge_lambda_paper_log10": (math.log(self.lam0) - self.log_c_k) / math.log(10.0),
            "kernel": "k0(x,x')=exp(-|s(x)-s(x')|^2/(2h^2)) on box-scaled s(x) in [0,1]^q",
            "propensity_clip_kappa": self.kappa, "learner": self.learner, "loss": self.loss,
            "huber_c": self.huber_c, "lipschitz_L_w": self.lipschitz_w,
            "lipschitz_derivation": self.lipschitz_derivation,
            "printed_over_corrected_factor_4sqrt_cK": self.printed_factor,
        }


def _lipschitz(spec: CateSpec, dy: float, kappa: float, lam0: float
               ) -> tuple[float, str, float | None]:
    """L_w (spec §3.4), for exactly the loss the solver minimises; public constants only."""
    sec = spec.cate
    rho_sup = (1.0 - kappa) ** 2 if sec.learner == "r" else 1.0
    if sec.resolved_loss == "huber":
        c = sec.huber_c if sec.huber_c is not None else dy / 2.0
        return 2.0 * c * rho_sup, f"Huber: L_w = 2c·sup ρ = 2·{c:g}·{rho_sup:g}", None
    if sec.learner == "r":
        b_psi = dy + (1.0 - kappa) * dy
        m_g = b_psi / math.sqrt(lam0)
        lw = 2.0 * ((1.0 - kappa) ** 2 * (m_g + dy) + (1.0 - kappa) * dy)
        return lw, "squared, R: L_w = 2[(1-κ)²(M_g+Δy)+(1-κ)Δy], M_g = (2-κ)Δy/√λ0", m_g
    m_g = (dy / kappa + dy) / math.sqrt(lam0)
    return 2.0 * (m_g + dy / kappa + dy), "squared, DR: L_w = 2(M_g+Δy/κ+Δy)", m_g


def build_setup(spec: CateSpec, n_rows: int) -> CateSetup:
    """Validate the public inputs and derive the constants; refuse what the guarantee cannot cover."""
    sec = spec.cate
    cols = spec.data.columns
    if not cols.covariates:
        raise SpecError("data.columns.covariates: cate needs at least one covariate column")
    if cols.outcome is None or cols.treatment is None:
        raise SpecError("data.columns: cate needs both 'outcome' and 'treatment' columns")
    if spec.privacy.delta == 0.0:
        raise SpecError("privacy.delta: cate is (ε, δ)-DP and needs δ > 0 (Gaussian noise); set "
                        "privacy.delta, e.g. to 1e-6 (it must be < 1/n_rows)")
    if spec.privacy.delta >= 1.0 / n_rows:
        raise SpecError(f"privacy.delta: δ = {spec.privacy.delta:g} is not < 1/n_rows = "
                        f"{1.0 / n_rows:.3g}; such a δ permits publishing a row outright. Use δ "
                        "well below 1/n_rows (e.g. 1/(10·n_rows))")
    if spec.bounds.outcome is None:
        raise MissingBoundsError(
            "bounds.outcome is missing: cate needs public outcome bounds [lo, hi] (Y is clipped to "
            "them; they are never taken from the data); add e.g. bounds: {outcome: [-1, 9]}")
    missing = [c for c in cols.covariates if spec.bounds.covariate(c) is None]
    if missing:
        raise MissingBoundsError(
            f"bounds.covariates has no bound for {', '.join(missing)}: cate needs a public box for "
            "every covariate (clipping, scaling, the sup over the domain); add them per column or "
            "give one [lo, hi] for all")
    n_nuis = math.floor(n_rows * sec.first_half_fraction)
    n = n_rows - n_nuis
    floor = MIN_N_FUNCTION if sec.mode == "function" else MIN_N_QUERIES
    if n < floor or n_nuis < MIN_N_FUNCTION:
        raise DataError(
            f"{spec.data.path}: {n_rows} rows give halves of {n_nuis} (nuisances) and {n} (second "
            f"stage); cate {sec.mode} mode needs >= {floor} rows in the second half and >= "
            f"{MIN_N_FUNCTION} in the first")
    if n > MAX_SECOND_STAGE and sec.features == "exact":
        raise DataError(
            f"{spec.data.path}: {n_rows} rows put {n} rows in the second half; the exact kernel ridge "
            f"second stage needs n × n memory and supports at most {MAX_SECOND_STAGE} rows there. "
            "Run on a public random subsample of the rows (decided before looking at the data), or "
            "use cate.features: rff (random Fourier features, any n)")
    columns = ArmColumns.from_spec(spec, "cate")
    bnds = np.array(columns.covariate_bounds, dtype=np.float64)
    box = BoxFeatures(bnds[:, 0], bnds[:, 1])
    eps, dlt, share = spec.privacy.epsilon, spec.privacy.delta, sec.nuisance.propensity_share
    prop = (given_penalty(sec.nuisance.propensity_l2) if sec.nuisance.propensity_l2 is not None
            else propensity_penalty(box, eps * share, dlt * share, n_nuis,
                                    len(sec.labels())))
    outm = (given_penalty(sec.nuisance.outcome_l2) if sec.nuisance.outcome_l2 is not None
            else outcome_penalty(box, columns.outcome_bounds, eps * (1 - share),
                                 dlt * (1 - share), n_nuis))

    def at(lam0: float, choice: PenaltyChoice | None = None) -> CateSetup:
        _check_second_stage_precision(sec.features, n, sec.rff_dim, lam0)
        dy = columns.outcome_bounds[1] - columns.outcome_bounds[0]
        lw, how, m_g = _lipschitz(spec, dy, sec.kappa, lam0)
        c = (sec.huber_c if sec.huber_c is not None else dy / 2.0) \
            if sec.resolved_loss == "huber" else None
        acc: RffAccuracy | KrrAccuracy
        if sec.features == "rff":
            acc = RffAccuracy(n, 2 * sec.rff_dim, lam0, lw, c is None, omega_error)
        else:
            acc = KrrAccuracy(n, q, h, lam0, lw, c is None)
        problem = acc.problem()
        if problem is not None:
            raise SpecError(problem)
        return CateSetup(columns, box, n_rows, n_nuis, n, h, lam0, sec.kappa, sec.learner,
                         sec.resolved_loss, c, lw, how, m_g, acc, prop, outm, choice)

    q = len(columns.covariates)
    h = sec.bandwidth if sec.bandwidth is not None else math.sqrt(q / 2.0)
    omega_error = (feature_error(FourierFeatures.draw(q, sec.rff_dim, h, sec.rff_seed).omega)
                   if sec.features == "rff" else 0.0)
    if sec.ridge is not None:
        setup = at(sec.ridge)
    elif sec.mode == "queries":
        setup = at(1.0 / math.sqrt(n))
    else:
        choice = second_stage_ridge(spec, at)
        setup = at(choice.l2, choice)
    if sec.mode == "function" and sec.sensitivity_formula == "paper" and setup.printed_factor < 1.0:
        raise UncertifiedModeError(
            f"cate.sensitivity_formula: 'paper' (printed Thm 3) under-noises here: (√(2π)h)^q = "
            f"{math.exp(-setup.log_c_k):.4g} > 16 (q = {q}, h = {h:g}), so the printed bound is "
            "below the true RKHS sensitivity (spec E1). Use 'max' (default) or 'corrected'")
    return setup


def kernel_mean(q: int, h: float) -> float:
    """E k0(s, s′) for s, s′ independent and uniform on [0, 1]^q: per axis
    2∫₀¹ (1 − t) exp(−t²/(2h²)) dt (t = |s − s′| has density 2(1 − t))."""
    a = h * math.sqrt(2.0)
    axis = 2.0 * (h * math.sqrt(math.pi / 2.0) * math.erf(1.0 / a)
                  - h * h * (1.0 - math.exp(-1.0 / (a * a))))
    return axis**q


def second_stage_ridge(spec: CateSpec, at: Callable[[float], CateSetup]) -> PenaltyChoice:
    """The default λ0 of function mode, chosen for total error from public inputs only.

    λ0 minimises (σ(λ0))² + (B·λ0/(λ0 + I))² over the penalties of
    :data:`dpcausal.learners.penalty.GRID` whose solve is guaranteed in float64 (the
    second-stage precision check, the random-feature accuracy), by
    :func:`dpcausal.learners.penalty.choose_penalty` — the rule of the nuisance penalties. σ(λ0)
    is the plan's noise sd of each released τ(x) (the Gaussian-process σ, from Δ_ℋ at λ0: exactly
    what the dry run prints); B = a quarter of the outcome range (the nuisances' effect proxy);
    I = ρ̄·E k0 the curvature of the loss term along the kernel's top (near-constant)
    eigenfunction: the squared (or Huber, quadratic near 0) loss weighted by ρ̄ = ¼ for the
    R-learner (E(A − π)² ≤ ¼) or 1 for the DR-learner, times E k0(s, s′) ≤ its top eigenvalue,
    for covariates uniform on their box (:func:`kernel_mean`). So I/(I + λ0) is the share of the
    effect's smooth part the fit keeps (a best case: covariates filling less of their box or a
    propensity far from ½ have less curvature). Everything is relative to the bounds, n, q, h, ε
    and δ: rescaling the outcome rescales σ and B alike and leaves λ0 — and the release's law
    up to the scale — unchanged; as ε → ∞, σ → 0 and λ0 goes to the smallest guaranteed value.
    """
    sec = spec.cate
    rho = 0.25 if sec.learner == "r" else 1.0
    noise: dict[float, float] = {}
    for lam in GRID:
        try:
            cand = at(float(lam))
        except SpecError:
            continue
        mech = GaussianProcessMechanism(spec.privacy.epsilon, spec.privacy.delta,
                                        noise_factor(spec, cand) * cand.rkhs_sensitivity,
                                        cand.bandwidth, sec.calibration)
        noise[float(lam)] = mech.sigma
    if not noise:
        raise SpecError("cate.ridge: no second-stage penalty in 1e-6 … 1 has a float64 solve that "
                        "cannot fail on this many rows; give cate.ridge", field="cate.ridge")
    some = at(next(iter(noise)))
    curvature = rho * kernel_mean(some.q, some.bandwidth)
    return choose_penalty(noise, curvature, OUTCOME_EFFECT * some.delta_y,
                          "argmin over λ0 of (noise sd of τ(x))² + (range/4 × λ0/(λ0 + I))², "
                          "I = ρ̄·E k0 for covariates uniform on their box")


def _check_second_stage_precision(features: str, n: int, rff_dim: int, lam0: float) -> None:
    """Refuse, before any row is read, a λ0 so small that a second-stage Cholesky factorisation
    could fail on the data (an exit that depends on it: issue #13). Exact kernel: W^{1/2}KW^{1/2}
    + nλ0I with weights ≤ 1 and kernel entries in (0, 1], so ‖·‖ ≤ n(1 + λ0); random features:
    Z_SᵀW_SZ_S/n + λ0I with ‖z_i‖ = 1, ‖·‖ ≤ 1 + λ0, kept by up to 100 incremental updates of
    sums over n rows (their rounding is taken off λ0)."""
    if features == "exact":
        ok = cholesky_completes(n, n * (1.0 + lam0), n * lam0)
    else:
        drift = 200.0 * gamma(n + 2)
        ok = cholesky_completes(2 * rff_dim, 1.0 + lam0 + drift, lam0 - drift)
    if not ok:
        raise SpecError(f"cate.ridge: λ0 = {lam0:.3g} is too small for a float64 second-stage "
                        f"solve on {n} rows that cannot fail; raise cate.ridge")


def noise_factor(spec: CateSpec, setup: CateSetup) -> float:
    """Multiplier of the corrected Δ_ℋ: max(1, 4√c_K) (max), 1 (corrected), 4√c_K (paper)."""
    formula = spec.cate.sensitivity_formula
    if formula == "corrected":
        return 1.0
    if formula == "paper":
        return setup.printed_factor
    return max(1.0, setup.printed_factor)


def data_columns(spec: CateSpec) -> list[str]:
    """Covariates, treatment and outcome."""
    cols = spec.data.columns
    return [c for c in [*cols.covariates, cols.treatment, cols.outcome, spec.cate.split.id_column]
            if c is not None]


def rff_features(spec: CateSpec, setup: CateSetup) -> FourierFeatures:
    """The public random Fourier feature map (drawn from ``cate.rff_seed``, no data)."""
    return FourierFeatures.draw(setup.q, spec.cate.rff_dim, setup.bandwidth, spec.cate.rff_seed)
