"""DR (AIPW) scores and chunked policy utilities of ``select-policy``; nuisance models.

U(π) = Σ_{i ∈ scoring block} ψ_π(Z_i; η) with
ψ_π(Z; η) = μ_{π(X)}(X) + 1{A = π(X)}/e_{π(X)}(X) · (Y − μ_{π(X)}(X))   (paper eq. (1)).
For binary actions write Γ_a(Z) = μ_a + 1{A = a}(Y − μ_a)/e_a; then ψ_π = Γ₀ + π(X)(Γ₁ − Γ₀) and
U = ΣΓ₀ + (Γ₁ − Γ₀)ᵀ[π_k(X_i)]: one matrix product per chunk of rows, never an n × M matrix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.commands.select_policy.library import PolicyLibrary
from dpcausal.errors import SpecError
from dpcausal.learners import CertifiedLogistic, CertifiedRidge, UnitBoxFeatures
from dpcausal.learners.logistic import LogisticFit
from dpcausal.learners.ridge import RidgeFit

FloatArray = npt.NDArray[np.float64]
MODEL_FORMAT = "dpcausal.nuisance/v1"


def dr_gammas(mu0: FloatArray, mu1: FloatArray, e1: FloatArray, treated: npt.NDArray[np.bool_],
              y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(Γ₀, Γ₁): the DR score of recommending control / treated, per row (e₀ = 1 − e₁)."""
    g1 = mu1 + np.where(treated, (y - mu1) / e1, 0.0)
    g0 = mu0 + np.where(treated, 0.0, (y - mu0) / (1.0 - e1))
    return g0, g1


def dr_score(pi: npt.NDArray[np.bool_], mu0: FloatArray, mu1: FloatArray, e1: FloatArray,
             treated: npt.NDArray[np.bool_], y: FloatArray) -> FloatArray:
    """ψ_π(Z_i; η) per row, directly from eq. (1) (reference implementation for tests)."""
    mu = np.where(pi, mu1, mu0)
    e = np.where(pi, e1, 1.0 - e1)
    return mu + (pi == treated) / e * (y - mu)


@dataclass(frozen=True)
class Nuisance:
    """A fitted (or frozen) nuisance pair on the public feature map."""

    fmap: UnitBoxFeatures
    outcome: RidgeFit
    propensity: LogisticFit

    def predict(self, x: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(μ̂₀, μ̂₁, ê₁) for raw rows, projected to the public ranges."""
        xt = self.fmap.transform(x)
        return self.outcome.predict(xt, 0), self.outcome.predict(xt, 1), self.propensity.predict(xt)

    def to_document(self) -> dict[str, Any]:
        """A public nuisance model file (only for models fit on public data)."""
        return {"format": MODEL_FORMAT, "covariates": list(self.fmap.names),
                "bounds": self.fmap.to_dict()["bounds"],
                "outcome": {"center": self.outcome.center,
                            "theta": {"control": self.outcome.to_dict()["theta"][0],
                                      "treated": self.outcome.to_dict()["theta"][1]}},
                "propensity": {"theta": self.propensity.to_dict()["theta"]}}


def fit_nuisance(fmap: UnitBoxFeatures, ridge: CertifiedRidge, logistic: CertifiedLogistic,
                 x: FloatArray, treated: npt.NDArray[np.bool_], y: FloatArray) -> Nuisance:
    """Fit the certified learners on the nuisance block (raw rows, arms, outcomes)."""
    xt = fmap.transform(x)
    return Nuisance(fmap, ridge.fit(xt, treated.astype(np.int8), y), logistic.fit(xt, treated))


def frozen_nuisance(doc: Any, fmap: UnitBoxFeatures, *, mu_bounds: tuple[float, float],
                    zeta: float, path: Path | None, sign: float = 1.0) -> Nuisance:
    """Validate a public nuisance model document against the spec's feature map. ``sign`` −1
    negates its outcome model (``outcome_direction: lower``; ``mu_bounds`` already negated)."""
    p = fmap.dim
    try:
        if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT:
            raise ValueError(f"format must be {MODEL_FORMAT!r}")
        if list(doc["covariates"]) != list(fmap.names):
            raise ValueError("its covariates must equal data.columns.covariates, in order")
        bounds = doc.get("bounds")
        if bounds is not None and bounds != fmap.to_dict()["bounds"]:
            raise ValueError("its covariate bounds differ from bounds.covariates of the spec")
        center = float(doc["outcome"]["center"])
        th0 = np.asarray(doc["outcome"]["theta"]["control"], dtype=np.float64)
        th1 = np.asarray(doc["outcome"]["theta"]["treated"], dtype=np.float64)
        the = np.asarray(doc["propensity"]["theta"], dtype=np.float64)
        for name, arr in (("outcome.theta.control", th0), ("outcome.theta.treated", th1),
                          ("propensity.theta", the)):
            if arr.shape != (p,) or not np.all(np.isfinite(arr)):
                raise ValueError(f"{name} must hold {p} finite numbers (intercept first)")
        if not np.isfinite(center):
            raise ValueError("outcome.center must be finite")
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"{path}: not a valid nuisance model file ({exc})") from exc
    outcome = RidgeFit(sign * np.vstack([th0, th1]), sign * center, mu_bounds)
    return Nuisance(fmap, outcome, LogisticFit(the, zeta))


def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def _weighted_column_sums(weights: FloatArray, dec: npt.NDArray[np.bool_]) -> FloatArray:
    """Σ_i w_i·dec_ik for every k, without converting the boolean chunk to a float matrix."""
    return np.asarray(np.einsum("i,ik->k", weights, dec), dtype=np.float64)


def utilities_from_gammas(library: PolicyLibrary, x: FloatArray, g0: FloatArray, g1: FloatArray,
                          *, chunk_rows: int = 32_768) -> FloatArray:
    """U_k = Σ_i [Γ₀ᵢ + π_k(x_i)(Γ₁ᵢ − Γ₀ᵢ)], accumulated over row chunks (float64, fsum-free)."""
    compiled = library.compile()
    u = np.zeros(library.size)
    base = 0.0
    for sl in _chunks(x.shape[0], chunk_rows):
        u += _weighted_column_sums(g1[sl] - g0[sl], library.decisions(x[sl], compiled))
        base += float(g0[sl].sum())
    return u + base


def learned_utilities(library: PolicyLibrary, nuis: Nuisance, x: FloatArray,
                      treated: npt.NDArray[np.bool_], y: FloatArray, *,
                      chunk_rows: int = 32_768) -> FloatArray:
    """U(π) over scoring rows with nuisance predictions computed chunk by chunk."""
    compiled = library.compile()
    u = np.zeros(library.size)
    base = 0.0
    for sl in _chunks(x.shape[0], chunk_rows):
        mu0, mu1, e1 = nuis.predict(x[sl])
        g0, g1 = dr_gammas(mu0, mu1, e1, treated[sl], y[sl])
        u += _weighted_column_sums(g1 - g0, library.decisions(x[sl], compiled))
        base += float(g0.sum())
    return u + base
