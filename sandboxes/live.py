"""A live command in a local sandbox: started through the process server's ``exec`` request like any
other (:func:`lego.sandboxes.spawner_client.start_command`), but lego keeps the write end of its stdin,
a thread drains its stdout and stderr (capped as :class:`~lego.sandboxes.processes.OutputCollector`
caps them) and waits for its exit status. What a harness that waits at its own prompt needs
(:class:`lego.seams.LiveCommand`).

Whether it is waiting for its stdin is read from the kernel, outside the sandbox, never from its
output: the agent's commands are the harness's children and their output is the harness's, so any
prompt text can be printed by the agent. :meth:`LiveProcess.reading_stdin` holds only when all of:

* the command is not reaped, and its host pid still names the process that was started (the pid the
  server reports is the one in the sandbox's pid namespace: the host pid is the process in that
  namespace, found among the sandbox init's descendants, whose ``NSpid`` ends with it; its start time
  is kept, so a reused pid is never taken for it);
* every byte lego wrote to its stdin has been read (``FIONREAD`` on the pipe is 0);
* its main thread sleeps in ``epoll_wait`` (``/proc/<pid>/wchan``), on an epoll instance
  (``/proc/<pid>/syscall``'s first argument, where the kernel gives it; else any of its epoll
  instances) that watches its fd 0, and that fd 0 is lego's stdin pipe (same inode);
* no child process of it is alive (an agent's command is a child of the harness while it runs),
  and no tracer is attached to it.

What it does not cover: an agent that takes over the harness process itself (ptrace of a process of
its own uid where the kernel allows it, detached again before the check) controls whatever that
process does, including its prompt. Such an agent could also write to the harness's stdin through
``/proc/<pid>/fd/0``; both are the agent acting on its own harness, not text that fools lego.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import selectors
import socket
import termios
import threading
import time
from pathlib import Path

from lego.errors import SandboxError
from lego.sandboxes.processes import OUTPUT_CAP, descendants

__all__ = ["EPOLL_WCHANS", "LiveProcess", "host_pid"]

EPOLL_WCHANS = frozenset({"do_epoll_wait", "ep_poll"})
"""What ``/proc/<pid>/wchan`` names for a thread asleep in ``epoll_wait``/``epoll_pwait``."""

_WRITE_TIMEOUT_S = 10.0
_DRAIN_AFTER_EXIT_S = 2.0


def _read(path: str) -> str:
    return Path(path).read_text(errors="replace")


def _start_time(pid: int) -> str:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks after boot): with the pid, names one process."""
    return _read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[19]


def host_pid(init_host_pid: int, pid_in_sandbox: int) -> int | None:
    """The host pid of the process the sandbox's process server (host pid ``init_host_pid``) reports as
    ``pid_in_sandbox``: itself where the server shares lego's pid namespace (no isolation), else the
    descendant of the init in the init's pid namespace whose ``NSpid`` ends with it. None: not found."""
    try:
        ns = os.stat(f"/proc/{init_host_pid}/ns/pid").st_ino
        if ns == os.stat("/proc/self/ns/pid").st_ino:
            return pid_in_sandbox
    except OSError:
        return None
    for pid in descendants(init_host_pid):
        try:
            status = _read(f"/proc/{pid}/status")
            same_ns = os.stat(f"/proc/{pid}/ns/pid").st_ino == ns
        except OSError:
            continue
        line = next((ln for ln in status.splitlines() if ln.startswith("NSpid:")), "")
        ids = line.split()[1:]
        if same_ns and len(ids) >= 2 and int(ids[-1]) == pid_in_sandbox and int(ids[0]) == pid:
            return pid
    return None


