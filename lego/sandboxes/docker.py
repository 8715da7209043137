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
  under a root wrapper (:data:`_WRAPPER`; the agent can neither signal nor trace it) that kills the
  command and every descendant at the deadline, and when the command ends stops what it left
  running before that end is visible (so a daemon cannot act between the harness returning and
  lego killing it); an output flood past ``OUTPUT_CAP`` or a command outliving its deadline by
  10 s kills every agent process. :meth:`DockerSandbox.kill_agent_processes` kills every process
  of uid 1000 (daemons and stopped ones included): first the container's main process (a root
  keeper under tini, :data:`_KEEPER`) is signalled and SIGKILLs them one by one, which needs no
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
import hashlib
import io
import select
import socket
import struct
import tarfile
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lego.config import SandboxConfig
from lego.errors import SandboxError
from lego.sandboxes.layout import AGENT_HOME, AGENT_UID, REPO_DIR
from lego.sandboxes.local_diff import DIFF_FILE_CAP
from lego.sandboxes.processes import OUTPUT_CAP
from lego.sandboxes.runtime import python_runtime
from lego.sandboxes.templates import pristine_template, sandbox_id, template_info
from lego.types import ExecResult, Task

__all__ = ["LABEL", "DockerSandbox", "cleanup_leftovers", "docker_client", "new_run_id"]

LABEL = "lego.sandbox"
_SOCK = "/run/lego/proxy.sock"
_LEGO = "/lego"
_BASE_GIT = f"{_LEGO}/base.git"
_ROOT_CAPS = ["CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "KILL", "SETUID", "SETGID", "SETPCAP"]
_AS_AGENT = [
    f"--reuid={AGENT_UID}",
    f"--regid={AGENT_UID}",
    "--clear-groups",
    "--bounding-set=-all",
    "--inh-caps=-all",
    "--no-new-privs",
    "--",
]
_DIFF_OUTPUT_CAP = 64 * 1024 * 1024
_STRIP = (
    'set -e; cd "$1"; git remote | xargs -r -n1 git remote remove; '
    "git for-each-ref --format='%(refname)' | grep -v \"^$(git symbolic-ref -q HEAD || echo NONE)$\" "
    "| xargs -r -n1 git update-ref -d; git stash clear; git reflog expire --expire=now --all; "
    "rm -f .git/ORIG_HEAD .git/FETCH_HEAD .git/packed-refs.lock; git gc -q --prune=now"
)
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_COUNT": "4",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": "/dev/null",
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
    "GIT_CONFIG_KEY_2": "core.untrackedCache",
    "GIT_CONFIG_VALUE_2": "false",
    "GIT_CONFIG_KEY_3": "safe.directory",
    "GIT_CONFIG_VALUE_3": "*",
}
# Runs as root with lego's runtime python: until no live process of the agent's uid is left, a
# child that became that uid sends kill(-1, SIGKILL), which the kernel applies to all of them at
# once (a fork cannot complete during it), sparing only the sender.
_KILL_ALL = f"""
import os, sys, time
def alive():
    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{{p}}/status") as f:
                fields = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
        except (OSError, ValueError):
            continue
        if fields.get("Uid", "").split()[:1] == ["{AGENT_UID}"] and fields.get("State", "").split()[:1] != ["Z"]:
            out.append(int(p))
    return out
deadline = time.monotonic() + 20
while left := alive():
    if time.monotonic() > deadline:
        sys.exit("processes of uid {AGENT_UID} survived 20 s of SIGKILL")
    try:
        pid = os.fork()
    except OSError:  # the pids limit is full (a fork bomb): one by one, which frees slots
        for p in left:
            try:
                os.kill(p, 9)
            except OSError:
                pass
        continue
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid({AGENT_UID})
            os.setuid({AGENT_UID})
            os.kill(-1, 9)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(0.005)
"""


