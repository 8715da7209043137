"""``create_sandbox``: the one entry point that turns a :class:`SandboxConfig` and a task into a
:class:`lego.seams.Sandbox`.

    create_sandbox(cfg, task, *, proxy_uds=None, ro_binds=(), proxy_port=None) -> Sandbox

* ``cfg.kind`` picks the backend: ``local`` (bubblewrap, :mod:`lego.sandboxes.local`) or ``docker``
  (:mod:`lego.sandboxes.docker`, needs the ``docker`` extra and a running engine).
* ``proxy_uds``: the host path of the recording proxy's Unix socket. When given, the sandbox
  forwards ``127.0.0.1:<sandbox.proxy_port>`` inside to it, and that is its only way out.
* ``ro_binds``: host directories (harness installs under ``lego.paths.data_dir()/harnesses``)
  mounted read-only at the same path inside.
* ``proxy_port``: the loopback port inside (default 18080 for local; each sandbox has its own
  network namespace, so every sandbox can use the same port).

The caller owns the sandbox and must ``close()`` it. Raises SandboxError (backend unavailable,
bubblewrap missing without ``unsafe_no_isolation``) or TaskError (the task's repo is missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lego.config import SandboxConfig
from lego.errors import ConfigError
from lego.seams import Sandbox
from lego.types import Task

__all__ = ["create_sandbox"]


def create_sandbox(
    cfg: SandboxConfig,
    task: Task,
    *,
    proxy_uds: Path | None = None,
    ro_binds: Sequence[Path] = (),
    proxy_port: int | None = None,
) -> Sandbox:
    """A fresh sandbox of ``task`` with the backend ``cfg.kind`` (see module doc)."""
    if cfg.kind == "local":
        from lego.sandboxes.local import DEFAULT_PROXY_PORT, LocalSandbox

        return LocalSandbox(
            task, cfg, proxy_uds=proxy_uds, ro_binds=ro_binds, proxy_port=proxy_port or DEFAULT_PROXY_PORT
        )
    if cfg.kind == "docker":
        from lego.sandboxes.docker import DockerSandbox

        return DockerSandbox(task, cfg, proxy_uds=proxy_uds, ro_binds=ro_binds, proxy_port=proxy_port)
    raise ConfigError(f"sandbox.kind={cfg.kind!r} is unknown; use 'local' or 'docker'")
