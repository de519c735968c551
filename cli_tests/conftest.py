"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    """The repository root (configs/ and sample_data/ live there)."""
    return REPO
