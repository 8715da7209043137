"""`lego train` end to end on the real stack (tiny model, lego-agent process, bubblewrap sandboxes,
hidden-test grading): metrics, trajectories and checkpoints are written, the rollout-train Pearson
holds every step, a SIGKILLed run resumes without losing or repeating a step, Ctrl-C stops within
seconds and says how to resume, `--resume` with no run is refused, a deliberate
sampling mismatch trips the fidelity gate, and an incompatible resume is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lego.conductor.loop import train
from lego.config import load_config
from lego.errors import ConfigError, FidelityError, ResumeError
from lego.io import read_jsonl
from tests.lego.calc_task import make_calc_tasks
from tests.lego.calc_task import train_overrides as _overrides

pytestmark = pytest.mark.slow

PEARSON = "training/rollout_actor_probs_pearson_corr"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_calc_tasks(tmp_path_factory.mktemp("calc"))


def test_train_writes_a_faithful_run(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    validation = ["training.eval_every=3", "tasks.eval_split=train", "eval.limit=1", "eval.samples=2"]
    validation.append("tasks.canary_rate=0.1")  # the default's: one canary a step here (the shared overrides set 0)
    cfg = load_config(None, [*_overrides(tasks, tiny_model_dir, tmp_path / "run", steps=3), *validation])
    run = train(cfg)
    lines = read_jsonl(run.metrics)
    assert [ln["step"] for ln in lines] == [1, 2, 3]  # 1-based, as the console and the checkpoints count
    for ln in lines:
        assert ln["metrics"][PEARSON] >= 0.999
        assert ln["metrics"]["rollout/count"] == 2.0
        # the default run mixes in one impossible canary a step (tasks.canary_rate): measured, never trained
        assert (ln["metrics"]["hack/canary_rollouts"], ln["metrics"]["hack/canary_pass_rate"]) == (1.0, 0.0)
        assert ln["metrics"]["guards/history_strip"] == 1.0
    assert [ln["metrics"]["policy/version"] for ln in lines] == [1.0, 2.0, 3.0]
    # validation ran once, after the last step, through the eval code with per-sample JSON
    assert "val/pass1@lego-agent" not in lines[1]["metrics"]
    assert 0.0 <= lines[2]["metrics"]["val/pass1@lego-agent"] <= 1.0
    assert len(list((run.root / "validation" / "step_0003" / "samples").rglob("*.json"))) == 2
    assert sorted(p.name for p in (run.root / "trajectories").iterdir()) == ["step_0001", "step_0002", "step_0003"]
    for step in (1, 2, 3):
        trajs = sorted(p for p in run.trajectories(step).glob("*.json") if "-canary-" not in p.name)
        canaries = [json.loads(p.read_text()) for p in run.trajectories(step).glob("*-canary-*.json")]
        assert len(trajs) == 2 and len(canaries) == 1
        assert canaries[0]["reward"] == 0.0 and canaries[0]["grade"]["resolved"] is False
        doc = json.loads(trajs[0].read_text())
        assert doc["harness"] == "lego-agent" and doc["grade"] is not None and doc["segments"]
    latest = (run.root / "checkpoints" / "latest").read_text().strip()
    assert latest == "step_000003"
    assert (run.root / "checkpoints" / latest / "model.safetensors").exists()
    assert (
        json.loads((run.root / "checkpoints" / latest / "lego_meta.json").read_text())["trained_harness"]
        == "lego-agent"
    )
    with pytest.raises(ConfigError, match="--resume"):
        train(cfg)


def test_sigkill_then_resume_loses_and_repeats_no_step(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [sys.executable, "-m", "lego.conductor.cli.main", "train"]
    for o in _overrides(tasks, tiny_model_dir, out, steps=2):
        args += ["-o", o]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    try:
        # kill while step 2's rollouts run: step 1's line is on disk, the run is mid-step
        while time.monotonic() < deadline and proc.poll() is None:
            if len(read_jsonl(out / "metrics.jsonl")) >= 1:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = len(read_jsonl(out / "metrics.jsonl"))
    res = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed" in res.stdout
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [ln["step"] for ln in lines] == [1, 2], f"{done} lines before the resume"
    # the policy version counts weight updates over the whole run, across the restart
    assert [ln["metrics"]["policy/version"] for ln in lines] == [1.0, 2.0]


def test_resume_without_a_run_names_the_directory(tmp_path: Path) -> None:
    out = tmp_path / "nothing-here"
    res = subprocess.run(
        [sys.executable, "-m", "lego.conductor.cli.main", "train", "-o", f"training.out_dir={out}", "--resume"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 2, res.stderr
    assert f"training.out_dir={out} holds no run to continue" in res.stderr
    assert not out.exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint-inherited-ignored", "sigterm"])
def test_ctrl_c_stops_within_seconds_and_says_how_to_resume(
    tasks: Path, tiny_model_dir: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGINT mid-step: the run stops launching and drops in-flight rollouts, keeps the last finished
    step and prints how to continue; `--resume` then finishes the run. The same for SIGTERM (what
    `kill`, Docker and a scheduler send), and for a SIGINT the run inherited ignored (a background job
    of a non-interactive shell), which `lego train` restores (issue 45)."""
    out = tmp_path / "run"
    overrides = [*_overrides(tasks, tiny_model_dir, out, steps=2), "harness.options={lego-agent = {max_tokens = 96}}"]
    args = [sys.executable, "-m", "lego.conductor.cli.main", "train"]
    for o in overrides:
        args += ["-o", o]
    # SIGINT ignored in the child, as a shell without job control starts a background job: Python then
    # installs no handler of its own, and `lego train` must restore one
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline and proc.poll() is None:  # interrupt step 2's rollouts
            if len(read_jsonl(out / "metrics.jsonl")) >= 1:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        t0 = time.monotonic()
        proc.send_signal(sig)
        stdout, _ = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout[-3000:]
    assert took < 15, f"Ctrl-C took {took:.1f}s"
    saved = len(read_jsonl(out / "metrics.jsonl"))
    assert saved >= 1
    # the command as invoked (here `python -m ...`; tests/lego/test_newcomer.py: a typed .venv/bin/lego)
    assert f"saved step {saved}; continue with `{sys.executable} -m lego.conductor.cli.main train --resume`" in stdout
    # off a terminal the log says what happens: loading, each rollout, each step
    assert "loading the policy" in stdout and "step 1 rollout 1/2:" in stdout and "step 1/2 |" in stdout
    assert "Warning" not in stdout, stdout[:2000]  # nothing from the libraries opens the run
    assert (out / "checkpoints" / f"step_{saved:06d}").is_dir()
    res = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert [ln["step"] for ln in read_jsonl(out / "metrics.jsonl")] == [1, 2]


