"""The docker backend, for real: needs a running engine and the test image (.ci/docker-setup.sh)."""

from __future__ import annotations

import http.server
import os
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.config import SandboxConfig
from lego.errors import SandboxError
from lego.sandboxes.factory import create_sandbox
from lego.sandboxes.grading import grade
from lego.seams import Sandbox
from lego.types import Task

pytestmark = pytest.mark.docker

IMAGE = os.environ.get("LEGO_DOCKER_TEST_IMAGE", "lego-test-bookworm:latest")


@pytest.fixture(scope="module")
def client() -> Any:
    try:
        from lego.sandboxes.docker import docker_client

        c = docker_client()
        c.images.get(IMAGE)
    except Exception as exc:
        pytest.skip(f"no Docker engine or no {IMAGE} image ({exc}); run .ci/docker-setup.sh")
    return c


@pytest.fixture
def cfg() -> SandboxConfig:
    return SandboxConfig(kind="docker", docker_image=IMAGE, max_processes=64, command_timeout_s=60)


@pytest.fixture
def sb(client: Any, cfg: SandboxConfig, calc_task: Task) -> Iterator[Any]:
    box = create_sandbox(cfg, calc_task)
    yield box
    box.close()


def test_protocol_exec_read_write_diff(sb: Any) -> None:
    assert sb.history_strip
    assert isinstance(sb, Sandbox) and sb.repo_dir == "/repo"
    assert sb.exec("pwd; ls").stdout.split() == ["/repo", "calc", "tests"]
    assert "1 passed" in sb.exec("python -m pytest -q -p no:cacheprovider tests 2>&1 | tail -1").stdout
    sb.write("calc/__init__.py", b"def add(a, b):\n    return a + b\n")
    assert sb.read("calc/__init__.py") == b"def add(a, b):\n    return a + b\n"
    sb.exec("python -c 'import calc'")
    diff = sb.diff()
    assert "+    return a + b" in diff and "__pycache__" not in diff


def test_no_network_and_timeouts(sb: Any) -> None:
    probe = sb.exec("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)\"")
    assert probe.exit_code != 0 and "unreachable" in probe.stderr.lower()
    slow = sb.exec("sleep 60 & sleep 60", timeout=1)
    assert slow.timed_out and slow.exit_code == 124
    assert "sleep 60" not in sb.exec("ps -eo args 2>/dev/null || ls /proc").stdout


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"via-proxy")

    def log_message(self, *args: object) -> None:
        pass


