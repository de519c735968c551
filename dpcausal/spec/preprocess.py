"""The ``preprocess`` section: declared, row-local rules that turn raw covariate columns into the
model's numeric, bounded covariates (one-hot encoding of declared levels, a declared fill value
and missingness indicator, log1p, products of declared columns).

Every rule is public and applied to each row on its own, so one person's row still changes one
row of the model's covariates: no sensitivity changes. Levels and bounds come from the spec,
never from the data (``dpcausal.io.preprocess`` derives the bounds of the derived columns).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from dpcausal.spec.model import ArmLabel, StrictModel

Level = ArmLabel
"""A level of a categorical column, written as it appears in the data (text, a number or
true/false; quote text such as "yes" and "no", which YAML reads as true and false)."""


def level_text(level: Level) -> str:
    """The text a level is written as in a derived column's name (and compared as, in a text
    column): ``true``/``false`` for booleans, ``str`` otherwise."""
    if isinstance(level, bool):
        return "true" if level else "false"
    return str(level)


class MissingFill(StrictModel):
    """What a missing cell of one covariate becomes (a rule of each row alone)."""

    fill: Level | None = None
    """A numeric covariate: the number (inside the column's public bound) put in place of a
    missing cell — required. A categorical one: a declared level that a missing cell counts
    as, or none (the cell then sets no level column, only the indicator)."""
    indicator: bool = True
    """Add the 0/1 model column '<column>=(missing)', 1 where the cell was missing (default
    true; bound [0, 1]). Without it a filled cell cannot be told from a real one."""


class CovariateRule(StrictModel):
    """How one raw covariate column becomes model columns. Without ``levels`` the column is
    numeric (its bound in bounds.covariates, in raw units); with them it is categorical and
    one-hot encoded, each level column in [0, 1] (no bound is declared for it)."""

    levels: Annotated[list[Level], Field(min_length=1)] | None = None
    """The categorical column's levels, all of them, fixed before the data is seen (never read
    from the data): one model column '<column>=<level>' per level, 1 where the cell equals the
    level. Text cells are compared as exact text (case and spaces count); numeric cells with
    numeric levels as numbers."""
    unseen: Literal["error", "other"] = "error"
    """A cell that is none of the levels: error (default; the run is refused, naming the
    column, the count and the first row, never the value) or other (it sets the extra model
    column '<column>=(other)', in [0, 1])."""
    reference: Level | None = None
    """A declared level whose column is left out (a row of that level has all level columns
    0), e.g. to avoid a column that the intercept already spans; default none (every level
    has its column)."""
    missing: Literal["refuse"] | MissingFill = "refuse"
    """refuse (default): a missing cell refuses the run (dpcausal never drops rows); or
    {fill, indicator}: a declared value in its place and a 0/1 indicator column."""
    transform: Literal["log1p"] | None = None
    """A numeric column's declared transform: log1p replaces it by the model column
    'log1p(<column>)' = log(1 + clip(x, lo, hi)), whose bound [log1p(lo), log1p(hi)] follows
    from the column's public bound (which must have lo > -1)."""

    @model_validator(mode="after")
    def _consistent(self) -> CovariateRule:
        if self.levels is None:
            if self.unseen != "error" or self.reference is not None:
                raise ValueError("unseen and reference are for categorical columns: declare "
                                 "their levels")
            if isinstance(self.missing, MissingFill) and (
                    isinstance(self.missing.fill, bool | str) or self.missing.fill is None
                    or not math.isfinite(self.missing.fill)):
                raise ValueError("missing.fill of a numeric column must be a finite number "
                                 "(inside its bound)")
            return self
        if self.transform is not None:
            raise ValueError("transform is for numeric columns; a categorical column (with "
                             "levels) is one-hot encoded")
        texts = [level_text(v) for v in self.levels]
        dup = sorted({t for t in texts if texts.count(t) > 1})
        if dup:
            raise ValueError(f"levels repeat {', '.join(map(repr, dup))} (compared as text)")
        for what, value in (("reference", self.reference), (
                "missing.fill", self.missing.fill if isinstance(self.missing, MissingFill)
                else None)):
            if value is not None and level_text(value) not in texts:
                raise ValueError(f"{what} must be one of the declared levels")
        if isinstance(self.missing, MissingFill) and self.missing.fill is None \
                and not self.missing.indicator:
            raise ValueError("missing: give a fill level, or keep the indicator (otherwise a "
                             "missing cell would be encoded like no level at all, silently)")
        kept = len(texts) - (self.reference is not None) + (self.unseen == "other")
        if kept == 0:
            raise ValueError("the column would have no model column: declare more levels, "
                             "drop reference or set unseen: other")
        return self


class PreprocessSpec(StrictModel):
    """Declared, row-local preprocessing of the covariates (data.columns.covariates), applied to
    every row of the data (and of the public files with covariate rows) before any method sees
    it. The dry run and the receipt list every rule and the model columns with their bounds."""

    covariates: dict[str, CovariateRule] = Field(default_factory=dict)
    """Rules by covariate name (each must be in data.columns.covariates): categorical levels,
    missing-value handling, a transform. A covariate without a rule is numeric, and a missing
    value in it refuses the run, as before."""
    interactions: list[Annotated[list[Annotated[str, Field(min_length=1)]],
                                 Field(min_length=2)]] = Field(default_factory=list)
    """Products of declared columns, each a list of 2 or more names: a covariate (all of its
    level or value columns) or a model column ('region=north', 'log1p(income)'). Each product
    column is named by joining its factors with '*' and its bound follows from theirs by
    interval arithmetic (factors are clipped to their bounds first)."""
