"""A user's mistake costs no compute (issue 28.8): the real CLI, as a subprocess, refuses it before any
rollout, model load or checkpoint with exit code 2 and one line that names the field (or flag) and the
fix -- a misspelt harness, one that is not installed, a model or task source that is not there, a run
directory where a checkpoint belongs, a sandbox backend this machine cannot start. And a training step
whose every rollout failed on infrastructure stops the run, saying why, instead of training on nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def lego(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "lego.conductor.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def one_line_exit_2(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr and "Error:" not in lines[0], lines[0]  # no raw class name
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def opencode_installed() -> bool:
    from lego.harnesses.install import installed

    return installed("opencode") is not None


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("harness.name=opencodee", ("harness.name", "opencodee", "did you mean 'opencode'")),
        ("harness.weights={lego-agnet=1.0}", ("harness.weights", "lego-agnet", "lego-agent")),
        ("engine.model=/nonexistent/model", ("engine.model", "/nonexistent/model", "not a directory")),
        ("tasks.source=no-such-suite", ("tasks.source", "no-such-suite")),
    ],
)
def test_train_refuses_a_mistake_before_anything_runs(tmp_path: Path, override: str, needles: tuple[str, ...]) -> None:
    out = tmp_path / "run"
    res = lego("train", "-o", override, "-o", f"training.out_dir={out}")
    one_line_exit_2(res, *needles)
    assert not out.exists()  # no run directory, no checkpoint


@pytest.mark.skipif(opencode_installed(), reason="opencode is installed here; the check needs it absent")
def test_a_harness_that_is_not_installed_is_refused_with_the_install_command(tmp_path: Path) -> None:
    res = lego("train", "-o", "harness.name=opencode", "-o", f"training.out_dir={tmp_path / 'run'}")
    one_line_exit_2(res, "harness.name", "lego harness install opencode")
    res = lego("run", "--harness", "opencode", "--task", "lego-builtin__roman-0001")
    one_line_exit_2(res, "--harness", "lego harness install opencode")


def test_eval_refuses_a_misspelt_harness_and_a_run_directory_as_a_policy(tmp_path: Path) -> None:
    res = lego("eval", "--policy", "p=default", "--harness", "lego-agnet", "--out", str(tmp_path / "ev"))
    one_line_exit_2(res, "eval.harnesses", "lego-agnet", "did you mean 'lego-agent'")
    run = tmp_path / "runs" / "a"
    (run / "checkpoints" / "step_000002").mkdir(parents=True)
    (run / "checkpoints" / "latest").symlink_to("step_000002")
    (run / "config.toml").write_text("")
    (run / "metrics.jsonl").write_text("")
    res = lego("eval", "--policy", f"rl={run}", "--harness", "lego-agent", "--out", str(tmp_path / "ev"))
    line = one_line_exit_2(res, "--policy rl", "run's directory", str(run / "checkpoints" / "latest"))
    assert "--from-run" in line
    assert not (tmp_path / "ev").exists()


def test_run_refuses_an_unknown_task_and_a_missing_model_in_one_line() -> None:
    one_line_exit_2(lego("run", "--task", "lego-builtin__nosuch-0001"), "lego-builtin__nosuch-0001")
    one_line_exit_2(lego("run", "--task", "lego-builtin__roman-0001", "--model", "/no/model"), "--model", "/no/model")


def test_a_step_whose_rollouts_all_failed_on_infrastructure_stops_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = lego(
        "train",
        "-o",
        "harness.name=tests.lego.broken_harness:BrokenHarness",
        "-o",
        f"training.out_dir={out}",
        "-o",
        "training.steps=3",
        "-o",
        "training.tasks_per_step=1",
        "-o",
        "algorithm.group_size=2",
        "-o",
        "training.retry_infra=0",
        "--unsafe-no-isolation",
        timeout=600,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "step 1: all 2 rollouts failed on infrastructure" in res.stderr, res.stderr
    assert "config file cannot be written" in res.stderr
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert lines == []  # nothing trained, nothing logged as a step
    kept = [p for p in (out / "trajectories" / "step_0001").glob("*.json") if "-canary-" not in p.name]
    assert len(kept) == 2  # kept for inspection


def test_a_sandbox_backend_this_machine_cannot_start_is_refused(tmp_path: Path) -> None:
    bare = {**os.environ, "PATH": str(tmp_path)}  # neither docker nor bubblewrap can be found
    for kind, needle in (("docker", "no Docker engine answers"), ("local", "needs bubblewrap")):
        res = subprocess.run(
            [sys.executable, "-m", "lego.conductor.cli.main", "train", "-o", f"sandbox.kind={kind}",
             "-o", f"training.out_dir={tmp_path / 'run'}"],
            capture_output=True, text=True, timeout=300, cwd=ROOT, env={**bare, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        one_line_exit_2(res, "sandbox.kind", needle)
    assert not (tmp_path / "run").exists()
