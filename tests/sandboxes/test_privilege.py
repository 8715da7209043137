"""The local sandbox's privilege and resource model, one attack per property, in a real sandbox.

Each test does what a hostile agent would, through ``exec`` of a real bubblewrap sandbox, and checks
the host-side effect (or its absence) from outside.
"""

from __future__ import annotations

import http.server
import os
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lego.config import SandboxConfig
from lego.sandboxes.cgroup import enforcement
from lego.sandboxes.local import LocalSandbox
from lego.sandboxes.processes import descendants
from lego.types import Task


@pytest.fixture
def sb(calc_task: Task) -> Iterator[LocalSandbox]:
    box = LocalSandbox(calc_task, SandboxConfig())
    yield box
    box.close()


def _status(pid: int, field: str) -> str:
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith(field + ":"))
    return line.split(":", 1)[1].split()[0]


def test_no_process_of_the_sandbox_holds_host_root(sb: LocalSandbox) -> None:
    sb.exec("nohup sleep 300 >/dev/null 2>&1 &")
    pids = [sb._procs.ns_pid, *descendants(sb._procs.ns_pid)]
    assert len(pids) >= 2
    host_uids = {_status(p, "Uid") for p in pids}
    if os.geteuid() == 0:
        assert host_uids == {str(sb.identity.uid)} and sb.identity.uid != 0
    else:
        assert host_uids == {str(os.getuid())}
    assert sb.exec("id -u").stdout.strip() == "1000"


def test_every_command_has_no_capabilities_and_no_new_privs(sb: LocalSandbox) -> None:
    status = dict(ln.split(":\t", 1) for ln in sb.exec("cat /proc/self/status").stdout.splitlines() if ":\t" in ln)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert status[cap].strip() == "0000000000000000", (cap, status[cap])
    assert status["NoNewPrivs"].strip() == "1"
    res = sb.exec("unshare -U -r true 2>&1; echo rc=$?")
    assert "rc=0" not in res.stdout  # no nested user namespace to regain capabilities in


def test_host_kernel_settings_cannot_be_changed(sb: LocalSandbox) -> None:
    before = Path("/proc/sys/kernel/core_pattern").read_text()
    res = sb.exec("echo '|/tmp/pwn' > /proc/sys/kernel/core_pattern; echo 0 > /proc/sys/net/ipv4/ip_forward")
    assert Path("/proc/sys/kernel/core_pattern").read_text() == before
    assert res.stderr.count("Read-only file system") == 2, res
    masked = sb.exec(
        "cat /proc/keys /proc/timer_list 2>/dev/null | wc -c; find /proc/acpi /proc/fs -mindepth 1 | wc -l"
    )
    assert masked.stdout.split() == ["0", "0"]
    assert sb.exec("ls /sys 2>&1").exit_code != 0


def test_mountinfo_shows_no_host_path_of_lego(sb: LocalSandbox, calc_task: Task, tmp_path: Path) -> None:
    sock = tmp_path / "p.sock"
    server = socketserver.UnixStreamServer(str(sock), http.server.BaseHTTPRequestHandler)
    try:
        with LocalSandbox(calc_task, SandboxConfig(), proxy_uds=sock) as box:
            info = box.exec("cat /proc/self/mountinfo; cat /proc/1/cmdline").stdout
        for host_path in (str(box.host_dir), str(box.template), str(sock.parent), "lego-sandboxes", "lego-mnt"):
            assert host_path not in info
        visible = {ln.split()[4] for ln in info.splitlines() if ln.count(" ") > 4}
        assert {"/repo", "/tmp", "/home/agent"} <= visible
    finally:
        server.server_close()


def test_a_disk_flood_fails_inside_and_never_reaches_the_host(calc_task: Task) -> None:
    before = os.statvfs("/tmp")
    with LocalSandbox(calc_task, SandboxConfig(disk_mb=64)) as box:
        res = box.exec("fallocate -l 2G /repo/x; head -c 100M /dev/zero > /dev/shm/y; df -k /repo | tail -1")
        assert res.stderr.count("No space left on device") == 2, res
        assert int(res.stdout.split()[1]) <= 64 * 1024
        assert box.exec("echo ok > /repo/small").exit_code != 0  # the budget is spent, for every path
        after = os.statvfs("/tmp")
        assert (before.f_bavail - after.f_bavail) * after.f_frsize < 32 << 20


