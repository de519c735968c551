"""The public side inputs of a run (:func:`load_side_inputs`): documents parsed and tables
inspected before the plan, table values read when first used (issue 24: a dry run reads, and
imports pandas for, only the side tables its plan needs)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from dpcausal.io import tables
from dpcausal.io.documents import read_document

if TYPE_CHECKING:
    from dpcausal.method import MethodDef, SideInput
    from dpcausal.preprocess import Preprocessor
    from dpcausal.spec.base import CommonSpec


class SideInputs(Mapping[str, Any]):
    """The public side inputs of a run by name: documents parsed at once, tables inspected at
    once (file, header and row count, the declared columns present) and their values read on
    first access — so a dry run reads (and imports pandas for) only the side tables its plan
    uses. :func:`execute` reads every one before a release reads a data row
    (:meth:`read_all`), as the files are public and their errors must come first."""

    def __init__(self, loaded: dict[str, Any], pending: dict[str, Callable[[], Any]]) -> None:
        self._loaded = loaded
        self._pending = pending

    def __getitem__(self, name: str) -> Any:
        if name in self._pending:
            self._loaded[name] = self._pending.pop(name)()
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*self._loaded, *self._pending])

    def __len__(self) -> int:
        return len(self._loaded) + len(self._pending)

    def read_all(self) -> SideInputs:
        """Read every pending table now; returns self."""
        for name in list(self._pending):
            self[name]
        return self


def load_side_inputs(method: MethodDef, spec: CommonSpec,
                     prep: Preprocessor | None = None) -> dict[str, Any]:
    """The public side files a method declares (tables, or YAML/JSON documents), every one read
    now (:func:`side_inputs` reads tables when first used)."""
    return dict(side_inputs(method, spec, prep).read_all())


def side_inputs(method: MethodDef, spec: CommonSpec,
                prep: Preprocessor | None = None) -> SideInputs:
    """The public side files a method declares (tables, or YAML/JSON documents), as
    :class:`SideInputs`: documents parsed and tables inspected now, table values on first use.

    ``spec`` is the model spec; with an active ``prep`` a side table (rows to score, query
    points, a public tuning file) is read by its raw columns, its covariates checked (every
    problem at once) and transformed exactly as the data's."""
    loaded: dict[str, Any] = {}
    pending: dict[str, Callable[[], Any]] = {}
    for name, s in method.side_inputs(spec).items():
        if s.kind == "document":
            loaded[name] = read_document(s.path, s.what)
            continue
        info = tables.inspect_table(s.path, s.what)
        if s.columns:
            tables.check_columns(info, prep.raw_columns(s.columns) if prep is not None
                                 and prep.active and s.kind == "table" else s.columns)
        pending[name] = functools.partial(_read_side_table, s, list(info.columns), prep)
    return SideInputs(loaded, pending)


def _read_side_table(s: SideInput, header: list[str], prep: Preprocessor | None) -> Any:
    columns = s.columns or header
    if s.kind == "arrow":
        return tables.read_arrow(s.path, columns, s.what)
    if prep is None or not prep.active:
        return tables.read_table(s.path, columns, s.what)
    frame = tables.read_table(s.path, prep.raw_columns(columns) if s.columns else columns,
                              s.what)
    return prep.side_table(frame, s.path, s.what)
