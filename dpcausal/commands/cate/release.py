"""cate's released outputs: cate.csv, the RFF function document, the plot, the summary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpcausal.commands.cate.plot import plot_png
from dpcausal.commands.cate.queries import grid_axes
from dpcausal.commands.cate.setup import CateSetup, rff_features
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.intervals import clamp, interval_bounds
from dpcausal.mechanisms.noise_law import gaussian_halfwidth
from dpcausal.method import Release

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]


def estimand(spec: CateSpec) -> str:
    """What cate.csv's ``cate`` column holds (``cate.outcome_direction``; with cate.arms, one
    contrast per value of the ``arm`` column)."""
    if spec.cate.multi_arm:
        c = spec.cate.control_label()
        if spec.cate.outcome_direction == "higher":
            return f"tau_k(x) = E[Y(k) - Y({c!r}) | x] for each arm k in column 'arm'"
        return (f"benefit_k(x) = E[Y({c!r}) - Y(k) | x] = -tau_k(x) for each arm k in column "
                "'arm' (outcome_direction lower: positive where arm k lowers the outcome)")
    if spec.cate.outcome_direction == "higher":
        return "tau(x) = E[Y(treated) - Y(control) | x]"
    return ("benefit(x) = E[Y(control) - Y(treated) | x] = -tau(x) (outcome_direction lower: "
            "positive where the treatment lowers the outcome)")


def function_document(spec: CateSpec, setup: CateSetup, weights: FloatArray) -> dict[str, Any]:
    """The released CATE function of the RFF variant: public feature map + private weights."""
    return {
        "format_version": 1, "command": "cate", "kind": "random-fourier-feature CATE function",
        "evaluate": "tau(x) = zeta(s(x)) . weights, s(x) = (clip(x, lo, hi) - lo)/(hi - lo), "
                    "zeta(s) = [cos(s @ omega), sin(s @ omega)] / sqrt(m) (computed in float32, "
                    "each (cos, sin) pair scaled to norm (1 - 2^-20)/sqrt(m); the float64 formula "
                    "agrees to ~1e-6 per feature)",
        "estimand": estimand(spec),
        "covariates": list(setup.covariates),
        "bounds": {c: list(setup.box_bounds(c)) for c in setup.covariates},
        "bandwidth": setup.bandwidth, "rff_seed": spec.cate.rff_seed, "m": spec.cate.rff_dim,
        "omega": rff_features(spec, setup).omega.tolist(),
        **({"contrasts": [{"arm": k, "control": spec.cate.control_label(),
                           "weights": [float(v) for v in row]}
                          for k, row in zip(spec.cate.contrast_arms(), weights, strict=True)]}
           if weights.ndim == 2 else {"weights": [float(v) for v in weights]}),
        "privacy": {"epsilon": spec.privacy.epsilon, "delta": spec.privacy.delta,
                    "guarantee": "approximate", "learner": setup.learner},
    }


def noise_law(spec: CateSpec, sd: float) -> str:
    """The law of the noise on each released τ(x), in words."""
    what = ("one Gaussian-process path, sd at each point" if spec.cate.mode == "function"
            else "independent Gaussian noise at each query, sd")
    return f"{what} {sd:.4g} (exact)"


def build_release(spec: CateSpec, setup: CateSetup, queries: pd.DataFrame, tau: FloatArray,
                  weights: FloatArray | None, sd: float | None) -> Release:
    """cate.csv (+ cate_function.json for rff, + cate.png for a 1-D/2-D grid) and the summary.

    ``cate`` is clamped to ±(y_hi − y_lo), the range of any effect on the bounded outcome, with
    ``cate_clamped`` where it moved; ``cate_noise_lo``/``hi`` is the (1 − α) interval of the
    noise (σ·z_{1−α/2} around the unclamped value, intersected with that range), when ``sd`` (the
    public noise sd at each point, :func:`~dpcausal.commands.cate.privacy.point_noise_sd`) is
    known. All post-processing.

    With ``outcome_direction: lower`` the released τ̂ (and the weights) are negated: a
    post-processing of the release (Δ and the noise are unchanged) whose law is that of the
    release computed on −Y with negated bounds, since every step of the estimator is odd in Y
    (clipping, the centred ridges, the pseudo-outcomes, the symmetric Huber loss) and the noise
    is symmetric.

    With cate.arms (``tau`` of shape (K − 1, d), ``weights`` (K − 1, 2m)): cate.csv stacks one
    block of the query rows per contrast, with columns ``arm`` and ``control`` first, and the
    plot is cate_1.png … one per contrast, in the order of cate.arms."""
    import pandas as pd

    if spec.cate.outcome_direction == "lower":
        tau = -tau
        weights = None if weights is None else -weights
    alpha = spec.accuracy.alpha
    bounds = (-setup.delta_y, setup.delta_y)
    half = None if sd is None else gaussian_halfwidth(sd, alpha)
    arms = spec.cate.contrast_arms()
    rows = np.atleast_2d(tau)
    parts = [_table(queries, row, half, bounds) for row in rows]
    if spec.cate.multi_arm:
        for arm, part in zip(arms, parts, strict=True):
            part.insert(0, "control", [spec.cate.control_label()] * len(part))
            part.insert(0, "arm", [arm] * len(part))
    table = pd.concat(parts, ignore_index=True)
    release = Release(tables={"cate": table})
    if weights is not None:
        release.documents["cate_function.json"] = function_document(spec, setup, weights)
    axes = grid_axes(spec, setup)
    if spec.cate.plot and axes:
        for i, (arm, part, row) in enumerate(zip(arms, parts, rows, strict=True)):
            name = "cate.png" if not spec.cate.multi_arm else f"cate_{i + 1}.png"
            what = None if not spec.cate.multi_arm else (
                f"arm {arm!r} vs control {spec.cate.control_label()!r}")
            release.figures[name] = plot_png(part, axes, spec, row, half, bounds, what=what)
    release.summary.update({"mode": spec.cate.mode, "learner": spec.cate.learner,
                            "queries": len(queries),
                            "released_cate_mean": float(np.mean(tau)),
                            "clamped": int(table["cate_clamped"].sum())})
    if spec.cate.multi_arm:
        release.summary["contrasts"] = [
            {"arm": arm, "control": spec.cate.control_label(),
             "released_cate_mean": float(np.mean(row))} for arm, row in zip(arms, rows, strict=True)]
    if half is not None and sd is not None:
        release.summary["cate_noise_interval"] = {
            "halfwidth": half, "level": 1.0 - alpha, "kind": "noise",
            "law": noise_law(spec, sd), "bound": False}
    else:
        release.summary["cate_noise_interval"] = (
            "not released: queries mode with gamma_method: search scales the noise by γ(T, D), "
            "which depends on the data and is never released")
    return release


def _table(queries: pd.DataFrame, tau: FloatArray, half: float | None,
           bounds: tuple[float, float]) -> pd.DataFrame:
    """The query rows with ``cate`` (clamped), its noise interval and ``cate_clamped``."""
    table = queries.copy()
    shown, moved = clamp(tau, bounds)
    table["cate"] = shown
    if half is not None:
        table["cate_noise_lo"], table["cate_noise_hi"] = interval_bounds(tau, half, bounds)
    table["cate_clamped"] = moved
    return table