def test_fidelity_gate_stops_a_mismatched_run(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    # The harness samples at temperature 2 and the proxy is told not to override it, while the
    # trainer recomputes at algorithm.temperature = 1: the probabilities no longer correlate.
    overrides = [
        *_overrides(tasks, tiny_model_dir, tmp_path / "run", steps=2),
        "training.sampling_override=false",
        "harness.options={lego-agent = {max_tokens = 24, temperature = 2.0}}",
        "training.fidelity.patience=1",
        "training.fidelity.min_pearson=0.999",
    ]
    with pytest.raises(
        FidelityError,
        match=r"training/rollout_actor_probs_pearson_corr = [0-9.]+ stayed below the threshold fidelity.min_pearson = 0.999",
    ):
        train(load_config(None, overrides))


def test_resume_refuses_an_incompatible_config(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    train(load_config(None, _overrides(tasks, tiny_model_dir, out, steps=1)))
    changed = load_config(None, [*_overrides(tasks, tiny_model_dir, out, steps=2), "algorithm.group_size=4"])
    with pytest.raises(ResumeError, match=r"algorithm\.group_size"):
        train(changed, resume=True)


def test_lora_run_checkpoints_are_loadable_models(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    """`lego eval` / `lego bench learn` take a checkpoint dir as a model: a LoRA run's must hold merged weights."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = load_config(None, [*_overrides(tasks, tiny_model_dir, tmp_path / "run", steps=1), "training.finetune=lora"])
    run = train(cfg)
    ckpt = run.root / "checkpoints" / "step_000001"
    assert (ckpt / "adapter" / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(ckpt).state_dict()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    want = PeftModel.from_pretrained(base, ckpt / "adapter").merge_and_unload().state_dict()
    assert merged.keys() == want.keys()
    for k in want:  # the top level is exactly base + the saved adapter, merged
        torch.testing.assert_close(merged[k], want[k], rtol=0, atol=1e-6)


def test_step_metrics_count_the_reward_and_who_failed() -> None:
    from lego.conductor.step_summary import step_metrics
    from lego.types import GradeResult, Trajectory

    resolved = GradeResult(reward=1.0, resolved=True)
    trajs = [
        Trajectory(trajectory_id="a", session_id="a", reward=1.0, grade=resolved),
        Trajectory(trajectory_id="z", session_id="z", reward=0.0, grade=resolved, metadata={"zeroed_by": ["x"]}),
        Trajectory(trajectory_id="k", session_id="k", termination="harness_error", reward=0.0, cause="policy"),
        Trajectory(trajectory_id="d", session_id="d", termination="harness_error", cause="infrastructure"),
    ]
    m = step_metrics(trajs, {})
    assert m["reward/pass_rate"] == pytest.approx(1 / 3)  # the zeroed fix does not pass; the infra one is not scored
    assert (m["rollout/infra_failures"], m["rollout/policy_failures"], m["guards/zeroed"]) == (1.0, 1.0, 0.25)


def test_a_run_that_cannot_start_leaves_no_directory(tmp_path: Path) -> None:
    """A refused model fails before step 1; no empty run directory is left for --resume to trip on."""
    from lego.conductor.loop import train
    from lego.config import load_config
    from lego.errors import ModelError

    out = tmp_path / "run"
    cfg = load_config(None, [f"engine.model={tmp_path / 'missing'}", f"training.out_dir={out}"])
    with pytest.raises(ModelError, match="is not a directory"):
        train(cfg)
    assert not out.exists()
