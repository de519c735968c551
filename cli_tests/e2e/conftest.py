"""Fixtures shared by the engine tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def cluster() -> Any:
    """An in-process 2-worker Dask LocalCluster shared by the engine tests."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as lc:
        yield lc
