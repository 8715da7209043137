"""A sandbox leaves nothing on the host (issue 28.11): no lock file in ``<tmp>/lego-uids`` for its host
uid, no ``lego-*`` pids/memory cgroup -- neither when it is closed, nor when the lego process that
owned it is killed (then the next sandbox any lego process creates removes what the dead one left;
live sandboxes of other processes are never touched). Counted by name before and after, with a real
child process SIGKILLed mid-sandbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from sbx_fixtures import make_task

from lego.config import SandboxConfig
from lego.sandboxes.local import LocalSandbox
from lego.types import Task

LOCKS = Path(tempfile.gettempdir()) / "lego-uids"
CGROUPS = [Path("/sys/fs/cgroup/pids/lego"), Path("/sys/fs/cgroup/memory/lego")]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not any(p.parent.is_dir() for p in CGROUPS),
    reason="needs root and cgroup v1 (per-sandbox uids and cgroups); run as root on such a host",
)


def left_by(box_id: str, uid: int) -> list[str]:
    """What the sandbox ``box_id`` (host uid ``uid``) still holds on the host."""
    out = [str(LOCKS / str(uid))] if (LOCKS / str(uid)).exists() else []
    return out + [str(p / f"lego-{box_id}") for p in CGROUPS if (p / f"lego-{box_id}").exists()]


def test_a_closed_sandbox_leaves_no_lock_file_and_no_cgroup(calc_task: Task) -> None:
    box = LocalSandbox(calc_task, SandboxConfig())
    box_id, uid = box.id, box.identity.uid
    assert left_by(box_id, uid), "a live sandbox holds its uid lock and its cgroups"
    assert box.exec("sleep 30 >/dev/null 2>&1 & echo started").exit_code == 0  # a process still running at close
    box.close()
    assert left_by(box_id, uid) == []


def test_what_a_killed_run_left_goes_with_the_next_sandbox(tmp_path: Path) -> None:
    task_dir = tmp_path / "tasks"
    child = textwrap.dedent(
        f"""
        import json, sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from sbx_fixtures import make_task
        from lego.config import SandboxConfig
        from lego.sandboxes.local import LocalSandbox
        box = LocalSandbox(make_task(__import__("pathlib").Path({str(task_dir)!r})), SandboxConfig())
        box.exec("sleep 300 >/dev/null 2>&1 &")
        print(json.dumps({{"id": box.id, "uid": box.identity.uid}}), flush=True)
        time.sleep(300)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, "the child could not start its sandbox"
        info = json.loads(first)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert left_by(info["id"], info["uid"]), "the killed process left its lock file and cgroups"
    box = LocalSandbox(make_task(tmp_path / "t2"), SandboxConfig())
    try:
        assert left_by(info["id"], info["uid"]) == []  # swept when the next sandbox was made
        assert left_by(box.id, box.identity.uid)  # the live one is untouched
    finally:
        box.close()
    assert left_by(box.id, box.identity.uid) == []
