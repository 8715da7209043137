"""Matrices, the transfer matrix from checkpoint metadata, report rendering and the CLI surface."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lego.conductor.cli.eval import eval_group
from lego.conductor.evaluate import parse_policies, run_defaults
from lego.config import LegoConfig
from lego.errors import ConfigError
from lego.eval.matrix import assign_bases, cell_metrics
from lego.eval.report import render, render_dir
from lego.eval.results import CHECKPOINT_META_FILE, EvalSpec, SampleKey, SampleResult, read_checkpoint_meta
from lego.eval.runner import run_eval
from lego.tasks.sources import load_tasks
from lego.types import GradeResult, Segment, Task, Trajectory

sys.path.insert(0, str(Path(__file__).parent))
import deterministic_rollout as det


def checkpoint(root: Path, name: str, harness: str) -> str:
    d = root / name
    d.mkdir(parents=True)
    (d / CHECKPOINT_META_FILE).write_text(json.dumps({"trained_harness": harness, "base_model": "m", "step": 10}))
    return str(d)


def test_from_trajectory_maps_counts_and_infra() -> None:
    key = SampleKey(policy="p", harness="h", task_id="t", sample=0, seed=1)
    seg = Segment(prompt_ids=[1, 2, 3, 4], response_ids=[5, 6, 7], response_mask=[1, 0, 1],
                  response_logprobs=[-0.5, None, -0.1], response_versions=[0, None, 0])  # fmt: skip
    traj = Trajectory(
        trajectory_id="x", session_id="x", harness="h", segments=[seg, seg], reward=1.0,
        grade=GradeResult(reward=1.0, resolved=True), guard_flags={"history_dig": True},
        messages=[{"role": "user", "content": "fix"}, {"role": "assistant", "content": "a"},
                  {"role": "tool", "content": "ok"}, {"role": "assistant", "content": "b"}],
        timings={"wall_s": 12.5},
    )  # fmt: skip
    r = SampleResult.from_trajectory(key, traj, trajectory_path="traj/x.json")
    assert (r.passed, r.reward, r.infra, r.turns) == (True, 1.0, False, 2)
    assert (r.prompt_tokens, r.completion_tokens, r.wall_s) == (2 * (4 + 1), 2 * 2, 12.5)
    assert r.guard_flags == {"history_dig": True} and r.trajectory_path == "traj/x.json"
    counted = traj.model_copy(update={"counters": {"turns": 7, "prompt_tokens": 900, "completion_tokens": 80}})
    r = SampleResult.from_trajectory(key, counted)
    assert (r.turns, r.prompt_tokens, r.completion_tokens) == (7, 900, 80)
    broken = traj.model_copy(
        update={"termination": "env_error", "cause": "infrastructure", "metadata": {"error": "sandbox died"}}
    )
    r = SampleResult.from_trajectory(key, broken)
    assert r.infra and not r.passed and r.error == "sandbox died"
    policy_caused = traj.model_copy(update={"termination": "harness_error", "cause": "policy"})
    assert not SampleResult.from_trajectory(key, policy_caused).infra


def test_transfer_matrix_deltas_and_self_contained_report(tmp_path: Path) -> None:
    ck1 = checkpoint(tmp_path, "ck_h1", "h1")
    ck2 = checkpoint(tmp_path, "ck_h2", "h2")
    policies = parse_policies(("oracle", "base=m", f"rl={ck1}", f"rl2={ck2}"), ())
    assert [(p.name, p.trained_harness) for p in policies] == [
        ("oracle", None), ("base", None), ("rl", "h1"), ("rl2", "h2")]  # fmt: skip
    spec = EvalSpec(policies=policies, harnesses=["h1", "h2", "h3"], task_ids=[f"t{i}" for i in range(8)],
                    samples=3, seed=5, bootstrap=300)  # fmt: skip
    assert assign_bases(spec) == {"rl": "base", "rl2": "base"}
    tasks = {t: Task(instance_id=t, repo="r", problem_statement="p", patch="") for t in spec.task_ids}
    out = tmp_path / "eval"
    res = run_eval(spec, det.factory(spec, tasks, out, LegoConfig()), out, concurrency=2)
    assert [(r.policy, r.trained_harness) for r in res.transfer] == [("rl", "h1"), ("rl2", "h2")]
    assert all(set(r.delta) == {"h1", "h2", "h3"} for r in res.transfer)
    d = next(x for x in res.deltas if (x.policy, x.harness) == ("rl", "h1"))
    cells = {(c.policy, c.harness): c for c in res.cells}
    assert d.delta == pytest.approx(cells[("rl", "h1")].pass1 - cells[("base", "h1")].pass1, abs=0.13)
    assert 0 < d.p_value <= 1 and 0 < d.p_value_sign_flip <= 1 and d.ci_low <= d.delta <= d.ci_high
    assert all(c.pass1 == 1.0 and c.pass_at_k[3] == 1.0 for c in res.cells if c.policy == "oracle")
    m = cell_metrics(cells[("rl", "h1")])
    assert m["val/pass1@h1"] == cells[("rl", "h1")].pass1 and m["val/pass@3@h1"] == cells[("rl", "h1")].pass_at_k[3]

    html_path = render(res, out)
    html = html_path.read_text()
    srcs = re.findall(r'src="([^"]*)"', html)
    assert len(srcs) == 2 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "http://" not in html and "https://" not in html and "<link" not in html and "<script" not in html
    assert "Transfer" in html and "Delta vs base" in html and "pass@3" in html
    md = (out / "report.md").read_text()
    assert "| oracle | 100.0 [100.0, 100.0] | 100.0 [100.0, 100.0] | 100.0 [100.0, 100.0] |" in md
    header = (out / "cells.csv").read_text().splitlines()[0].split(",")
    assert {"pass@1", "pass@2", "pass@3", "n_infra", "guard:test_tamper", "term:completed"} <= set(header)
    assert (out / "transfer_heatmap.png").is_file() and (out / "pass1_heatmap.png").is_file()

    # `lego eval report DIR` re-renders the same bytes from results.json
    before = {n: (out / n).read_bytes() for n in ["report.html", "report.md", "cells.csv", "results.json"]}
    result = CliRunner().invoke(eval_group, ["report", str(out)])
    assert result.exit_code == 0, result.output
    assert {n: (out / n).read_bytes() for n in before} == before

    # without results.json (a killed eval), the report is rebuilt from spec.json + samples/
    (out / "results.json").unlink()
    next(out.glob("samples/rl/h1/t0/0.json")).unlink()
    render_dir(out)
    assert "Unfinished: 1 samples missing" in (out / "report.md").read_text()


def test_cli_options_and_task_loading(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    rows = [
        Task(instance_id=f"t{i}", repo="r", problem_statement="p", patch="", split=["a", "b"][i % 2]) for i in range(5)
    ]
    tasks.write_text("\n".join(t.model_dump_json() for t in rows) + "\n")
    assert [t.instance_id for t in load_tasks(f"{tasks}:a")] == ["t0", "t2", "t4"]
    assert [t.instance_id for t in load_tasks(str(tasks), limit=2)] == ["t0", "t1"]  # the first N, in file order
    with pytest.raises(ConfigError, match="has no split 'zzz'"):
        load_tasks(f"{tasks}:zzz")
    with pytest.raises(ConfigError, match="unknown task source"):
        load_tasks("nowhere:heldout")
    with pytest.raises(ConfigError, match="given twice"):
        parse_policies(("a=x", "a=y"), ())
    with pytest.raises(ConfigError, match="TRAINED=BASE"):
        parse_policies(("a=x", "b=y"), ("a=c",))
    assert parse_policies(("a=x", "b=y"), ("a=b",))[0].base == "b"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / CHECKPOINT_META_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="not valid checkpoint metadata"):
        read_checkpoint_meta(str(tmp_path / "bad"))

    runner = CliRunner()
    assert runner.invoke(eval_group, []).exit_code == 2  # no --policy / --harness: usage error
    res = runner.invoke(eval_group, ["--policy", "oracle", "--harness", "lego-agent", "--tasks", str(tasks),
                                     "--sample-fn", "no_such_module:f", "--out", str(tmp_path / "o")])  # fmt: skip
    assert isinstance(res.exception, ConfigError) and "no_such_module" in str(res.exception)
    res = runner.invoke(eval_group, ["--policy", "oracle", "--policy", "t=m", "--harness", "lego-agent", "--tasks", str(tasks),
                                     "--samples", "2", "--bootstrap", "200", "--out", str(tmp_path / "o2"),
                                     "--sample-fn", "deterministic_rollout:factory"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "| oracle | 100.0 [100.0, 100.0] |" in res.output
    assert len(list((tmp_path / "o2" / "samples").rglob("*.json"))) == 2 * 5 * 2


def test_from_run_evaluates_the_latest_checkpoint_against_the_start_with_the_runs_settings(tmp_path: Path) -> None:
    from lego.config import load_config, to_toml

    run = tmp_path / "run"
    (run / "checkpoints" / "step_000002").mkdir(parents=True)
    cfg = load_config(None, ["harness.max_turns=5", "harness.timeout_s=77", "eval.concurrency=3"])
    (run / "config.toml").write_text(to_toml(cfg))
    runner = CliRunner()
    res = runner.invoke(eval_group, ["--from-run", str(run)])
    assert isinstance(res.exception, ConfigError) and "no complete checkpoint" in str(res.exception)
    with pytest.raises(ConfigError, match=r"no config\.toml there"):
        run_defaults(tmp_path)

    step = run / "checkpoints" / "step_000002"
    for name in ("trainer_state.json", "optimizer.pt"):  # what marks a checkpoint complete (lego.training.checkpoint)
        (step / name).write_text("{}")
    (run / "checkpoints" / "latest").write_text("step_000002")
    got = run_defaults(run)
    assert got["policies"] == ("start=default", f"trained={step}") and got["bases"] == ("trained=start",)
    assert got["tasks_arg"] == "boundary:heldout" and got["harnesses"] == ("lego-agent",)
    assert (got["temperature"], got["max_turns"], got["timeout_s"], got["concurrency"]) == (1.0, 5, 77.0, 3)
    res = runner.invoke(eval_group, ["--from-run", str(run), "--limit", "3", "--max-turns", "9", "--bootstrap", "200",
                                     "--sample-fn", "deterministic_rollout:factory"])  # fmt: skip
    assert res.exit_code == 0, res.output
    spec = json.loads((run / "eval" / "spec.json").read_text())
    assert [p["name"] for p in spec["policies"]] == ["start", "trained"]
    assert spec["policies"][1]["base"] == "start" and spec["policies"][1]["model"] == str(step)
    assert spec["tasks_source"] == "boundary:heldout" and len(spec["task_ids"]) == 3
    assert (spec["temperature"], spec["max_turns"], spec["timeout_s"]) == (1.0, 9, 77.0)  # --max-turns given: it wins


def test_a_zeroed_reward_never_passes_and_cells_say_who_failed() -> None:
    from lego.eval.matrix import summarize_cell

    key = SampleKey(policy="p", harness="h", task_id="t", sample=0, seed=1)
    resolved = GradeResult(reward=1.0, resolved=True)
    zeroed = Trajectory(trajectory_id="z", session_id="z", reward=0.0, grade=resolved, metadata={"zeroed_by": ["x"]})
    assert not SampleResult.from_trajectory(key, zeroed).passed  # the reward counts, not the grade
    killed = Trajectory(trajectory_id="k", session_id="k", termination="harness_error", reward=0.0,
                        cause="policy", cause_detail="the harness died after 2 policy response(s)")  # fmt: skip
    down = Trajectory(trajectory_id="d", session_id="d", termination="harness_error", cause="infrastructure")
    samples = [
        SampleResult.from_trajectory(key.model_copy(update={"task_id": f"t{i}"}), t)
        for i, t in enumerate([zeroed, killed, down])
    ]
    assert samples[1].cause_detail.startswith("the harness died")
    cell = summarize_cell("p", "h", samples, n_boot=50, seed=0)
    assert cell.terminations == {"completed": 1, "harness_error (infrastructure)": 1, "harness_error (policy)": 1}
    assert (cell.n_scored, cell.n_infra, cell.pass1) == (2, 1, 0.0)
