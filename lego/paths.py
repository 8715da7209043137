"""Where lego keeps things on disk: a per-user cache (built models) and data dir (harness installs),
and the private temporary directories a process makes (:func:`owned_tmpdir`).

Both honour ``LEGO_CACHE_DIR`` / ``LEGO_DATA_DIR`` and otherwise follow XDG conventions.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["cache_dir", "data_dir", "owned_tmpdir"]

_OWNER = ".owner"


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


def owned_tmpdir(prefix: str) -> Path:
    """A private temporary directory (``mkdtemp``: mode 0700) that goes when this process ends: at exit
    (a normal one, and Ctrl-C or SIGTERM as lego's long commands take them), or sooner by its user's
    ``shutil.rmtree``. One a SIGKILL left behind is swept by the next process that makes one of the
    same prefix: the directory records its owner's pid, and a dead owner's is removed."""
    _sweep(prefix)
    path = Path(tempfile.mkdtemp(prefix=prefix))
    (path / _OWNER).write_text(f"{os.getpid()}\n")
    atexit.register(shutil.rmtree, path, True)
    return path


def _sweep(prefix: str) -> None:
    for old in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            pid = int((old / _OWNER).read_text().strip())
        except (OSError, ValueError):
            continue  # not one of ours, or still being made: left alone
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except PermissionError:
            pass  # alive, and another user's
