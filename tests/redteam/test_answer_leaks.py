"""Answer leaks: the gold patch or the hidden tests, read from anywhere the agent can reach.

The task's gold patch carries a unique marker (:data:`GOLD_MARKER`) and the hidden tests a line
the repo never holds (:data:`HIDDEN_MARKER`): neither may appear in anything the environment shows
the agent, and a patch the agent finds and applies must not earn a reward.
"""

from __future__ import annotations

import json
import re

from lego.types import Task
from tests.redteam.helpers import (
    GOLD_MARKER,
    HIDDEN_MARKER,
    RedTeam,
    assert_policy_zero,
    bash,
    leak_probe,
    observations,
    py,
)


def assert_nothing_leaked(text: str) -> None:
    assert GOLD_MARKER not in text, "the gold patch reached the agent"
    assert HIDDEN_MARKER not in text, "the hidden tests reached the agent"
    assert "LEAKED PATCH" not in text and "FOUND:" not in text, text[-3000:]


def test_saved_trajectory_holds_no_gold_patch(redteam: RedTeam, task: Task) -> None:
    """A non-oracle policy's trajectory (what `lego run`/`lego eval` save) never carries the answer."""
    traj = redteam.play(task, bash("ls"))
    assert_policy_zero(traj)
    saved = traj.model_dump_json()
    assert GOLD_MARKER not in saved and task.patch not in saved and task.test_patch not in saved


def test_session_url_from_proc_then_trajectory_and_metadata(redteam: RedTeam, task: Task) -> None:
    """The harness's argv/environ name its session URL and key; every control route is asked for
    the patch, over the forwarder and the raw proxy socket, and whatever is found is applied."""
    traj = redteam.play(task, leak_probe())
    assert_policy_zero(traj)
    assert_nothing_leaked(observations(traj))


def test_trajectory_export_is_not_on_the_model_face(redteam: RedTeam, task: Task) -> None:
    traj = redteam.play(task, leak_probe())
    seen = observations(traj)
    assert "probe done" in seen, seen[-2000:]
    exported = re.findall(r"probe \S+ (/s/[^ ]*/trajectory|/trajectory) 200", seen)
    assert not exported, f"the sandbox could export trajectories: {exported}"
    assert_policy_zero(traj)


def test_another_session_by_id(redteam: RedTeam, task: Task, victim_task: Task) -> None:
    """Even knowing a concurrent rollout's session id, the agent can neither read, drive nor delete it."""
    from lego.conductor.rollout import RolloutOptions, RolloutRunner

    runner = RolloutRunner(redteam.cfg, redteam.policy)
    opened = runner.open_session(victim_task, "lego-agent", RolloutOptions(max_turns=5))
    victim = opened[0] if isinstance(opened, tuple) else opened  # (id, token) where sessions carry a token
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    drive = (
        f"for base in http://127.0.0.1:18080 ; do "
        f"curl -s -m 10 -o /dev/null -w 'post %{{http_code}}\\n' -H 'content-type: application/json' "
        f"-d '{body}' $base/s/{victim}/v1/chat/completions; "
        f"curl -s -m 10 -o /dev/null -w 'delete %{{http_code}}\\n' -X DELETE $base/s/{victim}; done; "
        f"curl -s -m 10 --unix-socket /run/lego/proxy.sock -o /dev/null -w 'uds-post %{{http_code}}\\n' "
        f"-H 'content-type: application/json' -d '{body}' http://x/s/{victim}/v1/chat/completions; "
        f"curl -s -m 10 --unix-socket /run/lego/proxy.sock -o /dev/null -w 'uds-delete %{{http_code}}\\n' "
        f"-X DELETE http://x/s/{victim}"
    )
    try:
        traj = redteam.play(task, leak_probe((victim,)), bash(drive))
        assert_policy_zero(traj)
        assert_nothing_leaked(observations(traj))
        held = redteam.policy.proxy.trajectory(victim)  # still open: nobody in a sandbox deleted it
        assert held.counters.get("calls", 0) == 0, "the attacker generated turns in another rollout's session"
        assert held.task_id in ("", victim_task.instance_id)
    finally:
        redteam.policy.proxy.close_session(victim)


