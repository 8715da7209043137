"""The ``docker`` sandbox backend (Docker SDK; ``pip install 'lego-rl[docker]'``).

One container per rollout, from an image per task: ``task.image`` (SWE-bench instance images by
their standard names, ``swebench/sweb.eval.x86_64.<id>:latest``), else an image built from
``task.dockerfile`` (tagged ``lego-task:<hash>``), else ``SandboxConfig.docker_image``.

* Repo: a task with a local ``repo_path`` gets a copy of its pristine, history-stripped template
  bound at ``/repo`` (exactly as the local backend). A task that only has an image keeps its repo in
  the image (``task.metadata["repo_dir"]``, default ``/testbed``); lego strips its history inside
  the container before the agent starts (reflog expired, remotes and other refs deleted, ``gc
  --prune=now``) and verifies it. Diffs of bound repos are taken against a read-only copy of the
  pristine ``.git``; diffs of image repos against the recorded base commit.
* Network: ``network_mode="none"``. When a proxy socket is given it is bind-mounted at
  ``/run/lego/proxy.sock`` and the container's init is ``socat TCP-LISTEN:<port>,bind=127.0.0.1,fork
  UNIX-CONNECT:/run/lego/proxy.sock``, the same bridge as the local backend (the image must ship
  socat).
* Runtime: lego's Python task runtime and the caller's ``ro_binds`` are mounted read-only at their
  host paths; the runtime's ``bin`` is appended to the image's PATH (the image's own Python wins).
* Identity: a task with a local repo runs as uid/gid 1000 (its copy is chowned to it when lego is
  root) with every capability dropped; an image repo is owned by the image's root, so such a
  container keeps CHOWN, DAC_OVERRIDE and FOWNER for root inside (Docker maps it to host root
  unless the engine uses userns-remap). ``no-new-privileges`` everywhere; /proc/sys read-only as
  Docker mounts it.
* Limits: ``mem_limit`` (``memory_budget_mb``, which covers the tmpfs pages too), ``pids_limit``
  (max_processes), RLIMIT_CPU via ulimits; /tmp, /var/tmp and HOME are tmpfs capped at
  ``disk_mb`` each (the bound repo is not: it lives on the host disk; use the local backend for a
  disk budget that covers the repo); each exec runs under ``timeout -s KILL`` (its whole process
  group dies) with a host-side backstop that kills the container's exec process;
  :meth:`DockerSandbox.kill_agent_processes` kills every process but the container's init.
* Cleanup: containers carry the labels ``lego.sandbox=1``, ``lego.run_id`` and ``lego.task``;
  :func:`cleanup_leftovers` removes any left behind by a crashed run.

Isolated as well as Docker isolates (namespaces, cgroups, seccomp): not against kernel exploits.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lego.config import SandboxConfig
from lego.errors import SandboxError
from lego.sandboxes.base import pristine_template, sandbox_id, template_info
from lego.sandboxes.runtime import python_runtime
from lego.types import ExecResult, Task

__all__ = ["LABEL", "DockerSandbox", "cleanup_leftovers", "docker_client", "new_run_id"]

LABEL = "lego.sandbox"
_AGENT = "1000:1000"
_HOME = "/home/agent"
_SOCK = "/run/lego/proxy.sock"
_BASE_GIT = "/lego/base.git"
_STRIP = (
    'set -e; cd "$1"; git remote | xargs -r -n1 git remote remove; '
    "git for-each-ref --format='%(refname)' | grep -v \"^$(git symbolic-ref -q HEAD || echo NONE)$\" "
    "| xargs -r -n1 git update-ref -d; git stash clear; git reflog expire --expire=now --all; "
    "rm -f .git/ORIG_HEAD .git/FETCH_HEAD .git/packed-refs.lock; git gc -q --prune=now"
)


def docker_client() -> Any:
    """A Docker SDK client from the environment, or a SandboxError naming the fix."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxError("the docker backend needs the Docker SDK: pip install 'lego-rl[docker]'") from exc
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        raise SandboxError(
            f"no Docker engine answers ({exc}); start one (e.g. `dockerd --bridge=none --iptables=false "
            "--ip6tables=false` as root) or use sandbox.kind=local"
        ) from exc
    return client


def _ulimit(name: str, value: int) -> Any:
    from docker.types import Ulimit

    return Ulimit(name=name, soft=value, hard=value)


def _image_for(client: Any, task: Task, cfg: SandboxConfig) -> str:
    if task.image:
        name = task.image
    elif task.dockerfile:
        name = f"lego-task:{hashlib.sha256(task.dockerfile.encode()).hexdigest()[:16]}"
        if not client.images.list(name=name):
            with tempfile.TemporaryDirectory() as ctx:
                (Path(ctx) / "Dockerfile").write_text(task.dockerfile)
                try:
                    client.images.build(path=ctx, tag=name, rm=True, network_mode="none")
                except Exception as exc:
                    raise SandboxError(f"building the image of task {task.instance_id} failed: {exc}") from exc
        return name
    elif cfg.docker_image:
        name = cfg.docker_image
    else:
        raise SandboxError(
            f"task {task.instance_id} names no image or dockerfile; set sandbox.docker_image or use sandbox.kind=local"
        )
    try:
        client.images.get(name)
    except Exception:
        try:
            client.images.pull(name)
        except Exception as exc:
            raise SandboxError(
                f"image {name} is not present and could not be pulled ({exc}); `docker pull {name}`"
            ) from exc
    return name


