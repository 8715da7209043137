"""FSDP2 scale-out: 2 CPU processes on gloo compute the same loss and gradients as 1 process; a
follower carries out every command rank 0 sends through the StepChannel; a dead follower is named."""

import os
import socket
import sys
from pathlib import Path

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


class _KeepWeights:
    """A WeightSync double: keeps what it was pushed, as an in-process engine would serve it."""

    def __init__(self) -> None:
        self.pushed: list[dict[str, torch.Tensor]] = []

    def push(self, trainer) -> int:
        self.pushed.append({k: v.clone() for k, v in trainer.engine_state_dict().items()})
        return len(self.pushed)

    def close(self) -> None:
        return None


def _channel_worker(
    rank: int, world: int, port: int, model_dir: str, items, cfg, out: str, run_dir: str, backend: str = "gloo"
) -> None:
    from lego.training.ranks import StepChannel, follow

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        channel = StepChannel.open()
        trainer = Trainer(model_dir, cfg, device=device)
        if rank == 0:
            weights = _KeepWeights()
            first = channel.train_step(trainer, items, None)
            channel.push(weights, trainer)
            saved = channel.save(trainer, Path(run_dir), {"note": "step 1"}, export_merged=False)
            channel.train_step(trainer, items, None)  # step 2, then back to step 1's checkpoint
            extra = channel.restore(trainer, saved)
            channel.push(weights, trainer)
            channel.stop()
            result = {"first": first, "pushed": weights.pushed, "extra": extra, "saved_step": channel.saved_step}
        else:
            result = {"done": follow(channel, trainer)}
        result["step_count"] = trainer.step_count
        torch.save(result, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_followers_take_every_command_rank_0_sends(model_dir, items, make_config, tmp_path):
    _check_the_channel(model_dir, items, make_config(micro_batch_size=3), tmp_path, "gloo", "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="FSDP2 on NCCL: two GPUs, one per rank")
def test_followers_take_every_command_on_nccl(model_dir, items, make_config, tmp_path):
    _check_the_channel(model_dir, items, make_config(micro_batch_size=3), tmp_path, "nccl", "cuda:0")


def _check_the_channel(model_dir, items, cfg, tmp_path, backend: str, device: str) -> None:
    single = Trainer(model_dir, cfg, device=device)
    straight = single.train_step(items)
    after_one = {k: v.cpu() for k, v in single.engine_state_dict().items()}

    out = str(tmp_path / "result")
    args = (2, _free_port(), str(model_dir), items, cfg, out, str(tmp_path / "run"), backend)
    mp.spawn(_channel_worker, args=args, nprocs=2, join=True)
    lead, follower = torch.load(f"{out}.0", weights_only=False), torch.load(f"{out}.1", weights_only=False)

    assert follower["done"] == 6  # Train, Push, Save, Train, Restore, Push; then Stop
    assert lead["step_count"] == follower["step_count"] == 1  # step 2 undone on both ranks by the restore
    assert lead["extra"] == {"note": "step 1"} and lead["saved_step"] == 1
    assert lead["first"]["actor/pg_loss"] == pytest.approx(straight["actor/pg_loss"], abs=1e-6)
    one, restored = ({k: v.cpu() for k, v in pushed.items()} for pushed in lead["pushed"])
    for k in after_one:  # the 2-rank step is the 1-process step (the FSDP2 test above bounds it at 1e-6)
        assert torch.allclose(one[k], after_one[k], atol=1e-6), (k, (one[k] - after_one[k]).abs().max())
        assert torch.equal(restored[k], one[k]), k  # the restored checkpoint is step 1's weights exactly


def _lost_worker(rank: int, world: int, port: int, model_dir: str, items, cfg, out: str) -> None:
    from lego.errors import RankFailedError
    from lego.training.ranks import StepChannel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    channel = StepChannel.open()
    if rank == 1:
        os._exit(3)  # a follower that dies between steps (killed, out of memory)
    trainer = Trainer(model_dir, cfg, device="cpu")
    try:
        channel.train_step(trainer, items, None)
        result = "no error"
    except RankFailedError as exc:
        result = f"{exc.rank}: {exc}"
    with open(out, "w") as fh:
        fh.write(result)
    os._exit(0)  # the default group lost a member: tearing it down could wait on the dead rank


def test_a_dead_follower_is_named_not_waited_for(model_dir, items, make_config, tmp_path):
    out = tmp_path / "result.txt"
    args = (2, _free_port(), str(model_dir), items, make_config(micro_batch_size=3), str(out))
    ctx = mp.spawn(_lost_worker, args=args, nprocs=2, join=False)
    ctx.processes[0].join(120)
    alive = ctx.processes[0].is_alive()
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
        p.join()
    assert not alive, "rank 0 waited for a dead follower"
    text = out.read_text()
    assert text.startswith("1: rank 1 of the trainer is gone"), text
    assert "--resume" in text
