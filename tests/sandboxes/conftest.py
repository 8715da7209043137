"""Fixture tasks for sandbox / grading tests: a real git repo holding a tiny buggy library."""

from __future__ import annotations

from pathlib import Path

import pytest
from sbx_fixtures import make_task

from lego.types import Task


@pytest.fixture(scope="session")
def calc_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return make_task(tmp_path_factory.mktemp("tasks"))


@pytest.fixture()
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private lego cache dir, so materialised task repos never leak between tests."""
    monkeypatch.setenv("LEGO_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"
