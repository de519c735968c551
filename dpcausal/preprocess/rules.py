"""The model columns a spec's ``preprocess`` section declares, and their public bounds.

Built from the spec alone, before any row is read: every model column, its rule and its bound
(one-hot and indicator columns in [0, 1]; log1p bounds from the declared ones; products by
interval arithmetic) are functions of declared values, never of the data.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dpcausal.errors import MissingBoundsError, SpecError
from dpcausal.spec.preprocess import CovariateRule, MissingFill, level_text

Bound = tuple[float, float]
Kind = Literal["number", "log1p", "level", "other", "missing", "product"]
UNIT: Bound = (0.0, 1.0)


def _fmt(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Source:
    """One raw covariate column and its declared rule (numeric when ``levels`` is None)."""

    column: str
    levels: tuple[Any, ...] | None = None
    unseen: Literal["error", "other"] = "error"
    reference: Any = None
    missing: Literal["refuse", "fill"] = "refuse"
    fill: Any = None
    indicator: bool = False
    transform: Literal["log1p"] | None = None
    bound: Bound | None = None
    """Numeric columns: the public bound in raw units (None: the spec has none)."""

    @classmethod
    def from_rule(cls, column: str, rule: CovariateRule | None, bound: Bound | None) -> Source:
        """The source for ``column`` under ``rule`` (None: numeric, missing cells refused)."""
        if rule is None:
            return cls(column, bound=bound)
        fill = rule.missing if isinstance(rule.missing, MissingFill) else None
        return cls(column, tuple(rule.levels) if rule.levels is not None else None, rule.unseen,
                   rule.reference, "fill" if fill is not None else "refuse",
                   fill.fill if fill is not None else None,
                   fill.indicator if fill is not None else False, rule.transform,
                   None if rule.levels is not None else bound)

    @property
    def categorical(self) -> bool:
        """True when the column has declared levels."""
        return self.levels is not None

    @property
    def texts(self) -> tuple[str, ...]:
        """The levels as text (how a text column's cells are compared, and column names)."""
        return tuple(level_text(v) for v in self.levels or ())

    @property
    def plain(self) -> bool:
        """A numeric column with no rule: its model column is the raw column itself."""
        return not self.categorical and self.missing == "refuse" and self.transform is None

    def to_dict(self) -> dict[str, Any]:
        """The declared rule, as listed in the plan, the receipt and rule files."""
        doc: dict[str, Any] = {"column": self.column,
                               "kind": "categorical" if self.categorical else "numeric"}
        if self.categorical:
            doc.update(levels=list(self.levels or ()), unseen=self.unseen,
                       reference=self.reference)
        else:
            doc.update(bounds=list(self.bound) if self.bound else None, transform=self.transform)
        doc["missing"] = ("refuse" if self.missing == "refuse" else
                          {"fill": self.fill, "indicator": self.indicator})
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Source:
        """Inverse of :meth:`to_dict` (a rule file's ``preprocessing``)."""
        rule = CovariateRule.model_validate(
            {k: doc[k] for k in ("levels", "unseen", "reference", "transform", "missing")
             if doc.get(k) is not None})
        bound = doc.get("bounds")
        return cls.from_rule(str(doc["column"]), rule,
                             (float(bound[0]), float(bound[1])) if bound else None)


@dataclass(frozen=True)
class ModelColumn:
    """One column the methods see: its name, what it is computed from, its public bound."""

    name: str
    kind: Kind
    source: str | None
    bound: Bound | None
    rule: str
    index: int = -1
    """``level``: the level's position in its source's levels."""
    factors: tuple[str, ...] = ()
    """``product``: the model columns multiplied."""

    def to_dict(self) -> dict[str, Any]:
        """As listed in the plan and the receipt."""
        return {"name": self.name, "bounds": list(self.bound) if self.bound else None,
                "rule": self.rule}


def _bound_of(src: Source, what: str) -> Bound:
    if src.bound is None:
        raise MissingBoundsError(
            f"bounds.covariates has no bound for {src.column}: the bound of {what} follows from "
            f"it; add {src.column}: [lo, hi] to bounds.covariates", field="bounds.covariates")
    return src.bound


def source_columns(src: Source) -> list[ModelColumn]:
    """The model columns of one source, in order: its value or level columns, then the
    missingness indicator."""
    c = src.column
    out: list[ModelColumn] = []
    if src.categorical:
        for i, text in enumerate(src.texts):
            if src.reference is not None and level_text(src.reference) == text:
                continue
            fill = (" (or missing)" if src.missing == "fill" and src.fill is not None
                    and level_text(src.fill) == text else "")
            out.append(ModelColumn(f"{c}={text}", "level", c, UNIT,
                                   f"1 if {c} is {text!r}{fill}, else 0", index=i))
        if src.unseen == "other":
            out.append(ModelColumn(f"{c}=(other)", "other", c, UNIT,
                                   f"1 if {c} is none of its {len(src.texts)} declared levels "
                                   "(and not missing), else 0"))
    elif src.transform == "log1p":
        lo, hi = _bound_of(src, f"log1p({c})")
        if lo <= -1.0:
            raise SpecError(f"preprocess.covariates.{c}.transform: log1p needs the bound of {c} "
                            f"above -1 (log(1 + x) is undefined at -1); bounds.covariates.{c} "
                            f"starts at {_fmt(lo)}", field=f"preprocess.covariates.{c}.transform")
        fill = f", missing cells set to {_fmt(src.fill)} first" if src.missing == "fill" else ""
        # the bound with the function the rows use (np.log1p): each row's value lies in it
        out.append(ModelColumn(f"log1p({c})", "log1p", c,
                               (float(np.log1p(lo)), float(np.log1p(hi))),
                               f"log(1 + clip({c}, {_fmt(lo)}, {_fmt(hi)})){fill}"))
    else:
        fill = f"; missing cells set to {_fmt(src.fill)}" if src.missing == "fill" else ""
        out.append(ModelColumn(c, "number", c, src.bound, f"{c} (numeric){fill}"))
    if src.missing == "fill" and src.indicator:
        out.append(ModelColumn(f"{c}=(missing)", "missing", c, UNIT,
                               f"1 if {c} is missing, else 0"))
    return out


def check_fill(src: Source) -> None:
    """A numeric fill value must lie inside the column's public bound (it would be clipped)."""
    if src.categorical or src.missing != "fill" or src.bound is None:
        return
    lo, hi = src.bound
    if not lo <= float(src.fill) <= hi:
        raise SpecError(f"preprocess.covariates.{src.column}.missing.fill: {_fmt(src.fill)} is "
                        f"outside bounds.covariates.{src.column} = [{_fmt(lo)}, {_fmt(hi)}]; "
                        "choose a fill value inside the bound",
                        field=f"preprocess.covariates.{src.column}.missing.fill")


def product_bound(bounds: list[Bound]) -> Bound:
    """Interval arithmetic: the range of a product of factors each within its bound."""
    lo, hi = 1.0, 1.0
    for a, b in bounds:
        corners = (lo * a, lo * b, hi * a, hi * b)
        lo, hi = min(corners), max(corners)
    return lo, hi


def products(interactions: tuple[tuple[str, ...], ...], sources: tuple[Source, ...],
             columns: list[ModelColumn]) -> list[ModelColumn]:
    """The product columns of ``interactions``: each factor names a covariate (all of its value
    or level columns) or one model column; bounds by interval arithmetic."""
    by_name = {m.name: m for m in columns}
    by_source = {s.column: [m for m in columns if m.source == s.column and m.kind != "missing"]
                 for s in sources}
    src_of = {s.column: s for s in sources}
    out: list[ModelColumn] = []
    for k, term in enumerate(interactions):
        where = f"preprocess.interactions[{k}]"
        groups = []
        for name in term:
            if name in by_source:
                groups.append(by_source[name])
            elif name in by_name:
                groups.append([by_name[name]])
            else:
                known = ", ".join([*by_source, *by_name][:20])
                raise SpecError(f"{where}: '{name}' is neither a covariate nor a model column "
                                f"(known: {known})", field=where)
        origins = [g[0].source for g in groups]
        if len(set(origins)) != len(origins):
            raise SpecError(f"{where}: an interaction multiplies distinct covariates; "
                            f"{', '.join(term)} repeats one", field=where)
        for combo in itertools.product(*groups):
            for m in combo:
                if m.bound is None:
                    assert m.source is not None
                    _bound_of(src_of[m.source], f"the product '{'*'.join(term)}'")
            bound = product_bound([m.bound for m in combo if m.bound is not None])
            if not all(math.isfinite(v) for v in bound) or not bound[0] < bound[1]:
                raise SpecError(f"{where}: the product's bound [{bound[0]}, {bound[1]}] is not a "
                                "finite interval; narrow its factors' bounds", field=where)
            parts = [f"{m.name} clipped to [{_fmt(m.bound[0])}, {_fmt(m.bound[1])}]"
                     if m.kind in ("number", "log1p") and m.bound else m.name for m in combo]
            out.append(ModelColumn("*".join(m.name for m in combo), "product", None, bound,
                                   "product of " + " and ".join(parts),
                                   factors=tuple(m.name for m in combo)))
    return out
