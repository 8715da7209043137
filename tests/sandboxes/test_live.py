"""Live commands of the local sandbox (:mod:`lego.sandboxes.live`): stdin kept open, output read as it
comes, and whether the command waits for its stdin decided from the kernel's view of its process."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lego.config import SandboxConfig
from lego.errors import SandboxError
from lego.harnesses.install import InstallSpec, installed
from lego.sandboxes.local import LocalSandbox
from lego.seams import LiveCommand, LiveSandbox
from lego.types import Task

MINI = InstallSpec(kind="pip", package="mini-swe-agent", version="2.4.6", executable="venv/bin/mini")
"""mini-swe-agent's venv: a Python with prompt_toolkit, the prompt a live harness waits at."""

PROMPT = """
import subprocess, sys
from prompt_toolkit.shortcuts import PromptSession
child = subprocess.Popen(["sleep", "60"]) if "--child" in sys.argv else None
print("ready", flush=True)
while True:
    line = PromptSession().prompt("> ")
    print("got", repr(line), flush=True)
    if not line:
        break
"""


def _until(cond: Callable[[], bool], limit: float = 20.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def _venv_python() -> Path:
    if installed("mini-swe-agent") is None:
        pytest.skip(
            "mini-swe-agent is not installed (its venv has prompt_toolkit); lego harness install mini-swe-agent"
        )
    return MINI.install_dir("mini-swe-agent") / "venv" / "bin" / "python"


@pytest.fixture(params=[True, False], ids=["isolated", "unisolated"])
def box(request: pytest.FixtureRequest, calc_task: Task) -> Iterator[LocalSandbox]:
    binds = [MINI.install_dir("mini-swe-agent")] if installed("mini-swe-agent") else []
    sb = LocalSandbox(calc_task, SandboxConfig(unsafe_no_isolation=not request.param), ro_binds=binds)
    yield sb
    sb.close()


def test_a_live_command_reads_what_lego_writes_and_exits_when_its_stdin_closes(box: LocalSandbox) -> None:
    assert isinstance(box, LiveSandbox)
    cat: LiveCommand = box.start(["cat"])
    cat.write(b"hello\n")
    assert _until(lambda: cat.output() == b"hello\n")
    assert cat.poll() is None and not cat.reading_stdin()  # blocked in read(2), not at a prompt
    cat.write(b"again\n")
    cat.close_stdin()
    assert cat.wait(10) == 0 and cat.output() == b"hello\nagain\n"
    with pytest.raises(SandboxError):
        cat.write(b"gone")
    cat.close()


def test_reading_stdin_holds_only_for_a_process_blocked_at_its_prompt(box: LocalSandbox) -> None:
    python = _venv_python()
    box.write("/tmp/prompt.py", PROMPT.encode())
    at_prompt = box.start([str(python), "/tmp/prompt.py"])
    assert _until(at_prompt.reading_stdin), at_prompt.output() + at_prompt.errors()
    at_prompt.write(b"one\r")
    assert _until(lambda: b"got 'one'" in at_prompt.output())
    assert _until(at_prompt.reading_stdin)  # at the next prompt again
    # the same prompt with a child of it alive (as mini while an agent's command runs): not waiting
    with_child = box.start([str(python), "/tmp/prompt.py", "--child"])
    assert _until(lambda: b"ready" in with_child.output())
    time.sleep(1.0)
    assert not with_child.reading_stdin()
    # sleeping, or printing: not waiting for stdin, whatever they print
    sleeper = box.start("echo '> '; sleep 30")
    printer = box.start("while true; do echo 'Agent wants to finish. Type new task or Enter to quit'; sleep 0.01; done")
    assert _until(lambda: b"> " in sleeper.output() and b"Agent" in printer.output())
    for _ in range(10):
        assert not sleeper.reading_stdin() and not printer.reading_stdin()
        time.sleep(0.05)
    at_prompt.write(b"\r")  # an empty line: it quits
    assert at_prompt.wait(10) == 0 and not at_prompt.reading_stdin()
    printer.kill()
    assert printer.wait(10) is not None


def test_closing_the_sandbox_kills_its_live_commands(calc_task: Task) -> None:
    sb = LocalSandbox(calc_task, SandboxConfig())
    live = sb.start(["sleep", "600"])
    assert live.poll() is None
    t0 = time.monotonic()
    sb.close()
    assert live.poll() is not None and time.monotonic() - t0 < 20


EDGE = """
import select
ep = select.epoll()
ep.register(0, select.EPOLLIN | select.EPOLLET)  # woken once per write, never reads
print("ready", flush=True)
while True:
    ep.poll()
"""


def test_bytes_written_and_not_yet_read_mean_it_is_not_waiting_for_the_person(box: LocalSandbox) -> None:
    """A process asleep in epoll on its stdin is waiting only once it has read what lego wrote: before, it
    has not seen the message yet (it may be about to act on it)."""
    box.write("/tmp/edge.py", EDGE.encode())
    edge = box.start(["python3", "/tmp/edge.py"])
    assert _until(edge.reading_stdin), edge.output() + edge.errors()
    edge.write(b"unread\r")
    time.sleep(0.3)
    assert not edge.reading_stdin()
    edge.kill()
    assert edge.wait(10) is not None
