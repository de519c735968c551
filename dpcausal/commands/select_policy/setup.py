"""select-policy's public setup: the library, the regime, the block sizes and the learners'
certificate, from the spec, the public row count and the public files; the columns it reads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import check_noise_scale
from dpcausal.commands.common import row_split
from dpcausal.commands.common.arms import treated_mask
from dpcausal.commands.select_policy import multi_arm
from dpcausal.commands.select_policy.library import PolicyLibrary, build_library, paper160
from dpcausal.commands.select_policy.multi_library import MultiArmLibrary, build_multi_library
from dpcausal.commands.select_policy.penalty import (
    GRID,
    Nuisances,
    PenaltyChoice,
    PenaltyInputs,
    choose_penalties,
    nuisances,
)
from dpcausal.commands.select_policy.spec import LibraryFile, SelectPolicySection, SelectPolicySpec
from dpcausal.errors import DataError, MissingBoundsError, SpecError
from dpcausal.frames import numeric_column
from dpcausal.learners import SpilloverCertificate, UnitBoxFeatures
from dpcausal.learners.certificate import score_bounds
from dpcausal.method import SideInput

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]
STAGE_CHOICE = "select_policy.choice"
STAGE_VALUE = "select_policy.value"


@dataclass(frozen=True, slots=True)
class ScoreInputs:
    """Regime ``fixed``: each row's scores for the two arms, in two columns clipped to [−B, B]."""

    treated: str
    control: str
    bound: float
    sign: float = 1.0
    """−1 for ``outcome_direction: lower``: the scores are negated (lower is better)."""

    def scores(self, frame: pd.DataFrame, path: Any) -> tuple[FloatArray, FloatArray]:
        """(q0, q1) of ``frame``: each row's scores (times ``sign``) clipped to [−B, B]."""
        return (np.clip(self.sign * numeric_column(frame, self.control, path), -self.bound,
                        self.bound),
                np.clip(self.sign * numeric_column(frame, self.treated, path), -self.bound,
                        self.bound))


@dataclass(frozen=True, slots=True)
class NuisanceInputs:
    """Regimes ``learned`` and ``frozen``: the outcome and treatment columns, the public bounds
    the outcome and the outcome model are clipped to, and the nuisances' public feature map."""

    outcome: str
    treatment: str
    fmap: UnitBoxFeatures
    y_bounds: tuple[float, float]
    mu_bounds: tuple[float, float]
    sign: float = 1.0
    """−1 for ``outcome_direction: lower``: Y is negated and ``y_bounds``/``mu_bounds`` are the
    negated declared bounds (B_ψ, R, β and Δ are unchanged: they depend on the bounds' widths
    and magnitudes only)."""

    def outcome_values(self, frame: pd.DataFrame, path: Any) -> FloatArray:
        """Y of ``frame`` (times ``sign``) clipped to ``y_bounds``."""
        return np.clip(self.sign * numeric_column(frame, self.outcome, path), *self.y_bounds)


@dataclass(frozen=True)
class Setup:
    """Every public constant of one run, from the spec, the public row count and public files."""

    library: PolicyLibrary | MultiArmLibrary
    regime: str
    n_total: int
    m: int
    n: int
    utility_sensitivity: float
    """Δ: how much one policy's utility U(π) moves when one row is replaced (Δ_cert, 2B_ψ or
    2B by regime); the exponential mechanism's sensitivity, not the privacy δ."""
    certificate: SpilloverCertificate | None
    inputs: ScoreInputs | NuisanceInputs
    """What the utilities are computed from, by regime (checked once, here)."""
    learners: dict[str, Any]
    nuisances: Nuisances | None = None
    """Regime ``learned``: the certified learners with their clip ranges."""
    penalty: PenaltyChoice | None = None
    """The total-error rule's choice, when the spec left a penalty to it."""


def _covariates(spec: SelectPolicySpec) -> list[str]:
    cols = spec.data.columns
    if not cols.covariates:
        raise SpecError("data.columns.covariates: select-policy needs at least one covariate "
                        "column")
    return list(cols.covariates)


def feature_map(spec: SelectPolicySpec) -> UnitBoxFeatures:
    """The learners' public feature map; refuses when a covariate bound is missing."""
    names = _covariates(spec)
    missing = [c for c in names if spec.bounds.covariate(c) is None]
    if missing:
        raise MissingBoundsError(
            f"bounds.covariates has no bound for {', '.join(missing)}: the certified learners clip "
            "every covariate to public bounds (R_x = √(d+1) enters Δ); add them per column or "
            "give one [lo, hi] for all"
        )
    b = np.array([spec.bounds.covariate(c) for c in names], dtype=np.float64)
    return UnitBoxFeatures(tuple(names), b[:, 0], b[:, 1])


