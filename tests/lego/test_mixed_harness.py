"""Mixed-harness training end to end: one `lego train` run whose tasks are spread over several
harnesses, each a real process in its own sandbox, driven by the tiny policy. Every step's metrics
line and the HTML report break reward, pass rate and rollout-trainer fidelity down per harness, a
task's G rollouts share a harness (its advantages are group-normalised), the checkpoint records the
mixed ``trained_harness``, and ``lego eval --from-run`` evaluates in every harness the run trained in.

The default suite's run mixes the three harnesses with the smallest first prompts (tokens of the tiny
policy's tokenizer on a built-in task): lego-agent (~0.8k), mini-swe-agent (~1.4k) and aider (~5.5k;
streamed chat, SEARCH/REPLACE text instead of tool calls). All three speak OpenAI chat: the cheapest
harness of another API, Codex (responses, ~14k), more than doubles the run (the trainer's attention
over its segments dominates each step; README). The ``slow_harness`` run mixes three APIs: Claude
Code (messages, ~30k), Codex (responses) and lego-agent (chat)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from lego.conductor.cli.eval import eval_group
from lego.conductor.evaluate import run_defaults
from lego.conductor.loop import train
from lego.conductor.step_plan import step_harnesses, trained_harness
from lego.config import load_config, to_toml
from lego.eval.matrix import summarize
from lego.eval.results import CHECKPOINT_META_FILE, EvalSpec, PolicySpec, SampleKey, SampleResult
from lego.eval.train_report import write_train_report
from lego.harnesses.install import installed
from lego.io import read_jsonl
from lego.types import Task
from tests.lego.calc_task import make_calc_tasks

PEARSON = "training/rollout_actor_probs_pearson_corr"
HARNESSES = ["claude-code", "codex", "lego-agent"]  # messages, responses, chat
WEIGHTS = "harness.weights={lego-agent = 1.0, claude-code = 1.0, codex = 1.0}"
SMALL = ["aider", "lego-agent", "mini-swe-agent"]  # chat (streamed, SEARCH/REPLACE text), chat, chat


def _records(n: int) -> list[Task]:
    return [Task(instance_id=f"t{i}", repo="r", problem_statement="p", patch="") for i in range(n)]


def _weights(harnesses: list[str]) -> str:
    return "harness.weights={" + ", ".join(f'"{h}" = 1.0' for h in harnesses) + "}"


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


def _mixed_run(harnesses: list[str], tiny_model_dir: Path, tmp_path: Path, extra: list[str]) -> Path:
    """Two steps of B = len(harnesses) tasks × G = 2 over equal weights; checks every step's per-harness
    metrics, groups, checkpoint meta and report, and returns the run directory."""
    missing = [h for h in harnesses if h != "lego-agent" and installed(h) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (run `lego harness install {' '.join(missing)}`)")
    tasks = make_calc_tasks(tmp_path / "calc", n=len(harnesses))
    cfg = load_config(
        None,
        [
            f"tasks.source={tasks}",
            f"engine.model={tiny_model_dir}",
            f"training.out_dir={tmp_path / 'run'}",
            "training.steps=2",
            f"training.tasks_per_step={len(harnesses)}",
            "algorithm.group_size=2",
            _weights(harnesses),
            "harness.max_turns=1",
            "harness.timeout_s=300",
            "harness.options={lego-agent = {max_tokens = 24}}",
            "proxy.max_tokens_cap=24",
            # canaries' harness rotation is checked in test_step_plan: here they would add an aider rollout a step
            "tasks.canary_rate=0",
            *extra,
        ],
    )
    run = train(cfg)
    lines = read_jsonl(run.metrics)
    assert [ln["step"] for ln in lines] == [1, 2]
    for ln in lines:
        m = ln["metrics"]
        assert m["rollout/infra_failures"] == 0.0, m
        for h in harnesses:
            assert m[f"rollout/count/{h}"] == 2.0  # one task × G = 2 each
            assert 0.0 <= m[f"reward/mean/{h}"] <= 1.0
            assert 0.0 <= m[f"reward/pass_rate/{h}"] <= 1.0
            assert m[f"{PEARSON}/{h}"] >= 0.999, (h, m)
    for step in (1, 2):
        by_task: dict[str, set[str]] = defaultdict(set)
        for f in run.trajectories(step).glob("*.json"):
            doc = json.loads(f.read_text())
            by_task[doc["task_id"]].add(doc["harness"])
        assert sorted(h for hs in by_task.values() for h in hs) == harnesses
        assert all(len(hs) == 1 for hs in by_task.values())  # a group shares its harness
    meta = json.loads((run.root / "checkpoints" / "step_000002" / CHECKPOINT_META_FILE).read_text())
    assert meta["trained_harness"] == "+".join(harnesses) == trained_harness(cfg)
    html = write_train_report(run.root).read_text()
    assert "<h2>Per harness</h2>" in html
    for h in harnesses:
        assert f"<td>{h}</td>" in html
    return run.root


@pytest.mark.slow
@pytest.mark.harness
@pytest.mark.timeout(900)
def test_a_mixed_run_reports_every_harness_each_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    """lego-agent, mini-swe-agent and aider in one run."""
    _mixed_run(SMALL, tiny_model_dir, tmp_path, ["training.concurrency=6", "training.micro_batch_size=1"])


# Claude Code's system prompt and tools are ~30k tokens of this tokenizer: on a 2-core CPU each step's
# forward/backward over its two segments takes minutes, so this run is kept out of the default suite
# like OpenHands: `pytest -m slow_harness tests/lego/test_mixed_harness.py`.
@pytest.mark.slow
@pytest.mark.harness
@pytest.mark.slow_harness
@pytest.mark.timeout(2400)
def test_a_mixed_run_with_claude_code_reports_every_harness_each_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    # one segment per micro-batch, so the trainer never pads two ~30k-token segments into one batch
    _mixed_run(HARNESSES, tiny_model_dir, tmp_path, ["training.concurrency=3", "training.micro_batch_size=1"])


def test_eval_from_a_mixed_run_evaluates_every_training_harness_as_in_distribution(tmp_path: Path) -> None:
    """``lego eval --from-run`` of a mixed run: every weighted harness plus what --harness adds; the
    transfer matrix marks each training harness of the mixed policy in-distribution (results.json, report.md).
    The rollout is the deterministic stand-in of tests/eval (the real one is the measurement in the README)."""
    run = tmp_path / "run"
    step = run / "checkpoints" / "step_000002"
    step.mkdir(parents=True)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(r.model_copy(update={"split": "heldout"}).model_dump_json() + "\n" for r in _records(4)))
    cfg = load_config(None, [f"tasks.source={tasks}", _weights(["mini-swe-agent", "lego-agent"])])
    (run / "config.toml").write_text(to_toml(cfg))
    for name in ("trainer_state.json", "optimizer.pt"):  # what marks a checkpoint complete
        (step / name).write_text("{}")
    (step / CHECKPOINT_META_FILE).write_text(json.dumps({"trained_harness": trained_harness(cfg), "step": 2}))
    (run / "checkpoints" / "latest").write_text(step.name)
    assert run_defaults(run)["harnesses"] == ("lego-agent", "mini-swe-agent")

    args = ["--from-run", str(run), "--harness", "aider", "--harness", "lego-agent", "--samples", "2"]
    res = CliRunner().invoke(
        eval_group, [*args, "--bootstrap", "200", "--sample-fn", "tests.eval.deterministic_rollout:factory"]
    )
    assert res.exit_code == 0, res.output
    results = json.loads((run / "eval" / "results.json").read_text())
    assert results["spec"]["harnesses"] == ["lego-agent", "mini-swe-agent", "aider"]
    [row] = results["transfer"]
    assert (row["policy"], row["trained_harness"]) == ("trained", "lego-agent+mini-swe-agent")
    assert row["in_distribution"] == ["lego-agent", "mini-swe-agent"]
    assert set(row["pass1"]) == set(row["delta"]) == {"lego-agent", "mini-swe-agent", "aider"}
    table = (run / "eval" / "report.md").read_text().split("## Transfer")[1]
    trained_line = next(ln for ln in table.splitlines() if ln.startswith("| trained"))
    cells = [c.strip() for c in trained_line.strip("|").split("|")][1:]
    assert [c.endswith("*") for c in cells] == [True, True, False]


def test_a_mixed_policy_row_is_ordered_by_its_first_training_harness() -> None:
    key = SampleKey(policy="p", harness="h", task_id="t", sample=0, seed=0)
    spec = EvalSpec(
        policies=[
            PolicySpec(name="mixed", model="m", trained_harness="b+c"),
            PolicySpec(name="single", model="s", trained_harness="a"),
        ],
        harnesses=["a", "b", "c"],
        task_ids=["t"],
        samples=1,
        bootstrap=100,
    )
    samples = [
        SampleResult(key=key.model_copy(update={"policy": p, "harness": h}), passed=p == "mixed", reward=1.0)
        for p in ("mixed", "single")
        for h in spec.harnesses
    ]
    transfer = summarize(spec, samples).transfer
    assert [(r.policy, r.in_distribution) for r in transfer] == [("single", ["a"]), ("mixed", ["b", "c"])]