# Every command of the agent's runs under this, as root with lego's runtime python (argv: the marker
# ``lego-exec``, the wall-time limit, then ``setpriv ... -- env -i -- VARS command``). It resumes every stopped
# process of the agent, becomes a child subreaper (daemons the command leaves, setsid or not, stay
# its descendants) and runs the command in a session of its own. At the deadline it kills the
# command and every descendant. When the command ends, before reaping it (so its pid still answers
# ``kill -0``), it stops (SIGSTOP, until none is left running) every process of the agent that no
# other running command of lego's owns: nothing the agent leaves behind can act between lego's
# commands (e.g. write the fix once the harness has returned, before lego kills it); the next
# command resumes them, :meth:`DockerSandbox.kill_agent_processes` ends them.
_WRAPPER = f"""
import ctypes, os, select, signal, sys, time
limit, cmd = float(sys.argv[2]), sys.argv[3:]
def procs():
    out = {{}}
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{{p}}/stat") as f:
                tail = f.read().rsplit(")", 1)[1].split()
            out[int(p)] = (tail[0], int(tail[1]))
        except (OSError, ValueError, IndexError):
            pass
    return out
def status_uid(pid):
    try:
        with open(f"/proc/{{pid}}/status") as f:
            return next(ln.split()[1] for ln in f if ln.startswith("Uid:"))
    except (OSError, StopIteration):
        return ""
for pid, (state, _) in procs().items():
    if state in "Tt" and status_uid(pid) == "{AGENT_UID}":
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
main = os.fork()
if main == 0:
    os.setsid()
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        sys.stderr.write(f"{{cmd[0]}}: {{e.strerror}}\\n")
        os._exit(127)
fd = os.pidfd_open(main)
deadline = time.monotonic() + limit
timed_out = False
while True:
    left = deadline - time.monotonic()
    if left <= 0:
        timed_out = True
        break
    if select.select([fd], [], [], min(left, 0.05))[0]:
        break
    while True:
        got = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if got is None or got.si_pid == main:
            break
        os.waitpid(got.si_pid, 0)
me = os.getpid()
def is_wrapper(pid):
    try:
        with open(f"/proc/{{pid}}/cmdline", "rb") as f:
            return f.read().split(b"\\0")[5:6] == [b"lego-exec"] and status_uid(pid) == "0"
    except OSError:
        return False
def below(table, roots):
    out, grew = set(), True
    while grew:
        grew = False
        for pid, (_, ppid) in table.items():
            if pid not in out and (ppid in roots or ppid in out):
                out.add(pid)
                grew = True
    return out
for _ in range(1000):
    table = procs()
    if timed_out:
        todo = [p for p in below(table, {{me}}) | {{main}} if table.get(p, ("Z",))[0] not in ("Z", "X")]
        sig = signal.SIGKILL
    else:
        busy = below(table, {{p for p in table if p != me and is_wrapper(p)}})
        todo = [
            p for p, (state, _) in table.items()
            if state not in "ZXTt" and p != main and p not in busy and status_uid(p) == "{AGENT_UID}"
        ]
        sig = signal.SIGSTOP
    if not todo:
        if timed_out:
            timed_out = None
            continue
        break
    for pid in todo:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    time.sleep(0.001)
_, status = os.waitpid(main, 0)
code = os.waitstatus_to_exitcode(status)
os._exit(124 if timed_out is None else (code if code >= 0 else 128 - code))
"""


# The container's main process (tini's child), as root: on SIGUSR1 it SIGKILLs every process of
# the agent's uid, one by one, until none is left. It needs no new process, so it works when the
# agent's processes hold every slot of the pids limit and no command (not even lego's) can start.
_KEEPER = f"""
import os, signal, time
def agents():
    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{{p}}/status") as f:
                fields = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
        except (OSError, ValueError):
            continue
        if fields.get("Uid", "").split()[:1] == ["{AGENT_UID}"] and fields.get("State", "").split()[:1] != ["Z"]:
            out.append(int(p))
    return out
def kill_all(*_):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        left = agents()
        if not left:
            return
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)
signal.signal(signal.SIGUSR1, kill_all)
while True:
    signal.pause()
"""


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


def _bind(path: str | Path, target: str, *, read_only: bool = True) -> Any:
    from docker.types import Mount

    return Mount(target=target, source=str(path), type="bind", read_only=read_only)


def _tmpfs(target: str, mb: int, mode: int) -> Any:
    from docker.types import Mount

    return Mount(target=target, source=None, type="tmpfs", tmpfs_size=max(mb, 1) << 20, tmpfs_mode=mode)


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


