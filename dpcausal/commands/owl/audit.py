"""How ``audit privacy`` drives owl: synthetic rows inside the public bounds, neighbouring pairs
(every fourth the planted pair that attains Δ), and the pre-noise θ̂ of each data set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.neighbours import Pair, RowDomain, row_neighbours
from dpcausal.audit.neighbours import quiet_pair as plant_quiet_pair
from dpcausal.audit.privacy import AuditAdapter
from dpcausal.commands.owl.estimate import fit_nonprivate
from dpcausal.commands.owl.method import METHOD
from dpcausal.commands.owl.setup import build_setup, prepare
from dpcausal.commands.owl.spec import OwlSpec, PropensityColumn
from dpcausal.errors import SpecError
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]


def _domain(spec: OwlSpec) -> RowDomain:
    """The public row domain: every covariate, the outcome and the propensity column inside their
    bounds, the treatment one of the two arms."""
    cols = build_setup(spec).columns  # refuses missing bounds first, with the usual message
    numeric = cols.numeric_domain()
    if isinstance(spec.owl.propensity, PropensityColumn):
        floor = spec.owl.propensity.floor
        numeric[spec.owl.propensity.column] = (floor, 1.0 - floor)
    return RowDomain(numeric, {cols.treatment: [spec.owl.treated, spec.owl.control_label()]})


def synthesize(spec: OwlSpec, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """n rows drawn inside the public bounds."""
    return _domain(spec).synthesize(n, rng)


def neighbours(spec: OwlSpec, frame: pd.DataFrame, rng: np.random.Generator,
               k: int) -> Iterator[Pair]:
    """Every fourth pair the quiet planted pair (:func:`quiet_pair`), else ``row_neighbours``."""
    generic = row_neighbours(frame, _domain(spec), rng, k - k // 4)
    for i in range(k):
        if i % 4 == 3:
            idx = int(rng.integers(len(frame)))
            d, dp = quiet_pair(spec, frame, idx)
            yield (f"row {idx} planted at full weight and ‖v‖ = 1, arm flipped, every other row at "
                   "the least weight", d, dp)
        else:
            yield next(generic)


def quiet_pair(spec: OwlSpec, frame: pd.DataFrame, idx: int
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The pair that attains Δ = (2W + 2τ)/γ up to the background's pull.

    The planted row has ‖v‖ = 1 (the corner of largest feature norm), the largest weight W (the
    outcome that maps to U, the received arm at the propensity floor) and its arm flipped, so its
    gradient changes by 2W·v; every other row has the least weight η/π (outcome at the end that
    maps to L), so the objective is curved by γ alone and θ̂ moves by ≈ 2W/γ.
    """
    sec = spec.owl
    cols = build_setup(spec).columns
    lo, hi = cols.outcome_bounds
    heavy, light = (hi, lo) if sec.outcome_direction == "higher" else (lo, hi)
    row: dict[str, Any] = {}
    for c, (c_lo, c_hi) in zip(cols.covariates, cols.covariate_bounds, strict=True):
        row[c] = c_lo if sec.scaling == "maxabs" and abs(c_lo) > abs(c_hi) else c_hi
    a = {**row, cols.outcome: heavy, cols.treatment: sec.treated}
    b = {**row, cols.outcome: heavy, cols.treatment: sec.control_label()}
    if isinstance(sec.propensity, PropensityColumn):  # received-arm propensity at the floor
        a[sec.propensity.column] = sec.propensity.floor
        b[sec.propensity.column] = 1.0 - sec.propensity.floor
    return plant_quiet_pair(frame, idx, {cols.outcome: light}, a, b)


def pre_noise(spec: OwlSpec, frame: pd.DataFrame, plan: PrivacyPlan,
              side: dict[str, Any]) -> dict[str, FloatArray]:
    """θ̂ before noise (the input of stage ``owl.theta``)."""
    if spec.owl.ridge_lambda == "auto":
        raise SpecError("audit privacy: owl's lambda: auto has several stages (trials, selection, "
                        "release) whose inputs depend on the secret split; audit it with a given "
                        "lambda, or run its unit tests", field="owl.lambda")
    setup = build_setup(spec)
    data = prepare(spec, setup, frame, spec.data.path)
    return {"owl.theta": fit_nonprivate(setup, data, float(plan.details["gamma"]))}


def output_vector(release: Release) -> FloatArray:
    """The released θ."""
    return np.asarray(release.documents["rule.json"]["theta"], dtype=np.float64)


def without_plot(spec: OwlSpec) -> OwlSpec:
    """The audited spec: no figure (post-processing only, the released numbers are unchanged)."""
    return spec.model_copy(update={"owl": spec.owl.model_copy(update={"plot": False})})


ADAPTER = AuditAdapter(METHOD, "owl", synthesize, neighbours, pre_noise, output_vector,
                       audit_spec=without_plot)
"""owl's audit adapter (listed in :data:`dpcausal.commands.COMMANDS`)."""
