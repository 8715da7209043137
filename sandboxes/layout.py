"""The filesystem a local sandbox sees: the bubblewrap arguments that build it.

    /usr /bin /sbin /lib*      host system, read-only (symlinks kept as symlinks)
    /etc                       host /etc read-only; shadow, gshadow, sudoers, ssh, ssl/private and
                               machine-id masked; passwd/group/hosts are bwrap data (uid 1000 = agent)
    /proc                      the sandbox's own, read-only as a whole (so /proc/sys and
                               sysrq-trigger too); kcore, keys, timer_list, sched_debug, ... and
                               acpi, scsi, fs, driver masked
    /dev                       minimal devices, read-only; /dev/shm on the sandbox's tmpfs
    /repo /tmp /var/tmp /run   one size-capped tmpfs (``disk_mb``) holding all four and HOME and
    HOME=/home/agent           /dev/shm: the repo is copied in at start
    /                          read-only: nothing can be created outside the places above
    <same path as host>        read-only binds: the Python task runtime, harness installs

Nothing else of the host exists inside: not its home, /work, /opt, /mnt, /srv or any run directory,
and no host path of lego's own (the sandbox directory, the template's .git, the proxy socket).
The read-only tool binds keep their host paths (a virtualenv and node installs embed their absolute
path in scripts and shebangs), so /proc/self/mountinfo shows those paths and nothing else of lego.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "AGENT_HOME",
    "AGENT_UID",
    "FS_DIRS",
    "REPO_DIR",
    "bwrap_args",
    "bwrap_available",
    "etc_files",
]

REPO_DIR = "/repo"
AGENT_HOME = "/home/agent"
AGENT_UID = 1000
FS_DIRS = {"repo": REPO_DIR, "tmp": "/tmp", "vartmp": "/var/tmp", "run": "/run", "home": AGENT_HOME, "shm": "/dev/shm"}
"""Directories of the sandbox's one tmpfs and where each appears inside."""
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_MASKED_ETC = ("shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh", "ssl/private", "machine-id")
# What container runtimes mask in /proc (bwrap itself covers sys, sysrq-trigger, irq and bus
# read-only): kernel memory, keyrings, timer and scheduler internals, hardware trees.
_MASKED_PROC_FILES = ("kcore", "keys", "key-users", "timer_list", "timer_stats", "sched_debug", "latency_stats", "kmsg")
_MASKED_PROC_DIRS = ("acpi", "asound", "scsi", "fs", "driver")


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None


def etc_files() -> dict[str, bytes]:
    """The replacement passwd, group and hosts (inside path -> content)."""
    return {
        "/etc/passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:{AGENT_UID}:{AGENT_UID}:agent:{AGENT_HOME}:"
        "/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode(),
        "/etc/group": f"root:x:0:\nagent:x:{AGENT_UID}:\nnogroup:x:65534:\n".encode(),
        "/etc/hosts": b"127.0.0.1 localhost lego-sandbox\n::1 localhost\n",
    }


def bwrap_args(
    fs: Path,
    *,
    ro_binds: Sequence[tuple[Path, str]],
    data_fds: Mapping[str, int],
) -> list[str]:
    """bwrap options (no command) for the layout above. ``fs`` is the sandbox's tmpfs as bwrap's
    parent sees it (its subdirectories are :data:`FS_DIRS`); ``ro_binds`` are (source, inside
    path) pairs; ``data_fds`` maps an inside path to a readable fd holding its content."""
    a = ["--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(AGENT_UID), "--gid", str(AGENT_UID)]
    a += ["--cap-drop", "ALL", "--as-pid-1", "--die-with-parent", "--new-session", "--hostname", "lego-sandbox"]
    a += ["--clearenv"]
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            a += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            a += ["--ro-bind", d, d]
    a += ["--ro-bind", "/etc", "/etc"]
    for name in _MASKED_ETC:
        p = Path("/etc") / name
        if p.is_dir() and not p.is_symlink():
            a += ["--tmpfs", str(p), "--remount-ro", str(p)]
        elif p.exists():
            a += ["--ro-bind", "/dev/null", str(p)]
    for inside, fd in data_fds.items():
        a += ["--ro-bind-data", str(fd), inside]
    # /proc is read-only as a whole: bwrap covers /proc/sys and friends only when its caller could
    # write them, and a read-only mount holds whatever the permissions are.
    a += ["--proc", "/proc"]
    for name in _MASKED_PROC_FILES:
        if os.path.exists(f"/proc/{name}"):
            a += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    for name in _MASKED_PROC_DIRS:
        if os.path.isdir(f"/proc/{name}"):
            a += ["--perms", "0555", "--tmpfs", f"/proc/{name}", "--remount-ro", f"/proc/{name}"]
    a += ["--dev", "/dev", "--dir", "/var"]
    for sub, inside in FS_DIRS.items():
        a += ["--bind", str(fs / sub), inside]
    for src, inside in ro_binds:
        a += ["--ro-bind", str(src), inside]
    a += ["--remount-ro", "/proc", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", REPO_DIR]
    return a
