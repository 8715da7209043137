"""`lego bench learn` end to end at the smallest size: eval before, one training step, eval after, JSON + PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
def test_bench_learn_writes_before_after_and_plot(tiny_model_dir: Path, tmp_path: Path) -> None:
    from lego.conductor.bench.learn import run_bench

    overrides = (
        f"engine.model={tiny_model_dir}",
        "training.tasks_per_step=1",
        "algorithm.group_size=2",
        "harness.max_turns=1",
        "training.concurrency=2",
        "eval.temperatures=[1.0]",
        "eval.sweep_samples=1",
        "eval.confirm_samples=1",
        "eval.pass_at_k=[1]",
    )
    report = run_bench(tmp_path / "b", minutes=0.0, limit=1, seed=0, overrides=overrides)
    assert report["steps"] == report["steps_run"] == 1  # the budget is checked after a step: one always runs
    assert report["after_within_budget"] is False  # ...and with a 0-minute budget it ended past it
    before, after = report["before_sweep"]["points"][0], report["after_sweep"]["points"][0]
    assert before["n_samples"] == 1 and after["n_samples"] == 1
    assert before["n_infra"] == 0 and after["n_infra"] == 0
    assert report["comparison"]["best_vs_best"]["n_tasks"] == 1
    confirmed = report["comparison"]["confirmed"]  # one fresh sample each at the (only) temperature
    assert confirmed["samples"] == 1 and confirmed["scored"]["n_tasks"] == 1
    assert report["before_sweep"]["confirm_temperature"] == 1.0 and report["after_sweep"]["confirm_wall_s"] >= 0
    assert report["headline"].startswith("best-vs-best held-out pass@1 on fresh samples")
    assert report["after_checkpoint"].endswith("step_000001")
    assert report["pearson_min"] is not None and report["pearson_min"] > 0.99
    saved = json.loads((tmp_path / "b" / "learn.json").read_text())
    assert saved["per_step"][0]["step"] == 1
    assert (tmp_path / "b" / "learn.png").read_bytes()[:4] == b"\x89PNG"


def test_pick_checkpoint_takes_the_last_one_saved_within_the_budget(tmp_path: Path) -> None:
    from lego.conductor.bench.learn import pick_checkpoint

    ckpts = tmp_path / "checkpoints"
    for step in (15, 16):
        (ckpts / f"step_{step:06d}").mkdir(parents=True)
        (ckpts / f"step_{step:06d}" / "trainer_state.json").write_text("{}")
        (ckpts / f"step_{step:06d}" / "optimizer.pt").write_text("")
    (ckpts / "latest").write_text("step_000016")
    ended = [(13, 1100.0), (14, 1182.0), (15, 1264.0)]  # the 16th step started at 19.7 min, ended at 21.1
    assert pick_checkpoint(ended, 1200.0, tmp_path) == (ckpts / "step_000015", 15, 1182.0)
    assert pick_checkpoint(ended, 1300.0, tmp_path) == (ckpts / "step_000016", 16, 1264.0)
    assert pick_checkpoint([(15, 1264.0)], 1200.0, tmp_path) == (ckpts / "step_000016", None, None)  # none within
    assert pick_checkpoint([(12, 900.0)], 1200.0, tmp_path) == (ckpts / "step_000016", None, None)  # pruned: newest
