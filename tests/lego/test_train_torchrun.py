"""`lego train` under real `torchrun` (2 CPU ranks on gloo, the tiny policy, real rollouts on rank 0).

What is shown: the two ranks' run trains exactly what one process trains on the same batches (the
checkpoint's weights are every rank's shards gathered, so a follower that skipped or repeated a step
would show in them); `--resume` continues the step count; a follower killed mid-run stops rank 0
with RankFailedError's message instead of a hang; a setting the sharded trainer cannot take is
refused with exit 2 before anything loads."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lego.conductor.preflight import check_ranks
from lego.config import load_config
from lego.errors import ConfigError
from lego.io import read_jsonl
from tests.lego.calc_task import make_calc_tasks
from tests.lego.calc_task import train_overrides as _calc_overrides

TORCHRUN = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "lego"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # torchrun's own default for several ranks, set to keep it quiet


def train_overrides(tasks: Path, model: Path, out: Path, steps: int) -> list[str]:
    """The calc task's short run, as a full fine-tune: the sharded trainer gathers full weights only."""
    return [*_calc_overrides(tasks, model, out, steps), "training.finetune=full"]


def _argv(overrides: list[str], *extra: str) -> list[str]:
    return [*TORCHRUN, "train", *extra, *(a for o in overrides for a in ("-o", o))]


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_calc_tasks(tmp_path_factory.mktemp("calc"))


