"""cate's released outputs: cate.csv, the RFF function document, the plot, the summary."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.commands.cate.plot import plot_png
from dpcausal.commands.cate.setup import CateSetup, grid_axes, rff_features
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]


def estimand(spec: CateSpec) -> str:
    """What cate.csv's ``cate`` column holds (``cate.outcome_direction``)."""
    if spec.cate.outcome_direction == "higher":
        return "tau(x) = E[Y(treated) - Y(control) | x]"
    return ("benefit(x) = E[Y(control) - Y(treated) | x] = -tau(x) (outcome_direction lower: "
            "positive where the treatment lowers the outcome)")


def function_document(spec: CateSpec, setup: CateSetup, weights: FloatArray) -> dict[str, Any]:
    """The released CATE function of the RFF variant: public feature map + private weights."""
    return {
        "format_version": 1, "command": "cate", "kind": "random-fourier-feature CATE function",
        "evaluate": "tau(x) = zeta(s(x)) . weights, s(x) = (clip(x, lo, hi) - lo)/(hi - lo), "
                    "zeta(s) = [cos(s @ omega), sin(s @ omega)] / sqrt(m)",
        "estimand": estimand(spec),
        "covariates": list(setup.covariates),
        "bounds": {c: list(setup.box_bounds(c)) for c in setup.covariates},
        "bandwidth": setup.bandwidth, "rff_seed": spec.cate.rff_seed, "m": spec.cate.rff_dim,
        "omega": rff_features(spec, setup).omega.tolist(),
        "weights": [float(v) for v in weights],
        "privacy": {"epsilon": spec.privacy.epsilon, "delta": spec.privacy.delta,
                    "guarantee": "approximate", "learner": setup.learner},
    }


def build_release(spec: CateSpec, setup: CateSetup, queries: pd.DataFrame, tau: FloatArray,
                  weights: FloatArray | None) -> Release:
    """cate.csv (+ cate_function.json for rff, + cate.png for a 1-D/2-D grid) and the summary.

    With ``outcome_direction: lower`` the released τ̂ (and the weights) are negated: a
    post-processing of the release (Δ and the noise are unchanged) whose law is that of the
    release computed on −Y with negated bounds, since every step of the estimator is odd in Y
    (clipping, the centred ridges, the pseudo-outcomes, the symmetric Huber loss) and the noise
    is symmetric."""
    if spec.cate.outcome_direction == "lower":
        tau = -tau
        weights = None if weights is None else -weights
    table = queries.copy()
    table["cate"] = tau
    release = Release(tables={"cate": table})
    if weights is not None:
        release.documents["cate_function.json"] = function_document(spec, setup, weights)
    axes = grid_axes(spec, setup)
    if spec.cate.plot and axes:
        release.figures["cate.png"] = plot_png(table, axes, spec)
    release.summary.update({"mode": spec.cate.mode, "learner": spec.cate.learner,
                            "queries": len(table), "released_cate_mean": float(np.mean(tau))})
    return release
