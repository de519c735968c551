"""The public policy library of ``select-policy`` with K ≥ 3 arms (``select_policy.arms``).

Each policy maps raw covariates x to one of the declared arms, fixed before the data is read:

- ``{type: constant, arm: LABEL}``: always that arm;
- ``{type: threshold | linear | rare_region, <its fields>, arm: LABEL, else: LABEL}``: the binary
  rule of :mod:`~dpcausal.commands.select_policy.library` (``threshold``: x_j op t; ``linear``:
  wᵀx + b ≥ 0; ``rare_region``: h_R(x) ≥ q; each with its ``complement``), recommending ``arm``
  where it holds and ``else`` where it does not;
- ``{type: argmax, scores: [{arm: LABEL, weights: {x1: w1, ...}, intercept: b}, ...]}``: the arm
  of the largest score wᵀx + b among those listed (ties: the first listed); an arm not listed is
  never recommended.

Labels are compared with the declared arms exactly (a text label never equals a number). The
library hash is the SHA-256 of the canonical JSON of the normalised policies, as for two arms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.commands.select_policy.library import (
    PolicyLibrary,
    _norm_policy,
    build_library,
    library_hash,
    normalised_policies,
)
from dpcausal.spec.arms import label_index
from dpcausal.spec.model import ArmLabel

FloatArray = npt.NDArray[np.float64]
MULTI_TYPES = ("constant", "threshold", "linear", "rare_region", "argmax")


def _arm(where: str, value: Any, arms: tuple[ArmLabel, ...]) -> tuple[ArmLabel, int]:
    i = label_index(arms, value)
    if i is None:
        raise ValueError(f"{where} must be one of select_policy.arms ({list(arms)!r}), got "
                         f"{value!r}")
    return arms[i], i


def _num(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _norm_multi(i: int, raw: Any, covariates: list[str], arms: tuple[ArmLabel, ...]
                ) -> dict[str, Any]:
    where = f"policies[{i}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a mapping with 'name' and 'type'")
    kind = raw.get("type")
    name = raw.get("name", f"policy-{i + 1}")
    if kind not in MULTI_TYPES:
        raise ValueError(f"{where}.type must be one of {', '.join(MULTI_TYPES)}, got {kind!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name must be a non-empty string")
    if kind == "constant":
        extra = set(raw) - {"name", "type", "arm"}
        if extra:
            raise ValueError(f"{where} (constant) has unknown field(s) {sorted(extra)}; with "
                             "select_policy.arms a constant policy is {type: constant, arm: LABEL}")
        return {"name": name, "type": kind, "arm": _arm(f"{where}.arm", raw.get("arm"), arms)[0]}
    if kind == "argmax":
        extra = set(raw) - {"name", "type", "scores"}
        if extra:
            raise ValueError(f"{where} (argmax) has unknown field(s) {sorted(extra)}")
        scores = raw.get("scores")
        if not isinstance(scores, list) or len(scores) < 2:
            raise ValueError(f"{where}.scores must list at least two {{arm, weights, intercept}}")
        listed: list[dict[str, Any]] = []
        for j, s in enumerate(scores):
            at = f"{where}.scores[{j}]"
            if not isinstance(s, dict) or set(s) - {"arm", "weights", "intercept"}:
                raise ValueError(f"{at} must be {{arm: LABEL, weights: {{covariate: w}}, "
                                 "intercept: b}")
            weights = s.get("weights", {})
            if not isinstance(weights, dict):
                raise ValueError(f"{at}.weights must be a mapping covariate: weight")
            for c in weights:
                if c not in covariates:
                    raise ValueError(f"{at}: covariate {c!r} is not in data.columns.covariates")
            listed.append({"arm": _arm(f"{at}.arm", s.get("arm"), arms)[0],
                           "weights": {str(c): _num(f"{at}.weights.{c}", v)
                                       for c, v in weights.items()},
                           "intercept": _num(f"{at}.intercept", s.get("intercept", 0.0))})
        codes = [label_index(arms, s["arm"]) for s in listed]
        if len(set(codes)) != len(codes):
            raise ValueError(f"{where}.scores lists an arm twice")
        return {"name": name, "type": kind, "scores": listed}
    missing = [k for k in ("arm", "else") if k not in raw]
    if missing:
        raise ValueError(f"{where} ({kind}) needs 'arm' (where the rule holds) and 'else' (where "
                         "it does not) with select_policy.arms")
    out = _norm_policy(i, {k: v for k, v in raw.items() if k not in ("arm", "else")}, covariates)
    out["arm"] = _arm(f"{where}.arm", raw["arm"], arms)[0]
    out["else"] = _arm(f"{where}.else", raw["else"], arms)[0]
    return out


@dataclass(frozen=True)
class MultiArmLibrary:
    """A materialised, validated, hashed K-arm library, compiled for vectorised evaluation."""

    policies: tuple[dict[str, Any], ...]
    covariates: tuple[str, ...]
    arms: tuple[ArmLabel, ...]
    sha256: str
    source: dict[str, Any]
    rules: PolicyLibrary | None = field(init=False)
    """The binary rules of the threshold/linear/rare_region policies, in order."""
    rule_k: npt.NDArray[np.intp] = field(init=False)
    rule_arms: npt.NDArray[np.int8] = field(init=False)
    """(arm where the rule holds, arm where it does not) per rule, as arm indices."""

    def __post_init__(self) -> None:
        rules, ks, pairs = [], [], []
        for k, p in enumerate(self.policies):
            if p["type"] in ("threshold", "linear", "rare_region"):
                rules.append({c: v for c, v in p.items() if c not in ("arm", "else")})
                ks.append(k)
                pairs.append((self._code(p["arm"]), self._code(p["else"])))
        object.__setattr__(self, "rules", build_library(
            {"policies": rules}, list(self.covariates), where="library rules",
            source={}) if rules else None)
        object.__setattr__(self, "rule_k", np.array(ks, dtype=np.intp))
        object.__setattr__(self, "rule_arms", np.array(pairs, dtype=np.int8).reshape(-1, 2))

    def _code(self, label: ArmLabel) -> int:
        i = label_index(self.arms, label)
        assert i is not None  # validated when the library was built
        return i

    @property
    def size(self) -> int:
        """M, the number of policies."""
        return len(self.policies)

    def compile(self) -> Any:
        """The binary rules compiled once per run (None without rules)."""
        return self.rules.compile() if self.rules is not None else None

    def decisions(self, x: FloatArray, compiled: Any = None) -> npt.NDArray[np.int8]:
        """Recommended arm indices for raw rows ``x`` (n × d): an n × M int8 matrix (use on
        chunks)."""
        n = x.shape[0]
        out = np.zeros((n, self.size), dtype=np.int8)
        if self.rules is not None:
            hold = self.rules.decisions(x, compiled or self.rules.compile())
            out[:, self.rule_k] = np.where(hold, self.rule_arms[:, 0], self.rule_arms[:, 1])
        idx = {c: j for j, c in enumerate(self.covariates)}
        for k, p in enumerate(self.policies):
            if p["type"] == "constant":
                out[:, k] = self._code(p["arm"])
            elif p["type"] == "argmax":
                w = np.zeros((len(self.covariates), len(p["scores"])))
                for j, s in enumerate(p["scores"]):
                    for c, v in s["weights"].items():
                        w[idx[c], j] = v
                b = np.array([s["intercept"] for s in p["scores"]])
                codes = np.array([self._code(s["arm"]) for s in p["scores"]], dtype=np.int8)
                out[:, k] = codes[np.argmax(x @ w + b, axis=1)]
        return out


def build_multi_library(doc: Any, covariates: list[str], arms: tuple[ArmLabel, ...], *,
                        where: str, source: dict[str, Any]) -> MultiArmLibrary:
    """Validate a K-arm library document (``{policies: [...]}`` or a bare list) and hash it."""
    pols = normalised_policies(doc, where, lambda i, p: _norm_multi(i, p, covariates, arms))
    return MultiArmLibrary(tuple(pols), tuple(covariates), arms, library_hash(pols), source)
