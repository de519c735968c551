"""The planted neighbouring pair of two-stage's audit that reaches its stated sensitivity ζ·W̄₁ˢ.

The audited quantity is sup_θ ‖b_D(θ) − b_D′(θ)‖ with b(θ) = Σ_i w_i·2(t_i − x_iᵀθ)x_i (the
ridge term cancels), maximal at a vertex θ ∈ {0, ±λ₁e_j} of the ℓ₁ ball. The bound ζ·W̄₁ˢ adds the
largest gradient norm ζ = 2M_x(2M_y + M_∞λ₁) of every record whose weight moves. Three facts
decide how much of it a pair can reach:

- the squared loss depends on (x, t) only through ±(x, t), so the replaced record's two gradients
  are anti-parallel at full norm only when the two rows share the coordinate θ sits on and differ
  in every other one: with the intercept shared and θ = ±λ₁e₀, flipping every covariate reaches
  √((d − 1)/d) of the replaced record's 2ζ (0.95 for d = 11; the same t on both sides);
- W₁ˢ = 2n·u′/(T + u′) for row-wise weights u (uniform, ipw-rct, ipw-known): it is reached by
  every other row at the least u (T = (n − 1)·u_lo) and the D′ row at the largest u_hi, whatever
  the D row's weight is; the other rows' weights then move too, and their gradients, at full norm
  in the same direction, add the rest;
- with ipw-known, which arm and propensity corner give u_hi or u_lo is fixed by the public model,
  so the search keeps the covariates in groups (those of the model, a pivot, the rest).

:func:`planted_pair` therefore searches every (background, D row, D′ row) triple of 32 row
types — arm × outcome end × a corner sign per group — with the exact shift of a data set made of
the background row n − 1 times and the planted row once, in closed form from the row-wise
weights, and returns the best triple as a neighbouring pair. The audit then measures the pair with
the real pipeline (for fitted weights — ipw-logit, ebw, mmd — the row-wise search is only a guide).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.audit.neighbours import quiet_pair
from dpcausal.commands.two_stage.setup import (
    TwoStageSetup,
    coef_vector,
    prepare,
    targets,
    with_center,
)
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.commands.two_stage.stage1 import compute_weights

FloatArray = npt.NDArray[np.float64]
ROW_WISE = ("uniform", "ipw-rct", "ipw-known")
"""Weight methods whose u_i depends on row i alone (the search is exact for them)."""


def _groups(spec: TwoStageSpec, setup: TwoStageSetup) -> list[npt.NDArray[np.bool_]]:
    """Covariate groups that move together: the propensity model's, a pivot, the rest."""
    d = len(setup.columns.covariates)
    model = np.zeros(d, dtype=bool)
    if spec.two_stage.weights == "ipw-known":
        model = coef_vector(spec) != 0.0
    rest = np.flatnonzero(~model)
    pivot = np.zeros(d, dtype=bool)
    if rest.size:
        pivot[rest[0]] = True
    return [g for g in (model, pivot, ~model & ~pivot) if g.any()]


def row_types(spec: TwoStageSpec, setup: TwoStageSetup) -> pd.DataFrame:
    """Every row type: arm × outcome end × a corner sign per covariate group (public values)."""
    cols = setup.columns
    sec = spec.two_stage
    lo, hi = np.asarray(setup.fmap.lower, float), np.asarray(setup.fmap.upper, float)
    coef = coef_vector(spec) if sec.weights == "ipw-known" else np.ones(len(lo))
    up = np.where(coef < 0.0, lo, hi)  # the corner that raises the propensity score
    down = lo + hi - up
    y_lo, y_hi = (float(v) for v in spec.bounds.outcome)  # type: ignore[union-attr]
    groups = _groups(spec, setup)
    rows = []
    for arm, y, signs in itertools.product((sec.treated, sec.control_label()), (y_lo, y_hi),
                                           itertools.product((1, -1), repeat=len(groups))):
        raw = up.copy()
        for g, s in zip(groups, signs, strict=True):
            raw[g] = (up if s > 0 else down)[g]
        rows.append({**dict(zip(cols.covariates, raw.tolist(), strict=True)),
                     cols.outcome: y, cols.treatment: arm})
    return pd.DataFrame(rows)


def _row_weights(spec: TwoStageSpec, setup: TwoStageSetup, types: pd.DataFrame) -> FloatArray:
    """u per row type (proportional to the stage-1 weights of row-wise methods; 1 otherwise)."""
    if spec.two_stage.weights not in ROW_WISE:
        return np.ones(len(types))
    return compute_weights(spec, setup, prepare(spec, setup, types, None))


def best_triple(spec: TwoStageSpec, setup: TwoStageSetup, n: int,
                types: pd.DataFrame) -> tuple[int, int, int, float]:
    """(background, D row, D′ row, shift) maximising the exact shift over all type triples."""
    data = prepare(spec, setup, types, None)
    x, t = data.x, data.t
    if setup.private_center:  # stage 2 at a fixed centre: the midpoint needs no winsorising, so
        # |t| reaches 2M_y, the bound's worst case
        t = targets(with_center(setup, 0.5 * (setup.lower + setup.upper)), data.y, data.a)
    u = _row_weights(spec, setup, types)
    k, d = x.shape
    radius = setup.l1_radius
    thetas = np.vstack([np.zeros(d), radius * np.eye(d), -radius * np.eye(d)])
    resid = t[:, None] - x @ thetas.T  # (type, vertex)
    grad = 2.0 * resid[:, :, None] * x[:, None, :]  # 2(t − xᵀθ)x per type and vertex
    a = np.repeat(np.arange(k), k)  # every (D row, D′ row) type pair
    b = np.tile(np.arange(k), k)
    best = (0, 0, 0, -1.0)
    for g in range(k):
        s, sp = (n - 1) * u[g] + u[a], (n - 1) * u[g] + u[b]
        c_g = (n - 1) * n * u[g] * (1.0 / s - 1.0 / sp)
        vec = (c_g[:, None, None] * grad[g][None] + (n * u[a] / s)[:, None, None] * grad[a]
               - (n * u[b] / sp)[:, None, None] * grad[b])
        shift = np.linalg.norm(vec, axis=2).max(axis=1)
        i = int(np.argmax(shift))
        if shift[i] > best[3]:
            best = (g, int(a[i]), int(b[i]), float(shift[i]))
    return best


def planted_pair(spec: TwoStageSpec, setup: TwoStageSetup, frame: pd.DataFrame,
                 idx: int) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """The searched pair: every row but ``idx`` the background type, row ``idx`` the D type in D
    and the D′ type in D′ (neighbours: they differ in that row only)."""
    types = row_types(spec, setup)
    g, a, b, _ = best_triple(spec, setup, len(frame), types)
    rec = types.to_dict("records")
    quiet: dict[str, Any] = rec[g]
    d, dp = quiet_pair(frame, idx, quiet, rec[a], rec[b])
    return (f"row {idx} planted (searched: row types {a} vs {b} on a background of type {g}) to "
            "reach ζ·W̄₁ˢ", d, dp)
