"""What every command's method provides to the pipeline (:class:`MethodDef`), and what it
releases (:class:`Release`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dpcausal.accounting.plan import PrivacyPlan

if TYPE_CHECKING:
    import pandas as pd

    from dpcausal.spec.base import CommonSpec


@dataclass(frozen=True, slots=True)
class SideInput:
    """A public file a method reads besides the sensitive data (tuning data, rows to score).

    ``kind="table"`` (default) is read as a CSV/Parquet table (a DataFrame); ``kind="arrow"`` as
    the same table's Arrow form, unpreprocessed (a reader that needs no pandas: the panel's unit
    and time columns); ``kind="document"`` is a YAML/JSON file parsed with ``yaml.safe_load``
    (e.g. a policy library, a public model).
    """

    path: Path
    columns: list[str] | None  # None: every column
    what: str
    kind: Literal["table", "arrow", "document"] = "table"


@dataclass(frozen=True)
class Release:
    """Everything a run publishes: all of it is private (post-processing of the noised values).

    Parameters
    ----------
    documents
        File name → JSON-able object (e.g. ``"rule.json"``).
    tables
        Stem → table, written as ``stem.csv`` (and ``stem.parquet`` for Parquet input).
    figures
        File name → PNG bytes drawn from released numbers only.
    summary
        Public facts for the terminal summary.
    """

    documents: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, bytes] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


PlanFn = Callable[..., PrivacyPlan]
RunFn = Callable[..., Release]


@dataclass(frozen=True)
class MethodDef:
    """A command's method: its spec model and the three functions the pipeline calls.

    ``data_columns(spec)`` lists the sensitive file's columns to read; ``side_inputs(spec)`` the
    public files; ``plan(spec, n_rows, side, *, rng)`` builds the plan from public inputs alone;
    ``run(spec, frame, plan, side, *, rng, noise)`` computes the release, drawing privacy noise only
    through ``noise`` (the run's :class:`~dpcausal.mechanisms.NoiseGuard`, built from ``plan``).
    """

    command: str
    spec_model: type[CommonSpec]
    data_columns: Callable[[Any], list[str]]
    side_inputs: Callable[[Any], Mapping[str, SideInput]]
    plan: PlanFn
    run: RunFn


def lazy(target: str) -> Callable[..., Any]:
    """``"package.module:function"`` as a callable that imports the module on its first call.

    A command's ``run`` is named this way in its :class:`MethodDef`, so ``--dry-run`` (which only
    plans) never imports the estimation code and what it loads (scipy's solvers, plotting).
    """
    module, _, name = target.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"Calls ``{target}`` (imported on first use)."
    return call


def no_side_inputs(spec: Any) -> dict[str, SideInput]:
    """For methods that read only the sensitive file."""
    return {}


