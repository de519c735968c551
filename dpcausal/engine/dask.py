"""The Dask engine: the table is a ``dask.dataframe`` with one partition per piece (Parquet row
groups of one file, read with column projection on the workers); each partition is mapped once
(clipping, features) and kept on its worker, and every pass maps a per-partition statistic and
adds the results pairwise on the workers in a fixed tree over the partition order; the client
receives the one total. No noise is ever drawn on a worker. With a preprocessor each partition is
checked and transformed before it is mapped, and ``load`` refuses with the problems of every
partition added up on the client.

Only Parquet input: a CSV file is one piece, so it would be one partition on one worker (use the
local engine, or convert it to Parquet). A failure of the cluster itself (lost workers, closed
comms, cancelled futures, timeouts) is an ``EngineError`` (exit 5); any other exception raised by
a computation propagates as on the local engine, and its text is never copied into a message."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

from dpcausal.engine.base import (
    PrepareFn,
    StatFn,
    plan_pieces,
    read_piece,
    tree_add,
)
from dpcausal.errors import DPCausalError, EngineError, SpecError
from dpcausal.io.tables import TableInfo
from dpcausal.preprocess.cells import Problems

CONNECT_TIMEOUT = "20s"
"""How long to wait for the scheduler at ``engine.address``."""


def _meta(pieces: list[Any], columns: list[str]) -> Any:
    """An empty frame with the projected schema (so Dask never reads rows on the client); the
    files' types were checked to agree (``tables.check_column_types``)."""
    schema = pq.ParquetFile(pieces[0].path).schema_arrow
    return schema.empty_table().select(columns).to_pandas()


def _cluster_failures() -> tuple[type[BaseException], ...]:
    """Exception types that mean the cluster failed (not the computation): exit 5."""
    kinds: list[type[BaseException]] = [OSError, TimeoutError, concurrent.futures.CancelledError,
                                        asyncio.CancelledError]
    with contextlib.suppress(ImportError):
        from distributed.client import FutureCancelledError

        kinds.append(FutureCancelledError)
    with contextlib.suppress(ImportError):
        from distributed.scheduler import KilledWorker

        kinds.append(KilledWorker)
    with contextlib.suppress(ImportError):
        from distributed.comm.core import CommClosedError

        kinds.append(CommClosedError)
    return tuple(kinds)


def _is_cluster_failure(exc: BaseException) -> bool:
    return isinstance(exc, _cluster_failures()) or type(exc).__module__.split(".")[0] == \
        "distributed"


def require_parquet(info: TableInfo) -> None:
    """Refuse a CSV file (checked before the plan, so a dry run refuses it too)."""
    if info.format != "parquet":
        raise SpecError(
            f"{info.path}: engine.kind dask reads Parquet only: convert to Parquet (a CSV "
            "file is one partition), e.g. a directory of Parquet files, or use engine.kind "
            "local for a CSV file (nothing was read, spent or written)")


@dataclass(frozen=True)
class _Invalid:
    """A partition with bad cells: its problems instead of its prepared rows."""

    found: Problems


def _load_part(frame: Any, start: int, prepare: PrepareFn, prep: Any) -> Any:
    """Check, transform and prepare one partition (on a worker)."""
    if prep is None:
        return prepare(frame, start)
    found = prep.problems(frame, start)
    if found:
        return _Invalid(found)
    return prepare(prep.transform(frame), start)


def _part_problems(part: Any) -> Problems | None:
    return part.found if isinstance(part, _Invalid) else None


