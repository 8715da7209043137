"""The ``local`` sandbox backend: a fresh working copy per rollout, commands run under bubblewrap.

How it works. ``LocalSandbox`` starts bubblewrap with a small process server
(:mod:`lego.sandboxes.spawner`) as the sandbox's pid 1, inside a private mount namespace prepared by
:mod:`lego.sandboxes.privilege`: one size-capped tmpfs holds /repo, /tmp, /var/tmp, /run, HOME and
/dev/shm, and the task's pristine, history-stripped template (:mod:`lego.sandboxes.base`) is copied into
it. Every :meth:`exec` asks the server, over a socket inherited from bubblewrap, to fork the command
with lego's pipes as its stdio; all commands share one filesystem view, loopback and process table,
so a background server started by one command is reachable from the next. When a proxy socket is
given, ``socat TCP-LISTEN:<port>,bind=127.0.0.1,fork UNIX-CONNECT:<sock>`` runs on the host, joined
to the sandbox's network namespace only: the harness reaches ``http://127.0.0.1:<port>`` inside,
the bytes leave through the proxy's socket, and nothing else can (the namespace has only ``lo``).

Threat model: the agent is adversarial and runs arbitrary code as the sandbox user.

Isolated (each property has a test in tests/sandboxes/test_privilege.py):
  * host identity: when lego runs as root, bubblewrap and everything inside run as an unprivileged
    host uid of their own (:mod:`lego.sandboxes.privilege` says which and why), mapped to uid 1000
    ("agent") inside; as an ordinary user, as that user. The agent never holds host root.
  * privileges: every command is a child of a server bubblewrap started with ``--cap-drop ALL``,
    so its bounding, effective, permitted, inheritable and ambient capability sets are empty, and
    no_new_privs is set; nested user namespaces are disabled (``--disable-userns``), so no command
    can regain capabilities in a namespace of its own.
  * kernel settings: /proc is read-only (so /proc/sys and /proc/sysrq-trigger), and what container
    runtimes mask is masked (kcore, keys, timer_list, sched_debug, acpi, scsi, fs, ...); /sys is
    not mounted.
  * network: a private network namespace; the only way out is the proxy bridge, which lives
    outside the sandbox's pid namespace, so ``kill -9 -1`` inside cannot stop or replace it.
  * filesystem (the full map is in :mod:`lego.sandboxes.layout`): system directories and /etc
    read-only, secrets in /etc masked, passwd/group/hosts replaced, / and /dev read-only; the
    host's home, /work, /opt, /mnt and lego's own directories absent. /proc/self/mountinfo shows no
    path of lego's (sandbox directory, template .git, proxy socket); the read-only tool binds (the
    Python runtime, harness installs) stay visible at their host paths, because their scripts and
    shebangs name those paths.
  * disk: /repo, /tmp, /var/tmp, /run, HOME and /dev/shm share one tmpfs of ``disk_mb``; a write
    past it fails with ENOSPC inside, and no byte of it reaches the host disk.
  * memory: a memory cgroup of ``memory_budget_mb`` holds the sandbox's processes and the tmpfs
    pages they write, where the host offers one (:mod:`lego.sandboxes.cgroup`; ``lego doctor`` says);
    RLIMIT_AS (``memory_mb``) per process everywhere.
  * processes: a private pid namespace; a pids cgroup (``max_processes``) where the host offers
    one, and RLIMIT_NPROC of the sandbox's own host uid; RLIMIT_CPU and RLIMIT_CORE=0 per process;
    a wall-time limit per exec after which its process group and every descendant die;
    :meth:`kill_agent_processes` kills every process in the namespace at once (daemons included),
    and the server (pid 1, non-dumpable) cannot be signalled or traced from inside.
  * diffs: :meth:`diff` runs git from outside, with lego's authority, against the pristine
    ``.git``: nothing the agent does to its files (modes, symlinks, a ``.git`` of its own, FIFOs,
    huge files) stops it, and git follows no symlink.

Not isolated:
  * the kernel (a kernel exploit escapes; use the docker backend on a VM for hostile code);
  * CPU time across processes (per-process RLIMIT_CPU only; no CPU quota);
  * memory across processes where the host has no memory cgroup for lego (an unprivileged user
    without a delegated cgroup): then only RLIMIT_AS per process and the tmpfs cap bound it;
  * the read-only tool binds and the host's system directories are readable;
  * with ``unsafe_no_isolation`` nothing above holds: commands run on the host, in a plain copy;
  * the bwrap init must be created from a thread that outlives the sandbox: ``--die-with-parent``
    ties the sandbox's life to the creating thread.

Where bubblewrap is missing, creating a sandbox raises :class:`SandboxError` naming the fix, unless
``SandboxConfig.unsafe_no_isolation`` is set.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import resource
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import lego.sandboxes.spawner
from lego.config import SandboxConfig
from lego.errors import SandboxError, TaskError
from lego.sandboxes.base import OutputCollector, kill_tree, pristine_template, sandbox_id, template_info
from lego.sandboxes.cgroup import SandboxCgroup
from lego.sandboxes.layout import AGENT_HOME, AGENT_UID, REPO_DIR, bwrap_args, bwrap_available, etc_files
from lego.sandboxes.privilege import HostIdentity, enter_private_ns
from lego.sandboxes.runtime import python_runtime
from lego.types import ExecResult, Task

__all__ = [
    "AGENT_HOME",
    "AGENT_UID",
    "DEFAULT_PROXY_PORT",
    "DIFF_FILE_CAP",
    "REPO_DIR",
    "LocalSandbox",
    "bwrap_available",
    "cleanup_leftovers",
]

DEFAULT_PROXY_PORT = 18080
DIFF_FILE_CAP = 8 * 1024 * 1024
"""Files larger than this, and files that are neither regular files nor symlinks (FIFOs, sockets,
devices), are left out of :meth:`LocalSandbox.diff`: no fix needs one, and reading one could make
the diff hang or balloon."""
_DIFF_OUTPUT_CAP = 64 * 1024 * 1024
_READY_TIMEOUT_S = 10.0
_SPAWNER = Path(lego.sandboxes.spawner.__file__).read_bytes()


def _workdir(cfg: SandboxConfig) -> Path:
    base = Path(cfg.workdir) if cfg.workdir else Path(tempfile.gettempdir()) / "lego-sandboxes"
    base.mkdir(parents=True, exist_ok=True)
    return base


def _mount_points(sandbox: str) -> Path:
    """Where a sandbox's private mounts are attached in its mount namespace: an empty directory
    the sandbox uid can reach (``SandboxConfig.workdir`` may sit below a directory it cannot)."""
    base = Path(tempfile.gettempdir()) / "lego-mnt"
    base.mkdir(mode=0o755, exist_ok=True)
    d = base / sandbox
    d.mkdir(mode=0o755)
    return d


def _copy_owned(src: Path, dst: Path, uid: int, gid: int) -> None:
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


def _recv_json(sock: socket.socket, timeout: float) -> dict[str, object] | None:
    """One reply of the process server; None when ``timeout`` passes first."""
    sock.settimeout(max(timeout, 0.001))
    try:
        data = sock.recv(65536)
    except TimeoutError:
        return None
    if not data:
        raise SandboxError("the sandbox's process server is gone (the sandbox was closed or its init died)")
    reply: dict[str, object] = json.loads(data)
    return reply


class LocalSandbox:
    """One task's working copy plus the bubblewrap sandbox around it (see module doc)."""

    def __init__(
        self,
        task: Task,
        cfg: SandboxConfig,
        *,
        proxy_uds: Path | None = None,
        ro_binds: Sequence[Path] = (),
        proxy_port: int = DEFAULT_PROXY_PORT,
    ) -> None:
        if not task.repo_path:
            raise TaskError(f"task {task.instance_id} has no repo_path; the local backend needs a local repo")
        self.cfg = cfg
        self.task = task
        self.isolated = not cfg.unsafe_no_isolation
        if self.isolated and not bwrap_available():
            raise SandboxError(
                "bubblewrap (bwrap) is not installed, so agents cannot be isolated; install it "
                "(apt-get install bubblewrap) or, only for trusted code on a disposable machine, pass "
                "--unsafe-no-isolation / -o sandbox.unsafe_no_isolation=true"
            )
        self.id = sandbox_id()
        self.host_dir = _workdir(cfg) / f"sbx-{self.id}"
        self.host_dir.mkdir(parents=True)
        self._init: subprocess.Popen[bytes] | None = None
        self._bridge: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self._ns_pid = 0
        self._mnt: Path | None = None
        self._closed = False
        self.identity = HostIdentity.allocate() if self.isolated else HostIdentity(os.getuid(), os.getgid(), False)
        self._cgroup = SandboxCgroup.create(f"lego-{self.id}", cfg.max_processes, cfg.memory_budget_mb << 20)
        try:
            self.template = pristine_template(task.repo_path)
            self.base_commit, self.history_strip = template_info(self.template)
            self.runtime = python_runtime()
            self.proxy_port: int | None = None
            if self.isolated:
                outer = self._start_bwrap([*self.runtime.binds, *ro_binds])
                self.root = Path(f"/proc/{outer}/root{self._mnt}/fs/repo")
                self.repo_dir = REPO_DIR
            else:
                self.root = self.host_dir / "repo"
                self.repo_dir = str(self.root)
                self.root.mkdir()
                self._start_spawner([str(self.runtime.python)], cwd=self.root)
            _copy_owned(self.template, self.root, self.identity.uid, self.identity.gid)
            if proxy_uds is not None:
                self._start_bridge(Path(proxy_uds), proxy_port if self.isolated else 0)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ start-up
    def _start_bwrap(self, ro_binds: list[Path]) -> int:
        """Start bubblewrap with the process server as its pid 1; returns bwrap's own host pid."""
        self._mnt = _mount_points(self.id)
        fs = self._mnt / "fs"
        fs.mkdir()
        stage: list[tuple[Path, Path]] = []
        for i, p in enumerate(Path(b) for b in ro_binds):
            if not p.exists():
                raise SandboxError(f"read-only bind {p} does not exist on the host; install it first")
            point = self._mnt / "stage" / str(i)
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
        fs_bytes = self.cfg.disk_mb << 20

        def child() -> None:
            self._limits()
            enter_private_ns(self.identity, fs, fs_bytes, stage)

        # Arguments go through --args (a pipe), so /proc/1/cmdline inside shows no host paths.
        args_r, args_w = os.pipe()
        info_r, info_w = os.pipe()
        try:
            self._start_spawner(
                ["bwrap", "--args", str(args_r), "--info-fd", str(info_w), "--", str(self.runtime.python)],
                extra_fds=(args_r, info_w, *data_fds.values()),
                preexec=child,
            )
        finally:
            for fd in (args_r, info_w, *data_fds.values()):
                os.close(fd)
        with os.fdopen(args_w, "wb") as f:
            f.write(b"".join(x.encode() + b"\0" for x in args))
        self._ns_pid = self._read_child_pid(info_r)
        assert self._init is not None
        (self.host_dir / "init.pid").write_text(str(self._init.pid))
        self._wait_ready()
        return self._init.pid

    def _start_spawner(
        self,
        prefix: list[str],
        *,
        cwd: Path | None = None,
        extra_fds: Sequence[int] = (),
        preexec: Callable[[], None] | None = None,
    ) -> None:
        """Start the process server (:mod:`lego.sandboxes.spawner`) as ``prefix + [python]``'s program."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._ctrl = mine
        # The source arrives on stdin (a pipe buffer holds it), so /proc/1/cmdline stays short.
        src_r, src_w = os.pipe()
        os.write(src_w, _SPAWNER)
        os.close(src_w)
        cg_fds = [os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in self._cgroup.agent_procs()]
        argv = [*prefix, "-I", "-S", "-", str(theirs.fileno()), *map(str, cg_fds)]
        try:
            self._init = subprocess.Popen(
                argv,
                stdin=src_r,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(theirs.fileno(), *cg_fds, *extra_fds),
                cwd=cwd,
                start_new_session=True,
                preexec_fn=preexec or self._limits,
            )
        finally:
            theirs.close()
            for fd in (src_r, *cg_fds):
                os.close(fd)
        if not self.isolated:
            self._ns_pid = self._init.pid
            self._wait_ready()

    def _init_error(self) -> str:
        if self._init is None or self._init.stderr is None:
            return ""
        if self._init.poll() is None:
            kill_tree(self._init)
            self._init.wait()
        return self._init.stderr.read().decode(errors="replace").strip()

    def _read_child_pid(self, fd: int) -> int:
        buf = b""
        deadline = time.monotonic() + _READY_TIMEOUT_S
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
        assert self._ctrl is not None
        try:
            ready = _recv_json(self._ctrl, _READY_TIMEOUT_S)
        except SandboxError:
            ready = None
        if not ready:
            raise SandboxError(f"the sandbox's process server did not start: {self._init_error() or 'timed out'}")

    def _start_bridge(self, proxy_uds: Path, port: int) -> None:
        """socat from 127.0.0.1:<port> to the proxy's socket, in the sandbox's network namespace but
        outside its pid namespace (and mount namespace): the agent can neither see nor kill it,
        and it reaches the socket at its host path, which the sandbox never sees."""
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
            ns = ["nsenter", f"--net=/proc/{self._ns_pid}/ns/net", "--"]
            argv = [*ns, "setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", *socat]
        else:
            # Joining a network namespace needs CAP_SYS_ADMIN over its user namespace: lego has it in
            # the one it created for bubblewrap (see lego.sandboxes.privilege).
            assert self._init is not None
            own = [f"--user=/proc/{self._init.pid}/ns/user", "--preserve-credentials"]
            argv = ["nsenter", *own, f"--net=/proc/{self._ns_pid}/ns/net", "--", *socat]
        self._bridge = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        needle = f"0100007F:{port:04X}"
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                lines = Path(f"/proc/{self._bridge.pid}/net/tcp").read_text().splitlines()[1:]
            except OSError:
                lines = []
            if any(ln.split()[1] == needle and ln.split()[3] == "0A" for ln in lines):
                self.proxy_port = port
                return
            if self._bridge.poll() is not None:
                break
            time.sleep(0.002)
        err = self._bridge.stderr.read().decode(errors="replace") if self._bridge.poll() is not None else ""  # type: ignore[union-attr]
        raise SandboxError(f"the proxy bridge (socat) did not listen on 127.0.0.1:{port}: {err.strip() or 'timed out'}")

    def _limits(self) -> None:
        """Runs in the child between fork and exec: per-process limits and the cgroups."""
        cpu, mem = self.cfg.cpu_seconds, self.cfg.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (self.cfg.max_processes, self.cfg.max_processes))
        self._cgroup.join_self()

    # ------------------------------------------------------------------ the Sandbox protocol
    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment every command starts from (``extra`` wins)."""
        home = AGENT_HOME
        if not self.isolated:
            home = str(self.host_dir / "home")
            Path(home).mkdir(exist_ok=True)
        base = {
            "PATH": f"{self.runtime.bin_dir}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
            "HOME": home,
            "USER": "agent",
            "LOGNAME": "agent",
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "TERM": "dumb",
        }
        if self.proxy_port is not None:
            base["LEGO_PROXY_URL"] = f"http://127.0.0.1:{self.proxy_port}"
        return {**base, **(extra or {})}

    def _request(self, op: bytes, fds: Sequence[int]) -> socket.socket:
        """Send ``op`` with ``fds`` to the process server; returns the request's reply socket."""
        if self._closed or self._ctrl is None:
            raise SandboxError(f"sandbox {self.id} is closed; create a new one")
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            rights = array.array("i", [theirs.fileno(), *fds])
            self._ctrl.sendmsg([op], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
        except OSError as exc:
            mine.close()
            raise SandboxError(f"sandbox {self.id} lost its process server ({exc}); create a new sandbox") from exc
        finally:
            theirs.close()
        return mine

    def run_bytes(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
    ) -> tuple[int, bytes, bytes, bool, float]:
        """:meth:`exec` with bytes in and out: (exit_code, stdout, stderr, timed_out, wall_s)."""
        limit = timeout if timeout is not None else self.cfg.command_timeout_s
        wd = cwd or self.repo_dir
        if not wd.startswith("/"):
            wd = f"{self.repo_dir}/{wd}"
        argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        t0 = time.monotonic()
        req = os.memfd_create("lego-exec", os.MFD_CLOEXEC)
        os.write(req, json.dumps({"argv": argv, "env": self.env(env), "cwd": wd}).encode())
        in_r, in_w = os.pipe() if stdin is not None else (os.open(os.devnull, os.O_RDONLY), None)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            reply = self._request(b"exec", [req, in_r, out_w, err_w])
        except SandboxError:
            for fd in (out_r, err_r, in_w):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in (req, in_r, out_w, err_w):
                os.close(fd)
        with reply:
            started = _recv_json(reply, _READY_TIMEOUT_S)
            if not started or "pid" not in started:
                for fd in (out_r, err_r, in_w):
                    if fd is not None:
                        os.close(fd)
                why = (started or {}).get("error", "no answer from the process server")
                raise SandboxError(f"cannot start a command in sandbox {self.id}: {why}")
            reader = OutputCollector(out_r, err_r, in_w, stdin)
            finished = reader.run(limit)
            done = _recv_json(reply, t0 + limit - time.monotonic()) if finished else None
            finished = done is not None
            timed_out = not finished and not reader.overflow
            if not finished:
                with contextlib.suppress(OSError):
                    reply.send(b"kill")
                if not reader.run(5):
                    # A detached process still holds the pipes: kill everything the agent runs.
                    self.kill_agent_processes()
                    reader.run(5)
                done = _recv_json(reply, 30)
            out, err = reader.result()
        if done is None:
            raise SandboxError(f"sandbox {self.id}: a killed command was not reaped within 30 s")
        code = 124 if timed_out else int(done["status"])  # type: ignore[call-overload]
        if reader.overflow:
            err += f"\n[lego: output exceeded {reader.cap} bytes on one stream; the command was killed]".encode()
        return code, out, err, timed_out, time.monotonic() - t0

    def exec(
        self,
        cmd: str | Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        code, out, err, timed_out, wall = self.run_bytes(cmd, env=env, timeout=timeout, cwd=cwd)
        return ExecResult(
            exit_code=code,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            timed_out=timed_out,
            wall_s=wall,
        )

    def read(self, path: str) -> bytes:
        """Read through the sandbox (never host file APIs), so an agent's symlink cannot point the
        host anywhere. Files above ``OUTPUT_CAP`` (16 MiB) raise SandboxError."""
        code, out, err, _, _ = self.run_bytes(["cat", "--", path], timeout=60)
        if code != 0:
            raise SandboxError(f"cannot read {path} in sandbox {self.id}: {err.decode(errors='replace').strip()}")
        return out

    def write(self, path: str, data: bytes) -> None:
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        code, _, err, _, _ = self.run_bytes(["/bin/sh", "-c", script, "sh", path], timeout=60, stdin=data)
        if code != 0:
            raise SandboxError(f"cannot write {path} in sandbox {self.id}: {err.decode(errors='replace').strip()}")

    def _left_out(self) -> list[str]:
        """Repo paths :meth:`diff` leaves out (see :data:`DIFF_FILE_CAP`), found without following
        any symlink."""
        out = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            if rel == ".":
                dirnames[:] = [d for d in dirnames if d != ".git"]
            for name in [*filenames, *dirnames]:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                odd = not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode))
                if odd or (stat.S_ISREG(st.st_mode) and st.st_size > DIFF_FILE_CAP):
                    out.append(os.path.normpath(os.path.join(rel, name)))
        return out

    def diff(self) -> str:
        """The agent's changes against the pristine commit, untracked files included, taken from
        outside the sandbox with lego's authority: git runs on the host (as root, or as the owner
        of the sandbox's namespaces) in the sandbox's private mount namespace, against the pristine
        template's ``.git`` and a throwaway index, so no file mode, symlink, nested or broken
        ``.git`` or attribute the agent left can stop it, and git follows no symlink. Files over
        :data:`DIFF_FILE_CAP`, FIFOs, sockets and devices are left out."""
        worktree = f"{self._mnt}/fs/repo" if self.isolated else str(self.root)
        specs = ["."] + [f":(exclude,literal){p}" for p in self._left_out()]
        specs += [":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.py[co]"]
        script = (
            "t=$(mktemp -d) || exit 1; trap 'rm -rf \"$t\"' EXIT; "
            'export GIT_INDEX_FILE="$t/index" GIT_OBJECT_DIRECTORY="$t/objects"; mkdir "$t/objects" && '
            'git read-tree HEAD && git add -A --pathspec-from-file="$1" --pathspec-file-nul && '
            f"git diff --cached --binary --no-ext-diff --no-textconv --no-color --full-index {self.base_commit} --"
        )
        gitdir = str(self.template / ".git")
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "GIT_DIR": gitdir,
            "GIT_WORK_TREE": worktree,
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": f"{gitdir}/objects",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_COUNT": "3",
            "GIT_CONFIG_KEY_0": "core.hooksPath",
            "GIT_CONFIG_VALUE_0": "/dev/null",
            "GIT_CONFIG_KEY_1": "core.fsmonitor",
            "GIT_CONFIG_VALUE_1": "false",
            "GIT_CONFIG_KEY_2": "core.untrackedCache",
            "GIT_CONFIG_VALUE_2": "false",
        }
        prefix: list[str] = []
        if self.isolated:
            assert self._init is not None
            prefix = ["nsenter", f"--mount=/proc/{self._init.pid}/ns/mnt"]
            if not self.identity.privileged:
                prefix += [f"--user=/proc/{self._init.pid}/ns/user", "--preserve-credentials"]
            prefix.append("--")
        with tempfile.NamedTemporaryFile() as spec_file:
            spec_file.write(b"\0".join(s.encode() for s in specs))
            spec_file.flush()
            proc = subprocess.Popen(
                [*prefix, "/bin/sh", "-c", script, "sh", spec_file.name],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd="/",
            )
            assert proc.stdout is not None and proc.stderr is not None
            reader = OutputCollector(
                os.dup(proc.stdout.fileno()), os.dup(proc.stderr.fileno()), None, None, cap=_DIFF_OUTPUT_CAP
            )
            proc.stdout.close()
            proc.stderr.close()
            finished = reader.run(300)
            if not finished:
                kill_tree(proc)
            out, err = reader.result()
            proc.wait()
        if reader.overflow:
            raise SandboxError(
                f"the agent's changes in sandbox {self.id} exceed {_DIFF_OUTPUT_CAP >> 20} MiB as a patch; "
                "such a diff cannot be graded"
            )
        if not finished or proc.returncode != 0:
            raise SandboxError(
                f"git diff failed in sandbox {self.id}: {err.decode(errors='replace').strip() or 'timed out'}"
            )
        return out.decode(errors="replace")

    def kill_agent_processes(self) -> None:
        """Kill every process started inside (daemons and orphans included), keeping the files.
        The process server does it from pid 1 with ``kill(-1, SIGKILL)``, which the kernel applies
        to the whole pid namespace at once, and answers once every one has been reaped."""
        if self._closed or self._ctrl is None:
            return
        with self._request(b"killall", []) as reply:
            if _recv_json(reply, 30) is None:
                raise SandboxError(f"sandbox {self.id}: the agent's processes did not die within 30 s")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._ctrl is not None:
            self._ctrl.close()  # the server kills everything it started and exits
        for proc in (self._bridge, self._init):
            if proc is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            kill_tree(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            if proc.stderr:
                proc.stderr.close()
        deadline = time.monotonic() + 5
        self._cgroup.remove()
        while self._cgroup.exists() and time.monotonic() < deadline:  # exiting tasks leave a moment later
            time.sleep(0.01)
            self._cgroup.remove()
        self.identity.release()
        shutil.rmtree(self.host_dir, ignore_errors=True)
        if self._mnt is not None:  # only empty mount points: the mounts lived in the sandbox's namespace
            shutil.rmtree(self._mnt, ignore_errors=True)

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def cleanup_leftovers(cfg: SandboxConfig | None = None) -> int:
    """Delete sandbox directories (and cgroups) whose bwrap init is gone: what a crashed run
    leaves behind. Live sandboxes are untouched. Returns how many were removed."""
    removed = 0
    for d in _workdir(cfg or SandboxConfig()).glob("sbx-*"):
        try:
            pid = int((d / "init.pid").read_text())
            alive = Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"bwrap")
        except (OSError, ValueError):
            alive = False
        if alive:
            continue
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(Path(tempfile.gettempdir()) / "lego-mnt" / d.name.removeprefix("sbx-"), ignore_errors=True)
        SandboxCgroup.of(f"lego-{d.name.removeprefix('sbx-')}").remove()
        removed += 1
    return removed
