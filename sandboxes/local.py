"""The ``local`` sandbox backend: a fresh working copy per rollout, commands run under bubblewrap.

How it works. ``LocalSandbox`` copies the task's pristine, history-stripped template (see
:mod:`sandboxes.base`) to a private directory and starts one long-lived bubblewrap *init* process
that owns the sandbox's namespaces (user, pid, mount, net, ipc, uts, cgroup). Every :meth:`exec`
joins that init with ``nsenter --preserve-credentials`` (user namespace first, then the others, then
its root directory), so all commands share one filesystem view, one loopback and one process table,
and a background server started by one command is reachable from the next. Joining a user namespace
one owns needs no privilege, so this also works for an unprivileged host user. When a proxy socket
is given, the init process *is* ``socat TCP-LISTEN:<port>,bind=127.0.0.1,fork UNIX-CONNECT:<sock>``:
the harness reaches ``http://127.0.0.1:<port>`` inside, the bytes leave through the bind-mounted
Unix socket, and nothing else can (the network namespace has only ``lo``).

Isolated:
  * network: a private network namespace; the only way out is the proxy's Unix socket.
  * filesystem (the full map is in :mod:`sandboxes.layout`): /usr, /bin, /lib*, /sbin and /etc read-only (with /etc/shadow, gshadow, sudoers,
    ssh keys and ssl/private masked, passwd/group/hosts replaced); the repo writable at /repo;
    private empty tmpfs /tmp, /var/tmp, /run and HOME=/home/agent. The host's home, /work, /opt,
    /mnt, the project's run directories and every other path are absent, except the read-only
    binds of the Python runtime (:mod:`sandboxes.runtime`) and the caller's ``ro_binds``, each at
    its own path.
  * identity: uid/gid 1000 ("agent") in a user namespace, every capability dropped and
    no_new_privs set on every command, so the read-only binds cannot be remounted and setuid
    binaries grant nothing.
  * processes: a private pid namespace (host processes are invisible; closing the sandbox kills
    everything in it); RLIMIT_CPU, RLIMIT_AS and RLIMIT_CORE=0 on every process; a pids cgroup
    capping the sandbox's process count where the host lets lego create one (cgroup v1/v2 pids
    controller), else RLIMIT_NPROC (which the kernel does not enforce for host root, hence the
    cgroup); a wall-time limit per exec after which its process group and every descendant die.

Not isolated:
  * the kernel (a kernel exploit escapes; use the docker backend on a VM for hostile code);
  * CPU time and memory across processes (limits are per process; no cgroup CPU/memory quota);
  * disk space in /repo (bounded only by the host filesystem); each tmpfs (/tmp, /var/tmp, /run,
    HOME) is capped at ``memory_mb``, but together they can hold several times that;
  * the bwrap init must be created from a thread that outlives the sandbox: ``--die-with-parent``
    ties the sandbox's life to the creating thread.

Where bubblewrap is missing, creating a sandbox raises :class:`SandboxError` naming the fix, unless
``SandboxConfig.unsafe_no_isolation`` is set: then commands run directly on the host, in the copy.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from lego.config import SandboxConfig
from lego.errors import SandboxError, TaskError
from lego.types import ExecResult, Task
from sandboxes.base import OutputCollector, descendants, kill_tree, pristine_template, sandbox_id, template_info
from sandboxes.cgroup import PidCgroup
from sandboxes.layout import AGENT_HOME, AGENT_UID, BASE_GIT, PROXY_SOCK, REPO_DIR, bwrap_args, bwrap_available
from sandboxes.runtime import python_runtime

__all__ = [
    "AGENT_HOME",
    "AGENT_UID",
    "DEFAULT_PROXY_PORT",
    "REPO_DIR",
    "LocalSandbox",
    "bwrap_available",
    "cleanup_leftovers",
]

DEFAULT_PROXY_PORT = 18080
_READY_TIMEOUT_S = 10.0


def _workdir(cfg: SandboxConfig) -> Path:
    base = Path(cfg.workdir) if cfg.workdir else Path(tempfile.gettempdir()) / "lego-sandboxes"
    base.mkdir(parents=True, exist_ok=True)
    return base


class LocalSandbox:
    """One task's working copy plus the bubblewrap init holding its namespaces (see module doc)."""

    def __init__(
        self,
        task: Task,
        cfg: SandboxConfig,
        *,
        proxy_uds: Path | None = None,
        ro_binds: Sequence[Path] = (),
        proxy_port: int = DEFAULT_PROXY_PORT,
        extra_binds: Mapping[Path, str] | None = None,
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
        self._ns_pid = 0
        self._cgroup: PidCgroup | None = None
        self._closed = False
        try:
            self.template = pristine_template(task.repo_path)
            self.root = self.host_dir / "repo"
            shutil.copytree(self.template, self.root, symlinks=True)
            self.base_commit, self.history_strip = template_info(self.template)
            self.runtime = python_runtime()
            self.repo_dir = REPO_DIR if self.isolated else str(self.root)
            self.proxy_port: int | None = None
            if self.isolated:
                self._start_bwrap(proxy_uds, proxy_port, list(ro_binds), dict(extra_binds or {}))
            elif proxy_uds is not None:
                self._start_host_forwarder(proxy_uds)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ start-up
    def _start_bwrap(self, proxy_uds: Path | None, port: int, ro_binds: list[Path], extra: dict[Path, str]) -> None:
        if proxy_uds is not None and not Path(proxy_uds).exists():
            raise SandboxError(f"proxy socket {proxy_uds} does not exist; start the proxy with a uds first")
        args = bwrap_args(
            self.host_dir / "etc",
            repo=self.root,
            base_git=self.template / ".git",
            ro_binds=[*self.runtime.binds, *ro_binds],
            rw_binds=extra,
            proxy_uds=proxy_uds,
            tmpfs_bytes=self.cfg.memory_mb * 1024 * 1024,
        )
        if proxy_uds is not None:
            init = ["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{PROXY_SOCK}"]
        else:
            init = ["sleep", "infinity"]
        self._cgroup = PidCgroup.create(f"lego-{self.id}", self.cfg.max_processes)
        # Arguments go through --args (a pipe), so /proc/1/cmdline inside shows no host paths.
        args_r, args_w = os.pipe()
        info_r, info_w = os.pipe()
        argv = ["bwrap", "--args", str(args_r), "--info-fd", str(info_w), "--", *init]
        try:
            self._init = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(args_r, info_w),
                preexec_fn=self._limits,
            )
        finally:
            os.close(args_r)
            os.close(info_w)
        with os.fdopen(args_w, "wb") as f:
            f.write(b"".join(x.encode() + b"\0" for x in args))
        self._ns_pid = self._read_child_pid(info_r)
        (self.host_dir / "init.pid").write_text(str(self._init.pid))
        self._wait_init(init[0])
        if proxy_uds is not None:
            self._wait_listening(port)
            self.proxy_port = port

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
        err = self._init.stderr.read().decode(errors="replace") if self._init and self._init.stderr else ""
        raise SandboxError(f"bubblewrap did not start: {err.strip() or 'no output'}; check `bwrap --version` works")

    def _wait_init(self, comm: str) -> None:
        """Wait until bwrap has built the filesystem and exec'd the init command (``comm``):
        the info-fd reports the pid before the mounts exist, and an exec before then finds no /bin."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                for kid in Path(f"/proc/{self._ns_pid}/task/{self._ns_pid}/children").read_text().split():
                    if Path(f"/proc/{kid}/comm").read_text().strip() == comm:
                        return
            if self._init is not None and self._init.poll() is not None:
                break
            time.sleep(0.001)
        err = self._init.stderr.read().decode(errors="replace") if self._init and self._init.stderr else ""
        raise SandboxError(f"the sandbox init ({comm}) did not start: {err.strip() or 'timed out'}")

    def _wait_listening(self, port: int) -> None:
        needle = f"0100007F:{port:04X}"
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                lines = Path(f"/proc/{self._ns_pid}/net/tcp").read_text().splitlines()[1:]
            except OSError:
                lines = []
            if any(ln.split()[1] == needle and ln.split()[3] == "0A" for ln in lines):
                return
            if self._init is not None and self._init.poll() is not None:
                break
            time.sleep(0.002)
        raise SandboxError(f"the proxy forwarder (socat) did not listen on 127.0.0.1:{port} inside the sandbox")

    def _start_host_forwarder(self, proxy_uds: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self._init = subprocess.Popen(
            ["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{proxy_uds}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            with socket.socket() as s, contextlib.suppress(OSError):
                s.connect(("127.0.0.1", port))
                self.proxy_port = port
                return
            time.sleep(0.005)
        raise SandboxError(f"socat did not listen on 127.0.0.1:{port}")

    def _limits(self) -> None:
        """Runs in the child between fork and exec: per-process limits and the pids cgroup."""
        cpu, mem = self.cfg.cpu_seconds, self.cfg.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (self.cfg.max_processes, self.cfg.max_processes))
        if self._cgroup is not None:
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

    def _argv(self, cmd: str | Sequence[str], cwd: str | None) -> list[str]:
        inner = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        wd = cwd or self.repo_dir
        if not wd.startswith("/"):
            wd = f"{self.repo_dir}/{wd}"
        inner = ["/bin/sh", "-c", 'cd "$1" || exit 126; shift; exec "$@"', "sh", wd, *inner]
        if not self.isolated:
            return inner
        ns = ["nsenter", "-t", str(self._ns_pid), "-U", "-m", "-n", "-i", "-u", "-p", "-C", "-r"]
        # nsenter'd processes do not inherit bwrap's no_new_privs: set it again for each command.
        return [*ns, "--preserve-credentials", "--", "setpriv", "--no-new-privs", *inner]

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
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed; create a new one")
        limit = timeout if timeout is not None else self.cfg.command_timeout_s
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                self._argv(cmd, cwd),
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env(env),
                cwd=str(self.root) if not self.isolated else "/",
                start_new_session=True,
                preexec_fn=self._limits,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start a command in sandbox {self.id}: {exc}") from exc
        reader = OutputCollector(proc, stdin)
        finished = reader.run(limit)
        if finished:  # both pipes closed; the process may still run (it closed them itself)
            try:
                proc.wait(timeout=max(0.0, t0 + limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                finished = False
        timed_out = not finished and not reader.overflow
        if not finished:
            kill_tree(proc)
            if not reader.run(5):
                # A detached process still holds the pipes: kill everything the agent runs.
                self._kill_agent_processes()
                reader.run(5)
        out, err = reader.result()
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        code = 124 if timed_out else proc.returncode
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

    def diff(self) -> str:
        """The agent's changes against the pristine commit, computed inside the sandbox against a
        read-only copy of the pristine ``.git`` (the agent's own ``.git`` is never consulted)."""
        gitdir = BASE_GIT if self.isolated else str(self.template / ".git")
        script = (
            "set -e; t=$(mktemp -d); export GIT_INDEX_FILE=$t/index GIT_OBJECT_DIRECTORY=$t/objects; "
            'mkdir -p "$t/objects"; git read-tree HEAD; git add -A -- .; '
            f"git diff --cached --binary --no-ext-diff --no-textconv --no-color --full-index {self.base_commit} "
            "-- . ':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/*.py[co]'; "
            'rm -rf "$t"'
        )
        env = {
            "GIT_DIR": gitdir,
            "GIT_WORK_TREE": self.repo_dir,
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": f"{gitdir}/objects",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_PAGER": "cat",
        }
        code, out, err, _, _ = self.run_bytes(script, env=env, timeout=120)
        if code != 0:
            raise SandboxError(f"git diff failed in sandbox {self.id}: {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    def _kill_agent_processes(self) -> None:
        """Kill every process in the sandbox except the init (and its socat listener)."""
        if not self._ns_pid:
            return
        keep = {self._ns_pid}
        with contextlib.suppress(OSError):
            keep |= {int(x) for x in Path(f"/proc/{self._ns_pid}/task/{self._ns_pid}/children").read_text().split()[:1]}
        for pid in descendants(self._ns_pid):
            if pid not in keep:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, 9)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._init is not None:
            kill_tree(self._init)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._init.wait(timeout=5)
            if self._init.stderr:
                self._init.stderr.close()
        if self._cgroup is not None:
            self._cgroup.remove()
        shutil.rmtree(self.host_dir, ignore_errors=True)

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def cleanup_leftovers(cfg: SandboxConfig | None = None) -> int:
    """Delete sandbox directories (and pids cgroups) whose bwrap init is gone: what a crashed run
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
        PidCgroup(PidCgroup.parent_v1() / f"lego-{d.name.removeprefix('sbx-')}").remove()
        removed += 1
    return removed
