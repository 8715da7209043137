"""Relabelling: whatever the agent's own commands break is the policy's failure, scored 0.

Killing its harness or the proxy bridge, files that collide with the hidden test patch, files the
diff cannot read, a repo that breaks git: none of these may end as an infrastructure failure
(which training masks out and eval leaves out of pass@1, so failing this way would pay).
"""

from __future__ import annotations

import pytest

from lego.types import Task
from tests.redteam.helpers import RedTeam, assert_policy_zero, bash

KILL_THE_BRIDGE = (
    "for p in /proc/[0-9]*; do c=$(cat $p/comm 2>/dev/null); "
    'case "$c" in socat*|bwrap*) kill -9 ${p#/proc/} 2>/dev/null && echo killed $c;; esac; done; '
    "kill -9 1 2>/dev/null; echo bridge-gone"
)

ATTACKS = {
    "kill_harness": "kill -9 $PPID",
    "kill_everything": "kill -9 -1",
    "kill_proxy_bridge": KILL_THE_BRIDGE,
    "tests_file_collides_with_hidden_patch": "git rm -rq tests && echo x > tests && git status --short",
    "tests_symlink_collides_with_hidden_patch": "git rm -rq tests && ln -s calc tests && git status --short",
    "hidden_test_path_is_a_directory": "mkdir -p tests/test_hidden.py && touch tests/test_hidden.py/x",
    "unreadable_source_file": "chmod 000 calc/__init__.py && ls -l calc",
    "unreadable_directory": "mkdir -p calc/secret && echo x > calc/secret/data && chmod 000 calc/secret",
    "dangling_nested_gitdir": "mkdir -p calc/sub && echo 'gitdir: /nonexistent' > calc/sub/.git && touch calc/sub/f",
    "fifo_in_the_repo": "mkfifo calc/pipe && ls -l calc",
    "diff_too_large_to_take": "head -c 24M /dev/urandom > calc/blob.bin && ls -l calc",
    "corrupt_own_git_dir": "rm -rf .git/objects && echo garbage > .git/HEAD && git status 2>&1 | head -2",
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_self_inflicted_failure_is_the_policys(redteam: RedTeam, task: Task, attack: str) -> None:
    traj = redteam.play(task, bash(ATTACKS[attack]), bash("ls"), max_turns=4)
    assert_policy_zero(traj)


def test_a_straggler_is_cut_and_scored_on_what_it_did(redteam: RedTeam, task: Task, tmp_path_factory) -> None:
    """training.straggler_multiple: three rollouts fix and submit at once, the fourth fixes then stalls
    (a slow command every turn). Once half have ended, the proxy stops serving the straggler past 2x their
    median: it ends at a turn boundary as ``cut``, long before its script would, and is graded on the fix
    it made (reward 1, the policy's): stalling is neither paid nor turned into infrastructure."""
    from lego.conductor.rollout import RolloutOptions, RolloutRunner
    from tests.redteam.helpers import FIX, marked_task, submit
    from tests.sandboxes.sbx_fixtures import make_task

    quick = [marked_task(make_task(tmp_path_factory.mktemp("quick"), name=f"calc-quick-{i}")) for i in range(3)]
    stalls = 40
    for t in quick:
        redteam.engine.route(t.instance_id, [bash(FIX), submit()])
    redteam.engine.route(task.instance_id, [bash(FIX), *[bash("sleep 2; echo still-working")] * stalls, submit()])
    training = redteam.cfg.training.model_copy(update={"straggler_multiple": 2.0})
    runner = RolloutRunner(redteam.cfg.model_copy(update={"training": training}), redteam.policy)
    opts = RolloutOptions(override_sampling=True, temperature=1.0, seed=0, max_turns=stalls + 3, timeout_s=300)
    *fast, slow = runner.run_many([(t, "lego-agent", opts) for t in [*quick, task]], concurrency=4)
    assert [(t.termination, t.reward, t.cause) for t in fast] == [("completed", 1.0, "policy")] * 3
    assert slow.termination == "cut", (slow.termination, slow.cause_detail)
    assert (slow.reward, slow.cause) == (1.0, "policy"), slow.cause_detail
    assert "straggler" in slow.cause_detail
    served = redteam.generations(task)
    assert 2 <= served < stalls, f"the straggler was served {served} generations; cut should stop it early"
