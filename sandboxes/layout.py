"""The filesystem a local sandbox sees: the bubblewrap arguments that build it.

    /usr /bin /sbin /lib*      host system, read-only (symlinks kept as symlinks)
    /etc                       host /etc read-only; shadow, gshadow, sudoers, ssh, ssl/private and
                               machine-id masked; passwd/group/hosts replaced (uid 1000 = agent)
    /proc /dev                 the sandbox's own (private pid namespace; minimal devices)
    /tmp /var/tmp /run HOME    empty private tmpfs, each capped at ``tmpfs_bytes``; HOME=/home/agent
    /repo                      the rollout's working copy, writable
    /lego/base.git             the pristine .git, read-only: diffs are taken against it
    /run/lego/proxy.sock       the proxy's Unix socket (only when a proxy is given)
    <same path as host>        read-only binds: the Python task runtime, harness installs

Nothing else of the host exists inside: not its home, /work, /opt, /mnt, /srv or any run directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from lego.errors import SandboxError

__all__ = [
    "AGENT_HOME",
    "AGENT_UID",
    "BASE_GIT",
    "PROXY_SOCK",
    "REPO_DIR",
    "bwrap_args",
    "bwrap_available",
]

REPO_DIR = "/repo"
AGENT_HOME = "/home/agent"
AGENT_UID = 1000
BASE_GIT = "/lego/base.git"
PROXY_SOCK = "/run/lego/proxy.sock"
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_MASKED_ETC = ("shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh", "ssl/private", "machine-id")


def bwrap_available() -> bool:
    """bwrap builds the sandbox; nsenter joins it for every command."""
    return shutil.which("bwrap") is not None and shutil.which("nsenter") is not None


def _write_etc(etc: Path) -> None:
    etc.mkdir()
    (etc / "passwd").write_text(
        f"root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:{AGENT_UID}:{AGENT_UID}:agent:{AGENT_HOME}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text(f"root:x:0:\nagent:x:{AGENT_UID}:\nnogroup:x:65534:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost lego-sandbox\n::1 localhost\n")


def bwrap_args(
    etc: Path,
    *,
    repo: Path,
    base_git: Path,
    ro_binds: Sequence[Path],
    rw_binds: Mapping[Path, str],
    proxy_uds: Path | None,
    tmpfs_bytes: int,
) -> list[str]:
    """bwrap options (no command) for the layout above; ``etc`` is a fresh host dir for the
    replacement passwd/group/hosts files."""
    _write_etc(etc)
    a = ["--unshare-all", "--unshare-user", "--uid", str(AGENT_UID), "--gid", str(AGENT_UID), "--cap-drop", "ALL"]
    a += ["--die-with-parent", "--new-session", "--hostname", "lego-sandbox", "--clearenv"]
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            a += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            a += ["--ro-bind", d, d]
    a += ["--ro-bind", "/etc", "/etc"]
    for name in _MASKED_ETC:
        p = Path("/etc") / name
        if p.is_dir() and not p.is_symlink():
            a += ["--tmpfs", str(p)]
        elif p.exists():
            a += ["--ro-bind", "/dev/null", str(p)]
    for name in ("passwd", "group", "hosts"):
        a += ["--ro-bind", str(etc / name), f"/etc/{name}"]
    size = ["--size", str(tmpfs_bytes)]
    a += ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/tmp", *size, "--tmpfs", "/run", "--dir", "/var"]
    a += [*size, "--tmpfs", "/var/tmp", *size, "--tmpfs", AGENT_HOME, "--bind", str(repo), REPO_DIR]
    a += ["--ro-bind", str(base_git), BASE_GIT]
    for p in ro_binds:
        if not Path(p).exists():
            raise SandboxError(f"read-only bind {p} does not exist on the host; install it first")
        a += ["--ro-bind", str(p), str(p)]
    for host, inside in rw_binds.items():
        a += ["--bind", str(host), inside]
    if proxy_uds is not None:
        a += ["--ro-bind", str(proxy_uds), PROXY_SOCK]
    a += ["--chdir", REPO_DIR]
    return a
