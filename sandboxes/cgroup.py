"""A pids cgroup per sandbox: the process cap that holds even when the host user is root.

RLIMIT_NPROC is not enforced for processes whose host uid is 0, which is what a sandbox's uid maps
to when lego runs as root. A pids cgroup caps the number of tasks regardless of uid. lego creates
one where the host lets it: the cgroup v1 ``pids`` hierarchy, or a cgroup v2 directory below
lego's own cgroup whose parent delegates the ``pids`` controller. Where neither is writable
(a typical unprivileged desktop session), ``PidCgroup.create`` returns None and the RLIMIT_NPROC
set by the backend is the cap (it is enforced for non-root users).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["PidCgroup"]

_V1 = Path("/sys/fs/cgroup/pids")


def _v2_parent() -> Path | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    rel = next((ln.split("::", 1)[1] for ln in lines if ln.startswith("0::")), None)
    if rel is None:
        return None
    for mount in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        parent = mount / rel.lstrip("/")
        with contextlib.suppress(OSError):
            if "pids" in (parent / "cgroup.subtree_control").read_text().split():
                return parent
    return None


class PidCgroup:
    """One cgroup directory with ``pids.max`` set; processes join it between fork and exec."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._procs = str(path / "cgroup.procs")

    @staticmethod
    def parent_v1() -> Path:
        return _V1 / "lego"

    @classmethod
    def create(cls, name: str, max_pids: int) -> PidCgroup | None:
        for parent in (_V1 / "lego", _v2_parent()):
            if parent is None:
                continue
            path = parent / name
            try:
                path.mkdir(parents=True)
                (path / "pids.max").write_text(str(max_pids))
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            return cls(path)
        return None

    def join_self(self) -> None:
        """Move the calling process into the cgroup (safe between fork and exec: one write)."""
        fd = os.open(self._procs, os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()
