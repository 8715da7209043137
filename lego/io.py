"""Atomic file writes: a crash leaves the old file or the new one, never half of either; and the lock
that keeps a directory to one process (:class:`DirLock`)."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "DirLock",
    "DirLockedError",
    "append_jsonl",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "read_jsonl",
]


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temp file in the same directory, fsync, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = None) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent))


def append_jsonl(path: str | Path, obj: Any) -> None:
    """Append one JSON line and fsync. A torn last line (killed mid-write) is skipped by :func:`read_jsonl`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(obj) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: str | Path) -> list[Any]:
    """Read JSON lines, dropping a torn final line."""
    out: list[Any] = []
    p = Path(path)
    if not p.exists():
        return out
    lines = p.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise
    return out


class DirLockedError(Exception):
    """Another process holds the directory (:class:`DirLock`); the message names it."""


class DirLock:
    """An exclusive lock on a directory, held while this object lives (``flock`` on ``DIR/.lock``, so the
    kernel releases it when the holder dies, however it ends); the holder writes its pid there, so
    whoever is refused can be told which process has it."""

    NAME = ".lock"

    def __init__(self, root: str | Path, what: str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._file = open(self.root / self.NAME, "a+", encoding="utf-8")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "?"
            self._file.close()
            raise DirLockedError(
                f"{self.root} is in use by another {what} (pid {holder}); wait for it to end, stop it, or use "
                "another directory"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"{os.getpid()}\n")
        self._file.flush()

    def release(self) -> None:
        if not self._file.closed:
            self._file.close()
