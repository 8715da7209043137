"""`lego bench async` (lego.conductor.bench.asynchrony): the figures come from each run's own metrics,
every k >= 1 figure sits beside its ratio to k = 0 of the same invocation, and a real run of both
loops on the tiny stack writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lego.conductor.bench.asynchrony import cpu_busy, run_bench, summarise_run
from tests.lego.calc_task import make_calc_tasks


def test_summarise_weights_engine_busy_by_the_time_each_step_covers() -> None:
    lines = [
        {"metrics": {"rollout/count": 4.0, "perf/engine_busy": 0.5, "perf/update_s": 2.0}},
        {"metrics": {"rollout/count": 4.0, "perf/engine_busy": 1.0, "perf/update_s": 2.0}},
    ]
    s = summarise_run(lines, closes=[10.0, 40.0], budget_s=30.0)
    assert s["rollouts"] == 8.0 and s["updates"] == 2.0 and s["wall_s"] == 40.0
    assert s["engine_busy"] == pytest.approx((0.5 * 10 + 1.0 * 30) / 40)
    assert s["trainer_busy"] == pytest.approx(4.0 / 40)
    assert s["rollouts_per_hour"] == pytest.approx(3600 * 8 / 40)
    # the asynchronous loop counts every rollout that ended, trained on or not
    lines[-1]["metrics"]["async/rollouts_done"] = 11.0
    assert summarise_run(lines, closes=[10.0, 40.0], budget_s=30.0)["rollouts"] == 11.0


def test_cpu_busy_is_the_share_of_cpu_time_not_idle_or_waiting_on_io() -> None:
    import psutil

    fields = psutil.cpu_times()._fields  # this platform's fields: the meter reads what psutil gives
    zero = dict.fromkeys(fields, 0.0)
    before = type(psutil.cpu_times())(**zero)
    spent = {**zero, "user": 30.0, "system": 10.0, "idle": 50.0}
    if "iowait" in fields:
        spent["iowait"] = 10.0
    else:
        spent["idle"] = 60.0
    if "guest" in fields:  # guest time is already inside user time: counting it twice would dilute idle
        spent["guest"] = 5.0
    after = type(before)(**spent)
    assert cpu_busy(before, after) == pytest.approx(0.4)
    assert cpu_busy(before, before) == 0.0


def _tiny(tasks: Path, model: Path) -> tuple[str, ...]:
    """The tiny stack on the calc tasks: one group of 2 rollouts per update, 2 turns of 24 tokens."""
    return (
        f"tasks.source={tasks}",
        f"engine.model={model}",
        "training.tasks_per_step=1",
        "training.concurrency=2",
        "algorithm.group_size=2",
        "harness.max_turns=2",
        "harness.options={lego-agent = {max_tokens = 24}}",
    )


@pytest.mark.slow
def test_both_loops_run_for_the_budget_and_compare(tiny_model_dir: Path, tmp_path: Path) -> None:
    overrides = _tiny(make_calc_tasks(tmp_path / "calc"), tiny_model_dir)
    report = run_bench(tmp_path / "out", minutes=0.4, staleness=[0, 1], seed=0, overrides=overrides)
    assert json.loads((tmp_path / "out" / "async.json").read_text()) == json.loads(json.dumps(report))
    k0, k1 = report["runs"]["0"], report["runs"]["1"]
    for run in (k0, k1):
        assert run["updates"] >= 1 and run["rollouts"] >= 2
        assert 0.0 < run["engine_busy"] <= 1.0 and 0.0 < run["trainer_busy"] < 1.0
        assert 0.0 < run["cpu_busy"] <= 1.0  # the host did the work: some CPU time was spent
    assert report["cpu_ceiling"] == pytest.approx(1.0 / k0["cpu_busy"])
    assert k1["vs_k0"]["cpu_busy"] == pytest.approx(k1["cpu_busy"] / k0["cpu_busy"])
    assert k1["vs_k0"]["rollouts_per_hour"] == pytest.approx(k1["rollouts_per_hour"] / k0["rollouts_per_hour"])
    assert "staleness_mean" in k1 and report["caveats"]


@pytest.mark.slow
def test_eval_compares_every_k_with_one_shared_start(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--eval with several k: each k's last checkpoint against the start in one eval directory, each
    under its own name (one name per model there), the start sampled once; and the throughput is on
    disk before the evaluation starts (a failed evaluation used to lose the whole report)."""
    overrides = (
        *_tiny(make_calc_tasks(tmp_path / "calc"), tiny_model_dir),
        "tasks.eval_split=train",
        "eval.temperatures=[1.0]",
        "eval.sweep_samples=1",
        "eval.pass_at_k=[1]",
        "eval.confirm_samples=0",
    )
    report = run_bench(
        tmp_path / "out", minutes=0.2, staleness=[0, 1], seed=0, overrides=overrides, evaluate=True, limit=1
    )
    assert json.loads((tmp_path / "out" / "async.json").read_text()) == json.loads(json.dumps(report))
    for k in ("0", "1"):
        bvb = report["runs"][k]["heldout"]["best_vs_best"]
        assert bvb["n_tasks"] == 1 and 0.0 <= bvb["after"] <= 1.0 and 0.0 <= bvb["before"] <= 1.0, bvb
    (temperature,) = (tmp_path / "out" / "eval").glob("T*")
    assert sorted(p.name for p in (temperature / "samples").iterdir()) == ["k0", "k1", "start"]
    err = capsys.readouterr().err
    assert err.count("held-out pass@1, start at T=1 vs k=") == 2  # a line per k, beside its JSON
    progress = [ln.strip() for ln in err.splitlines() if ln.strip().endswith("min left")]
    assert progress[-1].startswith("1/1 samples"), progress  # k1's evaluation sampled k1 alone
