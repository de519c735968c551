"""The public policy library of ``select-policy``: parse, generate (paper160), hash, evaluate.

A library is a list of deterministic binary policies π: x ↦ {0 = control, 1 = treated}, fixed before
the data is read. Policies are evaluated on the *raw* covariate values (a policy is any fixed
function of x; it needs no bounds). Types:

- ``constant``: ``{type: constant, treat: true|false}``
- ``threshold``: ``{type: threshold, covariate: x3, op: ">=" | "<", threshold: t}``
- ``linear``: ``{type: linear, weights: {x1: w1, ...}, intercept: b, complement: false}``
  treats when wᵀx + b ≥ 0 (or, with ``complement``, when wᵀx + b < 0)
- ``rare_region``: ``{type: rare_region, covariates: [...], threshold: q, complement: false}``
  treats when h_R(x) ≥ q, with h_R the paper's rare-region index (App. G.1) over the listed
  covariates in order (0-based: x_0 is the first).

The library hash is the SHA-256 of the canonical JSON of the normalised policy list.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.errors import SpecError

FloatArray = npt.NDArray[np.float64]
POLICY_TYPES = ("constant", "threshold", "linear", "rare_region")
RARE_THRESHOLD_DRAWS = 200_000


def h_rare(x: FloatArray) -> FloatArray:
    """The paper's rare-region index h_R(x) (spec §5.2), 0-based covariate indices.

    h_R(x) = Σ_{j < min(8, d)} c_j x_j + 1{d > 15}(0.5 sin(x_8) + 0.25 x_11 x_15),
    c = linspace(1.2, −0.9, min(8, d)).
    """
    d = x.shape[1]
    k = min(8, d)
    out = x[:, :k] @ np.linspace(1.2, -0.9, k)
    if d > 15:
        out = out + 0.5 * np.sin(x[:, 8]) + 0.25 * x[:, 11] * x[:, 15]
    return np.asarray(out, dtype=np.float64)


def tau_weights(d: int) -> FloatArray:
    """w_τ = linspace(−0.75, 0.95, k), k = min(10, d), zero-padded to d (spec §5.2)."""
    k = min(10, d)
    w = np.zeros(d)
    w[:k] = np.linspace(-0.75, 0.95, k)
    return w


@lru_cache(maxsize=32)
def default_rare_threshold(d: int, seed: int) -> float:
    """q₀.₉₅ of h_R under i.i.d. N(0, 1) covariates: a public reference, never the data."""
    rng = np.random.default_rng([seed, 95])
    return float(np.quantile(h_rare(rng.standard_normal((RARE_THRESHOLD_DRAWS, d))), 0.95))


def paper160(names: list[str], seed: int, n_random: int = 142,
             rare_threshold: float | None = None) -> list[dict[str, Any]]:
    """The paper's library (App. G.1): 18 structured policies and ``n_random`` random linear ones.

    Structured: always/never treat; 1{x_j ≥ 0}, 1{x_j < 0} for the first min(6, d) covariates;
    1{xᵀw_τ ≥ 0} and its complement; 1{h_R(x) ≥ q₀.₉₅} and its complement. Random: w ~ N(0, I_d);
    with probability 0.7 keep a uniformly random subset of max(2, min(8, d)) coordinates; normalise
    to unit ℓ2 norm; b ~ N(0, 0.2²); treat when xᵀw + b ≥ 0. All randomness is the public ``seed``.
    """
    d = len(names)
    if d < 1:
        raise SpecError("select_policy.library: paper160 needs at least one covariate")
    q = default_rare_threshold(d, seed) if rare_threshold is None else float(rare_threshold)
    pols: list[dict[str, Any]] = [
        {"name": "always-treat", "type": "constant", "treat": True},
        {"name": "never-treat", "type": "constant", "treat": False},
    ]
    for j in range(min(6, d)):
        for op in (">=", "<"):
            pols.append({"name": f"{names[j]}{op}0", "type": "threshold", "covariate": names[j],
                         "op": op, "threshold": 0.0})
    wt = tau_weights(d)
    for comp in (False, True):
        pols.append({"name": "tau-index" + ("<0" if comp else ">=0"), "type": "linear",
                     "weights": {n: float(w) for n, w in zip(names, wt, strict=True) if w != 0.0},
                     "intercept": 0.0, "complement": comp})
    for comp in (False, True):
        pols.append({"name": "rare-region" + ("-complement" if comp else ""), "type": "rare_region",
                     "covariates": list(names), "threshold": q, "complement": comp})
    rng = np.random.default_rng(seed)
    keep = max(2, min(8, d))
    for i in range(n_random):
        w = rng.standard_normal(d)
        if rng.uniform() < 0.7 and keep < d:
            idx = rng.choice(d, size=keep, replace=False)
            mask = np.zeros(d, dtype=bool)
            mask[idx] = True
            w[~mask] = 0.0
        norm = float(np.linalg.norm(w))
        w = w / norm if norm > 0 else w
        b = float(rng.normal(0.0, 0.2))
        pols.append({"name": f"random-linear-{i + 1:03d}", "type": "linear",
                     "weights": {n: float(v) for n, v in zip(names, w, strict=True) if v != 0.0},
                     "intercept": b, "complement": False})
    return pols


def _num(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _norm_policy(i: int, raw: Any, covariates: list[str]) -> dict[str, Any]:
    where = f"policies[{i}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a mapping with 'name' and 'type'")
    name = raw.get("name", f"policy-{i + 1}")
    kind = raw.get("type")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name must be a non-empty string")
    allowed = {"constant": {"treat"}, "threshold": {"covariate", "op", "threshold"},
               "linear": {"weights", "intercept", "complement"},
               "rare_region": {"covariates", "threshold", "complement"}}
    if kind not in allowed:
        raise ValueError(f"{where}.type must be one of {', '.join(POLICY_TYPES)}, got {kind!r}")
    extra = set(raw) - allowed[kind] - {"name", "type"}
    if extra:
        raise ValueError(f"{where} ({kind}) has unknown field(s) {sorted(extra)}")

    def cov(c: Any) -> str:
        if c not in covariates:
            raise ValueError(f"{where}: covariate {c!r} is not in data.columns.covariates "
                             f"({', '.join(covariates)})")
        return str(c)

    out: dict[str, Any] = {"name": name, "type": kind}
    if kind == "constant":
        if not isinstance(raw.get("treat"), bool):
            raise ValueError(f"{where}.treat must be true or false")
        out["treat"] = raw["treat"]
    elif kind == "threshold":
        out["covariate"] = cov(raw.get("covariate"))
        if raw.get("op") not in (">=", "<"):
            raise ValueError(f"{where}.op must be '>=' or '<', got {raw.get('op')!r}")
        out["op"] = raw["op"]
        out["threshold"] = _num(f"{where}.threshold", raw.get("threshold"))
    elif kind == "linear":
        weights = raw.get("weights")
        if not isinstance(weights, dict) or not weights:
            raise ValueError(f"{where}.weights must be a non-empty mapping covariate: weight")
        out["weights"] = {cov(k): _num(f"{where}.weights.{k}", v) for k, v in weights.items()}
        out["intercept"] = _num(f"{where}.intercept", raw.get("intercept", 0.0))
        out["complement"] = bool(raw.get("complement", False))
    else:
        covs = raw.get("covariates")
        if not isinstance(covs, list) or not covs:
            raise ValueError(f"{where}.covariates must be a non-empty list of covariate names")
        out["covariates"] = [cov(c) for c in covs]
        out["threshold"] = _num(f"{where}.threshold", raw.get("threshold"))
        out["complement"] = bool(raw.get("complement", False))
    return out


@dataclass(frozen=True)
class PolicyLibrary:
    """A materialised, validated, hashed library, compiled for vectorised evaluation.

    Linear-type policies (constant, threshold, linear) are rows of (W, b, complement): treat iff
    (xᵀW + b ≥ 0) XOR complement. Rare-region policies are evaluated separately.
    """

    policies: tuple[dict[str, Any], ...]
    covariates: tuple[str, ...]
    sha256: str
    source: dict[str, Any]

    @property
    def size(self) -> int:
        """M, the number of policies."""
        return len(self.policies)

    def compile(self) -> CompiledLibrary:
        """Arrays for vectorised evaluation (built once per run, reused for every chunk)."""
        d, m = len(self.covariates), self.size
        w = np.zeros((d, m))
        b = np.zeros(m)
        comp = np.zeros(m, dtype=bool)
        idx = {c: j for j, c in enumerate(self.covariates)}
        thr_k, thr_col, thr_val, thr_lt = [], [], [], []
        rare: list[tuple[int, list[int], float, bool]] = []
        for k, p in enumerate(self.policies):
            if p["type"] == "constant":
                comp[k] = not p["treat"]  # 0 ≥ 0 is true: treat; complement: never
            elif p["type"] == "threshold":
                thr_k.append(k)
                thr_col.append(idx[p["covariate"]])
                thr_val.append(p["threshold"])
                thr_lt.append(p["op"] == "<")
            elif p["type"] == "linear":
                for c, v in p["weights"].items():
                    w[idx[c], k] += v
                b[k] = p["intercept"]
                comp[k] = p["complement"]
            else:
                rare.append((k, [idx[c] for c in p["covariates"]], p["threshold"],
                             p["complement"]))
        return CompiledLibrary(w, b, comp, np.array(thr_k, dtype=np.intp),
                               np.array(thr_col, dtype=np.intp), np.array(thr_val),
                               np.array(thr_lt, dtype=bool), tuple(rare))

    def decisions(self, x: FloatArray,
                  compiled: CompiledLibrary | None = None) -> npt.NDArray[np.bool_]:
        """Treat decisions for raw rows ``x`` (n × d): an n × M boolean matrix (use on chunks)."""
        c = compiled or self.compile()
        out = np.greater_equal(x @ c.w, -c.b)
        out ^= c.complement
        if c.thr_k.size:  # exact comparisons, no arithmetic
            out[:, c.thr_k] = (x[:, c.thr_col] >= c.thr_val) ^ c.thr_lt
        for k, cols, q, complement in c.rare:
            out[:, k] = (h_rare(x[:, cols]) >= q) ^ complement
        return out


@dataclass(frozen=True)
class CompiledLibrary:
    """Treat iff (xᵀw_k + b_k ≥ 0) XOR complement_k; thresholds and rare regions evaluated exactly."""

    w: FloatArray
    b: FloatArray
    complement: npt.NDArray[np.bool_]
    thr_k: npt.NDArray[np.intp]
    thr_col: npt.NDArray[np.intp]
    thr_val: FloatArray
    thr_lt: npt.NDArray[np.bool_]
    rare: tuple[tuple[int, list[int], float, bool], ...]


def library_hash(policies: list[dict[str, Any]]) -> str:
    """SHA-256 of the canonical JSON of the normalised policy list."""
    body = json.dumps({"policies": policies}, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)
    return hashlib.sha256(body.encode()).hexdigest()


def build_library(doc: Any, covariates: list[str], *, where: str,
                  source: dict[str, Any]) -> PolicyLibrary:
    """Validate a library document (``{policies: [...]}`` or a bare list) and hash it."""
    pols = normalised_policies(doc, where, lambda i, p: _norm_policy(i, p, covariates))
    return PolicyLibrary(tuple(pols), tuple(covariates), library_hash(pols), source)


def normalised_policies(doc: Any, where: str, norm: Callable[[int, Any], dict[str, Any]]
                        ) -> list[dict[str, Any]]:
    """The policies of a library document, each normalised by ``norm(index, raw)`` (which raises
    ValueError for a bad one); refuses a malformed document or repeated names (SpecError)."""
    raw = doc.get("policies") if isinstance(doc, dict) else doc
    if isinstance(doc, dict):
        extra = set(doc) - {"policies", "name", "description"}
        if extra:
            raise SpecError(f"{where}: unknown top-level field(s) {sorted(extra)}; a library is "
                            "{policies: [...]} (optionally with name and description)")
    if not isinstance(raw, list) or not raw:
        raise SpecError(f"{where}: the library must hold a non-empty 'policies' list")
    try:
        pols = [norm(i, p) for i, p in enumerate(raw)]
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from exc
    names = [p["name"] for p in pols]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecError(f"{where}: policy names must be unique; repeated: {', '.join(dup[:5])}")
    return pols
