"""The local bubblewrap backend: the Sandbox protocol, isolation properties, the proxy bridge."""

from __future__ import annotations

import http.server
import os
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sbx_fixtures import git_in, make_task

from lego.config import SandboxConfig
from lego.errors import SandboxError, TaskError
from lego.sandboxes.factory import create_sandbox
from lego.sandboxes.guards import verify_history_strip
from lego.sandboxes.local import REPO_DIR, LocalSandbox
from lego.sandboxes.processes import descendants
from lego.seams import Sandbox
from lego.types import Task


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.fixture
def sb(calc_task: Task) -> Iterator[LocalSandbox]:
    box = LocalSandbox(calc_task, SandboxConfig())
    yield box
    box.close()


def test_protocol_and_layout(sb: LocalSandbox) -> None:
    assert isinstance(sb, Sandbox)
    assert sb.repo_dir == REPO_DIR and sb.proxy_port is None and sb.history_strip
    res = sb.exec("id -u; pwd; echo $HOME; ls")
    assert res.exit_code == 0, res.stderr
    uid, cwd, home, *files = res.stdout.split()
    assert (uid, cwd, home) == ("1000", "/repo", "/home/agent")
    assert set(files) == {"calc", "tests"}
    assert sb.exec(["python", "-c", "import pytest, sys; print(sys.version_info[0])"]).stdout.strip() == "3"
    assert sb.exec("pwd", cwd="calc").stdout.strip() == "/repo/calc"
    assert sb.exec("echo $FOO", env={"FOO": "bar"}).stdout.strip() == "bar"
    assert sb.exec("exit 3").exit_code == 3


def test_read_write_diff(sb: LocalSandbox) -> None:
    sb.write("calc/__init__.py", b"def add(a, b):\n    return a + b\n")
    sb.write("/home/agent/.config/x.json", b"{}")
    assert sb.read("/home/agent/.config/x.json") == b"{}"
    assert b"a + b" in sb.read("calc/__init__.py")
    sb.exec("python -c 'import calc'")  # leaves __pycache__ behind
    sb.exec("git add -A && git -c user.name=a -c user.email=a@a commit -qm wip")  # moving HEAD hides nothing
    diff = sb.diff()
    assert "+    return a + b" in diff and "__pycache__" not in diff and ".pyc" not in diff
    with pytest.raises(SandboxError):
        sb.read("does/not/exist")


def test_state_persists_between_execs_and_close_kills_everything(calc_task: Task) -> None:
    box = LocalSandbox(calc_task, SandboxConfig())
    box.exec("nohup sleep 300 >/dev/null 2>&1 &")
    assert "sleep" in box.exec("ps -eo comm").stdout  # the background process outlived its exec
    inside = [int(p) for p in descendants(box._procs.ns_pid)] + [box._procs.ns_pid]
    box.close()
    assert not [p for p in inside if _alive(p)]
    assert not box.host_dir.exists()
    with pytest.raises(SandboxError, match="closed"):
        box.exec("true")


def test_system_is_read_only_and_secrets_masked(sb: LocalSandbox) -> None:
    assert sb.exec("touch /usr/x").exit_code != 0
    assert sb.exec("touch /etc/x").exit_code != 0
    assert sb.exec(f"touch {sb.runtime.venv}/x").exit_code != 0
    assert sb.exec("cat /etc/shadow").stdout == ""
    assert sb.exec("ls /work /opt /mnt 2>&1").exit_code != 0
    assert sb.exec("grep Cap[EP] /proc/self/status").stdout.split()[1::2] == ["0000000000000000"] * 2


def test_history_strip_of_a_repo_with_history(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    repo = Path(task.repo_path or "")
    assert not verify_history_strip(repo)  # a normal repo: has reflog, a branch
    git_in(repo, "checkout", "-qb", "fix")
    (repo / "calc" / "__init__.py").write_text("def add(a, b):\n    return a + b  # THE-FIX\n")
    git_in(repo, "commit", "-qam", "fix")
    git_in(repo, "checkout", "-q", "-")
    with LocalSandbox(task, SandboxConfig()) as box:
        assert box.history_strip and verify_history_strip(box.template)  # /repo is a byte copy of it
        dig = box.exec(
            "git log --all --oneline | wc -l; git rev-list --all --objects | cut -d' ' -f1 | git cat-file --batch"
        )
        assert dig.stdout.startswith("1\n") and "THE-FIX" not in dig.stdout
        assert box.exec("grep -r THE-FIX .git; git remote; git reflog").stdout.strip() == ""


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"via-proxy")

    def log_message(self, *args: object) -> None:
        pass


