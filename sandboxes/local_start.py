"""Start-up of a local sandbox: its private mount namespace, bubblewrap with the process server as
pid 1, and the proxy bridge; the host-side processes a :class:`~lego.sandboxes.local.LocalSandbox`
owns (what they isolate is in :mod:`lego.sandboxes.local`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import lego.sandboxes.launcher
import lego.sandboxes.spawner
from lego.config import SandboxConfig
from lego.errors import SandboxError
from lego.sandboxes.cgroup import SandboxCgroup
from lego.sandboxes.layout import FS_DIRS, bwrap_args, etc_files
from lego.sandboxes.privilege import HostIdentity
from lego.sandboxes.processes import kill_tree
from lego.sandboxes.spawner_client import READY_TIMEOUT_S, recv_json

_LAUNCHER = Path(lego.sandboxes.launcher.__file__)


def _launched(spec: dict[str, object], argv: Sequence[str]) -> list[str]:
    """``argv`` run through :mod:`lego.sandboxes.launcher` with ``spec``: the set-up a
    ``preexec_fn`` would do, without making :class:`subprocess.Popen` fork all of lego."""
    return [sys.executable, "-I", "-S", str(_LAUNCHER), json.dumps(spec), "--", *argv]


__all__ = ["HostProcesses", "copy_owned", "mount_root", "workdir"]

_SPAWNER = Path(lego.sandboxes.spawner.__file__).read_bytes()


def workdir(cfg: SandboxConfig) -> Path:
    """Where sandboxes keep their host directories (``sbx-<id>``)."""
    base = Path(cfg.workdir) if cfg.workdir else Path(tempfile.gettempdir()) / "lego-sandboxes"
    base.mkdir(parents=True, exist_ok=True)
    return base


def mount_root() -> Path:
    """The parent of every sandbox's mount points (one empty directory per sandbox id)."""
    return Path(tempfile.gettempdir()) / "lego-mnt"


def _mount_points(sandbox: str) -> Path:
    """Where a sandbox's private mounts are attached in its mount namespace: an empty directory
    the sandbox uid can reach (``SandboxConfig.workdir`` may sit below a directory it cannot)."""
    base = mount_root()
    base.mkdir(mode=0o755, exist_ok=True)
    d = base / sandbox
    d.mkdir(mode=0o755)
    return d


