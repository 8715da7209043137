"""The Docker engine's client: an engine that does not answer is one SandboxError naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from lego.errors import SandboxError

pytest.importorskip("docker")


def test_no_engine_at_docker_host_is_a_sandbox_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from lego.sandboxes.docker_engine import docker_client

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'absent.sock'}")
    with pytest.raises(SandboxError, match="no Docker engine answers"):
        docker_client()
