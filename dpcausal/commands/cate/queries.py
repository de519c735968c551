"""cate's public query points: a query file's rows or a grid over the covariate box.

The points where τ(x) is released are public and fixed before the data is read (spec P15): a
query file is a side input that must not be the sensitive data file, a grid is built from the
spec's box alone. A grid's size is counted without building it, so a dry run imports no pandas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcausal.commands.cate.setup import CateSetup
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.errors import DataError, SpecError
from dpcausal.frames import numeric_column
from dpcausal.method import SideInput

if TYPE_CHECKING:
    import pandas as pd

MAX_QUERIES = 10_000


def grid_shape(spec: CateSpec, setup: CateSetup) -> tuple[list[str], int]:
    """The covariates the grid varies and its points per axis; refuses a bad grid."""
    grid = spec.cate.grid
    assert grid is not None
    names = list(setup.covariates)
    vary = grid.vary if grid.vary is not None else (names if len(names) <= 2 else None)
    if vary is None:
        raise SpecError("cate.grid.vary: with more than 2 covariates, name the 1 or 2 the grid "
                        "varies (the others are held at cate.grid.fixed or the box middle)")
    unknown = [v for v in [*vary, *grid.fixed] if v not in names]
    if unknown:
        raise SpecError(f"cate.grid: {', '.join(unknown)} not in data.columns.covariates")
    return list(vary), grid.points if grid.points is not None else (101 if len(vary) == 1 else 41)


def check_count(d: int) -> int:
    """``d`` if it is an allowed number of query points; refuses more than :data:`MAX_QUERIES`."""
    if d > MAX_QUERIES:
        raise SpecError(f"cate: {d} query points; at most {MAX_QUERIES} per release "
                        "(fewer grid points, or split the query file)")
    return d


def query_count(spec: CateSpec, setup: CateSetup, side: Mapping[str, Any]) -> int:
    """The number of query points, with the checks of :func:`query_points`; a grid's is counted
    without building it (a dry run imports no pandas for it)."""
    if spec.cate.queries is not None:
        return len(query_points(spec, setup, side))
    vary, pts = grid_shape(spec, setup)
    return check_count(pts ** len(vary))


def query_points(spec: CateSpec, setup: CateSetup, side: Mapping[str, Any]) -> pd.DataFrame:
    """The public query table (file rows, or the grid over the box); refuses bad query files."""
    import pandas as pd

    sec = spec.cate
    names = list(setup.covariates)
    if sec.queries is not None:
        frame = side["queries"]
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise DataError(f"{sec.queries}: the query file lacks covariate column(s) "
                            f"{', '.join(missing)}; it needs every data.columns.covariates column")
        if "cate" in frame.columns:
            raise DataError(f"{sec.queries}: the query file already has a column 'cate' (the output "
                            "column); rename or drop it")
        for c in names:
            numeric_column(frame, c, sec.queries)
        out = frame.reset_index(drop=True)
    else:
        assert sec.grid is not None
        vary, pts = grid_shape(spec, setup)
        axes = [np.linspace(*setup.box_bounds(v), pts) for v in vary]
        mesh = np.meshgrid(*axes, indexing="ij")
        out = pd.DataFrame({v: m.ravel() for v, m in zip(vary, mesh, strict=True)})
        for c in names:
            if c not in vary:
                lo, hi = setup.box_bounds(c)
                out[c] = sec.grid.fixed.get(c, 0.5 * (lo + hi))
        out = out[names]
    check_count(len(out))
    return out


def grid_axes(spec: CateSpec, setup: CateSetup) -> list[str]:
    """The covariates a grid varies (empty for a query file)."""
    grid = spec.cate.grid
    if grid is None:
        return []
    if grid.vary is not None:
        return list(grid.vary)
    return list(setup.covariates) if setup.q <= 2 else []


def side_inputs(spec: CateSpec) -> dict[str, SideInput]:
    """The public query file, if any (never the sensitive data itself: spec P15)."""
    q = spec.cate.queries
    if q is None:
        return {}
    if spec.data.path is not None:
        try:
            same = q.resolve() == spec.data.path.resolve()
        except OSError:
            same = False
        if same:
            raise SpecError(f"cate.queries: {q} is the sensitive data file; query points must be "
                            "public and fixed in advance (values at the training rows are not "
                            "covered by the guarantee). Use a separate public file or cate.grid")
    return {"queries": SideInput(q, None, "cate.queries file")}