class _UnixHTTP(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def test_proxy_bridge(client: Any, cfg: SandboxConfig, calc_task: Task, tmp_path: Path) -> None:
    sock = tmp_path / "p.sock"
    server = _UnixHTTP(str(sock), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with create_sandbox(cfg, calc_task, proxy_uds=sock) as box:  # type: ignore[attr-defined]
            url = f"http://127.0.0.1:{box.proxy_port}/v1/models"
            got = box.exec(f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}').read())\"")
            assert "via-proxy" in got.stdout, got
    finally:
        server.shutdown()
        server.server_close()


def test_grading_in_docker(client: Any, cfg: SandboxConfig, calc_task: Task) -> None:
    assert grade(calc_task, calc_task.patch, cfg=cfg).reward == 1.0
    assert grade(calc_task, "", cfg=cfg).reward == 0.0


DOCKERFILE = f"""FROM {IMAGE}
RUN mkdir -p /testbed/calc && cd /testbed && git init -q && git config user.email t@t && git config user.name t \\
 && printf 'def add(a, b):\\n    return a - b\\n' > calc/__init__.py && git add -A && git commit -qm base \\
 && git checkout -qb fix && printf 'def add(a, b):\\n    return a + b  # UPSTREAM\\n' > calc/__init__.py \\
 && git commit -qam fix && git checkout -q - && git remote add origin https://example.invalid/calc.git
"""


def test_image_repo_history_is_stripped(client: Any, cfg: SandboxConfig) -> None:
    task = Task(instance_id="img-1", repo="t/calc", problem_statement="p", patch="", dockerfile=DOCKERFILE)
    with create_sandbox(cfg, task) as box:  # type: ignore[attr-defined]
        assert box.repo_dir == "/testbed" and box.history_strip
        dig = box.exec(
            "git log --all --oneline | wc -l; git remote; git rev-list --all --objects | cut -d' ' -f1 | git cat-file --batch"
        )
        assert dig.stdout.startswith("1\n") and "UPSTREAM" not in dig.stdout
        box.write("calc/__init__.py", b"def add(a, b):\n    return a + b\n")
        assert "+    return a + b" in box.diff()


def test_cleanup_leftovers(client: Any, cfg: SandboxConfig, calc_task: Task) -> None:
    from lego.sandboxes.docker import DockerSandbox, cleanup_leftovers

    box = DockerSandbox(calc_task, cfg, run_id="leftover-test")
    box._closed = True  # simulate a crashed run that never closed its sandbox
    assert cleanup_leftovers(run_id="leftover-test", client=client) == 1
    assert not client.containers.list(all=True, filters={"label": "lego.run_id=leftover-test"})


def test_agent_is_unprivileged_and_bounded(sb: Any) -> None:
    status = dict(ln.split(":\t", 1) for ln in sb.exec("cat /proc/self/status").stdout.splitlines() if ":\t" in ln)
    assert status["Uid"].split()[0] == "1000"
    for cap in ("CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert status[cap].strip() == "0000000000000000", cap
    assert status["NoNewPrivs"].strip() == "1"
    assert sb.exec("echo x > /proc/sys/kernel/core_pattern").exit_code != 0
    flood = sb.exec(f"head -c {sb.cfg.disk_mb + 16}M /dev/zero > /tmp/big")
    assert "No space left on device" in flood.stderr


def test_kill_agent_processes_ends_daemons(sb: Any) -> None:
    sb.exec("nohup sh -c 'while :; do date >> /tmp/log; sleep 0.05; done' >/dev/null 2>&1 & sleep 0.3")
    between = len(sb.read("/tmp/log"))
    assert sb.exec("sleep 0.3").exit_code == 0 and len(sb.read("/tmp/log")) > between  # runs during commands
    sb.kill_agent_processes()
    size = len(sb.read("/tmp/log"))
    time.sleep(0.3)
    assert len(sb.read("/tmp/log")) == size and "sh -c while" not in sb.exec("ps -eo args").stdout


def test_nothing_left_behind_acts_after_its_command_ended(sb: Any) -> None:
    """A daemon that acts the moment its command ends (as one outliving the harness would, to write
    the fix before lego kills it) is stopped before that end is visible, then killed."""
    sb.exec(
        "H=$$; setsid nohup sh -c 'while kill -0 '$H' 2>/dev/null; do sleep 0.001; done; echo acted > /tmp/acted' "
        ">/dev/null 2>&1 </dev/null & sleep 0.2"
    )
    sb.kill_agent_processes()
    assert sb.exec("test -e /tmp/acted").exit_code == 1


def test_diff_is_taken_with_legos_authority(sb: Any) -> None:
    """Modes, symlinks out of the repo, FIFOs and huge files the agent leaves neither stop nor steer the diff."""
    setup = sb.exec(
        "sed -i 's/a - b/a + b/' calc/__init__.py && chmod 000 calc/__init__.py && "
        "mkdir calc/secret && echo hidden-data > calc/secret/data && chmod 000 calc/secret && "
        "ln -s /lego/base.git/config calc/link && ln -s /etc/shadow calc/shadow && mkfifo calc/pipe && "
        "head -c 9M /dev/zero > calc/huge.bin"
    )
    assert setup.exit_code == 0, setup
    assert sb.exec("cat /lego/base.git/config").exit_code != 0  # lego's pristine .git is root-only
    diff = sb.diff()
    assert "+    return a + b" in diff and "+hidden-data" in diff
    assert "+/lego/base.git/config" in diff and "+/etc/shadow" in diff  # stored as links, not followed
    assert "[core]" not in diff and "root:" not in diff
    assert "calc/pipe" not in diff and "calc/huge.bin" not in diff


def test_bridge_is_out_of_the_agents_reach(client: Any, cfg: SandboxConfig, calc_task: Task, tmp_path: Path) -> None:
    sock = tmp_path / "bridge-test.sock"
    server = _UnixHTTP(str(sock), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    get = "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{}/').read())\""
    try:
        with create_sandbox(cfg, calc_task, proxy_uds=sock) as box:  # type: ignore[attr-defined]
            seen = box.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '; cat /proc/self/mountinfo").stdout
            assert "socat" not in seen and str(tmp_path) not in seen and "bridge-test.sock" not in seen
            box.exec("kill -9 -1; for p in /proc/[0-9]*; do kill -9 ${p#/proc/}; done")
            assert "via-proxy" in box.exec(get.format(box.proxy_port)).stdout
    finally:
        server.shutdown()
        server.server_close()


def test_every_writable_place_is_capped(client: Any, calc_task: Task) -> None:
    small = SandboxConfig(kind="docker", docker_image=IMAGE, disk_mb=64, max_processes=64, command_timeout_s=60)
    with create_sandbox(small, calc_task) as box:  # type: ignore[attr-defined]
        for d in ("/repo", "/tmp", "/home/agent", "/dev/shm"):
            fill = box.exec(f"head -c 80M /dev/zero > {d}/fill; stat -c %s {d}/fill; rm -f {d}/fill")
            assert "No space left on device" in fill.stderr and int(fill.stdout.split()[0]) <= 64 << 20, (d, fill)
        for d in ("/", "/var/tmp", "/run", "/usr", "/etc"):
            assert box.exec(f"touch {d}/x").exit_code != 0, d


def test_callers_environment_reaches_no_root_process(sb: Any) -> None:
    """A PATH or LD_PRELOAD naming the agent's files applies to the agent's command only."""
    sb.exec(
        "mkdir -p /tmp/evil && for t in setpriv env python3; do "
        "printf '#!/bin/sh\\nid -u > /tmp/evil/ran-as\\n' > /tmp/evil/$t && chmod +x /tmp/evil/$t; done"
    )
    got = sb.exec("id -u; echo $LD_PRELOAD", env={"PATH": "/tmp/evil:/usr/bin:/bin", "LD_PRELOAD": "/tmp/evil/x.so"})
    assert got.stdout.split()[:2] == ["1000", "/tmp/evil/x.so"], got
    assert sb.exec("test -e /tmp/evil/ran-as").exit_code == 1


def test_kill_agent_processes_when_they_hold_every_pid(sb: Any) -> None:
    """Sleepers fork until the pids limit refuses more (setsid, so no process group holds them): all die."""
    bomb = (
        "import os, time\nn = 0\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        os.setsid()\n        time.sleep(1000)\n        os._exit(0)\n    n += 1\nprint('filled', n)"
    )
    assert "filled" in sb.exec(["python3", "-c", bomb]).stdout
    sb.kill_agent_processes()
    assert sb.exec("echo alive").stdout == "alive\n"
    assert "sleep(1000)" not in sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout


def test_an_image_the_engine_cannot_provide_is_a_sandbox_error(
    client: Any, cfg: SandboxConfig, calc_task: Task
) -> None:
    from lego.sandboxes.docker_engine import image_for

    for name, needle in (("Not A Reference!", "cannot look up image"), ("lego-absent:none", "could not be pulled")):
        with pytest.raises(SandboxError, match=needle):
            image_for(client, calc_task.model_copy(update={"image": name}), cfg)


def test_a_sandbox_whose_container_is_gone_refuses_commands_and_still_closes(
    client: Any, cfg: SandboxConfig, calc_task: Task
) -> None:
    box = create_sandbox(cfg, calc_task)
    client.containers.get(box.container.id).remove(force=True)  # type: ignore[attr-defined]
    with pytest.raises(SandboxError, match="cannot start a command"):
        box.exec("true")
    box.close()