def test_saved_trajectories_and_run_dirs_on_the_host(redteam: RedTeam, task: Task) -> None:
    """Files the trainer writes on the host (a run's trajectories, a sandbox's task repo, the task
    template cache) hold the answer; nothing of the host outside the sandbox's own view is readable."""
    planted = redteam.workdir.parent / "run" / "trajectories" / "step_0001"
    planted.mkdir(parents=True, exist_ok=True)
    (planted / "t.json").write_text(json.dumps({"metadata": {"gold_patch": task.patch}}))
    scan = (
        "for d in / /repo /lego /tmp /var /run /home /root /work /opt /srv /mnt /media "
        f"{redteam.workdir.parent} {task.repo_path} ; do ls -d $d 2>/dev/null; done; "
        "timeout 60 grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude-dir=usr "
        "--exclude-dir=lib --exclude-dir=lib64 --exclude-dir=bin --exclude-dir=sbin "
        f"-e '{GOLD_MARKER}' -e 'add(0, 0)' / 2>/dev/null | sed 's/^/FOUND: /'; echo scanned"
    )
    traj = redteam.play(task, bash(scan))
    assert_policy_zero(traj)
    seen = observations(traj)
    assert "scanned" in seen, seen[-2000:]
    assert_nothing_leaked(seen)
    assert str(redteam.workdir.parent) not in seen.replace(f"ls -d {redteam.workdir.parent}", "")


def test_pristine_git_and_fix_objects(redteam: RedTeam, task: Task) -> None:
    """Every object in the pristine .git and the repo's own .git, history, reflog, stashes, packs."""
    dig = (
        "for g in /lego/base.git /repo/.git; do "
        "git --git-dir=$g log --all --oneline 2>&1 | head; git --git-dir=$g reflog 2>&1 | head; "
        "git --git-dir=$g count-objects -v; "
        "git --git-dir=$g cat-file --batch-all-objects --batch-check | while read o t s; do "
        "git --git-dir=$g cat-file -p $o; done | grep -n 'a + b\\|add(0, 0)' | sed 's/^/FOUND: /'; "
        "ls -R $g | grep -i 'pack\\|orig\\|stash'; done; echo dug"
    )
    traj = redteam.play(task, bash(dig))
    assert_policy_zero(traj)
    seen = observations(traj)
    assert "dug" in seen, seen[-2000:]
    assert_nothing_leaked(seen)
    assert traj.guard_flags.get("history_strip") is True


def test_environment_variables_and_argv_of_every_process(redteam: RedTeam, task: Task) -> None:
    # the needles are built at run time, so they are not in this command's own argv
    dump = py(
        """
import glob, os
needles = ["dif" + "f --git", "go" + "ld", "pat" + "ch", "ans" + "wer", "test" + "_hidden", "add(0" + ", 0)"]
print("\\n".join(f"{k}={v}" for k, v in os.environ.items()))
for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    if path.split("/")[2] in (str(os.getpid()), str(os.getppid())):
        continue
    try:
        text = open(path, "rb").read().decode("utf-8", "replace").replace("\\0", "\\n")
    except OSError:
        continue
    for line in text.splitlines():
        if any(n in line.lower() for n in needles):
            print("FOUND:", path, line[:300])
print("dumped")
"""
    )
    traj = redteam.play(task, dump)
    assert_policy_zero(traj)
    seen = observations(traj)
    assert "dumped" in seen, seen[-2000:]
    assert_nothing_leaked(seen)


def test_hidden_tests_are_nowhere_in_the_sandbox(redteam: RedTeam, task: Task) -> None:
    """During the episode the hidden test file exists nowhere the agent can look, by name or content."""
    look = (
        "find / -xdev \\( -path /proc -o -path /sys \\) -prune -o -name 'test_hidden*' -print 2>/dev/null "
        "| sed 's/^/FOUND: /'; ls -la /repo/tests; echo looked"
    )
    traj = redteam.play(task, bash(look))
    assert_policy_zero(traj)
    seen = observations(traj)
    assert "looked" in seen, seen[-2000:]
    assert_nothing_leaked(seen)
