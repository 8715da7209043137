"""Per-sandbox cgroups: a process cap and one memory budget that hold whoever runs lego.

A sandbox's processes, and the pages of its in-memory file systems that they write (tmpfs pages
are charged to the writer's memory cgroup), share one ``memory`` limit
(``SandboxConfig.memory_budget_mb``); ``pids`` caps how many tasks it holds
(``SandboxConfig.max_processes``). lego creates them where the host lets it:

* cgroup v1: ``/sys/fs/cgroup/{pids,memory}/lego/<sandbox>`` (lego runs as root);
* cgroup v2: a directory below lego's own cgroup, when its parent delegates the controller.

Where neither is writable (a typical unprivileged desktop session), that controller is absent and
:func:`enforcement` says so (``lego doctor`` prints it): the process cap then falls back to
RLIMIT_NPROC of the sandbox's own host uid, and memory is bounded only per process (RLIMIT_AS) and
per file system (the sandbox's one tmpfs, capped at ``disk_mb``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

__all__ = ["SandboxCgroup", "enforcement"]

_ROOT = Path("/sys/fs/cgroup")


def _v2_parent(controller: str) -> Path | None:
    """lego's own v2 cgroup, if it delegates ``controller`` to children."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    rel = next((ln.split("::", 1)[1] for ln in lines if ln.startswith("0::")), None)
    if rel is None:
        return None
    for mount in (_ROOT, _ROOT / "unified"):
        parent = mount / rel.lstrip("/")
        with contextlib.suppress(OSError):
            if controller in (parent / "cgroup.subtree_control").read_text().split():
                return parent
    return None


def _limits(controller: str, value: int) -> list[tuple[str, str]]:
    if controller == "pids":
        return [("pids.max", str(value))]
    # v1 names first, v2 after; only the files the hierarchy has are written.
    return [
        ("memory.limit_in_bytes", str(value)),
        ("memory.memsw.limit_in_bytes", str(value)),
        ("memory.max", str(value)),
        ("memory.swap.max", "0"),
    ]


def _make(controller: str, name: str, value: int) -> Path | None:
    """``<hierarchy>/<name>/agent`` with the limit on ``agent``; returns the ``agent`` path."""
    for parent in (_ROOT / controller / "lego", _v2_parent(controller)):
        if parent is None:
            continue
        path = parent / name / "agent"
        created = not path.exists()  # v2: pids and memory share one directory
        try:
            path.mkdir(parents=True, exist_ok=True)
            written = 0
            for fname, v in _limits(controller, value):
                if (path / fname).exists():
                    (path / fname).write_text(v)
                    written += 1
            if not written:
                raise OSError(f"{path} has no {controller} limit file")
        except OSError:
            if created:
                with contextlib.suppress(OSError):
                    path.rmdir()
                    path.parent.rmdir()
            continue
        return path
    return None


class SandboxCgroup:
    """The pids and memory cgroups of one sandbox (either may be None).

    Two levels each: the sandbox's own process server lives in ``<name>`` (no limit; it joins
    between fork and exec with :meth:`join_self`), every command it starts moves itself into
    ``<name>/agent``, which carries the limits (:meth:`agent_procs`). So when the agent exhausts
    its memory budget, the OOM killer chooses among the agent's processes only (tmpfs pages belong
    to no process, so otherwise it could pick the server and end the sandbox)."""

    def __init__(self, pids: Path | None, memory: Path | None) -> None:
        self.pids, self.memory = pids, memory
        # v2 puts both controllers in one directory: join it once.
        self._procs = sorted({str(p.parent / "cgroup.procs") for p in (pids, memory) if p is not None})

    def agent_procs(self) -> list[Path]:
        """The ``cgroup.procs`` files the agent's processes join (one per directory)."""
        return sorted({p / "cgroup.procs" for p in (self.pids, self.memory) if p is not None})

    @classmethod
    def create(cls, name: str, max_pids: int, memory_bytes: int) -> SandboxCgroup:
        return cls(_make("pids", name, max_pids), _make("memory", name, memory_bytes))

    @classmethod
    def of(cls, name: str) -> SandboxCgroup:
        """The v1 cgroups a sandbox called ``name`` would have (for removing leftovers)."""
        return cls(_ROOT / "pids" / "lego" / name / "agent", _ROOT / "memory" / "lego" / name / "agent")

    def join_self(self) -> None:
        """Move the calling process into the cgroups (safe between fork and exec: plain writes)."""
        for procs in self._procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)

    def exists(self) -> bool:
        return any(p is not None and p.parent.exists() for p in (self.pids, self.memory))

    def remove(self) -> None:
        for p in {self.pids, self.memory}:
            if p is not None:
                for d in (p, p.parent):
                    with contextlib.suppress(OSError):
                        d.rmdir()


def enforcement() -> dict[str, str]:
    """What a sandbox created now would get, per controller: ``pids`` and ``memory`` map to
    where the cgroup lives, or to what bounds that resource instead."""
    probe = SandboxCgroup.create(f"probe-{uuid.uuid4().hex[:8]}", 64, 64 << 20)
    try:
        return {
            "pids": f"pids cgroup ({probe.pids.parent.parent})"
            if probe.pids
            else "no pids cgroup here: RLIMIT_NPROC of the sandbox's host uid",
            "memory": f"memory cgroup ({probe.memory.parent.parent}): processes and tmpfs share memory_budget_mb"
            if probe.memory
            else "no memory cgroup here: RLIMIT_AS per process and the one tmpfs capped at disk_mb only",
        }
    finally:
        probe.remove()
