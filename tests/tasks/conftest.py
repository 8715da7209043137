"""Fixtures for the tasks room's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture()
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private lego cache dir, so materialised task repos never leak between tests."""
    monkeypatch.setenv("LEGO_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"
