"""The ``docker`` sandbox backend (Docker SDK; ``pip install 'lego-rl[docker]'``).

One container per rollout, from an image per task: ``task.image`` (SWE-bench instance images by
their standard names, ``swebench/sweb.eval.x86_64.<id>:latest``), else an image built from
``task.dockerfile`` (tagged ``lego-task:<hash>``), else ``SandboxConfig.docker_image``. The image
must ship ``setpriv`` (util-linux) and git, and socat when a proxy is used, and must run lego's
Python runtime (bound from the host: its C library must be no older than the host's), which the
exec wrapper, the keeper and the kill loop use as well as grading and the harnesses.

Threat model: as the local backend's (:mod:`lego.sandboxes.local`): the agent is adversarial and
runs arbitrary code as uid 1000. Each property below has a test in tests/sandboxes/test_docker.py,
and the red-team suite (tests/redteam) runs its backend-dependent attacks on this backend too.

* Identity: the container runs as root with every capability dropped except the few lego's own
  commands need (chown, dac_override, dac_read_search, fowner, kill, setuid, setgid, setpcap);
  every command of the agent's enters through ``setpriv --reuid=1000 --regid=1000 --clear-groups
  --bounding-set=-all --inh-caps=-all --no-new-privs``, so it holds no capability in any set, cannot
  regain one (no_new_privs; Docker's seccomp profile refuses user namespaces), and cannot signal or
  trace the root processes (its exec wrapper, lego's own commands). Without userns-remap the
  container's uid 1000 is the host's uid 1000: never host root.
* Kernel settings: /proc/sys, /proc/sysrq-trigger and /sys are read-only and Docker's masked paths
  are masked (Docker's defaults for an unprivileged container).
* Filesystem: the image's root file system is read-only (for a task with a local repo); the only
  writable places are size-capped tmpfs mounts: /repo (``disk_mb``), /tmp (``disk_mb / 2``), HOME
  (``disk_mb / 4``) and /dev/shm (``disk_mb / 8``). A write past a cap fails with ENOSPC; no byte
  reaches the host disk. No host path is mounted but lego's Python runtime and the caller's
  ``ro_binds`` (read-only, at their host paths: their scripts name those paths); an empty /root is
  mounted over the image's when one of them lives below it. The repo is streamed in as a tar of
  the task's pristine, history-stripped template (owned by uid 1000), and its pristine ``.git`` is
  copied to /lego (root-only, mode 0700), which :meth:`DockerSandbox.diff` compares against.
* Memory: ``mem_limit`` = ``memswap_limit`` = ``memory_budget_mb``: the container's memory cgroup
  holds its processes and the pages of its tmpfs mounts together.
* Processes: a private pid namespace with Docker's init (tini) as pid 1 (it reaps orphans);
  ``pids_limit`` = ``max_processes``; RLIMIT_CPU and RLIMIT_CORE=0 via ulimits. Each exec runs
  under a root wrapper (:data:`~lego.sandboxes.docker_scripts.WRAPPER`; the agent can neither signal nor trace it) that kills the
  command and every descendant at the deadline, and when the command ends stops what it left
  running before that end is visible (so a daemon cannot act between the harness returning and
  lego killing it); an output flood past ``OUTPUT_CAP`` or a command outliving its deadline by
  10 s kills every agent process. :meth:`DockerSandbox.kill_agent_processes` kills every process
  of uid 1000 (daemons and stopped ones included): first the container's main process (a root
  keeper under tini, :data:`~lego.sandboxes.docker_scripts.KEEPER`) is signalled and SIGKILLs them one by one, which needs no
  free pid; then a root loop sends ``kill(-1, SIGKILL)`` from a uid-1000 child until none is left.
* Network: ``network_mode="none"``: only ``lo``. With a proxy socket, a second container (the
  *bridge*) joins the sandbox's network namespace only, with the socket bind-mounted at
  ``/run/lego/proxy.sock``, and runs ``socat TCP-LISTEN:<port>,bind=127.0.0.1,fork
  UNIX-CONNECT:/run/lego/proxy.sock`` (as the socket's owner, no capabilities): the agent reaches
  ``http://127.0.0.1:<port>``, but the bridge lives in another pid and mount namespace, so the
  agent can neither see, signal nor replace it, and the socket's host path appears nowhere inside.
* Diffs: :meth:`DockerSandbox.diff` runs git in the container as root (dac_override: file modes do
  not stop it) against the pristine ``.git`` in /lego and a throwaway index; git never follows a
  symlink, and files that are not regular (FIFOs, sockets, devices) or larger than
  ``DIFF_FILE_CAP`` are left out, as in the local backend.
* Cleanup: containers carry the labels ``lego.sandbox=1``, ``lego.run_id`` and ``lego.task``;
  :func:`cleanup_leftovers` removes any left behind by a crashed run.

Not isolated:
  * the kernel (shared with the host: Docker isolates with namespaces, cgroups and seccomp; use a VM
    for hostile code that may carry a kernel exploit);
  * a task that only has an image keeps its repo in the image (``task.metadata["repo_dir"]``,
    default ``/testbed``): that container's root file system stays writable (the repo lives in it),
    so its writes land in Docker's storage on the host disk, bounded only where the storage driver
    supports ``storage_opt`` size; lego strips the repo's history inside the container before the
    agent starts (reflog expired, remotes and other refs deleted, ``gc --prune=now``), verifies it,
    and hands the repo to uid 1000;
  * the total of the tmpfs caps is ``1.875 * disk_mb`` (Docker gives each mount its own file
    system); the memory budget bounds them together;
  * per-process RLIMIT_AS (``memory_mb``) is not set (Docker offers no such ulimit): the memory
    cgroup bounds all processes together;
  * the agent's processes run only while a command of lego's runs: each command's end stops the
    ones no other running command owns, and the next command resumes them (the local backend lets
    them run between commands);
  * uid 1000 has no /etc/passwd entry unless the image has one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lego.config import SandboxConfig
from lego.errors import SandboxError
from lego.sandboxes.docker_engine import (
    LABEL,
    LEGO_DIR,
    cleanup_leftovers,
    docker_client,
    exec_as_root,
    image_for,
    new_run_id,
    repo_tar,
    run_bridge_container,
    run_sandbox_container,
    sandbox_mounts,
)
from lego.sandboxes.docker_scripts import AS_AGENT, GIT_ENV, KEEPER, KILL_ALL, STRIP, STRIP_CHECK, WRAPPER, diff_script
from lego.sandboxes.layout import AGENT_HOME, AGENT_UID, REPO_DIR
from lego.sandboxes.local_diff import DIFF_OUTPUT_CAP
from lego.sandboxes.processes import OUTPUT_CAP, FileOps, agent_env
from lego.sandboxes.runtime import python_runtime, task_runtime
from lego.sandboxes.templates import pristine_template, sandbox_id, template_info
from lego.types import Task

__all__ = ["LABEL", "DockerSandbox", "cleanup_leftovers", "docker_client", "new_run_id"]

_BASE_GIT = f"{LEGO_DIR}/base.git"


class DockerSandbox(FileOps):
    """One container per rollout, plus one bridge container when a proxy is given (see module doc)."""

    def __init__(
        self,
        task: Task,
        cfg: SandboxConfig,
        *,
        proxy_uds: Path | None = None,
        ro_binds: Sequence[Path] = (),
        proxy_port: int | None = None,
        run_id: str = "",
        client: Any = None,
    ) -> None:
        self.cfg, self.task, self.isolated = cfg, task, True
        self.client = client or docker_client()
        self.id = sandbox_id()
        self.container: Any = None
        self.bridge: Any = None
        self._closed = False
        self.proxy_port: int | None = None
        self._labels = {LABEL: "1", "lego.run_id": run_id, "lego.task": task.instance_id}
        try:
            image = image_for(self.client, task, cfg)
            self.runtime = python_runtime()
            self.task_runtime = task_runtime(task)
            binds = list(dict.fromkeys(Path(p) for p in (*self.runtime.binds, *self.task_runtime.binds, *ro_binds)))
            mounts, under_root = sandbox_mounts(binds, cfg, repo_tmpfs=bool(task.repo_path))
            if task.repo_path:
                self.template = pristine_template(task.repo_path)
                self.repo_dir = REPO_DIR
            else:
                self.repo_dir = str(task.metadata.get("repo_dir", "/testbed"))
            self.container = run_sandbox_container(
                self.client,
                image,
                cfg,
                command=[str(self.runtime.python), "-I", "-S", "-c", KEEPER],
                labels=self._labels,
                mounts=mounts,
                read_only=bool(task.repo_path),
            )
            self.container.reload()
            # The repo as the host sees it (through the container's init), where lego shares the
            # engine's host with the right to read another process's root; the protocol's ``root``.
            self.root = Path(f"/proc/{self.container.attrs['State']['Pid']}/root{self.repo_dir}")
            self._image_path = self._image_env_path()
            # Absolute paths, looked up once on the image's PATH: the root wrapper execs them, so no
            # PATH a caller passes (which may name a directory the agent writes) can pick them.
            tools = self._root(
                "command -v setpriv && command -v env && command -v git >/dev/null "
                f"|| {{ echo 'image {image} lacks setpriv (util-linux), env or git' >&2; exit 1; }}; "
                f"chown {AGENT_UID}:{AGENT_UID} {AGENT_HOME} && chmod 1777 /tmp && chmod 0700 {LEGO_DIR}"
                # Docker gives a tmpfs the mode of the image's directory below it (/root: 0700).
                + (" && chmod 0755 /root" if under_root else "")
            )
            self._setpriv, self._env_bin = tools.decode().split()[:2]
            if task.repo_path:
                self.base_commit, self.history_strip = template_info(self.template)
                self._root(
                    f"tar -x --same-owner -C {REPO_DIR} && chown {AGENT_UID}:{AGENT_UID} {REPO_DIR}",
                    stdin=repo_tar(self.template),
                    timeout=600,
                )
            else:
                self.history_strip = self._strip_image_repo()
            self._root(f'cp -a "{self.repo_dir}/.git" {_BASE_GIT}', timeout=600)
            if proxy_uds is not None:
                self._start_bridge(Path(proxy_uds), image, proxy_port or 18080)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ start-up
    def _image_env_path(self) -> str:
        env = self.container.attrs.get("Config", {}).get("Env") or []
        return next((e.split("=", 1)[1] for e in env if e.startswith("PATH=")), "/usr/local/bin:/usr/bin:/bin")

    def _root(self, script: str, *, stdin: bytes | None = None, timeout: float = 120) -> bytes:
        """Run ``script`` as the container's root (lego's authority); SandboxError when it fails."""
        env = {"PATH": self._image_path, "HOME": LEGO_DIR, "LANG": "C.UTF-8"}
        code, out, err, _, _ = self._run(["sh", "-c", script], env=env, workdir="/", stdin=stdin, limit=timeout)
        if code != 0:
            raise SandboxError(
                f"sandbox {self.id}: `{script[:120]}` failed [exit {code}]: {err.decode(errors='replace').strip()}"
            )
        return out

    def _strip_image_repo(self) -> bool:
        self._root(STRIP.replace('"$1"', f'"{self.repo_dir}"'), timeout=300)
        self.base_commit = self._root(f'git -C "{self.repo_dir}" rev-parse HEAD').decode().strip()
        check = self._run(
            ["sh", "-c", STRIP_CHECK, "sh", self.repo_dir],
            env={"PATH": self._image_path, "HOME": LEGO_DIR},
            workdir="/",
            limit=120,
        )
        self._root(f'chown -R {AGENT_UID}:{AGENT_UID} "{self.repo_dir}"', timeout=600)
        return check[0] == 0

    def _start_bridge(self, proxy_uds: Path, image: str, port: int) -> None:
        if not proxy_uds.exists():
            raise SandboxError(f"proxy socket {proxy_uds} does not exist; start the proxy with a uds first")
        self.bridge = run_bridge_container(
            self.client, image, sandbox_container=self.container.id, proxy_uds=proxy_uds, port=port, labels=self._labels
        )
        needle = f"0100007F:{port:04X}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            tcp = self._root("cat /proc/net/tcp", timeout=5).decode()
            if any(ln.split()[1:2] == [needle] and ln.split()[3:4] == ["0A"] for ln in tcp.splitlines()[1:]):
                self.proxy_port = port
                return
            self.bridge.reload()
            if self.bridge.status not in ("created", "running"):
                break
            time.sleep(0.05)
        logs = self.bridge.logs().decode(errors="replace").strip()
        raise SandboxError(f"the proxy bridge (socat) did not listen on 127.0.0.1:{port}: {logs or 'timed out'}")

    # ------------------------------------------------------------------ running commands
    def _run(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str],
        workdir: str,
        limit: float,
        stdin: bytes | None = None,
        cap: int = OUTPUT_CAP,
    ) -> tuple[int, bytes, bytes, bool, float]:
        """One exec as root (see :func:`~lego.sandboxes.docker_engine.exec_as_root`); a runaway
        command's output or time kills every agent process."""
        if self._closed or self.container is None:
            raise SandboxError(f"sandbox {self.id} is closed; create a new one")
        return exec_as_root(
            self.client.api,
            self.container.id,
            self.id,
            argv,
            env=env,
            workdir=workdir,
            limit=limit,
            stdin=stdin,
            cap=cap,
            on_runaway=self.kill_agent_processes,
        )

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment every command starts from (``extra`` wins)."""
        path = f"{self._image_path}:{self.runtime.bin_dir}"
        if self.task_runtime.bin_dir is not None:
            path = f"{self.task_runtime.bin_dir}:{path}"
        pythonpath = self.task_runtime.pythonpath(self.repo_dir)
        env = {**({"PYTHONPATH": pythonpath} if pythonpath else {}), **(extra or {})}
        return agent_env(path, AGENT_HOME, self.proxy_port, env)

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
        inner = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        wd = cwd or self.repo_dir
        wd = wd if wd.startswith("/") else f"{self.repo_dir}/{wd}"
        # The wrapper runs as root in a fixed environment (none of the caller's variables, e.g. a
        # PATH or LD_PRELOAD naming the agent's files, reaches a root process); the command's own
        # environment is set by `env -i` after setpriv has made it the agent.
        wrapper = [str(self.runtime.python), "-I", "-S", "-c", WRAPPER, "lego-exec", f"{max(limit, 0.01):.3f}"]
        as_agent = [self._setpriv, *AS_AGENT, self._env_bin, "-i", "--"]
        argv = [*wrapper, *as_agent, *(f"{k}={v}" for k, v in self.env(env).items()), *inner]
        root_env = {"PATH": self._image_path, "LANG": "C.UTF-8"}
        code, out, err, overflow, wall = self._run(argv, env=root_env, workdir=wd, limit=limit, stdin=stdin)
        timed_out = not overflow and ((code == 124 and wall >= limit * 0.95) or wall > limit + 10)
        if overflow:
            err += f"\n[lego: output exceeded {OUTPUT_CAP} bytes on one stream; the command was killed]".encode()
        return (124 if timed_out else code), out, err, timed_out, wall

    def diff(self) -> str:
        """The agent's changes against the pristine commit, untracked files included: git runs as the
        container's root against the pristine ``.git`` in /lego and a throwaway index, so no file mode,
        symlink, nested or broken ``.git`` or attribute the agent left stops it, and git follows no
        symlink. Files over ``DIFF_FILE_CAP``, FIFOs, sockets and devices are left out."""
        script = diff_script(self.base_commit)
        env = {
            **GIT_ENV,
            "PATH": self._image_path,
            "HOME": LEGO_DIR,
            "GIT_DIR": _BASE_GIT,
            "GIT_WORK_TREE": self.repo_dir,
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": f"{_BASE_GIT}/objects",
        }
        code, out, err, overflow, _ = self._run(
            ["sh", "-c", script], env=env, workdir="/", limit=300, cap=DIFF_OUTPUT_CAP
        )
        if overflow:
            raise SandboxError(
                f"the agent's changes in sandbox {self.id} exceed {DIFF_OUTPUT_CAP >> 20} MiB as a patch; "
                "such a diff cannot be graded"
            )
        if code != 0:
            raise SandboxError(f"git diff failed in sandbox {self.id}: {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    def kill_agent_processes(self) -> None:
        """Kill every process of the agent's uid (daemons and orphans included), keeping the files;
        returns once none is left (see module doc). The root processes (the bridge lives in another
        container anyway) are untouched."""
        from docker.errors import APIError

        if self._closed or self.container is None:
            return
        with contextlib.suppress(APIError):  # the keeper's pass first: it needs no free pid (409: it has exited)
            self.container.kill(signal="SIGUSR1")
        for _ in range(50):
            try:
                code, out, err, _, _ = self._run(
                    [str(self.runtime.python), "-I", "-S", "-c", KILL_ALL],
                    env={"PATH": self._image_path},
                    workdir="/",
                    limit=30,
                )
            except SandboxError:
                code, out, err = 126, b"OCI runtime exec failed", b""
            if not (code == 126 and b"OCI runtime exec failed" in out + err):
                break
            time.sleep(0.1)  # no free pid yet: the keeper is still freeing them
        else:
            raise SandboxError(f"sandbox {self.id}: no command could start to kill the agent's processes")
        if code != 0:
            raise SandboxError(
                f"sandbox {self.id}: the agent's processes did not die: {err.decode(errors='replace').strip()}"
            )

    def close(self) -> None:
        if self._closed:
            return
        from docker.errors import APIError

        self._closed = True
        for box in (self.bridge, self.container):
            if box is not None:
                with contextlib.suppress(APIError):  # NotFound: already gone (a cleanup, the engine's restart)
                    box.remove(force=True)

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
