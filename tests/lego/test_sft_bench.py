"""`lego bench learn` end to end at the smallest size: eval before, one training step, eval after, JSON + PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
def test_bench_learn_writes_before_after_and_plot(tiny_model_dir: Path, tmp_path: Path) -> None:
    from eval.bench.learn import run_bench

    overrides = (
        f"engine.model={tiny_model_dir}",
        "training.tasks_per_step=1",
        "algorithm.group_size=2",
        "harness.max_turns=1",
        "training.concurrency=2",
    )
    report = run_bench(tmp_path / "b", minutes=0.0, limit=1, samples=1, seed=0, overrides=overrides)
    assert report["steps"] == 1  # the budget is checked after a step, so one step always runs
    assert report["before"]["n_samples"] == 1 and report["after"]["n_samples"] == 1
    assert report["before"]["n_infra"] == 0 and report["after"]["n_infra"] == 0
    assert report["after_checkpoint"].endswith("step_000001")
    assert report["pearson_min"] is not None and report["pearson_min"] > 0.99
    saved = json.loads((tmp_path / "b" / "learn.json").read_text())
    assert saved["per_step"][0]["step"] == 1
    assert (tmp_path / "b" / "learn.png").read_bytes()[:4] == b"\x89PNG"
