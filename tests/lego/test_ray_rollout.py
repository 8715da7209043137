"""The Ray rollout backend on a real local Ray cluster: lego-agent + the oracle engine on the tiny
calc task, each rollout a Ray task that builds its bubblewrap sandbox on the worker and reaches
the driver's proxy over TCP through a socat forwarder. Acceptance: reward 1, mask-1 segments with
real logprobs, and a trajectory with exactly the fields (labels, guards, timings, counters) of the
threads backend's rollout of the same task.

Skipped without the ``ray`` extra (``pip install 'lego[ray]'``)."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lego.conductor.rollout import RolloutOptions, RolloutRunner, ServedPolicy
from lego.config import load_config
from lego.errors import ConfigError
from lego.types import Task, Trajectory
from tests.lego.calc_task import make_calc_tasks

ray = pytest.importorskip("ray", reason="the Ray backend needs the 'ray' extra: pip install 'lego[ray]'")

if shutil.which("socat") is None or shutil.which("bwrap") is None:
    pytest.skip("the Ray backend's workers need socat and bubblewrap", allow_module_level=True)

OPTS = RolloutOptions(override_sampling=True, temperature=1.0, seed=3, max_turns=10, timeout_s=300)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 1024**2, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    path = make_calc_tasks(tmp_path_factory.mktemp("calc"))
    return [Task.model_validate_json(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def runner(tiny_model_dir: Path) -> Iterator[RolloutRunner]:
    overrides = [
        "engine.kind=oracle",
        f"engine.model={tiny_model_dir}",
        "training.rollout_backend=ray",
        "harness.options={lego-agent = {max_tokens = 1024}}",  # room for the oracle's whole patch
    ]
    cfg = load_config(None, overrides)
    policy = ServedPolicy.start(cfg.engine, cfg.proxy, name="oracle")
    try:
        yield RolloutRunner(cfg, policy)
    finally:
        policy.close()


def _check_solved(traj: Trajectory) -> None:
    detail = f"{traj.termination}: {traj.metadata.get('error', '')}\n{traj.metadata.get('harness_log_tail', '')[-2000:]}\n{traj.grade.log[-2000:] if traj.grade else ''}"
    assert traj.termination == "completed", detail
    assert traj.reward == 1.0 and traj.grade is not None and traj.grade.resolved, detail
    sampled = [s for s in traj.segments if s.num_sampled > 0]
    assert sampled, f"no segment with sampled tokens: {traj.counters}"
    logprobs = [lp for s in sampled for lp, m in zip(s.response_logprobs, s.response_mask, strict=True) if m == 1]
    assert logprobs and all(lp is not None and math.isfinite(lp) and lp <= 0 for lp in logprobs)


def _shape(traj: Trajectory) -> dict[str, Any]:
    """What must not depend on the backend: which fields are set, and the labels and flags themselves."""
    return {
        "set": sorted(k for k, v in traj.model_dump().items() if v not in (None, "", [], {})),
        "termination": traj.termination,
        "harness": traj.harness,
        "policy": traj.policy,
        "harness_version": traj.harness_version,
        "guard_flags": traj.guard_flags,
        "timings": sorted(traj.timings),
        "counters": sorted(traj.counters),
        "metadata": sorted(traj.metadata),
    }


def test_ray_rollouts_solve_the_task_with_the_threads_backends_fields(
    ray_cluster: None, runner: RolloutRunner, tasks: list[Task]
) -> None:
    from lego.conductor.ray_rollout import ray_runner

    backend = ray_runner(runner)
    assert ray_runner(runner) is backend  # one TCP listener per runner, not one per step
    host, port = backend.proxy_addr
    assert host == "127.0.0.1" and port > 0

    done: list[int] = []
    jobs = [(tasks[0], "lego-agent", OPTS), (tasks[1], "lego-agent", replace(OPTS, seed=4))]
    trajs = backend.run_many(jobs, concurrency=2, on_done=lambda i, _: done.append(i))
    assert sorted(done) == [0, 1]
    assert [t.task_id for t in trajs] == ["calc-0", "calc-1"]
    for traj in trajs:
        _check_solved(traj)
        assert traj.guard_flags["history_strip"] and traj.guard_flags["egress_blocked"]
        assert traj.timings["grade_s"] > 0 and traj.timings["wall_s"] >= traj.timings["harness_s"] > 0
    assert trajs[0].session_id != trajs[1].session_id
    # the sessions were opened and closed on the driver
    assert not runner.policy.proxy.service.sessions

    local = runner.run(tasks[0], "lego-agent", OPTS)
    _check_solved(local)
    assert _shape(trajs[0]) == _shape(local)
    assert trajs[0].metadata["seed"] == local.metadata["seed"] == OPTS.seed


def test_an_unreachable_proxy_is_a_labelled_failure_not_a_crash(
    ray_cluster: None, runner: RolloutRunner, tasks: list[Task]
) -> None:
    from lego.conductor.ray_rollout import run_rollout_task
    from lego.conductor.rollout import DriveJob

    # a worker whose forwarder dials a closed port: the harness cannot reach the policy
    opts = replace(OPTS, max_turns=2, timeout_s=60)
    job = DriveJob(runner.cfg, tasks[0], "lego-agent", "s-unreachable", "no-token", opts, runner.policy.proxy.config)
    outcome = ray.get(ray.remote(num_cpus=1)(run_rollout_task).remote(job, ("127.0.0.1", 9)))
    assert outcome.result.reason == "harness_error", outcome.result.logs[-2000:]
    assert "chat completions failed" in outcome.result.logs
    assert outcome.grade is not None and outcome.grade.reward == 0.0  # the empty diff, graded on the worker


def test_without_ray_the_backend_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from lego.conductor import ray_rollout

    real_import = builtins.__import__

    def no_ray(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigError, match=r"pip install 'lego\[ray\]'"):
        ray_rollout._import_ray()


def test_a_training_step_runs_its_rollouts_on_ray(ray_cluster: None, tiny_model_dir: Path, tmp_path: Path) -> None:
    from lego.conductor.loop import train
    from lego.io import read_jsonl

    overrides = [
        f"tasks.source={make_calc_tasks(tmp_path / 'tasks')}",
        f"engine.model={tiny_model_dir}",
        f"training.out_dir={tmp_path / 'run'}",
        "training.steps=1",
        "training.tasks_per_step=1",
        "algorithm.group_size=2",
        "harness.max_turns=2",
        "harness.options={lego-agent = {max_tokens = 24}}",
        "training.rollout_backend=ray",
    ]
    run = train(load_config(None, overrides))
    (line,) = read_jsonl(run.metrics)
    assert line["metrics"]["rollout/count"] == 2.0 and line["metrics"]["policy/version"] == 1.0
    assert line["metrics"]["training/rollout_actor_probs_pearson_corr"] >= 0.999
    files = sorted(p for p in run.trajectories(1).glob("*.json") if "-canary-" not in p.name)  # canaries apart
    docs = [Trajectory.model_validate_json(p.read_text()) for p in files]
    assert len(docs) == 2 and all(d.segments and not d.is_infra_failure and d.grade is not None for d in docs)
