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

Nothing is left behind. :meth:`SandboxCgroup.remove` kills what still runs in the cgroups before
removing them, and a sandbox's cgroups are owned through an flock on ``<tmp>/lego-cgroups/<name>``
held from before they are made until they are removed: when the lego process that made them dies
without removing them (SIGKILL, a Ctrl-C that drops rollouts in flight), the next
:meth:`SandboxCgroup.create` of any lego process finds the lock free and removes them (:func:`sweep`).
A ``lego-*`` cgroup without a lock file (made by an older lego) goes once it has been empty for
:data:`UNOWNED_STALE_S`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import tempfile
import time
import uuid
from pathlib import Path

__all__ = ["UNOWNED_STALE_S", "SandboxCgroup", "enforcement", "sweep"]

_ROOT = Path("/sys/fs/cgroup")
_LOCKS = Path(tempfile.gettempdir()) / "lego-cgroups"
UNOWNED_STALE_S = 600.0
"""How old an empty ``lego-*`` cgroup with no owner lock must be before a sweep removes it."""


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

    Two levels each: the sandbox's own process server lives in ``<name>`` (no limit; the sandbox
    launcher joins :meth:`server_procs` before it execs), every command it starts moves itself into
    ``<name>/agent``, which carries the limits (:meth:`agent_procs`). So when the agent exhausts
    its memory budget, the OOM killer chooses among the agent's processes only (tmpfs pages belong
    to no process, so otherwise it could pick the server and end the sandbox)."""

    def __init__(self, pids: Path | None, memory: Path | None, owner: tuple[str, int] | None = None) -> None:
        self.pids, self.memory = pids, memory
        self._owner = owner  # (name, the owner flock's fd): see the module docstring; None: not ours
        # v2 puts both controllers in one directory: join it once.
        self._procs = sorted({str(p.parent / "cgroup.procs") for p in (pids, memory) if p is not None})

    def agent_procs(self) -> list[Path]:
        """The ``cgroup.procs`` files the agent's processes join (one per directory)."""
        return sorted({p / "cgroup.procs" for p in (self.pids, self.memory) if p is not None})

    @classmethod
    def create(cls, name: str, max_pids: int, memory_bytes: int) -> SandboxCgroup:
        """The cgroups of a new sandbox ``name``, owned by this process; first removes those whose
        owner died (:func:`sweep`)."""
        sweep()
        lock = _own(name)
        owner = (name, lock) if lock is not None else None
        made = cls(_make("pids", name, max_pids), _make("memory", name, memory_bytes), owner)
        if made.pids is None and made.memory is None:
            made.remove()  # nothing to own: drop the lock file
        return made

    @classmethod
    def of(cls, name: str) -> SandboxCgroup:
        """The v1 cgroups a sandbox called ``name`` would have (for removing leftovers)."""
        return cls(_ROOT / "pids" / "lego" / name / "agent", _ROOT / "memory" / "lego" / name / "agent")

    def server_procs(self) -> list[str]:
        """The ``cgroup.procs`` files the sandbox's process server joins (one per directory)."""
        return list(self._procs)

    def exists(self) -> bool:
        return any(p is not None and p.parent.exists() for p in (self.pids, self.memory))

    def remove(self) -> None:
        """Kill what still runs in the cgroups, remove them and, once they are gone, the owner lock.
        An exiting task can keep a cgroup busy for a moment: call again until :meth:`exists` is False."""
        for p in {self.pids, self.memory}:
            if p is not None:
                for d in (p, p.parent):
                    _kill_members(d)
                    with contextlib.suppress(OSError):
                        d.rmdir()
        if self._owner is not None and not self.exists():
            name, fd = self._owner
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_LOCKS / name)
            os.close(fd)
            self._owner = None


def _kill_members(cgroup: Path) -> None:
    """SIGKILL every process in ``cgroup`` (a removed sandbox's leftovers: orphans, daemons)."""
    try:
        pids = (cgroup / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _own(name: str) -> int | None:
    """The owner flock of cgroup ``name`` (None where the lock directory cannot be made)."""
    try:
        _LOCKS.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(_LOCKS / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    fcntl.flock(fd, fcntl.LOCK_EX)  # a fresh name: nobody else holds it
    return fd


def _parents() -> list[Path]:
    """Where sandbox cgroups are made: the v1 hierarchies' ``lego`` directories and lego's v2 cgroup."""
    out = [_ROOT / controller / "lego" for controller in ("pids", "memory")]
    out += [p for p in (_v2_parent("pids"), _v2_parent("memory")) if p is not None]
    return [p for p in dict.fromkeys(out) if p.is_dir()]


def _dead_owner(name: str, cgroup: Path) -> tuple[bool, int | None]:
    """Whether ``cgroup``'s owner is gone: ``(gone, the owner lock now held by us or None)``."""
    path = _LOCKS / name
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:  # never owned through a lock: an older lego's, once empty long enough
        try:
            empty = not any((d / "cgroup.procs").read_text().split() for d in (cgroup, cgroup / "agent") if d.exists())
            return empty and time.time() - cgroup.stat().st_mtime > UNOWNED_STALE_S, None
        except OSError:
            return False, None
    except OSError:
        return False, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # its lego is alive
        os.close(fd)
        return False, None
    return True, fd


def sweep() -> int:
    """Remove the ``lego-*`` cgroups whose owning lego process is gone (see the module docstring);
    returns how many sandboxes' cgroups went. A live owner's are never touched."""
    removed = 0
    for parent in _parents():
        for cgroup in parent.glob("lego-*"):
            gone, fd = _dead_owner(cgroup.name, cgroup)
            if not gone:
                continue
            for d in (cgroup / "agent", cgroup):
                _kill_members(d)
                with contextlib.suppress(OSError):
                    d.rmdir()
            if not cgroup.exists():
                removed += 1
                if fd is not None and not any((p / cgroup.name).exists() for p in _parents()):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(_LOCKS / cgroup.name)
            if fd is not None:
                os.close(fd)
    return removed


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