def load_library(spec: SelectPolicySpec, side: dict[str, Any]
                 ) -> PolicyLibrary | MultiArmLibrary:
    """Materialise and hash the public library (before any data row is read)."""
    lib = spec.select_policy.library
    names = _covariates(spec)
    if spec.select_policy.arms is not None and isinstance(lib, LibraryFile):  # K arms
        return build_multi_library(side["library"], names, spec.select_policy.labels(),
                                   where=str(lib.path), source={"file": str(lib.path)})
    if isinstance(lib, LibraryFile):
        return build_library(side["library"], names, where=str(lib.path),
                             source={"file": str(lib.path)})
    pols = paper160(names, lib.seed, lib.n_random, lib.rare_threshold)
    return build_library({"policies": pols}, names, where="select_policy.library (paper160)",
                         source={"generator": "paper160", "seed": lib.seed,
                                 "n_random": lib.n_random,
                                 "rare_threshold": next(p["threshold"] for p in pols
                                                        if p["type"] == "rare_region")})


def _refuse_tiny_epsilon(spec: SelectPolicySpec, p: PenaltyInputs, *, free: bool) -> None:
    """Name ε (exit 2) when it is why the total-error rule found no candidate: an ε below
    float64's range, or (both penalties free) a noise scale beyond it even at the largest
    penalties, whose Δ is the smallest."""
    sec = spec.select_policy
    delta = 0.0
    if free:
        widest = nuisances(GRID[-1], GRID[-1], p)
        assert isinstance(widest, Nuisances)  # the largest penalties always solve
        delta = widest.certificate.delta_cert
    check_noise_scale(STAGE_CHOICE, spec.privacy.epsilon, 2.0 * delta / spec.privacy.epsilon)
    if sec.value_release is not None:
        eps = sec.value_release.epsilon
        check_noise_scale(STAGE_VALUE, eps, delta / p.n / eps)


def build_setup(spec: SelectPolicySpec, n_rows: int, side: dict[str, Any]) -> Setup:
    """Derive Δ and every public constant; refuse missing bounds (exit 3) and bad sizes (exit 2)."""
    sec = spec.select_policy
    library = load_library(spec, side)
    cols = spec.data.columns
    sign = -1.0 if sec.outcome_direction == "lower" else 1.0
    if sec.regime == "fixed":
        if sec.fixed_scores is None:  # the spec model requires it for this regime
            raise SpecError("select_policy.fixed_scores: regime fixed needs {treated: COLUMN, "
                            "control: COLUMN, bound: B}")
        fs = sec.fixed_scores
        return Setup(library, "fixed", n_rows, 0, n_rows, 2.0 * fs.bound, None,
                     ScoreInputs(fs.treated, fs.control, fs.bound, sign),
                     {"scores": "user-supplied columns, clipped to [-B, B]"})
    if cols.outcome is None or cols.treatment is None:
        raise SpecError("data.columns: select-policy needs both 'outcome' and 'treatment' columns "
                        "(or regime: fixed with select_policy.fixed_scores)")
    if spec.bounds.outcome is None:
        raise MissingBoundsError(
            "bounds.outcome is missing: select-policy clips Y to public bounds [lo, hi] (they "
            "bound every DR score and Δ; never taken from the data); add e.g. "
            "bounds: {outcome: [0, 1]}"
        )
    y_bounds = (float(spec.bounds.outcome[0]), float(spec.bounds.outcome[1]))
    mu_bounds = ((float(sec.mu_bounds[0]), float(sec.mu_bounds[1])) if sec.mu_bounds is not None
                 else y_bounds)
    if sign < 0:  # lower is better: work on −Y ∈ [−hi, −lo]
        y_bounds, mu_bounds = (-y_bounds[1], -y_bounds[0]), (-mu_bounds[1], -mu_bounds[0])
    fmap = feature_map(spec)
    d = fmap.d
    if sec.regime == "frozen":
        inputs = NuisanceInputs(cols.outcome, cols.treatment, fmap, y_bounds, mu_bounds, sign)
        b_mu, r, b_psi = score_bounds(sec.zeta, y_bounds, mu_bounds)
        cert = SpilloverCertificate(d, 0, n_rows, sec.zeta, y_bounds, mu_bounds,
                                    b_mu, r, b_psi, 0.0, 0.0, 0.0, 2 * b_psi, 0.0, 2 * b_psi,
                                    "frozen")
        return Setup(library, "frozen", n_rows, 0, n_rows, cert.delta_cert, cert, inputs,
                     {"nuisance": f"frozen public model file {sec.frozen_model}"})
    m = math.floor(sec.train_fraction * n_rows)
    n = n_rows - m
    if m < 1 or n < 1:
        raise DataError(
            f"{spec.data.path}: {n_rows} row(s) give m = {m} nuisance rows and n = {n} scoring "
            "rows with select_policy.train_fraction; both blocks need at least one row"
        )
    if sec.arms is not None:  # K ≥ 3 arms (experimental, spec §2.9)
        multi_arm.check_supported(spec)
        cert, learners = multi_arm.certificate(sec, d=d, m=m, n=n, y_bounds=y_bounds,
                                               mu_bounds=mu_bounds)
        inputs = NuisanceInputs(cols.outcome, cols.treatment, fmap, y_bounds, mu_bounds, sign)
        return Setup(library, "learned", n_rows, m, n, cert.delta_cert, cert, inputs, learners)
    inputs_p = PenaltyInputs(sec.zeta, y_bounds, mu_bounds, d, m, n, sec.solver_tol,
                             sec.certificate, sec.effective_bounds)
    lam_mu = None if sec.lambda_mu == "total" else float(sec.lambda_mu)
    lam_e = None if sec.lambda_e == "total" else float(sec.lambda_e)
    choice = None
    if lam_mu is None or lam_e is None:
        try:
            choice = choose_penalties(inputs_p, epsilon=spec.privacy.epsilon,
                                      library_size=library.size, alpha=spec.accuracy.alpha,
                                      lambda_mu=lam_mu, lambda_e=lam_e,
                                      value_epsilon=(None if sec.value_release is None
                                                     else sec.value_release.epsilon))
        except ValueError:
            _refuse_tiny_epsilon(spec, inputs_p, free=lam_mu is None and lam_e is None)
            fixed = "lambda_mu" if lam_mu is not None else "lambda_e"
            raise SpecError(f"select_policy.{fixed}: no penalty of the total-error rule can be "
                            "solved with a guarantee beside it; raise it") from None
        lam_mu, lam_e = choice.lambda_mu, choice.lambda_e
    fit = nuisances(lam_mu, lam_e, inputs_p)
    if not isinstance(fit, Nuisances):  # public settings only: refused before any row is read
        raise SpecError(f"select_policy.{fit[0]}: {fit[1]}; raise it")
    ridge, logistic, cert = fit.ridge, fit.logistic, fit.certificate
    inputs = NuisanceInputs(cols.outcome, cols.treatment, fmap, y_bounds, fit.mu_bounds, sign)
    learners = {
        "outcome": {"name": "certified ridge per arm (centred outcome, penalised intercept)",
                    "lambda": lam_mu, **ridge.constants(d), "clip": list(fit.mu_bounds)},
        "propensity": {"name": "certified l2-logistic (penalised intercept), damped Newton",
                       "lambda": lam_e, **logistic.constants(d), "clip_zeta": fit.zeta},
        "solver_tol": sec.solver_tol,
        # public rounding bounds (learners/rounding.py), already inside beta_mu and beta_e
        "ridge_solve_error": ridge.solve_error(d),
        "logistic_stop_tol": logistic.accuracy(m, d).stop_tol,
        "logistic_distance_to_minimiser": logistic.accuracy(m, d).distance,
        "objective": "(1/m) sum loss + (lambda/2) ||theta||^2 over all m nuisance rows",
        "effective_bounds": sec.effective_bounds,
        "penalty_source": "spec" if choice is None else "total-error rule",
    }
    if choice is not None:
        learners["penalty_rule"] = choice.to_dict()
    return Setup(library, "learned", n_rows, m, n, cert.delta_cert, cert, inputs, learners,
                 fit, choice)