class DockerSandbox:
    """One container per rollout (see module doc)."""

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
        self.host_dir = Path(tempfile.mkdtemp(prefix=f"lego-docker-{self.id}-"))
        self.container: Any = None
        self._closed = False
        self.proxy_port: int | None = None
        try:
            image = _image_for(self.client, task, cfg)
            runtime = python_runtime()
            self.runtime = runtime
            volumes: dict[str, dict[str, str]] = {
                str(p): {"bind": str(p), "mode": "ro"} for p in (*runtime.binds, *ro_binds)
            }
            if task.repo_path:
                self.template = pristine_template(task.repo_path)
                self.root = self.host_dir / "repo"
                shutil.copytree(self.template, self.root, symlinks=True)
                self.user = _AGENT if os.geteuid() == 0 else f"{os.getuid()}:{os.getgid()}"
                if os.geteuid() == 0:
                    for path in (self.root, *self.root.rglob("*")):
                        os.lchown(path, 1000, 1000)
                self.repo_dir = "/repo"
                volumes[str(self.root)] = {"bind": self.repo_dir, "mode": "rw"}
                volumes[str(self.template / ".git")] = {"bind": _BASE_GIT, "mode": "ro"}
                self.base_commit, _ = template_info(self.template)
            else:
                self.root = self.host_dir
                self.user = "0:0"
                self.repo_dir = str(task.metadata.get("repo_dir", "/testbed"))
                self.base_commit = ""
            port = proxy_port or 18080
            if proxy_uds is not None:
                volumes[str(proxy_uds)] = {"bind": _SOCK, "mode": "rw"}
                init = ["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{_SOCK}"]
            else:
                init = ["sleep", "infinity"]
            self.container = self.client.containers.run(
                image,
                command=init,
                entrypoint=[],
                detach=True,
                network_mode="none",
                labels={LABEL: "1", "lego.run_id": run_id, "lego.task": task.instance_id},
                volumes=volumes,
                working_dir=self.repo_dir,
                user=self.user,
                mem_limit=f"{cfg.memory_budget_mb}m",
                memswap_limit=f"{cfg.memory_budget_mb}m",
                pids_limit=cfg.max_processes,
                tmpfs=self._tmpfs(volumes),
                cap_drop=["ALL"],
                cap_add=[] if task.repo_path else ["CHOWN", "DAC_OVERRIDE", "FOWNER"],  # root owns an image repo
                security_opt=["no-new-privileges"],
                ulimits=[_ulimit("cpu", cfg.cpu_seconds), _ulimit("core", 0)],
                hostname="lego-sandbox",
            )
            self._image_path = self._image_env_path()
            if task.repo_path:
                self.history_strip = template_info(self.template)[1]
            else:
                self.history_strip = self._strip_image_repo()
            if proxy_uds is not None:
                self._wait_listening(port)
                self.proxy_port = port
        except BaseException:
            self.close()
            raise

    def _tmpfs(self, volumes: dict[str, dict[str, str]]) -> dict[str, str]:
        """Size-capped tmpfs for the temp dirs and HOME; plus an empty, traversable /root when a
        read-only bind (lego's runtime, a harness) lives below it, since the image's /root is
        mode 0700 and the agent is not root."""
        out = {d: f"size={self.cfg.disk_mb}m,mode=1777,nosuid,nodev" for d in ("/tmp", "/var/tmp", _HOME)}
        if self.user != "0:0" and any(v["bind"].startswith("/root/") for v in volumes.values()):
            out["/root"] = "size=1m,mode=0755,nosuid,nodev"
        return out

    def _image_env_path(self) -> str:
        env = self.container.attrs.get("Config", {}).get("Env") or []
        return next((e.split("=", 1)[1] for e in env if e.startswith("PATH=")), "/usr/local/bin:/usr/bin:/bin")

    def _strip_image_repo(self) -> bool:
        res = self.exec(["sh", "-c", _STRIP, "sh", self.repo_dir], timeout=300)
        if res.exit_code != 0:
            raise SandboxError(f"history strip inside {self.task.image} failed: {res.stderr.strip()}")
        self.base_commit = self.exec("git rev-parse HEAD").stdout.strip()
        check = self.exec(
            'test $(git rev-list --all | wc -l) -eq 1 && test -z "$(git remote)" && test -z "$(git reflog)"'
        )
        return check.exit_code == 0

    def _wait_listening(self, port: int) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if f":{port:04X} 00000000:0000 0A" in self.exec("cat /proc/net/tcp", timeout=5).stdout:
                return
            time.sleep(0.05)
        raise SandboxError(f"socat did not listen on 127.0.0.1:{port} in the container; does the image ship socat?")

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        base = {
            "PATH": f"{self._image_path}:{self.runtime.bin_dir}",
            "HOME": _HOME,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }
        if self.proxy_port is not None:
            base["LEGO_PROXY_URL"] = f"http://127.0.0.1:{self.proxy_port}"
        return {**base, **(extra or {})}

    def exec(
        self,
        cmd: str | Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed; create a new one")
        limit = timeout if timeout is not None else self.cfg.command_timeout_s
        inner = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        wd = cwd or self.repo_dir
        wd = wd if wd.startswith("/") else f"{self.repo_dir}/{wd}"
        argv = ["timeout", "-s", "KILL", f"{max(limit, 0.01):.3f}", *inner]
        t0 = time.monotonic()
        api = self.client.api
        exec_id = api.exec_create(self.container.id, argv, environment=self.env(env), workdir=wd, user=self.user)["Id"]
        box: dict[str, Any] = {}

        def run() -> None:
            box["out"] = api.exec_start(exec_id, demux=True)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(limit + 10)  # backstop: `timeout` inside should already have fired
        if worker.is_alive():
            pid = api.exec_inspect(exec_id).get("Pid")
            if pid:
                self.container.exec_run(["kill", "-9", "--", f"-{pid}"])
            worker.join(5)
        out, err = box.get("out") or (b"", b"")
        code = api.exec_inspect(exec_id).get("ExitCode")
        wall = time.monotonic() - t0
        timed_out = code in (124, 137) and wall >= limit * 0.95
        return ExecResult(
            exit_code=124 if timed_out else int(code if code is not None else -1),
            stdout=(out or b"").decode(errors="replace"),
            stderr=(err or b"").decode(errors="replace"),
            timed_out=timed_out,
            wall_s=wall,
        )

    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.repo_dir}/{path}"

    def read(self, path: str) -> bytes:
        try:
            stream, _ = self.container.get_archive(self._abs(path))
        except Exception as exc:
            raise SandboxError(f"cannot read {path} in sandbox {self.id}: {exc}") from exc
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            f = tar.extractfile(member) if member is not None else None
            if f is None:
                raise SandboxError(f"cannot read {path} in sandbox {self.id}: not a regular file")
            return f.read()

    def write(self, path: str, data: bytes) -> None:
        target = Path(self._abs(path))
        self.exec(["mkdir", "-p", str(target.parent)], timeout=30)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(target.name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        if not self.container.put_archive(str(target.parent), buf.getvalue()):
            raise SandboxError(f"cannot write {path} in sandbox {self.id}")

    def diff(self) -> str:
        excludes = "':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/*.py[co]'"
        if self.task.repo_path:
            env = {
                "GIT_DIR": _BASE_GIT,
                "GIT_WORK_TREE": self.repo_dir,
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": f"{_BASE_GIT}/objects",
            }
        else:
            env = {}
        script = (
            "set -e; t=$(mktemp -d); export GIT_INDEX_FILE=$t/index GIT_OBJECT_DIRECTORY=$t/objects; "
            f'mkdir -p "$t/objects"; export GIT_ALTERNATE_OBJECT_DIRECTORIES=${{GIT_ALTERNATE_OBJECT_DIRECTORIES:-{self.repo_dir}/.git/objects}}; '
            f"git read-tree {self.base_commit}; git add -A -- .; "
            f"git diff --cached --binary --no-ext-diff --no-textconv --no-color --full-index {self.base_commit} -- . {excludes}"
        )
        res = self.exec(script, env={**env, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}, timeout=120)
        if res.exit_code != 0:
            raise SandboxError(f"git diff failed in sandbox {self.id}: {res.stderr.strip()}")
        return res.stdout

    def kill_agent_processes(self) -> None:
        """SIGKILL every process but the container's init (the proxy bridge), as the agent's user:
        ``kill(-1)`` spares the caller and pid 1, so it runs twice to catch a process forked
        during the first pass."""
        if self._closed or self.container is None:
            return
        self.container.exec_run(["sh", "-c", "kill -9 -1; kill -9 -1; true"], user=self.user)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.remove(force=True)
        shutil.rmtree(self.host_dir, ignore_errors=True)

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cleanup_leftovers(run_id: str | None = None, client: Any = None) -> int:
    """Remove containers lego left behind (all, or one run's); returns how many were removed."""
    client = client or docker_client()
    filters = {"label": [f"{LABEL}=1", *([f"lego.run_id={run_id}"] if run_id else [])]}
    removed = 0
    for c in client.containers.list(all=True, filters=filters):
        with contextlib.suppress(Exception):
            c.remove(force=True)
            removed += 1
    return removed


def new_run_id() -> str:
    return uuid.uuid4().hex[:8]
