"""The launcher of a local sandbox's host-side processes: it sets up the process it runs in and then
execs the real program (bubblewrap, the bare process server, or the proxy bridge).

Why a program and not a ``preexec_fn``. A ``preexec_fn`` makes :mod:`subprocess` fork the whole
lego process instead of using vfork: with the engine and the trainer resident that is gigabytes of
page tables copied while the forking thread holds the GIL, and then a copy-on-write fault for every
page the trainer or the engine writes until the child execs. On the default two-core box that was a
measurable share of the rollout loop (README, "Asynchronous training"). Started through this file
(``python -I -S launcher.py SPEC -- ARGV...``), :class:`subprocess.Popen` vforks, and the set-up
below runs in a small fresh interpreter instead.

``SPEC`` is a JSON object, written by lego on the host (the sandbox never sees it); each key is
optional and applied in this order, as the ``preexec_fn`` did:

* ``rlimits``: ``{"CPU": n, "AS": n, ...}``, each set as soft and hard limit (``resource.RLIMIT_*``);
* ``cgroup_procs``: ``cgroup.procs`` files this process joins;
* ``ns``: the private mount namespace of :mod:`lego.sandboxes.privilege` (:func:`enter_private_ns`):
  ``{"uid", "gid", "privileged", "fs", "fs_bytes", "dirs", "stage": [[source, staging dir], ...]}``;
* ``parent``: lego's pid. The process gets SIGKILL when the thread of lego that started it exits (the
  kernel's parent-death signal, which survives exec, setpriv's capability drops and joining
  namespaces; only a uid/gid change clears it, so it is armed last), and exits at once if that
  parent is already gone.

A failure writes one line to stderr and exits 127 without exec'ing: the caller reads that line as
the start-up error. The file uses only the standard library and must not import lego (it runs with
``-I -S``).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import sys
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
EXIT_FAILED = 127


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(libc: ctypes.CDLL, src: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(
        libc.mount(
            src.encode(), target.encode(), fstype.encode() if fstype else None, flags, data.encode() if data else None
        ),
        f"mount {target}",
    )


def enter_private_ns(
    uid: int,
    gid: int,
    privileged: bool,
    fs: str,
    fs_bytes: int,
    dirs: Sequence[str],
    stage: Sequence[tuple[str, str]],
) -> None:
    """Private mount namespace (plus a user namespace mapping only our own uid when not root), the
    sandbox tmpfs at ``fs`` with the subdirectories ``dirs`` owned by uid:gid, each (source, staging
    dir) bind, then the sandbox identity (see :mod:`lego.sandboxes.privilege`)."""
    libc = _libc()
    if privileged:
        _check(libc.unshare(_CLONE_NEWNS), "unshare(mount)")
    else:
        own_uid, own_gid = os.getuid(), os.getgid()
        _check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(user, mount)")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{own_uid} {own_uid} 1\n")
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny\n")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{own_gid} {own_gid} 1\n")
    _mount(libc, "none", "/", None, _MS_REC | _MS_PRIVATE, None)
    _mount(libc, "tmpfs", fs, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={fs_bytes},mode=0755,uid={uid},gid={gid}")
    for sub in dirs:
        path = os.path.join(fs, sub)
        os.mkdir(path)
        os.chown(path, uid, gid)
    for src, dest in stage:
        _mount(libc, src, dest, None, _MS_BIND | _MS_REC, None)
    if privileged:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)


def prepare(spec: dict[str, object]) -> None:
    """Apply ``spec`` (see the module docstring) to this process."""
    rlimits = spec.get("rlimits", {})
    assert isinstance(rlimits, dict)
    for name, value in rlimits.items():
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (int(value), int(value)))
    procs = spec.get("cgroup_procs", [])
    assert isinstance(procs, list)
    for path in procs:
        fd = os.open(str(path), os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
    ns = spec.get("ns")
    if ns is not None:
        assert isinstance(ns, dict)
        enter_private_ns(
            int(ns["uid"]),
            int(ns["gid"]),
            bool(ns["privileged"]),
            str(ns["fs"]),
            int(ns["fs_bytes"]),
            [str(d) for d in ns["dirs"]],
            [(str(s), str(d)) for s, d in ns["stage"]],
        )
    parent = spec.get("parent")
    if parent is not None:
        _check(_libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != int(str(parent)):
            raise OSError(f"lego (pid {parent}) exited before its sandbox started")


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: launcher.py SPEC_JSON -- PROGRAM [ARGS...]\n")
        return 2
    try:
        # Looked up now, as lego: after the identity change the sandbox uid may not read the
        # directories (nor the standard library that a later lookup would import).
        program = shutil.which(argv[3])
        if program is None:
            raise FileNotFoundError(f"{argv[3]} not found on PATH")
        prepare(json.loads(argv[1]))
        os.execv(program, argv[3:])
    except Exception as e:  # one line, read by lego as the start-up error
        sys.stderr.write(f"sandbox launcher: {e}\n")
        sys.stderr.flush()
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
