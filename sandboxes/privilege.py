"""Who a local sandbox is on the host, and the private mount namespace bubblewrap starts in.

Host identity. When lego runs as root, bubblewrap must not: a user namespace created by host root
maps the agent's uid to host uid 0, and every kernel check made against the host (sysctls in
/proc/sys, files of the host, per-user limits) then sees root. So each sandbox gets its own
unprivileged host uid and gid, :data:`UID_BASE` + slot, and bubblewrap and everything in the sandbox
run as it (uid 1000 inside maps to it). Why one uid per sandbox rather than one shared: the kernel
keeps per-user accounts (RLIMIT_NPROC, inotify instances, user namespaces, POSIX message queues,
locked memory), and a shared uid would let one sandbox's fork bomb or inotify flood starve every
other sandbox. Why this range: 0x70000000 + 0..65535 lies above the ranges that systemd-nspawn picks
container uids from (524288-1879048191) and that /etc/subuid allocations use, and below 2**31,
where tools that keep uids in signed ints fail. A slot is held by an flock on a file in
``<tmp>/lego-uids``, released by the kernel when its holder dies, so concurrent lego processes never
share a uid; a slot whose uid names a user in the passwd database is skipped. The file goes with its
lock: :meth:`HostIdentity.release` deletes it, and every allocation deletes the files whose holder
died without releasing (a killed lego), so the directory holds one file per live sandbox. A lock is
held only while its file is still the one at that path (checked after locking), so deleting a file
never lets two processes hold one slot.

When lego runs as an ordinary user, the sandbox runs as that user (as before); the per-user
accounts are then shared with that user's other processes.

Private mount namespace. Before it execs bubblewrap, the sandbox launcher
(:func:`lego.sandboxes.launcher.enter_private_ns`; a program of its own, see
:mod:`lego.sandboxes.launcher` for why not a ``preexec_fn``) enters a new mount namespace (plus,
when not root, a user namespace mapping only its own uid, which grants the right to mount in it),
makes every mount private, and mounts there, invisible to the host and to other sandboxes:

* the sandbox's one tmpfs (``size=disk_mb``, owned by the sandbox uid), whose subdirectories become
  /repo, /tmp, /var/tmp, /run, HOME and /dev/shm inside: one disk budget for all of them, and no
  host path in the sandbox's mountinfo (a tmpfs has no host path);
* each read-only tool bind at a staging directory the sandbox uid can traverse: the Python runtime
  and harness installs live under /root (mode 0700), which the sandbox uid cannot enter, and
  bubblewrap 0.8 resolves ``--ro-bind-fd`` sources by their path text, so passing it fds opened by
  root does not work.

Then it drops to the sandbox uid. lego reaches the tmpfs (to copy the repo in and take diffs) from
outside through ``/proc/<bwrap pid>/root`` and ``/proc/<bwrap pid>/ns/mnt``, as root or as the
namespace's owner.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lego.errors import SandboxError

__all__ = ["UID_BASE", "HostIdentity", "sweep_locks"]

UID_BASE = 0x70000000
_SLOTS = 65536


@dataclass
class HostIdentity:
    """The host uid/gid a sandbox runs as; ``privileged`` when lego is root and must drop to it."""

    uid: int
    gid: int
    privileged: bool
    _lock: int | None = None
    _path: Path | None = None

    @classmethod
    def allocate(cls) -> HostIdentity:
        if os.geteuid() != 0:
            return cls(os.getuid(), os.getgid(), False)
        locks = Path(tempfile.gettempdir()) / "lego-uids"
        locks.mkdir(mode=0o700, exist_ok=True)
        sweep_locks(locks)
        for slot in random.sample(range(_SLOTS), 256):
            uid = UID_BASE + slot
            with contextlib.suppress(KeyError):
                pwd.getpwuid(uid)
                continue
            path = locks / str(uid)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            if not _locked(fd, path):
                os.close(fd)
                continue
            return cls(uid, uid, True, fd, path)
        raise SandboxError(f"no free sandbox uid in {UID_BASE}+0..{_SLOTS}; close other lego runs and retry")

    def release(self) -> None:
        if self._lock is not None:
            if self._path is not None:  # delete while still holding the lock (see the module docstring)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path)
            os.close(self._lock)
            self._lock = None


def _locked(fd: int, path: Path) -> bool:
    """Take ``fd``'s flock without waiting, and keep it only if ``path`` is still that file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:  # deleted by its releaser or a sweep after we opened it
        return False


def sweep_locks(locks: Path) -> int:
    """Delete the lock files in ``locks`` that no live process holds (their sandbox's lego was killed);
    returns how many. A held lock is untouched: taking it fails at once."""
    removed = 0
    for path in locks.iterdir():
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if _locked(fd, path):
                os.unlink(path)
                removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed
