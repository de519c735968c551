"""``select-policy`` with K ≥ 3 arms (``select_policy.arms``; experimental, spec select_policy
§2.9): the K-arm certificate, the arms of the rows, the K-arm DR scores and utilities.

Regime ``learned`` only: a certified ridge per arm (:class:`~dpcausal.learners.CertifiedRidge`
with K arms) and the certified multinomial logistic propensity
(:class:`~dpcausal.learners.multinomial.CertifiedMultinomial`, projected into Δ_K^ζ) are fit on
the nuisance block; every scoring row gets the K scores
Γ_a(Z) = μ̂_a(X) + 1{A = a}(Y − μ̂_a(X))/ê_a(X), and U(π) = Σ_i Γ_{π(X_i)}(Z_i). The proof is
docs/proofs/select_policy.md §8.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.commands.common.arms import arm_codes as arm_codes
from dpcausal.commands.select_policy.certify import spillover
from dpcausal.commands.select_policy.multi_library import MultiArmLibrary
from dpcausal.commands.select_policy.spec import SelectPolicySection
from dpcausal.errors import SpecError
from dpcausal.learners import CertifiedRidge, SpilloverCertificate
from dpcausal.learners.features import UnitBoxFeatures
from dpcausal.learners.multinomial import CertifiedMultinomial, MultinomialFit
from dpcausal.learners.ridge import RidgeFit

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
STATUS = ("experimental (spec select_policy §2.9: the K-arm certificate is derived, not yet "
          "independently reviewed)")
"""What the receipt says of a K-arm release."""


def check_supported(spec: Any) -> None:
    """Refuse (before any row is read) what the K-arm route does not run: an engine."""
    if spec.engine is not None:
        raise SpecError("select_policy.arms: K-arm selection runs in memory only for now; remove "
                        "the engine section (and --engine)", field="engine")


PAPER_PENALTY = 50.0
"""λ_μ and λ_e for K arms when the spec leaves them to ``total``: the paper's value."""


def penalties(sec: SelectPolicySection) -> tuple[float, float]:
    """(λ_μ, λ_e) of the K-arm learners: a number as given; ``total`` (the default) is the
    paper's 50 here — the total-error rule of :mod:`~dpcausal.commands.select_policy.penalty`
    covers two arms only."""

    def one(v: float | str) -> float:
        return PAPER_PENALTY if v == "total" else float(v)

    return one(sec.lambda_mu), one(sec.lambda_e)


def certificate(sec: SelectPolicySection, *, d: int, m: int, n: int,
                y_bounds: tuple[float, float], mu_bounds: tuple[float, float]
                ) -> tuple[SpilloverCertificate, dict[str, Any]]:
    """The K-arm certificate Δ_cert = max{2B_ψ, n ρ*} and the learners' public constants.

    Notes
    -----
    As for two arms (:func:`~dpcausal.learners.certify_spillover`), with β_μ of the per-arm
    ridge (the same bound for every arm) and β_e of the multinomial propensity,
    √2(1 − Kζ)R_x²/(mλ_e) plus its solver slack; ``certificate: trivial`` takes
    β_μ = μ̄ − μ̲ and β_e = 1 − Kζ (the largest gap of one coordinate inside Δ_K^ζ), valid for
    any learner whose outputs are projected.
    """
    k = len(sec.labels())
    lam_mu, lam_e = penalties(sec)
    ridge = CertifiedRidge(lam_mu, y_bounds, mu_bounds, sec.solver_tol)
    mult = CertifiedMultinomial(lam_e, sec.zeta, k, sec.solver_tol)
    cert = spillover(sec, ridge, mult, d=d, m=m, n=n, trivial_beta_e=1.0 - k * sec.zeta)
    acc = mult.accuracy(m, d)
    learners = {
        "outcome": {"name": f"certified ridge per arm, {k} arms (centred outcome, penalised "
                            "intercept)", "lambda": lam_mu, **ridge.constants(d)},
        "propensity": {"name": f"certified multinomial l2-logistic, {k} arms (every entry "
                               "penalised), damped Newton, projected into the simplex with "
                               "floor zeta", "lambda": lam_e, **mult.constants(d)},
        "solver_tol": sec.solver_tol,
        "ridge_solve_error": ridge.solve_error(d),
        "multinomial_stop_tol": acc.stop_tol,
        "multinomial_distance_to_minimiser": acc.distance,
        "objective": "(1/m) sum loss + (lambda/2) ||theta||^2 over all m nuisance rows",
        "arms": list(sec.labels()), "K": k, "status": STATUS,
    }
    return cert, learners


def dr_gammas(mu: FloatArray, e: FloatArray, codes: IntArray, y: FloatArray) -> FloatArray:
    """Γ (n × K): Γ_a = μ_a + 1{A = a}(Y − μ_a)/e_a, the DR score of recommending arm a."""
    out = mu.copy()
    rows = np.arange(len(codes))
    out[rows, codes] += (y - mu[rows, codes]) / e[rows, codes]
    return out


def utilities(library: MultiArmLibrary, gam: FloatArray, x: FloatArray) -> FloatArray:
    """U_k = Σ_i Γ_{i, π_k(x_i)} for one chunk of rows."""
    dec = library.decisions(x, library.compile())
    u = np.zeros(library.size)
    for a in range(gam.shape[1]):
        u += np.einsum("i,ik->k", gam[:, a], dec == a)
    return u


def learned_utilities(library: MultiArmLibrary, fmap: UnitBoxFeatures, outcome: RidgeFit,
                      propensity: MultinomialFit, x: FloatArray, codes: IntArray, y: FloatArray,
                      *, chunk_rows: int) -> FloatArray:
    """U(π) over the scoring rows, nuisance predictions computed chunk by chunk."""
    u = np.zeros(library.size)
    k = len(library.arms)
    for start in range(0, x.shape[0], chunk_rows):
        sl = slice(start, min(x.shape[0], start + chunk_rows))
        xt = fmap.transform(x[sl])
        mu = np.column_stack([outcome.predict(xt, a) for a in range(k)])
        u += utilities(library, dr_gammas(mu, propensity.predict(xt), codes[sl], y[sl]), x[sl])
    return u


def compute_utilities(sec: SelectPolicySection, library: MultiArmLibrary, fmap: UnitBoxFeatures,
                      y_bounds: tuple[float, float], mu_bounds: tuple[float, float],
                      x: FloatArray, codes: IntArray, y: FloatArray, tr: IntArray, sc: IntArray
                      ) -> FloatArray:
    """Fit the certified K-arm learners on the nuisance rows ``tr`` and score the rows ``sc``
    (private: only fed to the mechanism)."""
    k = len(library.arms)
    lam_mu, lam_e = penalties(sec)
    ridge = CertifiedRidge(lam_mu, y_bounds, mu_bounds, sec.solver_tol)
    mult = CertifiedMultinomial(lam_e, sec.zeta, k, sec.solver_tol)
    xt = fmap.transform(x[tr])
    outcome = ridge.fit(xt, codes[tr].astype(np.int8), y[tr], arms=k)
    propensity = mult.fit(xt, codes[tr])
    del xt
    return learned_utilities(library, fmap, outcome, propensity, x[sc], codes[sc], y[sc],
                             chunk_rows=sec.chunk_rows)