class LiveProcess:
    """One live command (see the module doc); :class:`lego.seams.LiveCommand`. Owns the reply socket
    and the three pipe ends it is given, and closes them in :meth:`close`."""

    def __init__(
        self,
        sandbox: str,
        reply: socket.socket,
        pid_in_sandbox: int,
        stdin_fd: int,
        out_fd: int,
        err_fd: int,
        *,
        init_host_pid: int,
        cap: int = OUTPUT_CAP,
    ) -> None:
        self.sandbox, self.cap = sandbox, cap
        self.pid_in_sandbox = pid_in_sandbox
        self._reply, self._in, self._out, self._err = reply, stdin_fd, out_fd, err_fd
        self._stdin_ino = os.fstat(stdin_fd).st_ino
        self._bufs: dict[int, bytearray] = {out_fd: bytearray(), err_fd: bytearray()}
        self._lock = threading.Lock()
        self._status: int | None = None
        self._exited = threading.Event()
        self._drained = threading.Event()
        self._closed = False
        self.overflow = False
        self.host_pid = host_pid(init_host_pid, pid_in_sandbox)
        self._start = None
        if self.host_pid is not None:
            with contextlib.suppress(OSError, IndexError):
                self._start = _start_time(self.host_pid)
        self._thread = threading.Thread(target=self._pump, name=f"lego-live-{sandbox}", daemon=True)
        self._thread.start()

    # --- the reader thread -------------------------------------------------------------------------

    def _pump(self) -> None:
        sel = selectors.DefaultSelector()
        for fd in (self._out, self._err):
            sel.register(fd, selectors.EVENT_READ, "pipe")
        sel.register(self._reply, selectors.EVENT_READ, "reply")
        exited_at: float | None = None
        try:
            while True:
                pipes = [k for k in sel.get_map().values() if k.data == "pipe"]
                if exited_at is not None and (not pipes or time.monotonic() - exited_at > _DRAIN_AFTER_EXIT_S):
                    return  # what a leftover process still holds open is not the command's output
                for key, _ in sel.select(0.2):
                    if key.data == "reply":
                        msg = self._recv_reply()
                        sel.unregister(self._reply)
                        with self._lock:
                            self._status = msg
                        self._exited.set()
                        exited_at = time.monotonic()
                        continue
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        sel.unregister(key.fd)
                        continue
                    with self._lock:
                        buf = self._bufs[key.fd]
                        room = self.cap - len(buf)
                        buf += chunk[: max(room, 0)]
                        flooded = len(chunk) > room and not self.overflow
                        self.overflow = self.overflow or len(chunk) > room
                    if flooded:  # as exec: a command printing past the cap is killed
                        self.kill()
        except (OSError, ValueError):
            return
        finally:
            sel.close()
            with self._lock:
                if self._status is None:  # the reply socket failed: the server is gone, and the command with it
                    self._status = -9
            self._exited.set()
            self._drained.set()

    def _recv_reply(self) -> int:
        """The exit status the server sends once the command is reaped (-9 when the server is gone:
        the sandbox closed and everything in it was killed)."""
        try:
            data = self._reply.recv(65536)
            reply = json.loads(data) if data else {}
        except (OSError, ValueError):
            reply = {}
        status = reply.get("status")
        return int(status) if isinstance(status, int) else -9

    # --- LiveCommand ---------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.poll() is not None or self._closed:
            raise SandboxError(f"sandbox {self.sandbox}: the live command has exited; nothing reads its stdin")
        view = memoryview(data)
        deadline = time.monotonic() + _WRITE_TIMEOUT_S
        os.set_blocking(self._in, False)
        while view:
            try:
                view = view[os.write(self._in, view) :]
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SandboxError(
                        f"sandbox {self.sandbox}: the live command read none of {len(view)} bytes in {_WRITE_TIMEOUT_S:g} s"
                    ) from None
                time.sleep(0.02)
            except OSError as exc:  # EPIPE: it closed its stdin or exited
                raise SandboxError(f"sandbox {self.sandbox}: cannot write to the live command: {exc}") from exc

    def close_stdin(self) -> None:
        with self._lock:
            if self._in >= 0:
                os.close(self._in)
                self._in = -1

    def output(self) -> bytes:
        with self._lock:
            return bytes(self._bufs[self._out])

    def errors(self) -> bytes:
        with self._lock:
            return bytes(self._bufs[self._err])

    def poll(self) -> int | None:
        with self._lock:
            return self._status

    def wait(self, timeout: float | None = None) -> int | None:
        self._exited.wait(timeout)
        return self.poll()

    def kill(self) -> None:
        if self.poll() is None and not self._closed:
            with contextlib.suppress(OSError):
                self._reply.send(b"kill")

    def close(self) -> None:
        if self._closed:
            return
        self.kill()
        self.wait(30)
        self._closed = True
        self.close_stdin()
        self._thread.join(_DRAIN_AFTER_EXIT_S + 5)
        for fd in (self._out, self._err):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._reply.close()

    def reading_stdin(self) -> bool:
        """See the module doc: every condition from the kernel's view, any unreadable one is False."""
        pid = self.host_pid
        if pid is None or self.poll() is not None or self._closed or self._in < 0:
            return False
        try:
            return self._blocked_on_stdin(pid)
        except (OSError, ValueError, IndexError):
            return False

    def _blocked_on_stdin(self, pid: int) -> bool:
        if self._start is None or _start_time(pid) != self._start:
            return False
        pending = array.array("i", [0])
        fcntl.ioctl(self._in, termios.FIONREAD, pending)
        if pending[0] != 0:
            return False  # it has not read what lego wrote yet
        if _read(f"/proc/{pid}/wchan").strip() not in EPOLL_WCHANS:
            return False
        status = _read(f"/proc/{pid}/status")
        if any(ln.split()[1:] != ["0"] for ln in status.splitlines() if ln.startswith("TracerPid:")):
            return False
        if os.readlink(f"/proc/{pid}/fd/0") != f"pipe:[{self._stdin_ino}]":
            return False
        for task in os.listdir(f"/proc/{pid}/task"):
            if _read(f"/proc/{pid}/task/{task}/children").split():
                return False
        return any(self._watches_stdin(pid, fd) for fd in self._epoll_fds(pid))

    @staticmethod
    def _epoll_fds(pid: int) -> list[int]:
        """The epoll instance the main thread waits on (first argument of the syscall it sleeps in),
        or, where the kernel does not say, every epoll instance the process holds."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = _read(f"/proc/{pid}/syscall").split()
            if fields and fields[0].isdigit() and len(fields) > 1:
                return [int(fields[1], 16)]
            if fields and fields[0] == "running":
                return []
        out = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[eventpoll]":
                    out.append(int(fd))
        return out

    def _watches_stdin(self, pid: int, epfd: int) -> bool:
        """Whether epoll instance ``epfd`` of ``pid`` watches its fd 0, which is lego's stdin pipe."""
        if os.readlink(f"/proc/{pid}/fd/{epfd}") != "anon_inode:[eventpoll]":
            return False
        for line in _read(f"/proc/{pid}/fdinfo/{epfd}").splitlines():
            fields = line.split()
            if fields[:2] == ["tfd:", "0"]:
                ino = next((f.split(":", 1)[1] for f in fields if f.startswith("ino:")), "")
                return ino != "" and int(ino, 16) == self._stdin_ino
        return False