class _UnixHTTP(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def test_proxy_bridge_is_the_way_out(calc_task: Task, tmp_path: Path) -> None:
    sock = tmp_path / "proxy.sock"
    server = _UnixHTTP(str(sock), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        box = create_sandbox(SandboxConfig(), calc_task, proxy_uds=sock)
        try:
            assert box.proxy_port is not None
            res = box.exec(f"curl -s http://127.0.0.1:{box.proxy_port}/v1/models")
            assert res.stdout == "via-proxy", res
        finally:
            box.close()
    finally:
        server.shutdown()
        server.server_close()


def test_missing_bubblewrap_refuses_unless_unsafe(
    calc_task: Task, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without bwrap: what a machine without it sees
    with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
        LocalSandbox(calc_task, SandboxConfig())
    monkeypatch.setenv("PATH", os.defpath)
    with LocalSandbox(calc_task, SandboxConfig(unsafe_no_isolation=True)) as box:
        assert not box.isolated and box.repo_dir == str(box.root)
        box.write("calc/__init__.py", b"def add(a, b):\n    return a + b\n")
        assert "+    return a + b" in box.diff()


def test_missing_repo_is_a_task_error(calc_task: Task, tmp_path: Path) -> None:
    bad = calc_task.model_copy(update={"repo_path": str(tmp_path / "nope")})
    with pytest.raises(TaskError, match="does not exist"):
        LocalSandbox(bad, SandboxConfig())


def test_cleanup_leftovers_removes_only_dead_sandboxes(calc_task: Task, tmp_path: Path) -> None:
    from lego.sandboxes.local import cleanup_leftovers

    cfg = SandboxConfig(workdir=str(tmp_path))
    live, dead = LocalSandbox(calc_task, cfg), LocalSandbox(calc_task, cfg)
    try:
        dead._procs.init.kill()  # type: ignore[union-attr]  # a crashed run: init gone, directory left
        dead._procs.init.wait()  # type: ignore[union-attr]
        assert cleanup_leftovers(cfg) == 1
        assert live.host_dir.exists() and not dead.host_dir.exists()
        assert live.exec("true").exit_code == 0
    finally:
        live.close()
        dead.close()


def test_repo_and_temp_space_share_one_disk_budget(calc_task: Task) -> None:
    with LocalSandbox(calc_task, SandboxConfig(disk_mb=64)) as box:
        res = box.exec("head -c 40M /dev/zero > /tmp/a; head -c 40M /dev/zero > /repo/b; stat -c %s /repo/b")
        assert "No space left on device" in res.stderr and int(res.stdout) <= 24 * 1024 * 1024
        assert box.exec("head -c 1M /dev/zero > ~/c").exit_code != 0  # HOME is on the same budget


def test_output_flood_and_closed_pipes_cannot_hang_or_exhaust_the_host(sb: LocalSandbox) -> None:
    from lego.sandboxes.processes import OUTPUT_CAP

    flood = sb.exec("yes lego", timeout=60)
    assert len(flood.stdout) == OUTPUT_CAP and "output exceeded" in flood.stderr and not flood.timed_out
    closed = sb.exec("exec >&- 2>&-; sleep 600", timeout=1)
    assert closed.timed_out and closed.exit_code == 124
    big = b"x" * (3 * 1024 * 1024)
    sb.write("/tmp/big", big)
    assert sb.read("/tmp/big") == big


_ORPHAN_SCRIPT = """
import json, sys, time
from pathlib import Path
from lego.config import SandboxConfig
from lego.sandboxes.local import LocalSandbox
from lego.types import Task
box = LocalSandbox(Task.model_validate_json(Path(sys.argv[1]).read_text()), SandboxConfig(), proxy_uds=Path(sys.argv[2]))
print(json.dumps({"bridge": box._procs.bridge.pid, "init": box._procs.init.pid}), flush=True)
time.sleep(600)
"""


def test_a_killed_lego_leaves_no_bridge_or_sandbox_behind(calc_task: Task, tmp_path: Path) -> None:
    """SIGKILL (or an unhandled SIGTERM) of the process that made a sandbox: its proxy bridge (socat, in
    a session of its own) and its bwrap init die with it, instead of listening on as orphans."""
    import json
    import signal
    import subprocess
    import sys
    import time

    sock = tmp_path / "proxy.sock"
    server = _UnixHTTP(str(sock), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    task_file = tmp_path / "task.json"
    task_file.write_text(calc_task.model_dump_json())
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT, str(task_file), str(sock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        pids = json.loads(proc.stdout.readline())
        for pid in pids.values():
            os.kill(pid, 0)  # alive while their owner is
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        alive = dict(pids)
        while alive and time.monotonic() < deadline:
            for name, pid in list(alive.items()):
                try:
                    os.kill(pid, 0)
                    if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                        del alive[name]  # a zombie awaiting its (re)parent's wait: dead
                except ProcessLookupError:
                    del alive[name]
            time.sleep(0.05)
        assert not alive, f"outlived the process that made them: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
        server.shutdown()
        server.server_close()


_KILLED_IN_STARTUP_SCRIPT = """
import json, os, sys, time
from pathlib import Path
from lego.config import SandboxConfig
from lego.sandboxes import local_start
from lego.sandboxes.local import LocalSandbox
from lego.types import Task
point = sys.argv[2]
original = getattr(local_start.HostProcesses, point)

def stall(self, *args, **kwargs):
    if point == "start_spawner":  # bubblewrap has just started, its arguments in hand
        original(self, *args, **kwargs)
    print(json.dumps({"init": self.init.pid}), flush=True)
    time.sleep(600)  # lego is SIGKILLed here, in the middle of starting the sandbox

setattr(local_start.HostProcesses, point, stall)
LocalSandbox(Task.model_validate_json(Path(sys.argv[1]).read_text()), SandboxConfig())
"""


def _marked(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (what a test's child and its children inherit)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes() and _alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("point", ["start_spawner", "_read_child_pid", "_wait_ready"])
def test_lego_killed_while_a_sandbox_starts_leaves_nothing_behind(calc_task: Task, tmp_path: Path, point: str) -> None:
    """SIGKILL of lego at any moment of a sandbox's start-up (bubblewrap just started,
    building the filesystem, the server not yet ready): bubblewrap and everything it started die too,
    instead of waiting forever as orphans that hold the sandbox's cgroup."""
    import json
    import signal
    import subprocess
    import sys
    import time
    import uuid

    marker = f"LEGO_TEST_STARTUP_KILL={uuid.uuid4().hex}"
    task_file = tmp_path / "task.json"
    task_file.write_text(calc_task.model_dump_json())
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_IN_STARTUP_SCRIPT, str(task_file), point],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        init = json.loads(proc.stdout.readline())["init"]
        time.sleep(0.3)  # bubblewrap gets as far as it can without lego
        assert _alive(init) and init in _marked(marker)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120] for pid in _marked(marker)}
        assert not left, f"outlived the lego that was starting them: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _marked(marker):
            os.kill(pid, signal.SIGKILL)


def test_starting_a_sandbox_never_forks_lego(calc_task: Task, tmp_path: Path) -> None:
    """Every host-side process of a sandbox (bubblewrap with its server, the proxy bridge) starts by
    vfork and exec, never by forking lego: a fork write-protects every page of lego (gigabytes with
    the engine and the trainer resident), and each page the engine or the trainer then writes takes
    a copy-on-write fault. Measured as that: the faults of rewriting a buffer after a start-up."""
    import mmap
    import resource

    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # private: what fork marks copy-on-write
    buf.madvise(mmap.MADV_NOHUGEPAGE)  # one fault per 4 KiB page, not per 2 MiB one
    pages = len(buf) // page

    def faults_of_rewriting() -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for i in range(0, len(buf), page):
            buf[i] = (buf[i] + 1) & 0xFF
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults_of_rewriting()  # every page present and writable
    sock = tmp_path / "proxy.sock"
    server = _UnixHTTP(str(sock), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        quiet = faults_of_rewriting()
        box = create_sandbox(SandboxConfig(), calc_task, proxy_uds=sock)
        try:
            after_start = faults_of_rewriting()
            assert box.exec("true").exit_code == 0
        finally:
            box.close()
    finally:
        server.shutdown()
        server.server_close()
    assert quiet < pages // 20, quiet
    assert after_start < pages // 20, f"{after_start} copy-on-write faults over {pages} pages: lego was forked"