class DaskEngine:
    """Run passes on a Dask cluster at ``address`` (an in-process LocalCluster when None)."""

    def __init__(self, info: TableInfo, columns: Sequence[str], batch_rows: int,
                 address: str | None, prep: Any = None) -> None:
        try:
            import dask.dataframe as dd
            from distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError("engine.kind dask needs the optional dependencies: "
                              "pip install 'dpcausal[dask]'") from exc
        require_parquet(info)
        self.n_rows = info.n_rows
        self.path = info.path
        self.prep = prep
        self.passes = 0
        self.columns = list(dict.fromkeys(columns))
        self._cluster: Any = None
        self.client: Any = None
        self._parts: list[Any] = []
        self.pieces = plan_pieces(info, batch_rows, self.columns)
        try:
            try:
                if address is None:
                    self._cluster = LocalCluster(n_workers=2, threads_per_worker=1,
                                                 processes=False, dashboard_address=None)
                    address = self._cluster.scheduler_address
                self.client = Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as exc:
                raise EngineError(
                    f"engine.address: cannot connect to the Dask scheduler at {address}: {exc}; "
                    "check the address and that the scheduler runs (nothing was read, spent or "
                    "written)") from exc
            self.description = (f"dask ({len(self.client.scheduler_info().get('workers', {}))} "
                                f"workers at {address}, {len(self.pieces)} partitions)")
            meta = _meta(self.pieces, self.columns)
            self.frame = dd.from_map(functools.partial(read_piece, columns=self.columns),
                                     self.pieces, meta=meta, enforce_metadata=False)
        except BaseException:
            self.close()  # never leave a started LocalCluster or a client behind
            raise

    def _call(self, fn: Any) -> Any:
        """Run ``fn`` and turn a cluster failure into an EngineError (exit 5). dpcausal errors
        (bad values, a changed file) and any other exception of a computation propagate as on
        the local engine (the latter as an internal error); no exception text is copied, as a
        computation's error may quote data."""
        try:
            return fn()
        except DPCausalError:
            raise
        except (Exception, asyncio.CancelledError) as exc:  # the latter is a BaseException
            if not _is_cluster_failure(exc):
                raise
            raise EngineError(
                f"the Dask engine failed mid-run ({type(exc).__name__}); nothing was released, "
                "written or charged; rerun when the cluster is healthy") from exc

    def load(self, prepare: PrepareFn) -> None:
        import dask

        parts = self.frame.to_delayed()
        mapped = [dask.delayed(_load_part)(part, piece.start, prepare, self.prep)
                  for part, piece in zip(parts, self.pieces, strict=True)]
        self._parts = self._call(lambda: self.client.compute(mapped))
        if self.prep is not None:  # every partition's problems, added up on the client
            flags = self._call(lambda: self.client.gather(
                self.client.map(_part_problems, self._parts, pure=False)))
            found = Problems()
            for f in flags:
                if f is not None:
                    found.merge(f)
            if found:
                raise self.prep.error(found, self.path)

    def _futures(self, stat: StatFn) -> list[Any]:
        assert self._parts, "load() first"
        self.passes += 1
        starts = [p.start for p in self.pieces]
        return self._call(lambda: self.client.map(stat, self._parts, starts, pure=False))

    def map_sum(self, stat: StatFn) -> Any:
        """Σ of the per-partition statistics, added pairwise ON THE WORKERS in a fixed tree over
        the partition order ((0+1)+(2+3))+…, so the client receives one statistic, not one per
        partition (a 2m × 2m Gram per partition would otherwise pile up on the client); the same
        partitions always give the same summation order."""
        level = self._futures(stat)

        def reduce() -> Any:
            nonlocal level
            while len(level) > 1:
                pairs = [self.client.submit(tree_add, level[i], level[i + 1], pure=False)
                         for i in range(0, len(level) - 1, 2)]
                level = pairs + level[len(level) - len(level) % 2:]
            return level[0].result()

        return self._call(reduce)

    def map_list(self, stat: StatFn) -> list[Any]:
        futures = self._futures(stat)
        return self._call(lambda: self.client.gather(futures))

    def close(self) -> None:
        for obj in (getattr(self, "client", None), getattr(self, "_cluster", None)):
            if obj is not None:
                with contextlib.suppress(Exception):  # best effort on shutdown
                    obj.close()
        self._parts = []
