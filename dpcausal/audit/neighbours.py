"""Neighbouring-dataset generators for the empirical audit (replace-one-row relations)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class RowDomain:
    """What one row may be: public ranges of numeric columns and the labels of categorical ones."""

    numeric: dict[str, tuple[float, float]]
    categorical: dict[str, Sequence[Any]]

    def random_row(self, rng: np.random.Generator) -> dict[str, Any]:
        """A row drawn uniformly inside the bounds."""
        row: dict[str, Any] = {c: float(rng.uniform(lo, hi)) for c, (lo, hi) in self.numeric.items()}
        row.update({c: labels[int(rng.integers(len(labels)))]
                    for c, labels in self.categorical.items()})
        return row

    def corner_row(self, rng: np.random.Generator) -> dict[str, Any]:
        """A row at a random corner of the bounds (every numeric column at lo or hi)."""
        row: dict[str, Any] = {c: float(lo if rng.uniform() < 0.5 else hi)
                               for c, (lo, hi) in self.numeric.items()}
        row.update({c: labels[int(rng.integers(len(labels)))]
                    for c, labels in self.categorical.items()})
        return row

    def extreme_pair(self, rng: np.random.Generator) -> tuple[dict[str, Any], dict[str, Any]]:
        """Two rows that differ only in their labels, at the upper corner of every numeric bound.

        For weighted-ERM style methods this is the pair that attains the sensitivity bound: the
        same maximal-norm covariates and the maximal outcome (weight) with the arm flipped.
        """
        row = {c: float(hi) for c, (lo, hi) in self.numeric.items()}
        a, b = dict(row), dict(row)
        for c, labels in self.categorical.items():
            i = int(rng.integers(len(labels)))
            a[c], b[c] = labels[i], labels[(i + 1) % len(labels)]
        return a, b

    def synthesize(self, n: int, rng: np.random.Generator) -> pd.DataFrame:
        """A synthetic table of ``n`` rows inside the bounds."""
        cols: dict[str, Any] = {c: rng.uniform(lo, hi, size=n) for c, (lo, hi) in self.numeric.items()}
        for c, labels in self.categorical.items():
            cols[c] = [labels[i] for i in rng.integers(len(labels), size=n)]
        return pd.DataFrame(cols)


def _holds(dtype: Any, val: Any) -> bool:
    """Whether a column of ``dtype`` takes ``val`` without changing dtype (pandas 3 refuses,
    pandas 2 warns, when it would not)."""
    is_bool = isinstance(val, bool | np.bool_)
    if pd.api.types.is_bool_dtype(dtype):
        return is_bool
    if pd.api.types.is_integer_dtype(dtype):
        return isinstance(val, int | np.integer) and not is_bool
    if pd.api.types.is_float_dtype(dtype):
        return isinstance(val, int | float | np.integer | np.floating) and not is_bool
    return bool(pd.api.types.is_object_dtype(dtype))


def replace_one(frame: pd.DataFrame, index: int, row: dict[str, Any]) -> pd.DataFrame:
    """A copy of ``frame`` with row ``index`` replaced (on the given columns).

    A column that cannot hold a new value as it is (an integer column and a value inside the
    bounds such as 7.4, a numeric column and a label) is widened first: to float64 for a number,
    else to object. The methods read every column as float64 or labels, so D′ means what it says.
    """
    out = frame.copy()
    for col, val in row.items():
        if col in out.columns:
            if not _holds(out[col].dtype, val):
                number = isinstance(val, int | float | np.integer | np.floating) and not isinstance(
                    val, bool | np.bool_)
                numeric_col = pd.api.types.is_numeric_dtype(out[col])
                out[col] = out[col].astype(np.float64 if number and numeric_col else object)
            out.loc[out.index[index], col] = val
    return out


Pair = tuple[str, pd.DataFrame | None, pd.DataFrame]
"""(description, D or None for the audited data set itself, D′)."""


def row_neighbours(frame: pd.DataFrame, domain: RowDomain, rng: np.random.Generator,
                   k: int) -> Iterator[Pair]:
    """``k`` replace-one neighbouring pairs around ``frame``, cycling through three kinds.

    - a row replaced by a random corner of the bounds (every clipped value at an extreme);
    - a row replaced by a random row inside the bounds;
    - a planted pair: one row set to the upper corner in D, the same row with the labels flipped in
      D′ (both differ from ``frame`` in that row only, so D and D′ are neighbours).
    """
    for i in range(k):
        idx = int(rng.integers(len(frame)))
        kind = i % 3
        if kind == 0:
            yield (f"row {idx} -> corner of the bounds", None,
                   replace_one(frame, idx, domain.corner_row(rng)))
        elif kind == 1:
            yield (f"row {idx} -> random row in the bounds", None,
                   replace_one(frame, idx, domain.random_row(rng)))
        else:
            a, b = domain.extreme_pair(rng)
            yield (f"row {idx} planted at the upper corner, labels flipped",
                   replace_one(frame, idx, a), replace_one(frame, idx, b))


def quiet_pair(frame: pd.DataFrame, index: int, quiet: dict[str, Any], a: dict[str, Any],
               b: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A planted pair on a quiet background: every other row takes the ``quiet`` values (chosen
    so they barely move the fit), row ``index`` is ``a`` in D and ``b`` in D′.

    The two data sets differ in that row only, so they are neighbours; with the background quiet,
    the strongly convex fits move by (almost) their full stability bound, which is what the
    stated sensitivity must cover (a random background curves the objective and hides most of it).
    """
    base = frame.copy()
    for col, val in quiet.items():
        base[col] = val
    return replace_one(base, index, a), replace_one(base, index, b)
