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


class _Dockerd:
    """dockerd's exec API as `exec_as_root` uses it: the exec has already exited (``exec_inspect``)
    while its output is still on the way, as under CPU contention, or a daemon keeps the stream open."""

    def __init__(self, frames: list[tuple[float, bytes]], close: bool) -> None:
        import socket

        self.ours, self.theirs = socket.socketpair()
        self.frames, self.close = frames, close

    def exec_create(self, *_: object, **__: object) -> dict[str, str]:
        return {"Id": "e1"}

    def exec_start(self, *_: object, **__: object) -> object:
        import struct
        import threading
        import time

        def deliver() -> None:
            for delay, data in self.frames:
                time.sleep(delay)
                self.theirs.sendall(bytes([1, 0, 0, 0]) + struct.pack(">I", len(data)) + data)
            if self.close:
                self.theirs.close()

        threading.Thread(target=deliver, daemon=True).start()
        return self.ours

    def exec_inspect(self, _: str) -> dict[str, object]:
        return {"Running": False, "ExitCode": 0}


def _run(api: _Dockerd) -> tuple[int, bytes, float]:
    from lego.sandboxes.docker_engine import exec_as_root

    code, out, _, _, wall = exec_as_root(
        api, "c", "sb", ["true"], env={}, workdir="/", limit=60, stdin=None, cap=1 << 20, on_runaway=lambda: None
    )
    return code, out, wall


def test_output_that_dockerd_delivers_after_the_exit_is_read() -> None:
    """The exit is seen before the output arrives (CI, both cores busy: `command -v setpriv` read as
    exit 0 with empty stdout): the read waits for the stream's end, not a fixed second after the exit."""
    code, out, _ = _run(_Dockerd([(2.5, b"/usr/bin/setpriv\n"), (1.5, b"more\n")], close=True))
    assert (code, out) == (0, b"/usr/bin/setpriv\nmore\n")


def test_a_daemon_holding_the_stream_does_not_hold_the_exec() -> None:
    """A background process that inherited the stream and says nothing more: the read ends after a
    quiet spell once the exec exited, with what came before it, well before the command's limit."""
    code, out, wall = _run(_Dockerd([(0.1, b"started\n")], close=False))
    assert (code, out) == (0, b"started\n") and wall < 15
