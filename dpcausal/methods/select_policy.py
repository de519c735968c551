"""``select-policy``: release one policy from a public library by the exponential mechanism over
doubly robust (AIPW) utilities, with the nuisance learners' spillover certified.

"Double Robustness Is Not a Privacy Certificate: Sensitivity Spillover in Private Policy Selection"
(spec ``select_policy.md``): utility U(π) = Σ_{scoring block} ψ_π(Z; η̂(D_tr)); the naive Δ = 2B_ψ
is not private when η̂ is learned on the same data. Δ_cert = max{2B_ψ, n ρ*} with
ρ* = (1 + 1/ζ)β_μ + ζ⁻² R_{Y,μ} β_e from the learners' public replace-one stability bounds.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.errors import DataError, MissingBoundsError, SpecError
from dpcausal.io.tables import numeric_column
from dpcausal.learners import (
    CertifiedLogistic,
    CertifiedRidge,
    SpilloverCertificate,
    UnitBoxFeatures,
    certify_spillover,
)
from dpcausal.learners.certificate import score_bounds
from dpcausal.mechanisms import ExponentialMechanism, LaplaceMechanism, NoiseGuard
from dpcausal.methods import _split
from dpcausal.methods._arms import treated_mask
from dpcausal.methods.base import MethodDef, Release, SideInput
from dpcausal.methods.select_policy_library import PolicyLibrary, build_library, paper160
from dpcausal.methods.select_policy_scores import (
    fit_nuisance,
    frozen_nuisance,
    learned_utilities,
    utilities_from_gammas,
)
from dpcausal.spec.select_policy import LibraryFile, SelectPolicySection, SelectPolicySpec
from dpcausal.spec.split import RowSplit

FloatArray = npt.NDArray[np.float64]
SELECTION_FORMAT_VERSION = 1
STAGE_CHOICE = "select_policy.choice"
STAGE_VALUE = "select_policy.value"


@dataclass(frozen=True)
class Setup:
    """Every public constant of one run, from the spec, the public row count and public files."""

    library: PolicyLibrary
    regime: str
    n_total: int
    m: int
    n: int
    delta: float
    certificate: SpilloverCertificate | None
    fmap: UnitBoxFeatures | None
    y_bounds: tuple[float, float] | None
    mu_bounds: tuple[float, float] | None
    learners: dict[str, Any]


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


def load_library(spec: SelectPolicySpec, side: dict[str, Any]) -> PolicyLibrary:
    """Materialise and hash the public library (before any data row is read)."""
    lib = spec.select_policy.library
    names = _covariates(spec)
    if isinstance(lib, LibraryFile):
        return build_library(side["library"], names, where=str(lib.path),
                             source={"file": str(lib.path)})
    pols = paper160(names, lib.seed, lib.n_random, lib.rare_threshold)
    return build_library({"policies": pols}, names, where="select_policy.library (paper160)",
                         source={"generator": "paper160", "seed": lib.seed,
                                 "n_random": lib.n_random,
                                 "rare_threshold": next(p["threshold"] for p in pols
                                                        if p["type"] == "rare_region")})


def build_setup(spec: SelectPolicySpec, n_rows: int, side: dict[str, Any]) -> Setup:
    """Derive Δ and every public constant; refuse missing bounds (exit 3) and bad sizes (exit 2)."""
    sec = spec.select_policy
    library = load_library(spec, side)
    cols = spec.data.columns
    if sec.regime == "fixed":
        assert sec.fixed_scores is not None
        delta = 2.0 * sec.fixed_scores.bound
        return Setup(library, "fixed", n_rows, 0, n_rows, delta, None, None, None, None,
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
    mu_bounds = tuple(sec.mu_bounds) if sec.mu_bounds is not None else y_bounds
    fmap = feature_map(spec)
    d = fmap.d
    if sec.regime == "frozen":
        b_mu, r, b_psi = score_bounds(sec.zeta, y_bounds, mu_bounds)  # type: ignore[arg-type]
        cert = SpilloverCertificate(d, 0, n_rows, sec.zeta, y_bounds, mu_bounds,  # type: ignore[arg-type]
                                    b_mu, r, b_psi, 0.0, 0.0, 0.0, 2 * b_psi, 0.0, 2 * b_psi,
                                    "frozen")
        return Setup(library, "frozen", n_rows, 0, n_rows, cert.delta_cert, cert, fmap, y_bounds,
                     mu_bounds, {"nuisance": f"frozen public model file {sec.frozen_model}"})  # type: ignore[arg-type]
    m = math.floor(sec.train_fraction * n_rows)
    n = n_rows - m
    if m < 1 or n < 1:
        raise DataError(
            f"{spec.data.path}: {n_rows} row(s) give m = {m} nuisance rows and n = {n} scoring "
            "rows with select_policy.train_fraction; both blocks need at least one row"
        )
    ridge = CertifiedRidge(sec.lambda_mu, y_bounds, mu_bounds, sec.solver_tol)  # type: ignore[arg-type]
    logistic = CertifiedLogistic(sec.lambda_e, sec.zeta, sec.solver_tol)
    for field, problem in (("lambda_mu", ridge.problem(d)), ("lambda_e", logistic.problem(m, d))):
        if problem is not None:  # public settings only: refused before any row is read
            raise SpecError(f"select_policy.{field}: {problem}; raise it")
    if sec.certificate == "erm":
        beta_mu, beta_e = ridge.beta(m, d), logistic.beta(m, d)
    else:
        beta_mu, beta_e = mu_bounds[1] - mu_bounds[0], 1.0 - 2.0 * sec.zeta
    cert = certify_spillover(d=d, m=m, n=n, zeta=sec.zeta, y_bounds=y_bounds,
                             mu_bounds=mu_bounds, beta_mu=beta_mu, beta_e=beta_e,  # type: ignore[arg-type]
                             certificate_type=sec.certificate)
    learners = {
        "outcome": {"name": "certified ridge per arm (centred outcome, penalised intercept)",
                    "lambda": sec.lambda_mu, **ridge.constants(d)},
        "propensity": {"name": "certified l2-logistic (penalised intercept), damped Newton",
                       "lambda": sec.lambda_e, **logistic.constants(d)},
        "solver_tol": sec.solver_tol,
        # public rounding bounds (learners/rounding.py), already inside beta_mu and beta_e
        "ridge_solve_error": ridge.solve_error(d),
        "logistic_stop_tol": logistic.accuracy(m, d).stop_tol,
        "logistic_distance_to_minimiser": logistic.accuracy(m, d).distance,
        "objective": "(1/m) sum loss + (lambda/2) ||theta||^2 over all m nuisance rows",
    }
    return Setup(library, "learned", n_rows, m, n, cert.delta_cert, cert, fmap, y_bounds,
                 mu_bounds, learners)  # type: ignore[arg-type]


def choice_mechanism(setup: Setup, epsilon: float) -> ExponentialMechanism:
    """The exponential mechanism over the library, P(π) ∝ exp(ε U(π) / (2Δ)).

    Notes
    -----
    Neighbouring relation: replace one record of the data file; N, m, n are public. The default
    split is a secret random permutation, so the guarantee holds for multisets (the coupling of
    :mod:`dpcausal.methods._split` keeps the replaced record in its block); a ``seeded`` or
    ``index`` split is a function of the row position and assumes the row order is independent
    of the data. Regime ``frozen``: the nuisance model is a fixed public input — only the rows of
    the data file (the scoring block) are protected, not the records it was fit on.
    Sensitivity: ``learned``: Δ_cert = max{2B_ψ, n ρ*} (paper Lemma 1 + Lemma 2 + Prop. 2; see
    :class:`dpcausal.learners.SpilloverCertificate`); ``frozen``: 2B_ψ (one summand moves, Prop. 1);
    ``fixed``: 2B for scores clipped to [−B, B].
    Guarantee: pure ε-DP (McSherry & Talwar 2007; paper Thm 2) for the released policy identity.
    """
    return ExponentialMechanism(epsilon, setup.delta, stage=STAGE_CHOICE)


def value_mechanism(setup: Setup, epsilon: float) -> LaplaceMechanism:
    """Laplace noise on V̂(π̂) = U(π̂)/n, a separate step with its own ε.

    Notes
    -----
    Neighbouring relation: as for :func:`choice_mechanism`.
    Sensitivity: for every fixed π, |U_D(π) − U_D′(π)| ≤ Δ, so V̂ = U/n moves by ≤ Δ/n; the chosen
    π̂ is a released (ε-DP) output, so the value step composes sequentially with the choice.
    Guarantee: pure ε₂-DP; total ε + ε₂ by basic composition.
    """
    return LaplaceMechanism(epsilon, setup.delta / setup.n, stage=STAGE_VALUE)


def _with_params(event: PrivacyEvent, extra: dict[str, Any]) -> PrivacyEvent:
    return PrivacyEvent(**{**event.to_dict(), "params": {**event.params, **extra}})


def neighbouring(setup: Setup, split: RowSplit) -> dict[str, Any]:
    """The receipt's neighbouring relation and protected set."""
    protected = {
        "learned": "every row: the nuisance block D_tr and the scoring block D_sc",
        "frozen": ("the rows of the data file (the scoring block) only; records used to fit the "
                   "frozen nuisance model are NOT protected"),
        "fixed": ("every row, given that each row's score columns are a function of that row "
                  "alone, fixed before the data was seen (user-asserted)"),
    }[setup.regime]
    out = {"relation": "replace-one", "unit": "row (one individual)", "n_public": True,
           "detail": ("bounded/substitution: replace one record; N, m, n are public; the replaced "
                      "record stays in its block; not add/remove"),
           "protected": protected}
    if setup.regime == "learned":
        out["row_order"] = _split.row_order(split)
    return out


