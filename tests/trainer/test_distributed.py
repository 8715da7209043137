"""FSDP2 scale-out: 2 CPU processes on gloo compute the same loss and gradients as 1 process."""

import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lego.training.checkpoint import load_latest
from lego.training.trainer import Trainer

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux" or not dist.is_available(), reason="gloo on Linux"),
    pytest.mark.slow,  # two spawned ranks: 24-58 s on a shared 2-core CPU
]


def _worker(rank: int, world: int, port: int, model_dir: str, items, cfg, out: str, run_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        trainer = Trainer(model_dir, cfg, device="cpu")
        metrics = trainer.compute_gradients(items)
        grads = {n: p.grad.full_tensor() for n, p in trainer.model.named_parameters()}
        norm = trainer.apply_gradients()
        trainer.step_count = 1
        weights = {k: v.clone() for k, v in trainer.engine_state_dict().items()}
        trainer.save(run_dir)  # every rank: weights and optimizer state are gathered
        if rank == 0:
            torch.save({"metrics": metrics, "grads": grads, "norm": norm, "weights": weights}, out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_match_one_process(model_dir, items, make_config, tmp_path):
    cfg = make_config(micro_batch_size=3)  # 8 items -> 3 micro-batches: rank 1 runs one padding pass
    single = Trainer(model_dir, cfg, device="cpu")
    m1 = single.compute_gradients(items)
    g1 = {n: p.grad.clone() for n, p in single.model.named_parameters()}
    norm1 = single.apply_gradients()
    w1 = single.engine_state_dict()

    out = str(tmp_path / "rank0.pt")
    run_dir = str(tmp_path / "run")
    mp.spawn(_worker, args=(2, _free_port(), str(model_dir), items, cfg, out, run_dir), nprocs=2, join=True)
    got = torch.load(out, weights_only=False)

    assert got["metrics"]["actor/pg_loss"] == pytest.approx(m1["actor/pg_loss"], abs=1e-6)
    assert got["metrics"]["actor/tokens"] == m1["actor/tokens"]
    assert got["metrics"]["training/rollout_actor_probs_pearson_corr"] == pytest.approx(
        m1["training/rollout_actor_probs_pearson_corr"], abs=1e-9
    )
    assert got["grads"].keys() == g1.keys()
    for k in g1:
        assert torch.allclose(got["grads"][k], g1[k], rtol=1e-4, atol=1e-7), (k, (got["grads"][k] - g1[k]).abs().max())
    assert got["norm"] == pytest.approx(norm1, rel=1e-5)
    for k in w1:
        assert torch.allclose(got["weights"][k], w1[k], atol=1e-6)

    # the FSDP2 checkpoint resumes in one process and continues like the single-process run
    single.step_count = 1
    straight = single.step(items)
    resumed = Trainer(model_dir, cfg, device="cpu")
    resumed.load(load_latest(run_dir))
    assert resumed.optimizer.state
    again = resumed.step(items)
    assert again["actor/pg_loss"] == pytest.approx(straight["actor/pg_loss"], abs=1e-6)
    a, b = single.engine_state_dict(), resumed.engine_state_dict()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), (k, (a[k] - b[k]).abs().max())
