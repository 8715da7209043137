"""One `lego train` run across three harnesses, one per API family: lego-agent (OpenAI chat),
Claude Code (Anthropic messages) and Codex (OpenAI responses), each a real process in its own
sandbox, driven by the tiny policy. Every step's metrics line and the HTML report break reward,
pass rate and rollout-trainer fidelity down per harness, and a task's G rollouts share a harness
(its advantages are group-normalised)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from lego.conductor.loop import train
from lego.conductor.step_plan import step_harnesses
from lego.config import load_config
from lego.eval.train_report import write_train_report
from lego.harnesses.install import installed
from lego.io import read_jsonl
from lego.types import Task
from tests.lego.calc_task import make_calc_tasks

pytestmark = [pytest.mark.slow, pytest.mark.harness]

PEARSON = "training/rollout_actor_probs_pearson_corr"
HARNESSES = ["claude-code", "codex", "lego-agent"]  # messages, responses, chat
WEIGHTS = "harness.weights={lego-agent = 1.0, claude-code = 1.0, codex = 1.0}"


def _records(n: int) -> list[Task]:
    return [Task(instance_id=f"t{i}", repo="r", problem_statement="p", patch="") for i in range(n)]


def test_each_step_spreads_its_tasks_over_the_weighted_harnesses() -> None:
    """Equal weights and B = 3: every step trains each harness once; metadata still wins; seeded by step."""
    cfg = load_config(None, [WEIGHTS])
    for step in range(6):
        assert sorted(step_harnesses(_records(3), cfg, step)) == HARNESSES
        assert step_harnesses(_records(3), cfg, step) == step_harnesses(_records(3), cfg, step)
    pinned = [_records(1)[0].model_copy(update={"metadata": {"harness": "aider"}}), *_records(3)]
    got = step_harnesses(pinned, cfg, 0)
    assert got[0] == "aider" and sorted(got[1:]) == HARNESSES
    # weights 2:1 over B = 3 → two tasks and one task; no weights → harness.name
    lopsided = load_config(None, ["harness.weights={lego-agent = 2.0, codex = 1.0}"])
    assert sorted(step_harnesses(_records(3), lopsided, 0)) == ["codex", "lego-agent", "lego-agent"]
    assert step_harnesses(_records(2), load_config(None, []), 0) == ["lego-agent", "lego-agent"]


# Claude Code's system prompt and tools are ~30k tokens of this tokenizer: on a 2-core CPU each step's
# forward/backward over its two segments takes minutes (one step measured 664 s on a loaded host), so
# this run is kept out of the default suite like OpenHands: `pytest -m slow_harness tests/lego/test_mixed_harness.py`.
@pytest.mark.slow_harness
@pytest.mark.timeout(2400)
def test_a_mixed_run_reports_every_harness_each_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    missing = [h for h in HARNESSES if h != "lego-agent" and installed(h) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (run `lego harness install {' '.join(missing)}`)")
    tasks = make_calc_tasks(tmp_path / "calc", n=3)
    cfg = load_config(
        None,
        [
            f"tasks.source={tasks}",
            f"engine.model={tiny_model_dir}",
            f"training.out_dir={tmp_path / 'run'}",
            "training.steps=2",
            "training.tasks_per_step=3",
            "algorithm.group_size=2",
            WEIGHTS,
            "harness.max_turns=1",
            "harness.timeout_s=300",
            "harness.options={lego-agent = {max_tokens = 24}}",
            # Claude Code's ~30k-token prompt: one rollout at a time, one segment per micro-batch,
            # so neither the engine nor the trainer pads two such prompts into one attention matrix
            "training.concurrency=1",
            "training.micro_batch_size=1",
            "proxy.max_tokens_cap=24",
        ],
    )
    run = train(cfg)
    lines = read_jsonl(run.metrics)
    assert [ln["step"] for ln in lines] == [1, 2]
    for ln in lines:
        m = ln["metrics"]
        for h in HARNESSES:
            assert m[f"rollout/count/{h}"] == 2.0  # one task × G = 2 each
            assert 0.0 <= m[f"reward/mean/{h}"] <= 1.0
            assert 0.0 <= m[f"reward/pass_rate/{h}"] <= 1.0
            assert m[f"{PEARSON}/{h}"] >= 0.99, (h, m)
    for step in (1, 2):
        by_task: dict[str, set[str]] = defaultdict(set)
        for f in run.trajectories(step).glob("*.json"):
            doc = json.loads(f.read_text())
            by_task[doc["task_id"]].add(doc["harness"])
        assert sorted(h for hs in by_task.values() for h in hs) == HARNESSES
        assert all(len(hs) == 1 for hs in by_task.values())  # a group shares its harness
    meta = json.loads((run.root / "checkpoints" / "step_000002" / "lego_meta.json").read_text())
    assert meta["trained_harness"] == "claude-code+codex+lego-agent"
    html = write_train_report(run.root).read_text()
    assert "<h2>Per harness</h2>" in html
    for h in HARNESSES:
        assert f"<td>{h}</td>" in html
