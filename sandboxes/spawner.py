"""The process server inside a local sandbox: every command the sandbox runs is its child.

Why a server and not ``nsenter``: a process that joins a user namespace from outside (setns) gets a
full capability bounding set in it, whatever it drops afterwards, and keeps the credentials of its
host parent. A child of a process that bubblewrap started with no capabilities inherits the empty
sets (bounding, effective, permitted, inheritable, ambient), the sandbox's uid, no_new_privs and
the resource limits, by construction. So bubblewrap execs this file as the sandbox's pid 1 and lego
asks it, over a Unix socket inherited from bubblewrap, to start each command.

Why the agent cannot touch it: it is pid 1 of the sandbox's pid namespace, and the kernel delivers
to a namespace's init only the signals it handles, from inside that namespace (``kill -9 -1`` and
``kill -9 1`` do nothing to it); it marks itself non-dumpable, so processes of the same uid can
neither ptrace it nor open ``/proc/1/fd``; its control socket is close-on-exec in every child.

Protocol (SOCK_SEQPACKET; a request is an operation name with file descriptors by SCM_RIGHTS,
replies are JSON objects). Every request carries its own reply socket as its first descriptor:

* ``exec`` with descriptors ``[reply, request, stdin, stdout, stderr]``, where ``request`` is a
  memfd holding ``{"argv": [...], "env": {...}, "cwd": "/repo"}`` (a memfd, so an argv of any
  length fits; a socket message has a size limit): the child runs in a new session (its pid is its process
  group), in ``cwd`` (exit 126 if it cannot enter it), with ``argv[0]`` looked up on the PATH of
  ``env`` (127 if not found). Replies ``{"pid": n}``, then ``{"status": rc}`` when it has been
  reaped (``rc`` as :attr:`subprocess.Popen.returncode`: negative for a signal). The byte string
  ``kill`` sent on the reply socket SIGKILLs the child's process group and every descendant.
* ``killall`` with ``[reply]``: SIGKILL every other process of the sandbox, wait until
  all are reaped, reply ``{"done": true}``.

Between commands nothing of the agent runs: when the last running command ends, every process it
left behind is stopped (SIGSTOP) before the command is reaped, except those still holding the
command's stdout/stderr (lego waits for those pipes, as it always did), and the next ``exec``
resumes them (SIGCONT). So a daemon cannot keep writing to the repo once the harness has returned and before
lego kills it; one that learns of the end sooner than a reap shows it (a pipe's EOF, the zombie
state in /proc) still has the microseconds until this server is woken, which is what remains.

Further arguments are descriptors of ``cgroup.procs`` files (opened by lego) that every command
joins before it execs: the limits hold for the agent's processes, not for this server.

When lego's end of the control socket closes, everything is killed and the server exits. The file
uses only the standard library and is run as ``python -I -S - <fd>`` with its source on stdin: it must not import
lego, which is not visible inside the sandbox.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import json
import os
import selectors
import signal
import socket
import sys

_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_MAX_FDS = 5


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _recv(sock: socket.socket) -> tuple[bytes, list[int]]:
    fds = array.array("i")
    msg, anc, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(_MAX_FDS * fds.itemsize), socket.MSG_CMSG_CLOEXEC)
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return msg, list(fds)


def _read_request(fd: int) -> dict[str, object]:
    chunks = []
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    req: dict[str, object] = json.loads(b"".join(chunks))
    return req


def _send(sock: socket.socket, obj: dict[str, object]) -> None:
    with contextlib.suppress(OSError):
        sock.send(json.dumps(obj).encode())


def _children(pid: int) -> list[int]:
    out = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    return out


def _tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (a snapshot)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def _kill(pids: list[int]) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


def _holding(pipes: set[str]) -> list[int]:
    """Processes of the sandbox with one of ``pipes`` open (a non-dumpable one hides its fds: not listed)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(f"/proc/{name}/fd/{fd}") in pipes for fd in os.listdir(f"/proc/{name}/fd")):
                out.append(int(name))
    return out


