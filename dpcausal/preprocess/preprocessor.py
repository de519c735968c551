"""The declared, row-local transform from a file's raw columns to the model's covariates.

:class:`Preprocessor` is built from the spec at plan time (no row read). The pipeline then

1. reads the raw columns (:meth:`Preprocessor.raw_columns`),
2. checks every cell of every column it knows the domain of — the covariates by their rules, the
   outcome (numeric) and the treatment (the declared arm labels) — and refuses with *all* the
   problems of the file in one error (:meth:`~Preprocessor.problems`; the engines add the counts
   over batches),
3. applies :meth:`~Preprocessor.transform` to the table (or to every batch), and
4. runs the method on :meth:`~Preprocessor.model_spec`: the spec with the model columns as its
   covariates and their derived bounds, so the methods see only numeric, bounded covariates.

Notes
-----
Privacy: every rule is a fixed function of one row's own cells and of declared values (levels,
fill values, bounds), so replacing one row of the raw file replaces exactly one row of the
model's covariates (the rows are also never dropped or reordered): the neighbouring relation and
every sensitivity the methods derive from the model columns' bounds hold unchanged. Each model
column lies within its derived bound (one-hot and indicator columns in [0, 1]; log1p and
products computed from values clipped to their declared bounds), and the methods clip to those
bounds again. Whether a run is refused depends only on the cells' membership in the declared
domain (a data-domain check, like a non-numeric cell before), never on their values otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcausal.errors import DataError, SpecError
from dpcausal.preprocess import cells
from dpcausal.preprocess.rules import (
    ModelColumn,
    Source,
    check_fill,
    products,
    source_columns,
)
from dpcausal.spec.preprocess import level_text

if TYPE_CHECKING:
    import pandas as pd

NUMERIC_FIX = ("dpcausal never drops rows: fix or remove them before the run (a rule that "
               "depends only on each row itself, applied to every row)")


@dataclass(frozen=True)
class Roles:
    """The non-covariate columns whose domain is checked with the covariates: the outcome
    (numeric) and the treatment (one of the declared arm labels)."""

    outcome: str | None = None
    treatment: str | None = None
    arms: tuple[Any, ...] | None = None
    section: str = ""
    arms_hint: str = ""
    """Appended to the fix of a treatment outside the declared arms (a binary-only command)."""


@dataclass(frozen=True)
class Preprocessor:
    """Raw covariate columns → the model's covariates with their public bounds.

    ``active`` is False when the spec has no ``preprocess`` section: the covariates are then the
    raw columns themselves (numeric, with their declared bounds) and only the checks apply.
    """

    sources: tuple[Source, ...]
    interactions: tuple[tuple[str, ...], ...] = ()
    roles: Roles = field(default_factory=Roles)
    active: bool = False
    columns: tuple[ModelColumn, ...] = field(init=False)

    def __post_init__(self) -> None:
        cols: list[ModelColumn] = []
        for src in self.sources:
            check_fill(src)
            cols += source_columns(src)
        cols += products(self.interactions, self.sources, cols)
        names = [m.name for m in cols]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SpecError(f"preprocess: the model column name(s) {', '.join(dup)} would be made "
                            "twice (a covariate, a level or a product named alike); rename the "
                            "column or the level", field="preprocess")
        object.__setattr__(self, "columns", tuple(cols))

    # ------------------------------------------------------------------ plan time

    @property
    def names(self) -> list[str]:
        """The model's covariates, in order."""
        return [m.name for m in self.columns]

    def bounds(self) -> dict[str, tuple[float, float]]:
        """Model column → its public bound (a column without one is left out: the method then
        refuses it, naming it, as it refuses a numeric covariate without a bound)."""
        return {m.name: m.bound for m in self.columns if m.bound is not None}

    def raw_columns(self, names: Sequence[str]) -> list[str]:
        """The file's columns to read for ``names`` (a method's columns of the model spec): each
        model column replaced by the raw columns it is computed from."""
        src: dict[str, list[str]] = {}
        for m in self.columns:
            src[m.name] = ([m.source] if m.source is not None else
                           [s for f in m.factors for s in src[f]])
        model = [n for n in names if n in src]
        clash = sorted({n for n in model if model.count(n) > 1})
        if clash:
            raise SpecError(f"preprocess: '{clash[0]}' is both a model covariate and the name of "
                            "another column the command reads; rename one of them",
                            field="preprocess")
        out: list[str] = []
        for n in names:
            out += src.get(n, [n])
        return list(dict.fromkeys(out))

    def model_spec(self, spec: Any) -> Any:
        """``spec`` with the model columns as its covariates, their derived bounds as
        ``bounds.covariates`` and no ``preprocess`` section (unchanged when inactive)."""
        if not self.active:
            return spec
        columns = spec.data.columns.model_copy(update={"covariates": self.names})
        return spec.model_copy(update={
            "data": spec.data.model_copy(update={"columns": columns}),
            "bounds": spec.bounds.model_copy(update={"covariates": self.bounds()}),
            "preprocess": None,
        })

    def describe(self) -> dict[str, Any]:
        """Every rule and every model column with its bound: for the dry run, the receipt and
        the released rule files (enough to apply the same transform to new rows)."""
        return {"covariates": [s.to_dict() for s in self.sources],
                "interactions": [list(t) for t in self.interactions],
                "model_columns": [m.to_dict() for m in self.columns],
                "row_local": True}

    @classmethod
    def from_description(cls, doc: dict[str, Any]) -> Preprocessor:
        """Rebuild the covariate transform of :meth:`describe` (a released rule's
        ``preprocessing``); raises KeyError/TypeError/ValueError on a malformed document."""
        prep = cls(tuple(Source.from_dict(d) for d in doc["covariates"]),
                   tuple(tuple(t) for t in doc.get("interactions", [])), active=True)
        if prep.names != [m["name"] for m in doc["model_columns"]]:
            raise ValueError("its model columns do not follow from its rules")
        return prep

    # ------------------------------------------------------------------ row time

    def problems(self, frame: pd.DataFrame, start: int = 0, *, roles: bool = True
                 ) -> cells.Problems:
        """Every bad cell of ``frame`` (rows numbered from ``start``), per column and kind: the
        covariates by their rules, then (``roles``) the outcome and the treatment if read."""
        found = cells.Problems()
        for src in self.sources:
            if src.categorical:
                self._level_problems(found, src, frame[src.column], start)
            else:
                _number_problems(found, src.column, frame[src.column], start,
                                 refuse=src.missing == "refuse", covariate=True)
        r = self.roles
        if roles and r.outcome is not None and r.outcome in frame.columns:
            _number_problems(found, r.outcome, frame[r.outcome], start, refuse=True,
                             covariate=False)
        if roles and r.arms is not None and r.treatment is not None \
                and r.treatment in frame.columns:
            col = frame[r.treatment]
            hit = np.zeros(len(col), dtype=bool)
            for label in r.arms:
                hit |= cells.label_matches(col, label)
            labels = " nor ".join(f"the {w} value {v!r}" for w, v in
                                  zip(("treated", "control"), r.arms, strict=False)) \
                if len(r.arms) == 2 else f"one of the arms {list(r.arms)!r}"
            where = f"{r.section}.treated/control" if len(r.arms) == 2 else f"{r.section}.arms"
            found.add(r.treatment, f"value(s) that are neither {labels}"
                      if len(r.arms) == 2 else f"value(s) that are not {labels}",
                      f"recode the column, or set {where} to the labels the file uses"
                      f"{r.arms_hint}", ~hit, start)
        return found

    def _level_problems(self, found: cells.Problems, src: Source, col: pd.Series,
                        start: int) -> None:
        code, missing = cells.level_codes(col, src.levels or (), src.texts)
        where = f"preprocess.covariates.{src.column}"
        if src.missing == "refuse":
            found.add(src.column, "missing value(s)",
                      f"declare {where}.missing: {{indicator: true}} (or a fill level), or fix "
                      "the file (rows are never dropped)", missing, start)
        if src.unseen == "error":
            quote = (" (YAML reads unquoted yes/no/on/off as true/false: quote text levels)"
                     if any(isinstance(v, bool) for v in src.levels or ()) else "")
            found.add(src.column, "value(s) that are none of its declared levels",
                      f"declare every level in {where}.levels (from the codebook, never from "
                      f"the data; text is compared exactly, case and spaces included){quote}, "
                      "or set unseen: other", (code < 0) & ~missing, start)

    def check(self, frame: pd.DataFrame, path: Any, *, what: str = "data file",
              roles: bool = True) -> None:
        """Refuse ``frame`` with every problem of every column at once (a DataError)."""
        found = self.problems(frame, roles=roles)
        if found:
            raise self.error(found, path, what)

    def side_table(self, frame: pd.DataFrame, path: Any, what: str) -> pd.DataFrame:
        """A public file of covariate rows (rows to score, query points, tuning rows): its
        covariates checked (every problem at once) and transformed as the data's are."""
        missing = [s.column for s in self.sources if s.column not in frame.columns]
        if missing:
            raise DataError(f"{path}: the {what} lacks the covariate column(s) "
                            f"{', '.join(missing)}; it needs the raw covariate columns the spec's "
                            "preprocessing reads", file=path, column=missing[0])
        own = {s.column for s in self.sources}
        clash = [n for n in self.names if n in frame.columns and n not in own]
        if clash:
            raise DataError(f"{path}: the {what} already has a column '{clash[0]}', the name of "
                            "a model column the preprocessing derives; rename or drop it",
                            file=path, column=clash[0])
        self.check(frame, path, what=what, roles=False)
        return self.transform(frame)

    def error(self, found: cells.Problems, path: Any, what: str = "data file") -> Exception:
        """The DataError of ``found`` (the problems of a whole table, or added over batches)."""
        order = [s.column for s in self.sources] + [c for c in (self.roles.outcome,
                                                                self.roles.treatment) if c]
        return found.error(path, what, order)

    def transform(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with the model columns (raw columns kept; a numeric column with a fill
        value replaced by its filled values). Assumes :meth:`problems` found none."""
        import pandas as pd

        if all(s.plain for s in self.sources) and not self.interactions:
            return frame
        values: dict[str, Any] = {}
        for src in self.sources:
            values.update(_source_values(src, frame[src.column]))
        for m in self.columns:
            if m.kind == "product":
                prod = np.ones(len(frame))
                for f in m.factors:
                    factor = self._column(f)
                    x = values[f] if f in values else cells.numbers(frame[f])[0]
                    if factor.kind in ("number", "log1p") and factor.bound is not None:
                        x = np.clip(x, *factor.bound)
                    prod = prod * x
                values[m.name] = prod
        keep = {c: frame[c] for c in frame.columns if c not in values}
        added = {n: v for n, v in values.items() if n in self.names}
        return pd.DataFrame({**keep, **added}, index=frame.index)

    def _column(self, name: str) -> ModelColumn:
        return next(m for m in self.columns if m.name == name)


def _number_problems(found: cells.Problems, column: str, col: pd.Series, start: int, *,
                     refuse: bool, covariate: bool) -> None:
    """Non-numeric, missing and infinite cells of a numeric column (missing cells allowed when a
    fill value is declared; infinite ones never)."""
    if cells.is_number_column(col) and col.dtype.kind == "f":
        arr = col.to_numpy()
        bad = ~np.isfinite(arr)
        if bad.any():
            _finite(found, column, arr, bad, start, refuse, covariate)
        return
    x, _, non_numeric = cells.numbers(col)
    hint = (f", or declare it categorical: preprocess.covariates.{column}.levels"
            if covariate else "")
    found.add(column, "non-numeric value(s)", f"the column must be numeric{hint}", non_numeric,
              start)
    _finite(found, column, x, ~np.isfinite(x) & ~non_numeric, start, refuse, covariate)


def _finite(found: cells.Problems, column: str, x: Any, bad: Any, start: int, refuse: bool,
            covariate: bool) -> None:
    if refuse:
        hint = (f", or declare preprocess.covariates.{column}.missing: {{fill: VALUE}} for "
                "missing cells" if covariate else "")
        found.add(column, "missing, NaN or infinite value(s)", NUMERIC_FIX + hint, bad, start)
    else:
        found.add(column, "infinite value(s)", "values must be finite (a missing cell is "
                  "filled, an infinite one is refused)", bad & np.isinf(x), start)


def _source_values(src: Source, col: pd.Series) -> dict[str, Any]:
    """The model columns of one source for a table (its rules applied to each cell)."""
    c = src.column
    out: dict[str, Any] = {}
    if src.categorical:
        code, missing = cells.level_codes(col, src.levels or (), src.texts)
        if src.missing == "fill" and src.fill is not None:
            code = np.where(missing, src.texts.index(level_text(src.fill)), code)
        for m in source_columns(src):
            if m.kind == "level":
                out[m.name] = (code == m.index).astype(np.float64)
            elif m.kind == "other":
                out[m.name] = ((code < 0) & ~missing).astype(np.float64)
        x_missing = missing
    else:
        x, x_missing, _ = cells.numbers(col)
        if src.missing == "fill":
            x = np.where(x_missing, float(src.fill), x)
        if src.transform == "log1p":
            assert src.bound is not None
            out[f"log1p({c})"] = np.log1p(np.clip(x, *src.bound))
        elif not src.plain:
            out[c] = x
    if src.missing == "fill" and src.indicator:
        out[f"{c}=(missing)"] = x_missing.astype(np.float64)
    return out
