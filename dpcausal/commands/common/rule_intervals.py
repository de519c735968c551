"""Noise intervals of a released linear rule (``owl``, ``two-stage``): θ, the coefficients in original
units and each recommendation's margin v(x)·θ (issue 16, DESIGN principle 9).

Every one of them is a linear functional aᵀθ of the released θ, and both commands bound the noise
on aᵀθ through two norms of a: with probability 1 − α (at least 1 − α for a bound),

    |aᵀ(θ − θ₀)| ≤ h(a) = min(per_l2·‖a‖₂, per_linf·‖a‖_∞),

θ₀ the value without noise. owl (ℓ2-Laplace output perturbation) has per_l2 = the exact projected
quantile and no ℓ∞ term; two-stage (objective perturbation) has the strong-convexity bound
q(‖b‖)/(nγ) and per_linf = 2λ₁ (both solutions lie in the ℓ1 ball). All of it is post-processing
of the released θ, public rows and public parameters: it costs no ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.plan import IntervalKind, PredictedAccuracy
from dpcausal.intervals import interval_bounds, interval_record

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]


class FeatureMap(Protocol):
    """What the intervals need of a rule's public feature map
    (:class:`dpcausal.commands.common.linear_rule.FeatureMap`)."""

    @property
    def names(self) -> tuple[str, ...]:
        """The covariates, in order."""

    @property
    def dim(self) -> int:
        """d = dim θ."""

    def original_units_matrix(self) -> FloatArray | None:
        """A with coefficients in original units = A θ (None: none)."""
SCORE_UNITS = "score v(x)·θ (the rule treats when > 0)"


@dataclass(frozen=True)
class RuleNoise:
    """The (1 − α) noise half-width of aᵀθ: min(per_l2·‖a‖₂, per_linf·‖a‖_∞) (module docstring)."""

    alpha: float
    law: str
    per_l2: float
    per_linf: float | None = None
    bound: bool = False
    note: str = ""

    def halfwidths(self, rows: npt.ArrayLike) -> FloatArray:
        """h(a) for each row a of ``rows`` (2-d)."""
        a = np.atleast_2d(np.asarray(rows, dtype=np.float64))
        h = self.per_l2 * np.linalg.norm(a, axis=1)
        if self.per_linf is not None:
            h = np.minimum(h, self.per_linf * np.abs(a).max(axis=1, initial=0.0))
        return np.asarray(h, dtype=np.float64)

    def margin_halfwidth_max(self, dim: int) -> float:
        """The largest margin half-width of any row: mapped rows have ‖v‖₂ ≤ 1, ‖v‖_∞ ≤ 1/√d."""
        h = self.per_l2
        if self.per_linf is not None:
            h = min(h, self.per_linf / math.sqrt(dim))
        return float(h)

    def accuracy(self, fmap: FeatureMap, *, n_search: bool) -> tuple[PredictedAccuracy, ...]:
        """The plan's predicted accuracies: the margin (headline), θ, the original-unit
        coefficients (linear rules)."""
        kind: IntervalKind = "noise"

        def acc(name: str, units: str, h: float, headline: bool = False) -> PredictedAccuracy:
            return PredictedAccuracy(name, units, float(h), self.alpha, kind, self.law, self.bound,
                                     headline, n_search, self.note)

        out = [acc("margin", SCORE_UNITS + ", any row", self.margin_halfwidth_max(fmap.dim),
                   headline=True),
               acc("theta[*]", "score per unit of v(x) (each coordinate)",
                   float(self.halfwidths(np.eye(1, fmap.dim))[0]))]
        a = fmap.original_units_matrix()
        if a is not None:
            for name, h in zip(coefficient_names(fmap), self.halfwidths(a), strict=True):
                units = "score" if name == "(intercept)" else f"score per unit of {name}"
                out.append(acc(f"coef[{name}]", units, h))
        return tuple(out)

    def document(self, fmap: FeatureMap, theta: FloatArray) -> dict[str, Any]:
        """The rule file's ``intervals``: every released number as {estimate, interval}."""
        theta = np.asarray(theta, dtype=np.float64)
        h_theta = self.halfwidths(np.eye(fmap.dim))

        def rec(v: float, h: float) -> dict[str, Any]:
            return interval_record(float(v), float(h), alpha=self.alpha, law=self.law,
                                   bound=self.bound)

        doc: dict[str, Any] = {
            "level": 1.0 - self.alpha, "kind": "noise", "law": self.law, "bound": self.bound,
            "theta": [rec(v, h) for v, h in zip(theta, h_theta, strict=True)],
            "coefficients_original_units": None,
            "margin": {"per_l2_norm": self.per_l2, "per_linf_norm": self.per_linf,
                       "halfwidth_max": self.margin_halfwidth_max(fmap.dim),
                       "rule": "a row's margin v(x)·θ has noise half-width min(per_l2_norm·‖v(x)‖₂, "
                               "per_linf_norm·‖v(x)‖_∞) (per_linf_norm null: the first term)"},
        }
        a = fmap.original_units_matrix()
        if a is not None:
            doc["coefficients_original_units"] = {
                name: rec(v, h) for name, v, h in
                zip(coefficient_names(fmap), a @ theta, self.halfwidths(a), strict=True)}
        return doc

    @classmethod
    def from_document(cls, rule: dict[str, Any]) -> RuleNoise | None:
        """Read a rule file's ``intervals`` (None for a rule written before them)."""
        iv = rule.get("intervals")
        if not isinstance(iv, dict):
            return None
        try:
            m = iv["margin"]
            return cls(1.0 - float(iv["level"]), str(iv["law"]), float(m["per_l2_norm"]),
                       None if m["per_linf_norm"] is None else float(m["per_linf_norm"]),
                       bool(iv["bound"]))
        except (KeyError, TypeError, ValueError):
            return None


def coefficient_names(fmap: FeatureMap) -> list[str]:
    """The keys of ``original_units``: the intercept, then the covariates."""
    return ["(intercept)", *fmap.names]


def add_margin_columns(frame: pd.DataFrame, v: FloatArray, theta: FloatArray,
                       noise: RuleNoise) -> pd.DataFrame:
    """``frame`` plus ``margin``, ``margin_noise_lo``, ``margin_noise_hi`` and
    ``noise_could_flip`` (the interval contains 0: at this level the noise could have turned the
    recommendation)."""
    out = frame.copy()
    margin = np.asarray(v @ theta, dtype=np.float64)
    lo, hi = interval_bounds(margin, noise.halfwidths(v))
    out["margin"] = margin
    out["margin_noise_lo"] = lo
    out["margin_noise_hi"] = hi
    out["noise_could_flip"] = (lo <= 0.0) & (hi >= 0.0)
    return out


def rule_summary(rule: dict[str, Any], recs: pd.DataFrame | None) -> dict[str, Any]:
    """The ``--json`` summary's intervals: coefficients (or θ), the largest margin half-width, and
    the share of recommendations the noise could have flipped."""
    iv = rule["intervals"]
    out: dict[str, Any] = {
        "interval_level": iv["level"],
        "margin_noise_halfwidth_max": iv["margin"]["halfwidth_max"],
        "coefficients": iv["coefficients_original_units"] or {
            f"theta[{j}]": r for j, r in enumerate(iv["theta"])},
    }
    if recs is not None and "noise_could_flip" in recs.columns:
        out["apply_to_share_noise_could_flip"] = float(recs["noise_could_flip"].mean())
    return out