def _repo_tar(template: Path) -> bytes:
    """The template as a tar whose every entry belongs to the agent (symlinks stored as links)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid = info.gid = AGENT_UID
            info.uname = info.gname = ""
            return info

        for entry in sorted(template.iterdir()):
            tar.add(entry, arcname=entry.name, filter=own)
    return buf.getvalue()


class _Frames:
    """Demultiplexes a Docker exec's raw stream (8-byte headers: stream id, size) with a cap."""

    def __init__(self, cap: int) -> None:
        self.cap, self.overflow = cap, False
        self.buf = bytearray()
        self.streams = {1: bytearray(), 2: bytearray()}

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        while len(self.buf) >= 8:
            kind, size = self.buf[0], struct.unpack(">I", self.buf[4:8])[0]
            if len(self.buf) < 8 + size:
                return
            data = bytes(self.buf[8 : 8 + size])
            del self.buf[: 8 + size]
            out = self.streams.get(kind)
            if out is None:
                continue
            room = self.cap - len(out)
            out += data[: max(room, 0)]
            self.overflow = self.overflow or len(data) > room


class DockerSandbox:
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
            image = _image_for(self.client, task, cfg)
            self.runtime = python_runtime()
            binds = [Path(p) for p in (*self.runtime.binds, *ro_binds)]
            for p in binds:
                if not p.exists():
                    raise SandboxError(f"read-only bind {p} does not exist on the host; install it first")
            mounts = [_bind(p, str(p)) for p in binds]
            under_root = any(str(p).startswith("/root/") for p in binds)
            if under_root:  # the image's /root is mode 0700: an empty, traversable one instead
                mounts.append(_tmpfs("/root", 1, 0o755))
            mounts += [
                _tmpfs("/tmp", cfg.disk_mb // 2, 0o1777),
                _tmpfs(AGENT_HOME, cfg.disk_mb // 4, 0o755),
                _tmpfs(_LEGO, cfg.disk_mb, 0o700),
            ]
            if task.repo_path:
                self.template = pristine_template(task.repo_path)
                self.repo_dir = REPO_DIR
                mounts.append(_tmpfs(REPO_DIR, cfg.disk_mb, 0o755))
            else:
                self.repo_dir = str(task.metadata.get("repo_dir", "/testbed"))
            self.container = self.client.containers.run(
                image,
                command=[str(self.runtime.python), "-I", "-S", "-c", _KEEPER],
                entrypoint=[],
                init=True,
                detach=True,
                user="0:0",
                network_mode="none",
                labels=self._labels,
                mounts=mounts,
                read_only=bool(task.repo_path),
                working_dir="/",
                mem_limit=f"{cfg.memory_budget_mb}m",
                memswap_limit=f"{cfg.memory_budget_mb}m",
                shm_size=f"{max(cfg.disk_mb // 8, 1)}m",
                pids_limit=cfg.max_processes,
                cap_drop=["ALL"],
                cap_add=_ROOT_CAPS,
                security_opt=["no-new-privileges"],
                ulimits=[_ulimit("cpu", cfg.cpu_seconds), _ulimit("core", 0)],
                hostname="lego-sandbox",
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
                f"chown {AGENT_UID}:{AGENT_UID} {AGENT_HOME} && chmod 1777 /tmp && chmod 0700 {_LEGO}"
                # Docker gives a tmpfs the mode of the image's directory below it (/root: 0700).
                + (" && chmod 0755 /root" if under_root else "")
            )
            self._setpriv, self._env_bin = tools.decode().split()[:2]
            if task.repo_path:
                self.base_commit, self.history_strip = template_info(self.template)
                self._root(
                    f"tar -x --same-owner -C {REPO_DIR} && chown {AGENT_UID}:{AGENT_UID} {REPO_DIR}",
                    stdin=_repo_tar(self.template),
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
        env = {"PATH": self._image_path, "HOME": _LEGO, "LANG": "C.UTF-8"}
        code, out, err, _, _ = self._run(["sh", "-c", script], env=env, workdir="/", stdin=stdin, limit=timeout)
        if code != 0:
            raise SandboxError(
                f"sandbox {self.id}: `{script[:120]}` failed [exit {code}]: {err.decode(errors='replace').strip()}"
            )
        return out

    def _strip_image_repo(self) -> bool:
        self._root(_STRIP.replace('"$1"', f'"{self.repo_dir}"'), timeout=300)
        self.base_commit = self._root(f'git -C "{self.repo_dir}" rev-parse HEAD').decode().strip()
        check = self._run(
            [
                "sh",
                "-c",
                'cd "$1" && test $(git rev-list --all | wc -l) -eq 1 && test -z "$(git remote)" '
                '&& test -z "$(git reflog)"',
                "sh",
                self.repo_dir,
            ],
            env={"PATH": self._image_path, "HOME": _LEGO},
            workdir="/",
            limit=120,
        )
        self._root(f'chown -R {AGENT_UID}:{AGENT_UID} "{self.repo_dir}"', timeout=600)
        return check[0] == 0

    def _start_bridge(self, proxy_uds: Path, image: str, port: int) -> None:
        if not proxy_uds.exists():
            raise SandboxError(f"proxy socket {proxy_uds} does not exist; start the proxy with a uds first")
        st = proxy_uds.stat()
        self.bridge = self.client.containers.run(
            image,
            command=["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{_SOCK}"],
            entrypoint=[],
            init=True,
            detach=True,
            user=f"{st.st_uid}:{st.st_gid}",
            network_mode=f"container:{self.container.id}",
            labels={**self._labels, "lego.bridge": "1"},
            mounts=[_bind(proxy_uds, _SOCK, read_only=False)],
            read_only=True,
            mem_limit="128m",
            pids_limit=256,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
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
        """One exec as root: (exit code, stdout, stderr, overflow, wall_s). Returns once the exec's
        process has exited and its output drained (1 s of grace for a daemon holding the stream), its
        output passed ``cap`` or ``limit + 10`` s passed; in the last two cases every agent process
        is killed."""
        if self._closed or self.container is None:
            raise SandboxError(f"sandbox {self.id} is closed; create a new one")
        api = self.client.api
        t0 = time.monotonic()
        try:
            exec_id = api.exec_create(
                self.container.id, argv, stdin=stdin is not None, environment=dict(env), workdir=workdir, user="0:0"
            )["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except Exception as exc:
            raise SandboxError(f"cannot start a command in sandbox {self.id}: {exc}") from exc
        raw = getattr(sock, "_sock", sock)
        frames = _Frames(cap)
        try:
            if stdin is not None:
                raw.sendall(stdin)
                raw.shutdown(socket.SHUT_WR)
            hard = t0 + limit + 10
            exited_at: float | None = None
            last_check = 0.0
            while True:
                ready, _, _ = select.select([raw], [], [], 0.2)
                now = time.monotonic()
                if ready:
                    chunk = raw.recv(1 << 16)
                    if not chunk:
                        break
                    frames.feed(chunk)
                    if frames.overflow:
                        break
                    continue
                if now > hard:
                    break
                if exited_at is None and now - last_check > 0.5:
                    last_check = now
                    if not api.exec_inspect(exec_id).get("Running"):
                        exited_at = now
                elif exited_at is not None and now - exited_at > 1.0:
                    break
        finally:
            with contextlib.suppress(OSError):
                raw.close()
            with contextlib.suppress(Exception):
                sock.close()
        if frames.overflow or time.monotonic() > t0 + limit + 10:
            self.kill_agent_processes()
        info = api.exec_inspect(exec_id)
        for _ in range(50):  # the exit code is recorded a moment after the stream closes
            if not info.get("Running"):
                break
            time.sleep(0.1)
            info = api.exec_inspect(exec_id)
        code = info.get("ExitCode")
        out, err = bytes(frames.streams[1]), bytes(frames.streams[2])
        return int(code if code is not None else -1), out, err, frames.overflow, time.monotonic() - t0

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment every command starts from (``extra`` wins)."""
        base = {
            "PATH": f"{self._image_path}:{self.runtime.bin_dir}",
            "HOME": AGENT_HOME,
            "USER": "agent",
            "LOGNAME": "agent",
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "TERM": "dumb",
        }
        if self.proxy_port is not None:
            base["LEGO_PROXY_URL"] = f"http://127.0.0.1:{self.proxy_port}"
        return {**base, **(extra or {})}

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
        wrapper = [str(self.runtime.python), "-I", "-S", "-c", _WRAPPER, "lego-exec", f"{max(limit, 0.01):.3f}"]
        as_agent = [self._setpriv, *_AS_AGENT, self._env_bin, "-i", "--"]
        argv = [*wrapper, *as_agent, *(f"{k}={v}" for k, v in self.env(env).items()), *inner]
        root_env = {"PATH": self._image_path, "LANG": "C.UTF-8"}
        code, out, err, overflow, wall = self._run(argv, env=root_env, workdir=wd, limit=limit, stdin=stdin)
        timed_out = not overflow and ((code == 124 and wall >= limit * 0.95) or wall > limit + 10)
        if overflow:
            err += f"\n[lego: output exceeded {OUTPUT_CAP} bytes on one stream; the command was killed]".encode()
        return (124 if timed_out else code), out, err, timed_out, wall

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

    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.repo_dir}/{path}"

    def read(self, path: str) -> bytes:
        """Read as the agent, through the sandbox (an agent's symlink points nowhere on the host)."""
        code, out, err, _, _ = self.run_bytes(["cat", "--", self._abs(path)], timeout=60)
        if code != 0:
            raise SandboxError(f"cannot read {path} in sandbox {self.id}: {err.decode(errors='replace').strip()}")
        return out

    def write(self, path: str, data: bytes) -> None:
        """Write as the agent (mode 0644 for a new file), creating parent directories."""
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        code, _, err, _, _ = self.run_bytes(["sh", "-c", script, "sh", self._abs(path)], timeout=60, stdin=data)
        if code != 0:
            raise SandboxError(f"cannot write {path} in sandbox {self.id}: {err.decode(errors='replace').strip()}")

    def diff(self) -> str:
        """The agent's changes against the pristine commit, untracked files included: git runs as the
        container's root against the pristine ``.git`` in /lego and a throwaway index, so no file mode,
        symlink, nested or broken ``.git`` or attribute the agent left stops it, and git follows no
        symlink. Files over ``DIFF_FILE_CAP``, FIFOs, sockets and devices are left out."""
        script = (
            "set -e; t=$(mktemp -d -p /lego); trap 'rm -rf \"$t\"' EXIT; "
            'export GIT_INDEX_FILE="$t/index" GIT_OBJECT_DIRECTORY="$t/objects"; mkdir "$t/objects"; '
            'cd "$GIT_WORK_TREE"; { printf ".\\0"; '
            f"find . -path ./.git -prune -o \\( ! -type d ! -type l ! -type f -o -type f -size +{DIFF_FILE_CAP // 1024}k \\) "
            "-printf ':(exclude,literal)%P\\0'; } > \"$t/specs\"; "
            "git read-tree HEAD; "
            'git add -A --pathspec-from-file="$t/specs" --pathspec-file-nul; '
            f"git diff --cached --binary --no-ext-diff --no-textconv --no-color --full-index {self.base_commit} -- "
            "':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/*.py[co]'"
        )
        env = {
            **_GIT_ENV,
            "PATH": self._image_path,
            "HOME": _LEGO,
            "GIT_DIR": _BASE_GIT,
            "GIT_WORK_TREE": self.repo_dir,
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": f"{_BASE_GIT}/objects",
        }
        code, out, err, overflow, _ = self._run(
            ["sh", "-c", script], env=env, workdir="/", limit=300, cap=_DIFF_OUTPUT_CAP
        )
        if overflow:
            raise SandboxError(
                f"the agent's changes in sandbox {self.id} exceed {_DIFF_OUTPUT_CAP >> 20} MiB as a patch; "
                "such a diff cannot be graded"
            )
        if code != 0:
            raise SandboxError(f"git diff failed in sandbox {self.id}: {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    def kill_agent_processes(self) -> None:
        """Kill every process of the agent's uid (daemons and orphans included), keeping the files;
        returns once none is left (see module doc). The root processes (the bridge lives in another
        container anyway) are untouched."""
        if self._closed or self.container is None:
            return
        with contextlib.suppress(Exception):  # the keeper's pass first: it needs no free pid
            self.container.kill(signal="SIGUSR1")
        for _ in range(50):
            try:
                code, out, err, _, _ = self._run(
                    [str(self.runtime.python), "-I", "-S", "-c", _KILL_ALL],
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
        self._closed = True
        for box in (self.bridge, self.container):
            if box is not None:
                with contextlib.suppress(Exception):
                    box.remove(force=True)

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cleanup_leftovers(run_id: str | None = None, client: Any = None) -> int:
    """Remove sandboxes lego left behind (all, or one run's); returns how many were removed (a
    sandbox's bridge container is removed with it and not counted)."""
    client = client or docker_client()
    filters = {"label": [f"{LABEL}=1", *([f"lego.run_id={run_id}"] if run_id else [])]}
    removed = 0
    for c in client.containers.list(all=True, filters=filters):
        with contextlib.suppress(Exception):
            c.remove(force=True)
            removed += 0 if c.labels.get("lego.bridge") else 1
    return removed


def new_run_id() -> str:
    return uuid.uuid4().hex[:8]
