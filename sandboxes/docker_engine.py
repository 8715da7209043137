"""The docker backend's calls to the Docker engine: the client, task images, mounts, the sandbox
and bridge containers with their limits, and one raw exec with its output demultiplexed under a
cap (what they isolate is in :mod:`lego.sandboxes.docker`)."""

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lego.config import SandboxConfig
from lego.errors import SandboxError
from lego.sandboxes.layout import AGENT_HOME, AGENT_UID, REPO_DIR
from lego.types import Task

__all__ = [
    "LABEL",
    "LEGO_DIR",
    "PROXY_SOCK",
    "ROOT_CAPS",
    "cleanup_leftovers",
    "docker_client",
    "exec_as_root",
    "image_for",
    "new_run_id",
    "repo_tar",
    "run_bridge_container",
    "run_sandbox_container",
    "sandbox_mounts",
]

LABEL = "lego.sandbox"
"""Every container lego starts carries ``LABEL=1`` (and ``lego.run_id``, ``lego.task``)."""
PROXY_SOCK = "/run/lego/proxy.sock"
"""Where the bridge container sees the proxy's socket."""
LEGO_DIR = "/lego"
"""lego's root-only directory in a sandbox container (the pristine ``.git`` lives there)."""
ROOT_CAPS = ["CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "KILL", "SETUID", "SETGID", "SETPCAP"]
"""The capabilities lego's own root commands in a sandbox container need; every other one is dropped."""


def docker_client() -> Any:
    """A Docker SDK client from the environment, or a SandboxError naming the fix."""
    try:
        import docker
        from docker.errors import DockerException
        from requests.exceptions import ConnectionError as Unreachable
    except ImportError as exc:
        raise SandboxError("the docker backend needs the Docker SDK: pip install 'lego-rl[docker]'") from exc
    try:
        client = docker.from_env()  # asks the engine its API version: DockerException when none answers
        client.ping()  # a connection lost here is requests' error: the SDK does not wrap it
    except (DockerException, Unreachable) as exc:
        raise SandboxError(
            f"no Docker engine answers ({exc}); start one (e.g. `dockerd --bridge=none --iptables=false "
            "--ip6tables=false` as root) or use sandbox.kind=local"
        ) from exc
    return client


def ulimit(name: str, value: int) -> Any:
    from docker.types import Ulimit

    return Ulimit(name=name, soft=value, hard=value)


def bind_mount(path: str | Path, target: str, *, read_only: bool = True) -> Any:
    from docker.types import Mount

    return Mount(target=target, source=str(path), type="bind", read_only=read_only)


def tmpfs_mount(target: str, mb: int, mode: int) -> Any:
    from docker.types import Mount

    return Mount(target=target, source=None, type="tmpfs", tmpfs_size=max(mb, 1) << 20, tmpfs_mode=mode)


def image_for(client: Any, task: Task, cfg: SandboxConfig) -> str:
    from docker.errors import APIError, BuildError, ImageNotFound

    if task.image:
        name = task.image
    elif task.dockerfile:
        name = f"lego-task:{hashlib.sha256(task.dockerfile.encode()).hexdigest()[:16]}"
        if not client.images.list(name=name):
            with tempfile.TemporaryDirectory() as ctx:
                (Path(ctx) / "Dockerfile").write_text(task.dockerfile)
                try:
                    client.images.build(path=ctx, tag=name, rm=True, network_mode="none")
                except (BuildError, APIError) as exc:
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
    except ImageNotFound:
        try:
            client.images.pull(name)
        except APIError as exc:
            raise SandboxError(
                f"image {name} is not present and could not be pulled ({exc}); `docker pull {name}`"
            ) from exc
    except APIError as exc:  # e.g. 400: not a valid image reference
        raise SandboxError(f"the Docker engine cannot look up image {name}: {exc}") from exc
    return name


def repo_tar(template: Path) -> bytes:
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


class Frames:
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


def sandbox_mounts(binds: Sequence[Path], cfg: SandboxConfig, *, repo_tmpfs: bool) -> tuple[list[Any], bool]:
    """The sandbox container's mounts: ``binds`` read-only at their host paths and the size-capped
    tmpfs mounts; and whether an empty /root is mounted (a bind lives below it)."""
    for p in binds:
        if not p.exists():
            raise SandboxError(f"read-only bind {p} does not exist on the host; install it first")
    mounts = [bind_mount(p, str(p)) for p in binds]
    under_root = any(str(p).startswith("/root/") for p in binds)
    if under_root:  # the image's /root is mode 0700: an empty, traversable one instead
        mounts.append(tmpfs_mount("/root", 1, 0o755))
    mounts += [
        tmpfs_mount("/tmp", cfg.disk_mb // 2, 0o1777),
        tmpfs_mount(AGENT_HOME, cfg.disk_mb // 4, 0o755),
        tmpfs_mount(LEGO_DIR, cfg.disk_mb, 0o700),
    ]
    if repo_tmpfs:
        mounts.append(tmpfs_mount(REPO_DIR, cfg.disk_mb, 0o755))
    return mounts, under_root


def run_sandbox_container(
    client: Any,
    image: str,
    cfg: SandboxConfig,
    *,
    command: list[str],
    labels: dict[str, str],
    mounts: list[Any],
    read_only: bool,
) -> Any:
    """Start the sandbox container: root with :data:`ROOT_CAPS` only, no network, its limits set."""
    return client.containers.run(
        image,
        command=command,
        entrypoint=[],
        init=True,
        detach=True,
        user="0:0",
        network_mode="none",
        labels=labels,
        mounts=mounts,
        read_only=read_only,
        working_dir="/",
        mem_limit=f"{cfg.memory_budget_mb}m",
        memswap_limit=f"{cfg.memory_budget_mb}m",
        shm_size=f"{max(cfg.disk_mb // 8, 1)}m",
        pids_limit=cfg.max_processes,
        cap_drop=["ALL"],
        cap_add=ROOT_CAPS,
        security_opt=["no-new-privileges"],
        ulimits=[ulimit("cpu", cfg.cpu_seconds), ulimit("core", 0)],
        hostname="lego-sandbox",
    )


def run_bridge_container(
    client: Any, image: str, *, sandbox_container: str, proxy_uds: Path, port: int, labels: dict[str, str]
) -> Any:
    """Start socat in the sandbox's network namespace only, as the proxy socket's owner, with no
    capabilities."""
    st = proxy_uds.stat()
    return client.containers.run(
        image,
        command=["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{PROXY_SOCK}"],
        entrypoint=[],
        init=True,
        detach=True,
        user=f"{st.st_uid}:{st.st_gid}",
        network_mode=f"container:{sandbox_container}",
        labels={**labels, "lego.bridge": "1"},
        mounts=[bind_mount(proxy_uds, PROXY_SOCK, read_only=False)],
        read_only=True,
        mem_limit="128m",
        pids_limit=256,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
    )


DRAIN_S = 5.0
"""Seconds of silence after an exec exited before its still-open stream is taken as a daemon's."""


def exec_as_root(
    api: Any,
    container: str,
    sandbox: str,
    argv: list[str],
    *,
    env: Mapping[str, str],
    workdir: str,
    limit: float,
    stdin: bytes | None,
    cap: int,
    on_runaway: Callable[[], None],
) -> tuple[int, bytes, bytes, bool, float]:
    """One exec as root in ``container``: (exit code, stdout, stderr, overflow, wall_s). Returns once
    the exec's process has exited and its stream ended (or, for a daemon that inherited the stream,
    ``DRAIN_S`` passed with no output since the exit: dockerd may deliver output seconds after
    ``exec_inspect`` reports the exit when the host is busy), its output passed ``cap`` or ``limit + 10`` s passed; in the last two cases
    ``on_runaway`` is called (it kills every agent process) before the exit code is read."""
    from docker.errors import APIError

    t0 = time.monotonic()
    try:
        exec_id = api.exec_create(
            container, argv, stdin=stdin is not None, environment=dict(env), workdir=workdir, user="0:0"
        )["Id"]
        sock = api.exec_start(exec_id, socket=True)
    except APIError as exc:  # NotFound: the container is gone; 409: it is not running
        raise SandboxError(f"cannot start a command in sandbox {sandbox}: {exc}") from exc
    raw = getattr(sock, "_sock", sock)
    frames = Frames(cap)
    try:
        if stdin is not None:
            raw.sendall(stdin)
            raw.shutdown(socket.SHUT_WR)
        hard = t0 + limit + 10
        exited_at: float | None = None
        last_check = last_data = 0.0
        while True:
            ready, _, _ = select.select([raw], [], [], 0.2)
            now = time.monotonic()
            if ready:
                chunk = raw.recv(1 << 16)
                if not chunk:
                    break
                last_data = now
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
            elif exited_at is not None and now - max(exited_at, last_data) > DRAIN_S:
                break
    finally:
        with contextlib.suppress(OSError):
            raw.close()
        with contextlib.suppress(OSError):
            sock.close()
    if frames.overflow or time.monotonic() > t0 + limit + 10:
        on_runaway()
    info = api.exec_inspect(exec_id)
    for _ in range(50):  # the exit code is recorded a moment after the stream closes
        if not info.get("Running"):
            break
        time.sleep(0.1)
        info = api.exec_inspect(exec_id)
    code = info.get("ExitCode")
    out, err = bytes(frames.streams[1]), bytes(frames.streams[2])
    return int(code if code is not None else -1), out, err, frames.overflow, time.monotonic() - t0


def cleanup_leftovers(run_id: str | None = None, client: Any = None) -> int:
    """Remove sandboxes lego left behind (all, or one run's); returns how many were removed (a
    sandbox's bridge container is removed with it and not counted)."""
    client = client or docker_client()
    from docker.errors import APIError  # after docker_client(): it explains a missing SDK

    filters = {"label": [f"{LABEL}=1", *([f"lego.run_id={run_id}"] if run_id else [])]}
    removed = 0
    for c in client.containers.list(all=True, filters=filters):
        with contextlib.suppress(APIError):  # NotFound: removed with its sandbox or by another cleanup
            c.remove(force=True)
            removed += 0 if c.labels.get("lego.bridge") else 1
    return removed


def new_run_id() -> str:
    return uuid.uuid4().hex[:8]
