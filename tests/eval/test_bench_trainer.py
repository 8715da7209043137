"""`lego bench trainer` at toy sizes: the JSON has its figures and baselines, and both sides really
trained (same number of steps, weights moved; lego's engine serves the trainer's weights).

No timing is asserted here: the speed targets live in the bench's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lego.conductor.bench.trainer import command, keyword_reward, measure

pytest.importorskip("trl")

STEPS = 2


@pytest.fixture(scope="module")
def bench_json(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("bench") / "trainer.json"
    args = ["--model", str(tiny_model_dir), "--prompts-per-step", "2", "--group-size", "2", "--max-tokens", "4",
            "--steps", str(STEPS), "--micro-batch-size", "2", "--threads", "1", "--repeats", "1", "--lr", "1e-3",
            "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(command, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), result.stdout


def test_stdout_is_exactly_the_json(bench_json: tuple[dict, str]) -> None:  # type: ignore[type-arg]
    data, stdout = bench_json
    assert json.loads(stdout) == data


def test_json_reports_both_figures_beside_their_baselines(bench_json: tuple[dict, str]) -> None:  # type: ignore[type-arg]
    data, _ = bench_json
    assert data["bench"] == "trainer"
    assert data["spec"]["group_size"] == 2 and data["spec"]["steps"] == STEPS and data["torch_threads"] == 1
    (run,) = data["runs"]
    assert run["ratio"] == pytest.approx(run["lego_median_step_s"] / run["trl_median_step_s"], rel=1e-2)
    assert data["step_time_ratio"] == run["ratio"]
    assert data["step_meets_target"] == (data["step_time_ratio"] <= data["step_target_ratio"])
    rec = data["recompute"]
    assert rec["segments"] == STEPS * 2 * 2
    assert rec["bare_forward_tokens_per_s"] > 0 and rec["recompute_tokens_per_s"] > 0
    assert rec["ratio"] == pytest.approx(rec["recompute_tokens_per_s"] / rec["bare_forward_tokens_per_s"], rel=1e-2)
    assert rec["meets_target"] == (rec["ratio"] >= rec["target_ratio"])
    assert data["differences"], "the JSON must say where the two runs differ"
    phases = data["phases_median_s"]
    assert set(phases) == {"lego_rollout_s", "lego_rollout_engine_s", "trl_generate_s", "lego_train_s", "lego_recompute_s", "lego_sync_s",
                           "trl_update_s"}  # fmt: skip
    assert 0 < phases["lego_recompute_s"] < phases["lego_train_s"]


def test_both_sides_trained_the_same_number_of_steps(bench_json: tuple[dict, str]) -> None:  # type: ignore[type-arg]
    data, _ = bench_json
    (run,) = data["runs"]
    trl, lego = run["trl"], run["lego"]
    assert trl["steps"] == lego["steps"] == STEPS
    assert len(trl["step_s"]) == len(lego["step_s"]) == STEPS
    assert len(trl["losses"]) == STEPS
    assert trl["weights_max_abs_change"] > 0
    assert lego["weights_max_abs_change"] > 0
    # the engine serves what the trainer trained (one sync per step)
    assert lego["policy_version"] == STEPS
    assert lego["engine_weights_max_abs_change"] == pytest.approx(lego["weights_max_abs_change"])
    for side in (trl, lego):
        assert len(side["completion_tokens"]) == STEPS
        assert all(0 < n <= 2 * 2 * 4 for n in side["completion_tokens"])
    assert all(p > 0.99 for p in lego["pearson"])


def test_micro_batch_must_divide_the_step_batch(tiny_model_dir: Path) -> None:
    with pytest.raises(click.BadParameter, match="multiple of"):
        measure(str(tiny_model_dir), prompts_per_step=1, group_size=3, micro_batch_size=2, repeats=1)


def test_keyword_reward_counts_the_letter_e() -> None:
    assert keyword_reward("tensor gradient eee") == 5.0
    assert keyword_reward("") == 0.0