def copy_owned(src: Path, dst: Path, uid: int, gid: int) -> None:
    """Copy the tree ``src`` into the existing directory ``dst``, every entry owned by uid:gid."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        target = dst / rel
        for name in [*dirnames, *filenames]:
            s, t = Path(dirpath) / name, target / name
            if s.is_symlink():
                os.symlink(os.readlink(s), t)
            elif s.is_dir():
                t.mkdir()
                shutil.copystat(s, t)
            else:
                shutil.copy2(s, t)
            os.lchown(t, uid, gid)
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]


class HostProcesses:
    """The processes one local sandbox runs on the host: its init (bubblewrap, or the bare process
    server without isolation) with lego's control socket to it, and the proxy bridge. Each is kept
    the moment it starts, so :meth:`stop` can end whatever a failed start-up left."""

    def __init__(
        self,
        sandbox: str,
        cfg: SandboxConfig,
        identity: HostIdentity,
        cgroup: SandboxCgroup,
        host_dir: Path,
        *,
        isolated: bool,
    ) -> None:
        self.sandbox, self.cfg, self.identity, self.cgroup = sandbox, cfg, identity, cgroup
        self.host_dir, self.isolated = host_dir, isolated
        self.init: subprocess.Popen[bytes] | None = None
        self.bridge: subprocess.Popen[bytes] | None = None
        self.ctrl: socket.socket | None = None
        self.ns_pid = 0
        self.mnt: Path | None = None

    def start_bwrap(self, python: Path, ro_binds: list[Path]) -> int:
        """Start bubblewrap with the process server (run by ``python``) as its pid 1; returns bwrap's
        own host pid."""
        self.mnt = _mount_points(self.sandbox)
        fs = self.mnt / "fs"
        fs.mkdir()
        stage: list[tuple[Path, Path]] = []
        for i, p in enumerate(Path(b) for b in ro_binds):
            if not p.exists():
                raise SandboxError(f"read-only bind {p} does not exist on the host; install it first")
            point = self.mnt / "stage" / str(i)
            point.parent.mkdir(exist_ok=True)
            point.mkdir() if p.is_dir() else point.touch()
            stage.append((p, point))
        data_fds = {}
        for inside, content in etc_files().items():
            r, w = os.pipe()
            os.write(w, content)  # a few hundred bytes: fits in the pipe
            os.close(w)
            data_fds[inside] = r
        args = bwrap_args(fs, ro_binds=[(point, str(src)) for src, point in stage], data_fds=data_fds)
        ident = self.identity
        # The limits and cgroups, then the private mount namespace and the sandbox identity, then
        # the tie to lego: bubblewrap's own --die-with-parent arrives through --args and acts only
        # once its set-up is done, so until then a lego killed mid-start would leave it waiting
        # forever. Armed after the identity change (which clears it).
        spec = {
            **self._limits(),
            "ns": {
                "uid": ident.uid,
                "gid": ident.gid,
                "privileged": ident.privileged,
                "fs": str(fs),
                "fs_bytes": self.cfg.disk_mb << 20,
                "dirs": list(FS_DIRS),
                "stage": [[str(src), str(point)] for src, point in stage],
            },
            "parent": os.getpid(),
        }

        # Arguments go through --args, so /proc/1/cmdline inside shows no host paths. They are all
        # in place before bubblewrap starts (a memory file, read to its end): through a pipe written
        # after the start, a lego killed in between handed bubblewrap an early EOF, and it went on
        # with no arguments at all (no --die-with-parent, no pid namespace), leaving a child behind.
        args_r = os.memfd_create("bwrap-args", os.MFD_CLOEXEC)
        pending = memoryview(b"".join(x.encode() + b"\0" for x in args))
        while pending:
            pending = pending[os.write(args_r, pending) :]
        os.lseek(args_r, 0, os.SEEK_SET)
        info_r, info_w = os.pipe()
        try:
            self.start_spawner(
                ["bwrap", "--args", str(args_r), "--info-fd", str(info_w), "--", str(python)],
                extra_fds=(args_r, info_w, *data_fds.values()),
                spec=spec,
            )
        finally:
            for fd in (args_r, info_w, *data_fds.values()):
                os.close(fd)
        self.ns_pid = self._read_child_pid(info_r)
        assert self.init is not None
        (self.host_dir / "init.pid").write_text(str(self.init.pid))
        self._wait_ready()
        return self.init.pid

    def start_spawner(
        self,
        prefix: list[str],
        *,
        cwd: Path | None = None,
        extra_fds: Sequence[int] = (),
        spec: dict[str, object] | None = None,
    ) -> None:
        """Start the process server (:mod:`lego.sandboxes.spawner`) as ``prefix + [python]``'s
        program, through the launcher with ``spec`` (default: the limits and cgroups)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ctrl = mine
        # The source arrives on stdin (a pipe buffer holds it), so /proc/1/cmdline stays short.
        src_r, src_w = os.pipe()
        os.write(src_w, _SPAWNER)
        os.close(src_w)
        cg_fds = [os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in self.cgroup.agent_procs()]
        argv = [*prefix, "-I", "-S", "-", str(theirs.fileno()), *map(str, cg_fds)]
        try:
            self.init = subprocess.Popen(
                _launched(spec if spec is not None else self._limits(), argv),
                stdin=src_r,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(theirs.fileno(), *cg_fds, *extra_fds),
                cwd=cwd,
                start_new_session=True,
            )
        finally:
            theirs.close()
            for fd in (src_r, *cg_fds):
                os.close(fd)
        if not self.isolated:
            self.ns_pid = self.init.pid
            self._wait_ready()

    def _init_error(self) -> str:
        if self.init is None or self.init.stderr is None:
            return ""
        if self.init.poll() is None:
            kill_tree(self.init)
            self.init.wait()
        return self.init.stderr.read().decode(errors="replace").strip()

    def _read_child_pid(self, fd: int) -> int:
        buf = b""
        deadline = time.monotonic() + READY_TIMEOUT_S
        with os.fdopen(fd, "rb") as f:
            while time.monotonic() < deadline:
                chunk = f.read1(4096)
                if not chunk:
                    break
                buf += chunk
                with contextlib.suppress(json.JSONDecodeError):
                    return int(json.loads(buf)["child-pid"])
        raise SandboxError(
            f"bubblewrap did not start: {self._init_error() or 'no output'}; check `bwrap --version` works "
            "and `lego doctor` for unprivileged user namespaces"
        )

    def _wait_ready(self) -> None:
        """The server says ready once bubblewrap has built the filesystem and exec'd it."""
        assert self.ctrl is not None
        try:
            ready = recv_json(self.ctrl, READY_TIMEOUT_S)
        except SandboxError:
            ready = None
        if not ready:
            raise SandboxError(f"the sandbox's process server did not start: {self._init_error() or 'timed out'}")

    def start_bridge(self, proxy_uds: Path, port: int) -> int:
        """socat from 127.0.0.1:<port> to the proxy's socket, in the sandbox's network namespace but
        outside its pid namespace (and mount namespace): the agent can neither see nor kill it,
        and it reaches the socket at its host path, which the sandbox never sees. Returns the port
        it listens on."""
        if not proxy_uds.exists():
            raise SandboxError(f"proxy socket {proxy_uds} does not exist; start the proxy with a uds first")
        if not self.isolated:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        socat = ["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{proxy_uds}"]
        if not self.isolated:
            argv = socat
        elif self.identity.privileged:
            # Root with an empty bounding set execs socat with no capabilities at all.
            ns = ["nsenter", f"--net=/proc/{self.ns_pid}/ns/net", "--"]
            argv = [*ns, "setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", *socat]
        else:
            # Joining a network namespace needs CAP_SYS_ADMIN over its user namespace: lego has it in
            # the one it created for bubblewrap (see lego.sandboxes.privilege).
            assert self.init is not None
            own = [f"--user=/proc/{self.init.pid}/ns/user", "--preserve-credentials"]
            argv = ["nsenter", *own, f"--net=/proc/{self.ns_pid}/ns/net", "--", *socat]
        # Its own session (a signal to lego's process group must not end it mid-rollout), but never an
        # orphan: when lego dies without stop() (SIGKILL, an unhandled SIGTERM) it dies too.
        self.bridge = subprocess.Popen(
            _launched({"parent": os.getpid()}, argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        needle = f"0100007F:{port:04X}"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                lines = Path(f"/proc/{self.bridge.pid}/net/tcp").read_text().splitlines()[1:]
            except OSError:
                lines = []
            if any(ln.split()[1] == needle and ln.split()[3] == "0A" for ln in lines):
                return port
            if self.bridge.poll() is not None:
                break
            time.sleep(0.002)
        err = self.bridge.stderr.read().decode(errors="replace") if self.bridge.poll() is not None else ""  # type: ignore[union-attr]
        raise SandboxError(f"the proxy bridge (socat) did not listen on 127.0.0.1:{port}: {err.strip() or 'timed out'}")

    def _limits(self) -> dict[str, object]:
        """The launcher's per-process limits and the sandbox's cgroups (see :mod:`lego.sandboxes.launcher`)."""
        return {
            "rlimits": {
                "CPU": self.cfg.cpu_seconds,
                "AS": self.cfg.memory_mb * 1024 * 1024,
                "CORE": 0,
                "NPROC": self.cfg.max_processes,
            },
            "cgroup_procs": self.cgroup.server_procs(),
        }

    def stop(self) -> None:
        """Close the control socket (the server kills everything it started and exits), then make
        sure the init is gone; the bridge keeps no state and never exits by itself, so it is
        killed at once (waiting for it cost every sandbox seconds)."""
        if self.ctrl is not None:
            self.ctrl.close()
        for proc, grace in ((self.init, 5.0), (self.bridge, 0.0)):
            if proc is None:
                continue
            if grace:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=grace)
            kill_tree(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            if proc.stderr:
                proc.stderr.close()