@pytest.mark.skipif("cgroup" not in enforcement()["memory"], reason="no memory cgroup for lego here")
def test_memory_budget_holds_processes_and_tmpfs_together(calc_task: Task) -> None:
    cfg = SandboxConfig(disk_mb=1024, memory_budget_mb=128)
    with LocalSandbox(calc_task, cfg) as box:
        assert box._cgroup.memory is not None
        flood = box.exec("head -c 400M /dev/zero > /tmp/big && echo wrote-it", timeout=60)
        assert "wrote-it" not in flood.stdout  # the OOM killer or ENOMEM stopped it
        assert (box.root.parent / "tmp" / "big").stat().st_size <= 128 << 20
        # The budget stays spent: more writes fail too (whether the next command is OOM-killed at
        # once depends on how much the killed writer's own pages freed), and lego's side still works.
        again = box.exec("head -c 64M /dev/zero > /tmp/big2 && echo wrote-again", timeout=60)
        assert "wrote-again" not in again.stdout
        tmp = box.root.parent / "tmp"
        assert sum(f.stat().st_size for f in tmp.iterdir() if f.is_file()) <= 128 << 20
        peak = next(
            box._cgroup.memory / n
            for n in ("memory.max_usage_in_bytes", "memory.peak")
            if (box._cgroup.memory / n).exists()
        )
        assert int(peak.read_text()) <= 128 << 20
        box.kill_agent_processes()
        assert box.diff() == ""
        limit = int((box._cgroup.memory / "memory.limit_in_bytes").read_text())
        assert limit == 128 << 20


def test_kill_minus_one_leaves_the_proxy_bridge_and_the_sandbox_working(calc_task: Task, tmp_path: Path) -> None:
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"via-proxy")

        def log_message(self, *args: object) -> None:
            pass

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    sock = tmp_path / "p.sock"
    server = Server(str(sock), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with LocalSandbox(calc_task, SandboxConfig(), proxy_uds=sock) as box:
            url = f"http://127.0.0.1:{box.proxy_port}/v1/models"
            assert "socat" not in box.exec("ps -eo comm").stdout  # not even visible inside
            box.exec("kill -9 -1; kill -9 1; kill -STOP 1; true")
            assert box.exec(f"curl -s {url}").stdout == "via-proxy"
            box.exec("nohup sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 &")
            assert box.exec("kill -9 -1; sleep 0.2; ps -eo comm --no-headers").stdout.split() == ["python", "ps"]
    finally:
        server.shutdown()
        server.server_close()


def test_kill_agent_processes_ends_daemons_and_keeps_files(sb: LocalSandbox) -> None:
    sb.exec("setsid sh -c 'while :; do date >> /repo/log; sleep 0.05; done' >/dev/null 2>&1 < /dev/null &")
    sb.exec("(nohup sh -c 'sleep 600' >/dev/null 2>&1 &) ; true")
    # the daemon is running once its log grows (on a loaded machine its first write can come late)
    assert sb.exec("for i in $(seq 200); do [ -s /repo/log ] && exit 0; sleep 0.05; done; exit 1").exit_code == 0
    assert len(descendants(sb._procs.ns_pid)) >= 2
    sb.kill_agent_processes()
    assert descendants(sb._procs.ns_pid) == []
    size = len(sb.read("log"))
    assert size > 0 and len(sb.read("log")) == size  # nobody writes any more; the file is still there
    assert "+" in sb.diff()


def test_diff_works_whatever_the_agent_did_to_its_files(sb: LocalSandbox) -> None:
    script = (
        "printf 'def add(a, b):\\n    return a + b\\n' > calc/__init__.py; "
        "echo secret > new.txt; chmod 000 new.txt calc/__init__.py; "
        "mkfifo pipe; head -c 20M /dev/urandom > big.bin; ln -s /etc/shadow link; "
        "rm -rf .git; mkdir .git; echo garbage > .git/HEAD; mkdir -p sub/.git; chmod 000 sub tests"
    )
    assert sb.exec(script).exit_code == 0
    diff = sb.diff()
    assert "+    return a + b" in diff and "+secret" in diff
    assert "big.bin" not in diff and "pipe" not in diff
    assert "+/etc/shadow" in diff  # the link itself, not what it points to


def test_commands_keep_exit_codes_stdin_and_timeouts(sb: LocalSandbox) -> None:
    code, out, _, timed_out, _ = sb.run_bytes("cat; exit 7", stdin=b"hello")
    assert (code, out, timed_out) == (7, b"hello", False)
    assert sb.exec("kill -9 $$").exit_code == -9
    assert sb.exec("no-such-program").exit_code == 127
    res = sb.exec("sleep 30", timeout=0.5)
    assert res.timed_out and res.exit_code == 124 and res.wall_s < 10
    many = ["x" * 100] * 5000  # an argv beyond a socket message's size
    assert sb.exec(["sh", "-c", "echo $#", "sh", *many]).stdout.strip() == "5000"


def test_a_daemon_racing_the_end_of_its_command_cannot_write_after_it(calc_task: Task) -> None:
    """A detached process that busy-waits for its command's /proc entry to vanish, then writes to the
    repo: the leftovers are stopped before the command is reaped, so the write never lands (before
    this, 4 of 10 such writes reached the diff)."""
    daemon = (
        "P=$$; setsid python3 -c \"import os\nwhile os.path.exists('/proc/$P'): pass\n"
        "open('calc/__init__.py', 'a').write('# late write')\" >/dev/null 2>&1 < /dev/null & sleep 0.3"
    )
    for _ in range(5):
        with LocalSandbox(calc_task, SandboxConfig()) as box:
            assert box.exec(daemon).exit_code == 0
            box.kill_agent_processes()
            assert "late write" not in box.diff()
