"""`lego train` with ``engine.kind = "vllm"``: two steps against a stand-in `vllm serve` (real HTTP,
vLLM's routes and shapes, a real engine behind them), through lego's own VLLMEngine and weight sync.
Each step's update reaches the server (``/collective_rpc reload_weights``) before the next rollouts,
and the rollouts then sample from the new weights (the rollout-train Pearson stays ~1 at step 2)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lego.conductor.loop import train
from lego.config import load_config
from lego.io import read_jsonl
from tests.engines.vllm_standin import VLLMStandIn
from tests.lego.calc_task import make_calc_tasks

pytestmark = pytest.mark.slow

PEARSON = "training/rollout_actor_probs_pearson_corr"


def test_train_on_vllm_delivers_weights_every_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    tasks = make_calc_tasks(tmp_path / "calc")
    served = tmp_path / "served"  # what `vllm serve <dir>` was started on; the trainer rewrites its weights
    shutil.copytree(tiny_model_dir, served)
    with VLLMStandIn(served) as server:
        cfg = load_config(
            None,
            [
                f"tasks.source={tasks}",
                f"engine.model={tiny_model_dir}",
                "engine.kind=vllm",
                f"engine.vllm_url={server.url}",
                f"engine.vllm_weights_dir={served}",
                f"training.out_dir={tmp_path / 'run'}",
                "training.steps=2",
                "training.tasks_per_step=1",
                "algorithm.group_size=2",
                "harness.max_turns=2",
                "harness.options={lego-agent = {max_tokens = 24}}",
                "training.lr=1e-3",
            ],
        )
        run = train(cfg)
    lines = read_jsonl(run.metrics)
    assert [ln["metrics"]["policy/version"] for ln in lines] == [1.0, 2.0]
    assert server.loads == [("/collective_rpc", str(served), 1), ("/collective_rpc", str(served), 2)]
    assert server.completions_served >= 4  # every rollout was served by the stand-in
    # step 2's rollouts came from the weights delivered after step 1: the trainer agrees with them
    assert all(ln["metrics"][PEARSON] >= 0.999 for ln in lines)
