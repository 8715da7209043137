"""Exhaustion: disk, in-memory file systems, processes and memory stay within the sandbox's budgets.

Every attack is bounded by itself (at most ~2 GiB written or allocated, a few hundred processes,
seconds of wall time), so a hole shows up as a number over budget, never as a host in trouble. The
rollout ends as the policy's own failure, reward 0. The suite's budgets: ``disk_mb=512``,
``memory_budget_mb=1024``, ``max_processes=128`` (see :meth:`RedTeam.config`).
"""

from __future__ import annotations

import re
import shutil

from lego.types import Task
from tests.redteam.helpers import RedTeam, assert_policy_zero, bash, observations, py

MIB = 1024 * 1024


def numbers(seen: str, label: str) -> list[int]:
    return [int(x) for x in re.findall(rf"{label}=(\d+)", seen)]


def test_fill_the_disk_from_the_repo(redteam: RedTeam, task: Task) -> None:
    free_before = shutil.disk_usage(redteam.workdir).free
    traj = redteam.play(
        task,
        bash(
            "fallocate -l 1G /repo/big.bin 2>&1 || timeout 30 dd if=/dev/zero of=/repo/big.bin bs=1M count=1024 2>&1 | tail -1; "
            "echo repo_bytes=$(stat -c %s /repo/big.bin 2>/dev/null || echo 0); rm -f /repo/big.bin"
        ),
    )
    assert_policy_zero(traj)
    seen = observations(traj)
    written = numbers(seen, "repo_bytes")
    assert written, seen[-2000:]
    assert max(written) <= (redteam.cfg.sandbox.disk_mb + 16) * MIB, f"wrote {max(written) // MIB} MiB into /repo"
    assert shutil.disk_usage(redteam.workdir).free > free_before - 256 * MIB


def test_fill_every_tmpfs(redteam: RedTeam, task: Task) -> None:
    """400 MiB into each writable in-memory mount: together they must stay within one budget."""
    traj = redteam.play(
        task,
        bash(
            "t=0; for d in /tmp /var/tmp /run /dev/shm $HOME /repo; do "
            "timeout 20 head -c 400M /dev/zero > $d/fill.bin 2>/dev/null; "
            "s=$(stat -c %s $d/fill.bin 2>/dev/null || echo 0); echo $d=$s; t=$((t + s)); done; echo total_bytes=$t; "
            "for d in /tmp /var/tmp /run /dev/shm $HOME /repo; do rm -f $d/fill.bin; done"
        ),
    )
    assert_policy_zero(traj)
    seen = observations(traj)
    total = numbers(seen, "total_bytes")
    assert total, seen[-2000:]
    budget = max(redteam.cfg.sandbox.disk_mb, redteam.cfg.sandbox.memory_budget_mb)
    assert total[0] <= (budget + 32) * MIB, f"{total[0] // MIB} MiB held across the sandbox's mounts"


def test_fork_bomb(redteam: RedTeam, task: Task) -> None:
    """Up to 400 sleeping children (a bounded bomb): at most ``max_processes`` may exist."""
    traj = redteam.play(
        task,
        py(
            """
import os, time
kids = 0
for _ in range(400):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    kids += 1
print(f"forked={kids}")
"""
        ),
    )
    assert_policy_zero(traj)
    seen = observations(traj)
    forked = numbers(seen, "forked")
    assert forked, seen[-2000:]
    assert forked[0] <= redteam.cfg.sandbox.max_processes, f"{forked[0]} processes started in one sandbox"


def test_memory_bomb_across_processes(redteam: RedTeam, task: Task) -> None:
    """Three processes fill up to 700 MiB each (written pages, not untouched calloc'd ones, which no
    kernel charges): together they must stay within the memory budget."""
    traj = redteam.play(
        task,
        bash(
            "for i in 1 2 3; do python3 -c '\n"
            "import sys, time\n"
            "blocks = []\n"
            "try:\n"
            "    for _ in range(700 // 64):\n"
            '        blocks.append(b"\\\\x01" * (64 << 20))\n'
            '        print("held_mib=%d" % (64 * len(blocks)), flush=True)\n'
            "    time.sleep(8)\n"
            "except MemoryError:\n"
            '    print("memory error")\n'
            "' > /tmp/m$i.log 2>&1 & done; wait; tail -qn1 /tmp/m1.log /tmp/m2.log /tmp/m3.log"
        ),
    )
    assert_policy_zero(traj)
    seen = observations(traj)
    held = numbers(seen, "held_mib")
    total = sum(held)
    assert total <= redteam.cfg.sandbox.memory_budget_mb + 3 * 64, f"{total} MiB held at once by three processes"