def treated_indicator(spec: SelectPolicySpec, inputs: NuisanceInputs, frame: pd.DataFrame
                      ) -> npt.NDArray[np.bool_]:
    """The treatment column as a treated indicator; refuses values that are neither arm."""
    sec: SelectPolicySection = spec.select_policy
    return treated_mask(frame[inputs.treatment], sec, path=spec.data.path,
                        column=inputs.treatment, command="select-policy's certified route")


def split_indices(spec: SelectPolicySpec, n_rows: int, m: int, frame: pd.DataFrame | None = None
                  ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(nuisance rows, scoring rows) by ``select_policy.split``
    (:mod:`dpcausal.commands.common.row_split`): by default a fresh secret permutation, so call it
    once per run. An ``id-hash`` split reads its id column from ``frame``."""
    column = spec.select_policy.split.id_column
    ids = None if column is None or frame is None else frame[column].tolist()
    return row_split.parts(spec.select_policy.split, n_rows, m, ids)


def data_columns(spec: SelectPolicySpec) -> list[str]:
    """Columns read from the sensitive file."""
    cols = spec.data.columns
    out = list(cols.covariates)
    fs = spec.select_policy.fixed_scores
    if spec.select_policy.regime == "fixed" and fs is not None:
        out += [fs.treated, fs.control]
    else:
        out += [c for c in (cols.outcome, cols.treatment) if c is not None]
    if spec.select_policy.regime == "learned" and spec.select_policy.split.id_column is not None:
        out.append(spec.select_policy.split.id_column)
    return list(dict.fromkeys(out))


def side_inputs(spec: SelectPolicySpec) -> dict[str, SideInput]:
    """The public library file and the public frozen nuisance model, as documents."""
    sec = spec.select_policy
    out: dict[str, SideInput] = {}
    if isinstance(sec.library, LibraryFile):
        out["library"] = SideInput(sec.library.path, None, "policy library file", kind="document")
    if sec.frozen_model is not None:
        out["frozen_model"] = SideInput(sec.frozen_model, None, "frozen nuisance model file",
                                        kind="document")
    return out
