"""Concurrent rollouts never cross sessions: the runner's one cached adapter per harness serves
several rollouts at once, each with its own sandbox, session and token, while other harnesses'
rollouts run beside them.

Every harness installed here, the oracle engine (logprobs from the tiny model), two rollouts per
harness on held-out built-in tasks with pairwise different problem statements, all in one
:meth:`lego.conductor.rollout.RolloutRunner.run_many` at concurrency 8, as a mixed-harness training
step runs them. Acceptance: every rollout ends ``completed`` with reward 1, and each session's
recorded conversation holds its own task's problem statement and no other task's. An adapter that
kept per-rollout state on itself (its environment, its home, its config paths) sends one rollout's
harness to its twin's session: that session then records a foreign task and the oracle plays the
wrong answer. (One mixed batch instead of eight batches of eight: the same property, a quarter of the
CI time.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lego.conductor.rollout import RolloutOptions, RolloutRunner, ServedPolicy
from lego.config import load_config
from lego.harnesses.install import installed
from lego.types import Task, Trajectory

pytestmark = [pytest.mark.harness, pytest.mark.slow]

CONCURRENCY = 8
PER_HARNESS = 2
HARNESS_NAMES = [
    "lego-agent",
    "mini-swe-agent",
    "aider",
    "opencode",
    "claude-code",
    "codex",
    "qwen-code",
    "gemini-cli",
]


def _distinct_tasks(n: int) -> list[Task]:
    """The first ``n`` held-out tasks whose problem statements differ (two tasks may share one)."""
    from lego.tasks.sources import load_tasks

    picked: list[Task] = []
    for task in load_tasks("builtin:heldout", limit=64):
        if all(
            task.problem_statement not in t.problem_statement and t.problem_statement not in task.problem_statement
            for t in picked
        ):
            picked.append(task)
        if len(picked) == n:
            return picked
    raise AssertionError(f"fewer than {n} held-out tasks with distinct problem statements")


@pytest.fixture(scope="module")
def runner(tiny_model_dir: Path) -> Iterator[RolloutRunner]:
    cfg = load_config(
        None,
        [
            "engine.kind=oracle",
            f"engine.model={tiny_model_dir}",
            "harness.options={lego-agent = {max_tokens = 4096}}",  # room for the oracle's whole patch
        ],
    )
    policy = ServedPolicy.start(cfg.engine, cfg.proxy, name="oracle")
    try:
        yield RolloutRunner(cfg, policy)
    finally:
        policy.close()


def _conversation(traj: Trajectory) -> str:
    return "\n".join(str(m.get("content") or "") for m in traj.messages)


def test_concurrent_oracle_rollouts_stay_in_their_own_sessions(runner: RolloutRunner) -> None:
    names = [n for n in HARNESS_NAMES if n == "lego-agent" or installed(n) is not None]
    if len(names) < 2:
        pytest.skip("fewer than two harnesses installed; run `lego harness install NAME` (see .ci/harnesses)")
    tasks = _distinct_tasks(PER_HARNESS * len(names))
    opts = RolloutOptions(override_sampling=True, temperature=1.0, seed=0, max_turns=10, timeout_s=300)
    # interleaved, so each harness's two rollouts overlap in time with each other and with the rest
    plan = [(task, names[i % len(names)], opts) for i, task in enumerate(tasks)]
    trajs = runner.run_many(plan, concurrency=CONCURRENCY)
    assert len({t.session_id for t in trajs}) == len(tasks)
    for (task, name, _), traj in zip(plan, trajs, strict=True):
        detail = f"{name} on {task.instance_id}: {traj.termination} ({traj.cause}: {traj.cause_detail})"
        assert traj.task_id == task.instance_id and traj.harness == name, detail
        assert traj.termination == "completed" and traj.reward == 1.0, detail
        said = _conversation(traj)
        assert task.problem_statement in said, f"{detail}: its session does not hold its own task"
        foreign = [o.instance_id for o in tasks if o is not task and o.problem_statement in said]
        assert not foreign, f"{detail}: its session holds turns of {foreign}"
    assert not runner.policy.proxy.service.sessions  # every session was closed
