"""Shared fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
