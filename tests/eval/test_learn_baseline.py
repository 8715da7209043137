"""`lego bench learn`'s baseline rule: the start policy at its own best temperature, on the same tasks and
per-sample seeds as the trained policy.

A "trained" policy that is only a temperature change of the start (the start with its final RMSNorm gain
doubled: every logit x 2, i.e. the start sampled at T / 2) must show no best-vs-best gain when the
sweep holds the matching temperatures, while its same-temperature deltas are far from 0. The
sweeps run through the bench's own code (``run_sweep`` for the start, ``compare_policies`` after
training) with a one-token rollout on the real tiny model (``tests/eval/logit_rollout.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import logit_rollout
import pytest
import torch
from logit_rollout import ANSWER_RANKS, next_token_logits

from lego.config import load_config
from lego.types import Task

SCALE = 2.0
TEMPS = [0.05, 0.1, 0.2, 0.4]  # a geometric sweep of ratio SCALE: trained at 0.1/0.2/0.4 = start at 0.05/0.1/0.2


def _scaled_copy(model_dir: Path, out: Path, c: float) -> Path:
    """``model_dir`` with its logits multiplied by ``c`` (the final norm's gain; the embedding is tied)."""
    from transformers import AutoModelForCausalLM

    shutil.copytree(model_dir, out)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        model.model.norm.weight.mul_(c)
    model.save_pretrained(out)
    return out


def _cfg(*extra: str):  # type: ignore[no-untyped-def]
    return load_config(
        None,
        [
            f"eval.temperatures=[{', '.join(map(str, TEMPS))}]",
            "eval.sweep_samples=8",
            "eval.pass_at_k=[1, 2, 4, 8]",
            "eval.concurrency=4",
            "eval.bootstrap=500",
            *extra,
        ],
    )


def _tasks(n: int) -> list[Task]:
    return [Task(instance_id=f"sweep-{i:03d}", repo="test/sweep", problem_statement="-", patch="") for i in range(n)]


def test_a_temperature_change_of_the_start_gains_nothing_best_vs_best(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lego.conductor.bench.learn_sweep import compare_policies, run_sweep

    trained = _scaled_copy(tiny_model_dir, tmp_path / "scaled", SCALE)
    start = str(tiny_model_dir)
    assert torch.equal(next_token_logits(str(trained), "sweep-000"), SCALE * next_token_logits(start, "sweep-000"))

    cfg, tasks, out = _cfg(), _tasks(24), tmp_path / "eval"
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("LEGO_TEST_CALLS_LOG", str(calls))
    monkeypatch.setenv("LEGO_TEST_ANSWER_MODEL", start)
    run_sweep(cfg, {"start": start}, tasks, out, seed=3, factory=logit_rollout.factory)  # [1/3] of the bench
    cmp, after = compare_policies(cfg, start, str(trained), tasks, out, seed=3, factory=logit_rollout.factory)

    # the start was sampled once (its first sweep's samples serve the comparison), the trained policy once:
    # 8 per task at every temperature, then 8 fresh ones at its best
    policies = [json.loads(line)["policy"] for line in calls.read_text().splitlines()]
    assert policies.count("start") == policies.count("trained") == 24 * (len(TEMPS) * 8 + 8)

    best = cmp.best_vs_best
    assert (best.before_temperature, best.after_temperature) == (0.1, 0.2)  # the same policy: T 0.1 = 0.2 / 2
    assert best.delta == pytest.approx(0.0, abs=1e-12)
    assert best.ci95[0] <= 0.0 <= best.ci95[1] and best.p_value > 0.5
    assert best.at_chosen.delta == pytest.approx(0.0, abs=1e-12)
    assert best.split is not None and best.split.scored.delta == pytest.approx(0.0, abs=1e-12)
    # ...while at one shared temperature the "trained" policy looks better or worse, depending on which
    same = {d.temperature: d for d in cmp.same_temperature}
    assert same[0.2].delta > 0.15 and same[0.2].ci95[0] > 0 and same[0.2].p_value < 0.01
    assert same[0.1].delta < -0.05 and same[0.1].ci95[1] < 0
    # the fresh samples at the chosen temperatures share their seeds, so the same policy draws the same
    assert cmp.confirmed is not None and cmp.confirmed.scored.delta == pytest.approx(0.0, abs=1e-12)
    assert (cmp.confirmed.before_temperature, cmp.confirmed.after_temperature) == (0.1, 0.2)
    assert cmp.confirmed.scored.p_value > 0.5 and cmp.pass_at_k_from == "confirm"
    for row in cmp.pass_at_k:
        assert row.delta == pytest.approx(0.0, abs=1e-12)
    assert [r.k for r in cmp.pass_at_k] == [1, 2, 4, 8]
    assert cmp.pass_at_k[0].before == pytest.approx(best.before)
    assert after["wall_s"] >= 0 and [p["temperature"] for p in after["points"]] == TEMPS


def test_a_real_gain_survives_the_best_temperature_baseline(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counterpart: a policy whose answer tokens gained logit (not a rescaling) wins best-vs-best."""
    from transformers import AutoModelForCausalLM

    from lego.conductor.bench.learn_sweep import compare_policies

    # The answer tokens of every task gain logit: their rows of the output layer are scaled up (the
    # embedding is tied, so their input embedding moves too). A different policy, not a temperature change.
    tasks = _tasks(16)
    better = tmp_path / "better"
    shutil.copytree(tiny_model_dir, better)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    answers = set()
    for t in tasks:
        order = torch.argsort(next_token_logits(str(tiny_model_dir), t.instance_id), descending=True)
        answers.update(order[list(ANSWER_RANKS)].tolist())
    with torch.no_grad():
        model.lm_head.weight[sorted(answers)] *= 1.5
    model.save_pretrained(better)
    monkeypatch.setenv("LEGO_TEST_ANSWER_MODEL", str(tiny_model_dir))  # the answers stay the start's

    cmp, _ = compare_policies(
        _cfg(), str(tiny_model_dir), str(better), tasks, tmp_path / "eval", seed=0, factory=logit_rollout.factory
    )
    assert cmp.best_vs_best.delta > 0.05 and cmp.best_vs_best.ci95[0] > 0, cmp.best_vs_best
    assert cmp.confirmed is not None
    assert cmp.confirmed.scored.delta > 0.05 and cmp.confirmed.scored.ci95[0] > 0, cmp.confirmed


def test_bench_refuses_fewer_samples_than_the_largest_k() -> None:
    from lego.errors import ConfigError

    with pytest.raises(ConfigError, match=r"eval.confirm_samples=8 .*--confirm-samples"):
        load_config(None, ["eval.confirm_samples=4"])
    with pytest.raises(ConfigError, match=r"eval.sweep_samples=8 .*--samples"):
        load_config(None, ["eval.confirm_samples=0", "eval.sweep_samples=4"])
    assert load_config(None, ["eval.sweep_samples=1"]).eval.confirm_samples == 8  # the sweep only chooses
