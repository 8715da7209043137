"""Fixtures for the tasks room's tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture()
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private lego cache dir, so materialised task repos never leak between tests."""
    monkeypatch.setenv("LEGO_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def package_index(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip (saying why) when pip cannot fetch from the package index the real-project tests use."""
    probe = tmp_path_factory.mktemp("index-probe")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(probe), "iniconfig==2.0.0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        pytest.skip(f"pip cannot reach the package index: {(proc.stderr or proc.stdout).strip()[-300:]}")


@pytest.fixture(scope="session")
def shared_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One lego cache dir for the session: venvs and sdists (tens of seconds each) built once, shared."""
    return tmp_path_factory.mktemp("real-cache")


@pytest.fixture()
def real_cache(shared_cache_dir: Path, package_index: None, monkeypatch: pytest.MonkeyPatch) -> Path:
    """LEGO_CACHE_DIR pointed at the session's shared cache (and the package index known to answer)."""
    monkeypatch.setenv("LEGO_CACHE_DIR", str(shared_cache_dir))
    return shared_cache_dir
