"""The Dask engine: the table is a ``dask.dataframe`` with one partition per piece (Parquet row
groups of one file, read with column projection on the workers); each partition is mapped once
(clipping, features) and kept on its worker, and every pass maps a per-partition statistic and
adds the results pairwise on the workers in a fixed tree over the partition order; the client
receives the one total. No noise is ever drawn on a worker."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import pyarrow.parquet as pq

from dpcausal.engine.base import (
    EngineError,
    PrepareFn,
    StatFn,
    plan_pieces,
    read_piece,
    tree_add,
)
from dpcausal.errors import DPCausalError
from dpcausal.io.tables import TableInfo, parquet_files

CONNECT_TIMEOUT = "20s"
"""How long to wait for the scheduler at ``engine.address``."""


def _meta(info: TableInfo, columns: list[str]) -> Any:
    """An empty frame with the projected schema (so Dask never reads rows on the client)."""
    if info.format == "parquet":
        schema = pq.ParquetFile(parquet_files(info.path)[0]).schema_arrow
        return schema.empty_table().select(columns).to_pandas()
    return None


class DaskEngine:
    """Run passes on a Dask cluster at ``address`` (an in-process LocalCluster when None)."""

    def __init__(self, info: TableInfo, columns: Sequence[str], batch_rows: int,
                 address: str | None) -> None:
        try:
            import dask.dataframe as dd
            from distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError("engine.kind dask needs the optional dependencies: "
                              "pip install 'dpcausal[dask]'") from exc
        self.n_rows = info.n_rows
        self.passes = 0
        self.pieces = plan_pieces(info, batch_rows)
        self.columns = list(dict.fromkeys(columns))
        self._cluster: Any = None
        try:
            if address is None:
                self._cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                             dashboard_address=":0")
                address = self._cluster.scheduler_address
            self.client: Any = Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            self.close()
            raise EngineError(f"engine.address: cannot connect to the Dask scheduler at "
                              f"{address}: {exc}; check the address and that the scheduler runs "
                              "(nothing was read, spent or written)") from exc
        self.description = (f"dask ({len(self.client.scheduler_info().get('workers', {}))} "
                            f"workers at {address}, {len(self.pieces)} partitions)")
        meta = _meta(info, self.columns)
        self.frame = dd.from_map(functools.partial(read_piece, columns=self.columns), self.pieces,
                                 meta=meta, enforce_metadata=False)
        self._parts: list[Any] = []

    def _call(self, fn: Any) -> Any:
        """Run ``fn`` and turn a cluster failure into an EngineError (user errors pass through)."""
        try:
            return fn()
        except DPCausalError:
            raise
        except Exception as exc:
            raise EngineError(
                f"the Dask engine failed mid-run ({type(exc).__name__}: {str(exc)[:200]}); nothing "
                "was released, written or charged; rerun when the cluster is healthy") from exc

    def load(self, prepare: PrepareFn) -> None:
        import dask

        parts = self.frame.to_delayed()
        mapped = [dask.delayed(prepare)(part, piece.start)
                  for part, piece in zip(parts, self.pieces, strict=True)]
        self._parts = self._call(lambda: self.client.compute(mapped))

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
        while len(level) > 1:
            pairs = [self.client.submit(tree_add, level[i], level[i + 1], pure=False)
                     for i in range(0, len(level) - 1, 2)]
            level = pairs + level[len(level) - len(level) % 2:]
        return self._call(lambda: level[0].result())

    def map_list(self, stat: StatFn) -> list[Any]:
        futures = self._futures(stat)
        return self._call(lambda: self.client.gather(futures))

    def close(self) -> None:
        for obj in (getattr(self, "client", None), self._cluster):
            if obj is not None:
                with contextlib.suppress(Exception):  # best effort on shutdown
                    obj.close()
        self._parts = []
