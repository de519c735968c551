"""Engines for the data passes (DESIGN §5): ``local`` streams the table in batches on this machine;
``dask`` runs each pass on a Dask cluster. A command's engine path
(``dpcausal/commands/<name>/engine.py``) writes every pass as a sum of per-batch statistics computed
from clipped rows; the sums are combined on the client, where the single noise draw happens (central
DP, trusted curator: no noise on workers)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from dpcausal.engine.base import Engine
from dpcausal.io.tables import TableInfo
from dpcausal.spec.base import EngineSpec


def check_source(spec: EngineSpec, info: TableInfo) -> None:
    """Refuse, before the plan and without reading a row, a table the engine cannot partition."""
    if spec.kind == "dask":
        from dpcausal.engine.dask import require_parquet

        require_parquet(info)


@contextmanager
def open_engine(spec: EngineSpec, info: TableInfo, columns: Sequence[str],
                prep: Any = None) -> Iterator[Engine]:
    """Start the engine ``spec`` names over ``info``'s table; close it afterwards.

    ``prep`` (a :class:`dpcausal.preprocess.Preprocessor`) checks every batch's cells, adding
    the problems up over all batches into one error, and transforms each batch before the
    method's ``prepare`` sees it."""
    engine: Any
    if spec.kind == "dask":
        from dpcausal.engine.dask import DaskEngine

        engine = DaskEngine(info, columns, spec.batch_rows, spec.address, prep=prep)
    else:
        from dpcausal.engine.local import LocalEngine

        engine = LocalEngine(info, columns, spec.batch_rows, cache_mb=spec.cache_mb, prep=prep)
    try:
        yield engine
    finally:
        engine.close()


__all__ = ["Engine", "check_source", "open_engine"]
