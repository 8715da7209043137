"""The ``local`` sandbox backend: a fresh working copy per rollout, commands run under bubblewrap.

How it works. ``LocalSandbox`` starts bubblewrap with a small process server
(:mod:`lego.sandboxes.spawner`) as the sandbox's pid 1, inside a private mount namespace prepared by
:mod:`lego.sandboxes.privilege`: one size-capped tmpfs holds /repo, /tmp, /var/tmp, /run, HOME and
/dev/shm, and the task's pristine, history-stripped template (:mod:`lego.sandboxes.templates`) is copied into
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
    ties the sandbox's life to the creating thread (the proxy bridge's too, by a parent-death
    signal, so neither outlives a lego that is killed without closing its sandboxes).

Where bubblewrap is missing, creating a sandbox raises :class:`SandboxError` naming the fix, unless
``SandboxConfig.unsafe_no_isolation`` is set.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from lego.config import SandboxConfig
from lego.errors import SandboxError, TaskError
from lego.sandboxes import spawner_client
from lego.sandboxes.cgroup import SandboxCgroup
from lego.sandboxes.layout import AGENT_HOME, AGENT_UID, REPO_DIR, bwrap_available
from lego.sandboxes.live import LiveProcess
from lego.sandboxes.local_diff import DIFF_FILE_CAP, host_diff
from lego.sandboxes.local_start import HostProcesses, copy_owned, mount_root, workdir
from lego.sandboxes.privilege import HostIdentity
from lego.sandboxes.processes import FileOps, agent_env
from lego.sandboxes.runtime import python_runtime, task_runtime
from lego.sandboxes.templates import pristine_template, sandbox_id, template_info
from lego.types import Task

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


class LocalSandbox(FileOps):
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
        self.host_dir = workdir(cfg) / f"sbx-{self.id}"
        self.host_dir.mkdir(parents=True)
        self._closed = False
        self._live: list[LiveProcess] = []
        self.identity = HostIdentity.allocate() if self.isolated else HostIdentity(os.getuid(), os.getgid(), False)
        self._cgroup = SandboxCgroup.create(f"lego-{self.id}", cfg.max_processes, cfg.memory_budget_mb << 20)
        self._procs = HostProcesses(self.id, cfg, self.identity, self._cgroup, self.host_dir, isolated=self.isolated)
        try:
            self.template = pristine_template(task.repo_path)
            self.base_commit, self.history_strip = template_info(self.template)
            self.runtime = python_runtime()
            self.task_runtime = task_runtime(task)
            self.proxy_port: int | None = None
            if self.isolated:
                binds = [*self.runtime.binds, *self.task_runtime.binds, *ro_binds]
                outer = self._procs.start_bwrap(self.runtime.python, list(dict.fromkeys(binds)))
                self.root = Path(f"/proc/{outer}/root{self._procs.mnt}/fs/repo")
                self.repo_dir = REPO_DIR
            else:
                self.root = self.host_dir / "repo"
                self.repo_dir = str(self.root)
                self.root.mkdir()
                self._procs.start_spawner([str(self.runtime.python)], cwd=self.root)
            copy_owned(self.template, self.root, self.identity.uid, self.identity.gid)
            if proxy_uds is not None:
                self.proxy_port = self._procs.start_bridge(Path(proxy_uds), proxy_port if self.isolated else 0)
        except BaseException:
            self.close()
            raise

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment every command starts from (``extra`` wins)."""
        home = AGENT_HOME
        if not self.isolated:
            home = str(self.host_dir / "home")
            Path(home).mkdir(exist_ok=True)
        path = f"{self.runtime.bin_dir}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
        if self.task_runtime.bin_dir is not None:
            path = f"{self.task_runtime.bin_dir}:{path}"
        pythonpath = self.task_runtime.pythonpath(self.repo_dir)
        return agent_env(
            path, home, self.proxy_port, {**({"PYTHONPATH": pythonpath} if pythonpath else {}), **(extra or {})}
        )

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
        if self._closed or self._procs.ctrl is None:
            raise SandboxError(f"sandbox {self.id} is closed; create a new one")
        limit = timeout if timeout is not None else self.cfg.command_timeout_s
        wd = cwd or self.repo_dir
        if not wd.startswith("/"):
            wd = f"{self.repo_dir}/{wd}"
        argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        return spawner_client.run_command(
            self._procs.ctrl,
            self.id,
            argv,
            env=self.env(env),
            cwd=wd,
            limit=limit,
            stdin=stdin,
            kill_everything=self.kill_agent_processes,
        )

    def start(
        self, cmd: str | Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> LiveProcess:
        """Start ``cmd`` as :meth:`exec` would, its stdin left open to lego, and return at once
        (:class:`lego.seams.LiveSandbox`; what it offers and how it knows the command waits for
        its stdin: :mod:`lego.sandboxes.live`). It has no time limit of its own: the caller kills
        it; :meth:`kill_agent_processes` and :meth:`close` do too."""
        if self._closed or self._procs.ctrl is None:
            raise SandboxError(f"sandbox {self.id} is closed; create a new one")
        wd = cwd or self.repo_dir
        if not wd.startswith("/"):
            wd = f"{self.repo_dir}/{wd}"
        argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        reply, pid, stdin_fd, out_fd, err_fd = spawner_client.start_command(
            self._procs.ctrl, self.id, argv, env=self.env(env), cwd=wd
        )
        live = LiveProcess(self.id, reply, pid, stdin_fd, out_fd, err_fd, init_host_pid=self._procs.ns_pid)
        self._live.append(live)
        return live

    def diff(self) -> str:
        """The agent's changes against the pristine commit, untracked files included, taken from
        outside the sandbox with lego's authority: git runs on the host (as root, or as the owner
        of the sandbox's namespaces) in the sandbox's private mount namespace, against the pristine
        template's ``.git`` and a throwaway index, so no file mode, symlink, nested or broken
        ``.git`` or attribute the agent left can stop it, and git follows no symlink. Files over
        :data:`DIFF_FILE_CAP`, FIFOs, sockets and devices are left out."""
        worktree = f"{self._procs.mnt}/fs/repo" if self.isolated else str(self.root)
        prefix: list[str] = []
        if self.isolated:
            init = self._procs.init
            assert init is not None
            prefix = ["nsenter", f"--mount=/proc/{init.pid}/ns/mnt"]
            if not self.identity.privileged:
                prefix += [f"--user=/proc/{init.pid}/ns/user", "--preserve-credentials"]
            prefix.append("--")
        return host_diff(
            self.id,
            root=self.root,
            worktree=worktree,
            template=self.template,
            base_commit=self.base_commit,
            prefix=prefix,
        )

    def kill_agent_processes(self) -> None:
        """Kill every process started inside (daemons and orphans included), keeping the files.
        The process server does it from pid 1 with ``kill(-1, SIGKILL)``, which the kernel applies
        to the whole pid namespace at once, and answers once every one has been reaped."""
        if self._closed or self._procs.ctrl is None:
            return
        spawner_client.killall(self._procs.ctrl, self.id)

    def close(self) -> None:
        if self._closed:
            return
        for live in self._live:  # the server kills them anyway as it stops; this releases lego's ends
            live.kill()
        self._closed = True
        self._procs.stop()
        for live in self._live:
            live.close()
        deadline = time.monotonic() + 5
        self._cgroup.remove()
        while self._cgroup.exists() and time.monotonic() < deadline:  # exiting tasks leave a moment later
            time.sleep(0.01)
            self._cgroup.remove()
        self.identity.release()
        shutil.rmtree(self.host_dir, ignore_errors=True)
        if self._procs.mnt is not None:  # only empty mount points: the mounts lived in the sandbox's namespace
            shutil.rmtree(self._procs.mnt, ignore_errors=True)

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
    for d in workdir(cfg or SandboxConfig()).glob("sbx-*"):
        try:
            pid = int((d / "init.pid").read_text())
            alive = Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"bwrap")
        except (OSError, ValueError):
            alive = False
        if alive:
            continue
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(mount_root() / d.name.removeprefix("sbx-"), ignore_errors=True)
        SandboxCgroup.of(f"lego-{d.name.removeprefix('sbx-')}").remove()
        removed += 1
    return removed