def _start(fds: list[int], cgroups: list[int]) -> int:
    """Fork and exec one command on the received descriptors; returns the child's pid."""
    req = _read_request(fds[1])
    raw_argv, raw_env = req["argv"], req["env"]
    if not isinstance(raw_argv, list) or not raw_argv or not isinstance(raw_env, dict):
        raise ValueError("an exec request needs a non-empty argv list and an env object")
    argv = [str(a) for a in raw_argv]
    env = {str(k): str(v) for k, v in raw_env.items()}
    cwd = str(req["cwd"])
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: nothing here may return into the server loop
        os.setsid()
        for cg in cgroups:  # into the agent's cgroups, where the limits are ("0" means the writer)
            os.write(cg, b"0")
        for target, fd in zip((0, 1, 2), fds[2:5], strict=True):
            os.dup2(fd, target)  # dup2 clears close-on-exec on the copy; every other fd closes at exec
        for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        try:
            os.chdir(cwd)
        except OSError as exc:
            os.write(2, f"cannot enter {cwd}: {exc.strerror}\n".encode())
            os._exit(126)
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
            os._exit(126 if isinstance(exc, PermissionError) else 127)
    finally:
        os._exit(127)


def serve(ctrl_fd: int, cgroups: list[int]) -> None:
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _prctl(_PR_SET_DUMPABLE, 0)
    pid1 = os.getpid() == 1
    if not pid1:  # unsafe_no_isolation: no pid namespace, so adopt orphans explicitly
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    for fd in (ctrl_fd, *cgroups):
        os.set_inheritable(fd, False)
    ctrl = socket.socket(fileno=ctrl_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    sel = selectors.DefaultSelector()
    sel.register(ctrl, selectors.EVENT_READ, "ctrl")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    running: dict[int, socket.socket] = {}  # command pid -> its reply socket
    outputs: dict[int, set[str]] = {}  # command pid -> its stdout/stderr pipes, as /proc/*/fd names them
    waiting: list[socket.socket] = []  # killall replies owed once every child is reaped

    def killall() -> None:
        if pid1:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)  # every process of the namespace but its init, atomically
        else:
            _kill([p for p in _tree(os.getpid()) if p != os.getpid()])

    def stop_leftovers() -> None:
        """Stop (SIGSTOP) every process still in the sandbox once the last running command has ended,
        BEFORE that command is reaped: an agent's daemon that watches for the command's end by its
        /proc entry sees it only after this, stopped, so it cannot write to the repo after the episode.
        The next command resumes them (a server one command started serves the next); killall ends them."""
        if not pid1:
            return
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is not None and info.si_pid in running and len(running) == 1:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGSTOP)  # atomically: nothing can act between the stop and the check
            # What still holds the command's output pipes is still part of it (`server &` without a
            # redirect): lego waits for those pipes as before, so they run on until they close them.
            held = outputs.get(info.si_pid, set())
            for pid in _holding(held):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def reap() -> None:
        stop_leftovers()
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                for r in waiting:
                    _send(r, {"done": True})
                    r.close()
                waiting.clear()
                return
            if pid == 0:
                if waiting:
                    killall()  # something forked while we killed: again, until none is left
                return
            reply = running.pop(pid, None)
            outputs.pop(pid, None)
            if reply is not None:
                _send(reply, {"status": os.waitstatus_to_exitcode(status)})
                with contextlib.suppress(KeyError, ValueError):
                    sel.unregister(reply)
                reply.close()

    _send(ctrl, {"ready": True})
    while True:
        for key, _ in sel.select():
            if key.data == "wake":
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                reap()
            elif key.data == "ctrl":
                try:
                    op, fds = _recv(ctrl)
                except OSError:
                    op, fds = b"", []
                if not op or not fds:  # lego is gone: nothing may outlive it
                    killall()
                    return
                reply = socket.socket(fileno=fds[0])
                if op == b"killall":
                    waiting.append(reply)
                    killall()
                    reap()
                    continue
                if pid1:  # what an earlier command left running (stopped when it ended) runs again
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(-1, signal.SIGCONT)
                try:
                    pipes = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in fds[3:5]}
                    pid = _start(fds, cgroups)
                except (OSError, ValueError, KeyError, IndexError) as exc:  # fork failed (process cap) or bad request
                    _send(reply, {"error": f"cannot start a process: {getattr(exc, 'strerror', None) or exc}"})
                    reply.close()
                    continue
                finally:
                    for fd in fds[1:]:
                        os.close(fd)
                running[pid] = reply
                outputs[pid] = pipes
                sel.register(reply, selectors.EVENT_READ, pid)
                _send(reply, {"pid": pid})
            else:
                pid = key.data
                try:
                    msg = key.fileobj.recv(64)  # type: ignore[union-attr]
                except OSError:
                    msg = b""
                if msg == b"kill":
                    _kill(_tree(pid))
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
                else:  # lego stopped listening for this command: keep reaping it, stop reading
                    sel.unregister(key.fileobj)


if __name__ == "__main__":
    serve(int(sys.argv[1]), [int(fd) for fd in sys.argv[2:]])
