"""Shared fixtures."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import yaml

from cli_tests.pg_server import REQUIRED_ENV, URL_ENV, Cluster, bin_dir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    """The repository root (configs/ and sample_data/ live there)."""
    return REPO


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of configs/ and sample_data/ in a temporary current directory (for example runs)."""
    shutil.copytree(REPO / "sample_data", tmp_path / "sample_data")
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    (tmp_path / "out").mkdir()  # as in a clone (out/.gitkeep): ledgers are never made in new dirs
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def small_owl_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The owl example's spec at ε = 1 without rows to score, in a temporary current directory
    with sample_data/ (for ``audit privacy``)."""
    from cli_tests.helpers import write_yaml

    shutil.copytree(REPO / "sample_data", tmp_path / "sample_data")
    monkeypatch.chdir(tmp_path)
    doc = yaml.safe_load((REPO / "configs" / "owl.yaml").read_text())
    doc["owl"].pop("apply_to")
    doc["privacy"]["epsilon"] = 1.0  # γ = 75 as in the example: the planted pair attains Δ
    return write_yaml(tmp_path / "owl.yaml", doc)


def _unavailable(reason: str) -> Any:
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRED_ENV}=1: the PostgreSQL ledger tests must run here)")
    pytest.skip(reason)


def _need_driver() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("the psycopg driver is not installed (pip install -e '.[test]')")


def _pg_bins() -> Path:
    _need_driver()
    bins = bin_dir()
    if bins is None:
        _unavailable("no PostgreSQL server binaries (initdb, pg_ctl) on this machine: install "
                     f"Debian's postgresql, or set {URL_ENV} to a server the tests may use")
    assert bins is not None
    return bins


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a PostgreSQL server where the tests may create databases.

    ``DPCAUSAL_TEST_PG_URL`` (CI starts one), else a cluster of our own for the session.
    """
    url = os.environ.get(URL_ENV)
    if url:
        _need_driver()
        yield url
        return
    cluster = Cluster(_pg_bins())
    try:
        cluster.start()
        yield cluster.url()
    finally:
        cluster.remove()


def database_url(server: str, name: str) -> str:
    """``server``'s URL pointed at database ``name``."""
    return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))


@contextmanager
def new_database(server: str) -> Iterator[str]:
    """The URL of a new, empty database on ``server`` (dropped after the ``with``)."""
    import psycopg

    name = f"dpcausal_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(server, name)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A new, empty database for one test (dropped afterwards)."""
    with new_database(pg_server) as url:
        yield url


@pytest.fixture
def pg_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the database ledger's key lives for this test (created by ``ledger init``)."""
    path = tmp_path / "pg-ledger.key"
    monkeypatch.setenv("DPCAUSAL_LEDGER_KEY_FILE", str(path))
    monkeypatch.delenv("DPCAUSAL_LEDGER_KEY", raising=False)
    return path


@pytest.fixture
def pg_cluster() -> Iterator[Cluster]:
    """A cluster of this test's own, started: for tests that stop and restart the server."""
    cluster = Cluster(_pg_bins())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()
