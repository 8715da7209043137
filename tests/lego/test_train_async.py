"""`lego train` with ``training.max_staleness = 1`` end to end on the real stack (tiny model, lego-agent
processes, bubblewrap sandboxes, hidden-test grading): rollouts keep running while the trainer
updates, every step is faithful on the tokens it trains, staleness is logged, no group is trained
twice, and SIGKILL or Ctrl-C with rollouts in flight, then ``--resume``, loses and doubles no step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lego.conductor.async_train import LEDGER_KEY
from lego.conductor.loop import train
from lego.config import load_config
from lego.io import read_jsonl
from tests.lego.calc_task import make_calc_tasks, train_overrides

pytestmark = pytest.mark.slow

PEARSON = "training/rollout_actor_probs_pearson_corr"


def _overrides(tasks: Path, model: Path, out: Path, steps: int) -> list[str]:
    return [*train_overrides(tasks, model, out, steps), "training.max_staleness=1", "training.concurrency=2"]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_calc_tasks(tmp_path_factory.mktemp("calc"))


def _trained_groups(out: Path) -> list[tuple[str, object]]:
    """(task, seed) of every trajectory an update trained on, over all steps."""
    keys = []
    for f in sorted((out / "trajectories").rglob("*.json")):
        t = json.loads(f.read_text())
        if t["task_id"].startswith("canary-"):  # an impossible canary: measured, never trained
            continue
        keys.append((t["task_id"], t["metadata"].get("seed")))
    return keys


def test_an_async_run_trains_on_rollouts_it_never_waited_for(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    # with one impossible canary an update, run beside the producer's groups and never trained on
    cfg = load_config(None, [*_overrides(tasks, tiny_model_dir, tmp_path / "run", steps=3), "tasks.canary_rate=0.5"])
    run = train(cfg)
    lines = read_jsonl(run.metrics)
    assert [ln["step"] for ln in lines] == [1, 2, 3]
    assert all(ln["metrics"]["hack/canary_rollouts"] == 1.0 for ln in lines)
    assert all(ln["metrics"]["hack/canary_pass_rate"] == 0.0 for ln in lines)
    assert [ln["metrics"]["policy/version"] for ln in lines] == [1.0, 2.0, 3.0]
    for ln in lines:
        m = ln["metrics"]
        assert m["rollout/count"] == 2.0
        # the gate's Pearson covers the tokens the trainer's own version sampled; a batch sampled wholly
        # by the previous version has none (its spread is logged per lag instead)
        assert m.get(PEARSON, 1.0) >= 0.999
        assert m.get(PEARSON) is not None or m["rollout_corr/tokens/lag_1"] > 0
        assert 0.0 <= m["training/staleness_mean"] <= m["training/staleness_max"] <= 1.0
        assert m["async/dropped_groups"] >= 0.0
        assert m["perf/update_s"] > 0.0 and 0.0 < m["perf/engine_busy"] <= 1.0
    assert any(PEARSON in ln["metrics"] for ln in lines)
    # rollouts ran ahead of the trainer: by the last update more had ended than the updates trained on
    assert lines[-1]["metrics"]["async/rollouts_done"] >= 6.0
    keys = _trained_groups(run.root)
    assert len(keys) == 6 and len(set(keys)) == 6  # no rollout trained twice
    state = json.loads((run.root / "checkpoints" / "step_000003" / "trainer_state.json").read_text())
    ledger = state["extra"][LEDGER_KEY]  # which groups the updates consumed: what a resume starts after
    assert ledger["low"] + len(ledger["above"]) >= 3


def _args(tasks: Path, model: Path, out: Path, steps: int, *extra: str) -> list[str]:
    args = [sys.executable, "-m", "lego.conductor.cli.main", "train"]
    for o in [*_overrides(tasks, model, out, steps), *extra]:
        args += ["-o", o]
    return args


def _wait_for_lines(proc: subprocess.Popen[str] | subprocess.Popen[bytes], metrics: Path, n: int) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if len(read_jsonl(metrics)) >= n:
            return
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it could be stopped"


def test_sigkill_with_rollouts_in_flight_then_resume(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = _args(tasks, tiny_model_dir, out, 3)
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for_lines(proc, out / "metrics.jsonl", 1)  # step 2's (and 3's) rollouts are in flight
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    res = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = read_jsonl(out / "metrics.jsonl")
    assert [ln["step"] for ln in lines] == [1, 2, 3]
    assert [ln["metrics"]["policy/version"] for ln in lines] == [1.0, 2.0, 3.0]
    keys = _trained_groups(out)
    assert len(keys) == len(set(keys)) == 6, keys  # the in-flight rollouts were redone, none trained twice


def test_ctrl_c_with_rollouts_in_flight_saves_and_resumes(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = _args(tasks, tiny_model_dir, out, 3, "harness.options={lego-agent = {max_tokens = 96}}")
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _wait_for_lines(proc, out / "metrics.jsonl", 1)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout[-3000:]
    assert took < 15, f"Ctrl-C took {took:.1f}s"
    saved = len(read_jsonl(out / "metrics.jsonl"))
    assert f"saved step {saved}; continue with" in stdout
    res = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert [ln["step"] for ln in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]
    keys = _trained_groups(out)
    assert len(keys) == len(set(keys)) == 6, keys
