"""lego's end of a local sandbox's process server (:mod:`lego.sandboxes.spawner`): requests over its
control socket, each with a reply socket and the descriptors it needs passed alongside.

A command is one ``exec`` request: a memfd holding its argv, environment and working directory, and
lego's pipes as its stdin, stdout and stderr. The server forks it and answers twice on the reply
socket (started, then its exit status); sending ``kill`` on that socket kills its process group.
:func:`start_command` is the same request returning at once, its stdin left open to the caller (a live
command, :mod:`lego.sandboxes.live`). ``killall`` kills every process in the sandbox's pid namespace.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence

from lego.errors import SandboxError
from lego.sandboxes.processes import OutputCollector

__all__ = ["READY_TIMEOUT_S", "killall", "recv_json", "request", "run_command", "start_command"]

READY_TIMEOUT_S = 10.0


def recv_json(sock: socket.socket, timeout: float) -> dict[str, object] | None:
    """One reply of the process server; None when ``timeout`` passes first."""
    sock.settimeout(max(timeout, 0.001))
    try:
        data = sock.recv(65536)
    except TimeoutError:
        return None
    if not data:
        raise SandboxError("the sandbox's process server is gone (the sandbox was closed or its init died)")
    reply: dict[str, object] = json.loads(data)
    return reply


def request(ctrl: socket.socket, sandbox: str, op: bytes, fds: Sequence[int]) -> socket.socket:
    """Send ``op`` with ``fds`` to the process server; returns the request's reply socket."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        rights = array.array("i", [theirs.fileno(), *fds])
        ctrl.sendmsg([op], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
    except OSError as exc:
        mine.close()
        raise SandboxError(f"sandbox {sandbox} lost its process server ({exc}); create a new sandbox") from exc
    finally:
        theirs.close()
    return mine


def start_command(
    ctrl: socket.socket, sandbox: str, argv: list[str], *, env: Mapping[str, str], cwd: str
) -> tuple[socket.socket, int, int, int, int]:
    """Start one command through the server and return at once: (reply socket, its pid as the server
    sees it, the write end of its stdin, the read ends of its stdout and stderr), all owned by the
    caller. The reply socket later carries ``{"status": rc}``; ``kill`` sent on it kills the command."""
    req = os.memfd_create("lego-exec", os.MFD_CLOEXEC)
    os.write(req, json.dumps({"argv": argv, "env": dict(env), "cwd": cwd}).encode())
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    mine = (in_w, out_r, err_r)
    try:
        reply = request(ctrl, sandbox, b"exec", [req, in_r, out_w, err_w])
    except SandboxError:
        for fd in mine:
            os.close(fd)
        raise
    finally:
        for fd in (req, in_r, out_w, err_w):
            os.close(fd)
    try:
        started = recv_json(reply, READY_TIMEOUT_S)
    except SandboxError:
        started = None
    if not started or "pid" not in started:
        reply.close()
        for fd in mine:
            os.close(fd)
        why = (started or {}).get("error", "no answer from the process server")
        raise SandboxError(f"cannot start a command in sandbox {sandbox}: {why}")
    return reply, int(started["pid"]), in_w, out_r, err_r  # type: ignore[call-overload]


def run_command(
    ctrl: socket.socket,
    sandbox: str,
    argv: list[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    limit: float,
    stdin: bytes | None,
    kill_everything: Callable[[], None],
) -> tuple[int, bytes, bytes, bool, float]:
    """Run one command through the server: (exit_code, stdout, stderr, timed_out, wall_s).
    ``kill_everything`` is called when a killed command's pipes stay open (a detached process
    holds them)."""
    t0 = time.monotonic()
    req = os.memfd_create("lego-exec", os.MFD_CLOEXEC)
    os.write(req, json.dumps({"argv": argv, "env": dict(env), "cwd": cwd}).encode())
    in_r, in_w = os.pipe() if stdin is not None else (os.open(os.devnull, os.O_RDONLY), None)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        reply = request(ctrl, sandbox, b"exec", [req, in_r, out_w, err_w])
    except SandboxError:
        for fd in (out_r, err_r, in_w):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        for fd in (req, in_r, out_w, err_w):
            os.close(fd)
    with reply:
        started = recv_json(reply, READY_TIMEOUT_S)
        if not started or "pid" not in started:
            for fd in (out_r, err_r, in_w):
                if fd is not None:
                    os.close(fd)
            why = (started or {}).get("error", "no answer from the process server")
            raise SandboxError(f"cannot start a command in sandbox {sandbox}: {why}")
        reader = OutputCollector(out_r, err_r, in_w, stdin)
        finished = reader.run(limit)
        done = recv_json(reply, t0 + limit - time.monotonic()) if finished else None
        finished = done is not None
        timed_out = not finished and not reader.overflow
        if not finished:
            with contextlib.suppress(OSError):
                reply.send(b"kill")
            if not reader.run(5):
                # A detached process still holds the pipes: kill everything the agent runs.
                kill_everything()
                reader.run(5)
            done = recv_json(reply, 30)
        out, err = reader.result()
    if done is None:
        raise SandboxError(f"sandbox {sandbox}: a killed command was not reaped within 30 s")
    code = 124 if timed_out else int(done["status"])  # type: ignore[call-overload]
    if reader.overflow:
        err += f"\n[lego: output exceeded {reader.cap} bytes on one stream; the command was killed]".encode()
    return code, out, err, timed_out, time.monotonic() - t0


def killall(ctrl: socket.socket, sandbox: str) -> None:
    """Kill every process started inside (daemons and orphans included). The server does it from
    pid 1 with ``kill(-1, SIGKILL)``, which the kernel applies to the whole pid namespace at once,
    and answers once every one has been reaped."""
    with request(ctrl, sandbox, b"killall", []) as reply:
        if recv_json(reply, 30) is None:
            raise SandboxError(f"sandbox {sandbox}: the agent's processes did not die within 30 s")
