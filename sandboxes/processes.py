"""Host processes a sandbox backend runs or reads: killing a process tree, collecting a command's
output under a deadline and a size cap."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path

from lego.errors import SandboxError
from lego.types import ExecResult

__all__ = [
    "OUTPUT_CAP",
    "FileOps",
    "OutputCollector",
    "agent_env",
    "descendants",
    "kill_tree",
]


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (host pids), found through /proc's children lists."""
    out: list[int] = []
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = Path(f"/proc/{p}/task/{t}/children").read_text().split()
            except OSError:
                continue
            for k in kids:
                out.append(int(k))
                stack.append(int(k))
    return out


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc``'s process group and every descendant (even ones that called setsid)."""
    victims = descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


OUTPUT_CAP = 16 * 1024 * 1024
"""Most bytes kept per stream of one command; a command printing more is killed (a policy that runs
``yes`` must not fill the host's memory before its timeout)."""


class OutputCollector:
    """Reads a command's stdout and stderr pipes (feeding its stdin from a thread) with a deadline
    and a size cap, so neither a silent hang nor an output flood can block or exhaust the caller.
    Takes ownership of the descriptors: :meth:`result` closes them."""

    def __init__(
        self, out_fd: int, err_fd: int, stdin_fd: int | None, stdin: bytes | None, cap: int = OUTPUT_CAP
    ) -> None:
        self.cap = cap
        self.overflow = False
        self._out, self._err = out_fd, err_fd
        self.bufs: dict[int, bytearray] = {out_fd: bytearray(), err_fd: bytearray()}
        self._sel = selectors.DefaultSelector()
        for fd in self.bufs:
            self._sel.register(fd, selectors.EVENT_READ)
        if stdin_fd is not None:
            threading.Thread(target=self._feed, args=(stdin_fd, stdin or b""), daemon=True).start()

    @staticmethod
    def _feed(fd: int, data: bytes) -> None:
        with contextlib.suppress(BrokenPipeError, OSError), os.fdopen(fd, "wb") as pipe:
            pipe.write(data)

    def run(self, timeout: float) -> bool:
        """Read until both streams hit EOF (True), the timeout passes or the cap is exceeded (False)."""
        deadline = time.monotonic() + timeout
        while self._sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0 or self.overflow:
                return False
            for key, _ in self._sel.select(min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    self._sel.unregister(key.fd)
                    continue
                buf = self.bufs[key.fd]
                room = self.cap - len(buf)
                buf += chunk[: max(room, 0)]
                self.overflow = self.overflow or len(chunk) > room
        return True

    def result(self) -> tuple[bytes, bytes]:
        self._sel.close()
        for fd in (self._out, self._err):
            with contextlib.suppress(OSError):
                os.close(fd)
        return bytes(self.bufs[self._out]), bytes(self.bufs[self._err])


def agent_env(path: str, home: str, proxy_port: int | None, extra: Mapping[str, str] | None) -> dict[str, str]:
    """The environment every agent command starts from, whichever backend runs it (``extra`` wins)."""
    base = {
        "PATH": path,
        "HOME": home,
        "USER": "agent",
        "LOGNAME": "agent",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "TERM": "dumb",
    }
    if proxy_port is not None:
        base["LEGO_PROXY_URL"] = f"http://127.0.0.1:{proxy_port}"
    return {**base, **(extra or {})}


class FileOps(ABC):
    """``exec``, ``read`` and ``write`` of the Sandbox protocol, built once for both backends on the
    backend's own ``run_bytes`` (commands as the agent, inside the sandbox). Files are read and
    written through the sandbox, never with host file APIs, so an agent's symlink cannot point the
    host anywhere; a relative path is taken from ``repo_dir``."""

    id: str
    repo_dir: str

    @abstractmethod
    def run_bytes(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
    ) -> tuple[int, bytes, bytes, bool, float]:
        """Run ``cmd`` as the agent in the sandbox: (exit_code, stdout, stderr, timed_out, wall_s)."""

    def exec(
        self,
        cmd: str | Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        code, out, err, timed_out, wall = self.run_bytes(cmd, env=env, timeout=timeout, cwd=cwd, stdin=stdin)
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
        """The file's bytes, read as the agent; files above ``OUTPUT_CAP`` (16 MiB) raise SandboxError."""
        code, out, err, _, _ = self.run_bytes(["cat", "--", self._abs(path)], timeout=60)
        if code != 0:
            raise SandboxError(f"cannot read {path} in sandbox {self.id}: {err.decode(errors='replace').strip()}")
        return out

    def write(self, path: str, data: bytes) -> None:
        """Write as the agent (mode 0644 for a new file), creating parent directories."""
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        code, _, err, _, _ = self.run_bytes(["/bin/sh", "-c", script, "sh", self._abs(path)], timeout=60, stdin=data)
        if code != 0:
            raise SandboxError(f"cannot write {path} in sandbox {self.id}: {err.decode(errors='replace').strip()}")