def plan(spec: SelectPolicySpec, n_rows: int, side: dict[str, Any], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """Build the plan from the spec, the public row count and the public library/model files."""
    if spec.privacy.delta != 0.0:
        raise SpecError("privacy.delta: select-policy is pure ε-DP (δ = 0); set privacy.delta to 0")
    sec = spec.select_policy
    setup = build_setup(spec, n_rows, side)
    if setup.regime == "frozen":
        assert setup.fmap is not None
        assert setup.mu_bounds is not None
        frozen_nuisance(side["frozen_model"], setup.fmap, mu_bounds=setup.mu_bounds,
                        zeta=sec.zeta, path=sec.frozen_model)
    eps = spec.privacy.epsilon
    cert = setup.certificate.to_dict() if setup.certificate else None
    common = {"regime": setup.regime, "utility": "sum_DR_AIPW_over_scoring_block"
              if setup.regime != "fixed" else "sum_fixed_scores", "N": n_rows, "m": setup.m,
              "n": setup.n, "M": setup.library.size, "K": 2}
    events = [_with_params(choice_mechanism(setup, eps).event(),
                           {**common, "certificate": cert,
                            "library_sha256": setup.library.sha256})]
    if sec.value_release is not None:
        events.append(_with_params(value_mechanism(setup, sec.value_release.epsilon).event(),
                                   {"released": "DR value estimate of the chosen policy, U/n",
                                    "n": setup.n}))
    beta = sec.regret_beta
    regret_term = 2.0 * setup.delta * (math.log(setup.library.size) + math.log(1.0 / beta)) / (
        setup.n * eps)
    details: dict[str, Any] = {
        "regime": setup.regime, "delta_cert": setup.delta, "N": n_rows, "m": setup.m,
        "n": setup.n, "M": setup.library.size, "library_sha256": setup.library.sha256,
        "regret_privacy_term": regret_term, "regret_beta": beta,
        "split": sec.split.kind if setup.regime == "learned" else "none (all rows score)",
    }
    if setup.certificate is not None:
        c = setup.certificate
        details.update({"B_psi": c.B_psi, "floor_2Bpsi": c.floor_2Bpsi, "beta_mu": c.beta_mu,
                        "beta_e": c.beta_e, "rho_star": c.rho_star, "n_rho_star": c.n_rho_star,
                        "certificate_type": c.certificate_type})
    details["library_source"] = setup.library.source
    assumptions: dict[str, Any] = {"library": {"sha256": setup.library.sha256,
                                               "size": setup.library.size,
                                               **setup.library.source},
                                   "actions": {"treated": sec.treated,
                                               "control": sec.control_label()}}
    if setup.regime == "fixed":
        assert sec.fixed_scores is not None
        assumptions["fixed_scores"] = sec.fixed_scores.model_dump()
    else:
        assert setup.fmap is not None
        assumptions.update({
            "outcome_bounds": list(setup.y_bounds or ()), "mu_bounds": list(setup.mu_bounds or ()),
            "zeta": sec.zeta, "covariates": setup.fmap.to_dict(),
            "feature_schema_sha256": hashlib.sha256(json.dumps(
                setup.fmap.to_dict(), sort_keys=True).encode()).hexdigest(),
            "learners": setup.learners,
            "split": ({**sec.split.receipt(), "train_fraction": sec.train_fraction,
                       "m": setup.m, "n": setup.n} if setup.regime == "learned" else None),
        })
        if setup.regime == "frozen":
            assumptions["frozen_model"] = str(sec.frozen_model)
    return PrivacyPlan(command="select-policy", events=tuple(events),
                       neighbouring=neighbouring(setup, sec.split), guarantee="pure", dp_guarantee=True,
                       assumptions=assumptions, details=details)


def treated_indicator(spec: SelectPolicySpec, frame: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """The treatment column as a treated indicator; refuses values that are neither arm."""
    sec: SelectPolicySection = spec.select_policy
    col = spec.data.columns.treatment
    assert col is not None
    return treated_mask(frame[col], sec, path=spec.data.path, column=col,
                        command="select-policy's certified route")


def split_indices(spec: SelectPolicySpec, n_rows: int, m: int) -> tuple[npt.NDArray[np.intp],
                                                                         npt.NDArray[np.intp]]:
    """(nuisance rows, scoring rows) by ``select_policy.split`` (:mod:`dpcausal.methods._split`):
    by default a fresh secret permutation, so call it once per run."""
    return _split.parts(spec.select_policy.split, n_rows, m)


def compute_utilities(spec: SelectPolicySpec, setup: Setup, frame: pd.DataFrame,
                      side: dict[str, Any]) -> FloatArray:
    """U(π) for every policy (private: never released; only fed to the mechanism)."""
    sec = spec.select_policy
    path = spec.data.path
    names = _covariates(spec)
    x = np.empty((len(frame), len(names)), order="F")  # column-major: each column is contiguous
    for j, c in enumerate(names):
        x[:, j] = numeric_column(frame, c, path)
    if setup.regime == "fixed":
        fs = sec.fixed_scores
        assert fs is not None
        q1 = np.clip(numeric_column(frame, fs.treated, path), -fs.bound, fs.bound)
        q0 = np.clip(numeric_column(frame, fs.control, path), -fs.bound, fs.bound)
        return utilities_from_gammas(setup.library, x, q0, q1, chunk_rows=sec.chunk_rows)
    assert spec.data.columns.outcome is not None
    assert setup.y_bounds is not None
    assert setup.fmap is not None
    assert setup.mu_bounds is not None
    y = np.clip(numeric_column(frame, spec.data.columns.outcome, path), *setup.y_bounds)
    treated = treated_indicator(spec, frame)
    if setup.regime == "frozen":
        nuis = frozen_nuisance(side["frozen_model"], setup.fmap, mu_bounds=setup.mu_bounds,
                               zeta=sec.zeta, path=sec.frozen_model)
        return learned_utilities(setup.library, nuis, x, treated, y, chunk_rows=sec.chunk_rows)
    tr, sc = split_indices(spec, setup.n_total, setup.m)
    ridge = CertifiedRidge(sec.lambda_mu, setup.y_bounds, setup.mu_bounds, sec.solver_tol)
    logistic = CertifiedLogistic(sec.lambda_e, sec.zeta, sec.solver_tol)
    if sec.split.kind == "index":  # contiguous blocks: views, no copies
        nuis = fit_nuisance(setup.fmap, ridge, logistic, x[: setup.m], treated[: setup.m],
                            y[: setup.m])
        return learned_utilities(setup.library, nuis, x[setup.m:], treated[setup.m:],
                                 y[setup.m:], chunk_rows=sec.chunk_rows)
    nuis = fit_nuisance(setup.fmap, ridge, logistic, x[tr], treated[tr], y[tr])
    return learned_utilities(setup.library, nuis, x[sc], treated[sc], y[sc],
                             chunk_rows=sec.chunk_rows)


def release_selection(spec: SelectPolicySpec, setup: Setup, utilities: npt.NDArray[np.float64],
                      plan: PrivacyPlan, *, noise: NoiseGuard
                      ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The private steps, shared by every engine: pick a policy by the exponential mechanism over
    ``utilities`` and, if asked, release its value by the Laplace mechanism.

    Returns the selection document and the value document (or None).
    """
    sec = spec.select_policy
    k = int(noise.release(choice_mechanism(setup, spec.privacy.epsilon), utilities))
    value_doc = None
    if sec.value_release is not None:
        mech = value_mechanism(setup, sec.value_release.epsilon)
        noisy = float(noise.release(mech, np.array([utilities[k] / setup.n]))[0])
        value_doc = {"value": noisy, "epsilon": mech.epsilon, "sensitivity": mech.l1_sensitivity,
                     "laplace_scale": mech.scale,
                     "estimand": "DR (AIPW) mean over the scoring block, V = U/n"}
    return selection_document(spec, setup, k, plan, value_doc), value_doc


def run(spec: SelectPolicySpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, Any], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Score every policy, release one by the exponential mechanism (and optionally its value)."""
    setup = build_setup(spec, len(frame), side)
    if setup.library.sha256 != plan.details["library_sha256"]:
        raise SpecError("the policy library changed between the plan and the run; rerun")
    utilities = compute_utilities(spec, setup, frame, side)
    doc, value_doc = release_selection(spec, setup, utilities, plan, noise=noise)
    del utilities
    summary: dict[str, Any] = {"selected_policy": doc["selected"]["name"],
                               "library_size": setup.library.size,
                               "utility_sensitivity": setup.delta}
    if value_doc is not None:
        summary["released_value"] = value_doc["value"]
    return Release(documents={"selection.json": doc}, summary=summary)


def selection_document(spec: SelectPolicySpec, setup: Setup, k: int, plan: PrivacyPlan,
                       value_doc: dict[str, Any] | None) -> dict[str, Any]:
    """The chosen policy and the public calibration; never utilities, probabilities or fits."""
    sec = spec.select_policy
    ev = plan.event(STAGE_CHOICE)
    doc: dict[str, Any] = {
        "format_version": SELECTION_FORMAT_VERSION,
        "command": "select-policy",
        "selected": {"index": k, **setup.library.policies[k]},
        "actions": {"treated": sec.treated, "control": sec.control_label(),
                    "policy_output": "true/1 = treated, false/0 = control"},
        "library": {"sha256": setup.library.sha256, "size": setup.library.size,
                    **setup.library.source},
        "regime": setup.regime,
        "privacy": {
            "epsilon": ev.epsilon, "delta": 0.0, "guarantee": "pure",
            "mechanism": "exponential, P(pi) ∝ exp(eps U(pi) / (2 Delta))",
            "sensitivity": setup.delta, "gumbel_scale": ev.noise_scale,
            "certificate": setup.certificate.to_dict() if setup.certificate else None,
            "learners": setup.learners, "neighbouring": plan.neighbouring,
            "N": setup.n_total, "m": setup.m, "n": setup.n,
        },
    }
    if value_doc is not None:
        doc["value_release"] = value_doc
    return doc


def data_columns(spec: SelectPolicySpec) -> list[str]:
    """Columns read from the sensitive file."""
    cols = spec.data.columns
    out = list(cols.covariates)
    fs = spec.select_policy.fixed_scores
    if spec.select_policy.regime == "fixed" and fs is not None:
        out += [fs.treated, fs.control]
    else:
        out += [c for c in (cols.outcome, cols.treatment) if c is not None]
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


METHOD = MethodDef(command="select-policy", spec_model=SelectPolicySpec, data_columns=data_columns,
                   side_inputs=side_inputs, plan=plan, run=run)

__all__ = ["METHOD", "build_setup", "compute_utilities", "plan", "run"]