@pytest.fixture(scope="module")
def two_rank_run(tasks: Path, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-step run under torchrun with 2 ranks."""
    out = tmp_path_factory.mktemp("torchrun") / "run"
    res = _run(_argv(train_overrides(tasks, tiny_model_dir, out, steps=2)), timeout=600)
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert res.stdout.count("run: ") == 1, res.stdout  # rank 0 reports, the follower does not
    return out


@pytest.mark.slow  # 60-150 s on a shared 2-core CPU: two ranks load torch, rank 0 runs 4 rollouts
def test_two_ranks_train_what_one_process_trains(two_rank_run: Path, tasks: Path, tiny_model_dir: Path) -> None:
    """Replays the run's own recorded batches through one process's trainer, as the step close builds
    them, and compares. Tolerance: FSDP2 reduce-scatters the two ranks' gradient halves, a different
    summation order than one process's, which the gradient test in tests/trainer/test_distributed.py
    bounds at rtol 1e-4; AdamW's update is lr × m/√v, so at lr 1e-3 two steps differ by ~1e-7, and
    1e-5 leaves room without hiding a skipped step (one step moves weights by ~1e-3)."""
    from safetensors.torch import load_file

    from lego.algos import group_advantages
    from lego.training.trainer import Trainer, items_from_trajectories
    from lego.types import Trajectory

    lines = read_jsonl(two_rank_run / "metrics.jsonl")
    assert [ln["step"] for ln in lines] == [1, 2]
    assert [ln["metrics"]["policy/version"] for ln in lines] == [1.0, 2.0]
    assert (two_rank_run / "checkpoints" / "latest").read_text().strip() == "step_000002"

    cfg = load_config(None, train_overrides(tasks, tiny_model_dir, two_rank_run, steps=2))
    one = Trainer.from_config(cfg, device="cpu")
    for step, line in enumerate(lines, start=1):
        files = sorted((two_rank_run / "trajectories" / f"step_{step:04d}").glob("*.json"))
        trajs = [Trajectory.model_validate_json(p.read_text()) for p in files]
        adv = group_advantages(
            [t.reward or 0.0 for t in trajs],
            [t.task_id for t in trajs],
            valid=[not t.is_infra_failure for t in trajs],
            eps=cfg.algorithm.adv_eps,
        )
        m = one.train_step(items_from_trajectories(trajs, adv, side_threads=cfg.training.train_side_threads))
        assert m["actor/tokens"] == line["metrics"]["actor/tokens"]
        assert m["actor/pg_loss"] == pytest.approx(line["metrics"]["actor/pg_loss"], abs=1e-6)
    saved = load_file(two_rank_run / "checkpoints" / "step_000002" / "model.safetensors")
    mine = one.engine_state_dict()
    assert saved
    for k, v in saved.items():
        assert torch.allclose(v, mine[k], atol=1e-5), (k, (v - mine[k]).abs().max())


@pytest.mark.slow  # 60-120 s: a third step after a resume
def test_resume_under_torchrun_continues_the_step_count(
    two_rank_run: Path, tasks: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    shutil.copytree(two_rank_run, out)
    res = _run(_argv(train_overrides(tasks, tiny_model_dir, out, steps=3), "--resume"), timeout=600)
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert "resumed" in res.stdout
    lines = read_jsonl(out / "metrics.jsonl")
    assert [ln["step"] for ln in lines] == [1, 2, 3]
    assert lines[2]["metrics"]["policy/version"] == 3.0
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_000003"


def _follower_pid(torchrun_pid: int) -> int | None:
    """The pid of torchrun's worker with RANK=1 (its environment says which rank it is)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == torchrun_pid and b"RANK=1" in environ:
            return int(proc.name)
    return None


@pytest.mark.slow  # 40-120 s: one step, then the kill
def test_a_killed_follower_stops_rank_0_with_a_named_error(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    log = tmp_path / "torchrun.log"
    with open(log, "w") as sink:  # a file, not a pipe: nobody reads a pipe while the run goes on
        proc = subprocess.Popen(
            _argv(train_overrides(tasks, tiny_model_dir, out, steps=3)),
            env=ENV,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline and proc.poll() is None and not read_jsonl(out / "metrics.jsonl"):
            time.sleep(0.5)
        assert proc.poll() is None, "the run ended before step 1 closed"
        follower = _follower_pid(proc.pid)
        assert follower is not None
        os.kill(follower, signal.SIGKILL)  # while rank 0 runs step 2's rollouts
        proc.wait(timeout=90)  # no hang: torchrun's SIGTERM reaches rank 0 at once
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert proc.returncode != 0
    assert "RankFailedError: rank 1 of the trainer is gone" in text, text[-4000:]
    assert "step 1 is saved" in text and "train --resume" in text, text[-4000:]


@pytest.mark.slow  # 15-40 s: two ranks start and refuse (torchrun and the CLI import, no model loads)
def test_torchrun_refuses_a_lora_run_before_any_compute(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _run(_argv([*_calc_overrides(tasks, tiny_model_dir, out, steps=1), "training.finetune=lora"]), timeout=300)
    text = res.stdout + res.stderr
    assert res.returncode != 0
    assert "error: training.finetune: 'lora' with 2 ranks" in text, text[-3000:]
    assert "exitcode  : 2" in text, text[-3000:]  # torchrun's summary: the rank exited 2, the CLI's code for input
    assert "ready in" not in text and not out.exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU count check runs on CUDA")
def test_more_ranks_than_gpus_is_refused_with_the_count(tasks: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    ranks = str(torch.cuda.device_count() + 1)
    argv = [*TORCHRUN[:3], ranks, *TORCHRUN[4:], "train"]
    for o in train_overrides(tasks, tiny_model_dir, tmp_path / "run", steps=1):
        argv += ["-o", o]
    if shutil.which("bwrap") is None:  # a GPU machine without bubblewrap: its preflight would answer first
        argv += ["-o", "sandbox.unsafe_no_isolation=true"]
    res = _run(argv, timeout=300)
    text = res.stdout + res.stderr
    assert res.returncode != 0
    assert f"torchrun started {ranks} processes on this node but" in text and "--nproc-per-node" in text, text[-3000:]


def test_check_ranks_names_the_field_and_the_fix() -> None:
    torchrun = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    check_ranks(load_config(None, ["training.finetune=full"]), torchrun)  # the default, fully fine-tuned
    check_ranks(load_config(None, ["training.finetune=lora"]), {})  # one process: anything goes
    with pytest.raises(ConfigError, match=r"MASTER_ADDR, MASTER_PORT are not.*torchrun --standalone"):
        check_ranks(load_config(None, ["training.finetune=full"]), {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"})
    with pytest.raises(ConfigError, match=r"^training\.finetune: 'lora' with 2 ranks.*training\.finetune=full"):
        check_ranks(load_config(None, ["training.finetune=lora"]), torchrun)
    with pytest.raises(ConfigError, match=r"^engine\.kind: 'oracle'"):
        check_ranks(load_config(None, ["training.finetune=full", "engine.kind=oracle"]), torchrun)


def test_the_cli_names_itself_as_started(monkeypatch: pytest.MonkeyPatch) -> None:
    from lego.conductor.cli.main import invoked_as

    main = Path(__file__).resolve().parents[2] / "lego" / "__main__.py"
    monkeypatch.setattr(sys, "argv", [str(main), "train"])
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert invoked_as().endswith(" -m lego")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "1")
    assert invoked_as() == "torchrun --standalone --nproc-per-node 2 -m lego"
    res = subprocess.run([sys.executable, "-m", "lego", "--help"], capture_output=True, text=True, check=False)
    assert res.returncode == 0 and "Usage: python -m lego" in res.stdout, res.stderr
