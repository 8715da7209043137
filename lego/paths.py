"""Where lego keeps things on disk: a per-user cache (built models) and data dir (harness installs).

Both honour ``LEGO_CACHE_DIR`` / ``LEGO_DATA_DIR`` and otherwise follow XDG conventions.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "data_dir"]


def cache_dir() -> Path:
    """Rebuildable artefacts (the embedded default model, built task repos)."""
    env = os.environ.get("LEGO_CACHE_DIR")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lego"
    base.mkdir(parents=True, exist_ok=True)
    return base


def data_dir() -> Path:
    """Installed things that are slow to rebuild (harness virtualenvs and npm prefixes)."""
    env = os.environ.get("LEGO_DATA_DIR")
    base = Path(env) if env else Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "lego"
    base.mkdir(parents=True, exist_ok=True)
    return base
