"""The image of a Harbor task: its ``environment/`` directory built with lego's Dockerfile.

The build context is the task's ``environment/`` with ``Dockerfile`` replaced by ``Task.dockerfile``
(the task's own plus :data:`lego.tasks.harbor.EPILOGUE`); the image is tagged ``lego-harbor:<hash>``
by the context's content, so it is built once and rebuilt only when a file changes. The build has
the engine's default network, as ``docker build`` does (it runs the task author's Dockerfile, never
the agent), and ``[environment] build_timeout_sec``.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

from lego.errors import SandboxError, TaskError
from lego.types import Task

__all__ = ["build_image"]


def _context_tar(task: Task) -> tuple[bytes, str]:
    """The build context (environment/ with lego's Dockerfile) as a tar, and its content hash."""
    env_dir = Path(task.metadata["harbor"]["task_dir"]) / "environment"
    buf = io.BytesIO()
    digest = hashlib.sha256()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        files = sorted(p for p in env_dir.rglob("*") if p.is_file()) if env_dir.is_dir() else []
        for p in files:
            rel = p.relative_to(env_dir).as_posix()
            if rel == "Dockerfile":
                continue
            data = p.read_bytes()
            digest.update(f"{rel}\0{p.stat().st_mode & 0o111}\0{len(data)}\0".encode() + data)
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), p.stat().st_mode & 0o777, 0
            tar.addfile(info, io.BytesIO(data))
        dockerfile = (task.dockerfile or "").encode()
        digest.update(b"Dockerfile\0" + dockerfile)
        info = tarfile.TarInfo("Dockerfile")
        info.size, info.mode = len(dockerfile), 0o644
        tar.addfile(info, io.BytesIO(dockerfile))
    return buf.getvalue(), digest.hexdigest()[:16]


def build_image(task: Task, client: Any = None) -> tuple[str, str]:
    """``(image, working directory)`` of a Harbor task, built once per content (see the module doc)."""
    from lego.sandboxes.docker_engine import docker_client

    client = client or docker_client()
    from docker.errors import APIError, BuildError  # after docker_client(): it explains a missing SDK

    context, digest = _context_tar(task)
    tag = f"lego-harbor:{digest}"
    if not client.images.list(name=tag):
        timeout = float(task.metadata["harbor"].get("build_timeout_sec", 600.0))
        try:
            client.images.build(
                fileobj=io.BytesIO(context), custom_context=True, tag=tag, rm=True, forcerm=True, timeout=timeout
            )
        except (BuildError, APIError) as exc:  # BuildError carries the build's log; APIError does not
            lines = [str(c.get("stream", "")) for c in getattr(exc, "build_log", None) or [] if isinstance(c, dict)]
            tail = "".join(lines)[-2000:]
            raise SandboxError(
                f"building the image of Harbor task {task.instance_id} failed: {exc}\n{tail}".rstrip()
            ) from exc
    workdir = str(client.images.get(tag).attrs.get("Config", {}).get("WorkingDir") or "")
    if workdir in ("", "/"):
        raise TaskError(
            f"Harbor task {task.instance_id}: its image has no working directory; add a WORKDIR (the directory the "
            "agent works in) to environment/Dockerfile"
        )
    return tag, workdir
