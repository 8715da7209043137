"""Scale-out helpers for running the trainer under ``torchrun`` with FSDP2.

``torchrun --nproc-per-node N ...`` sets RANK / WORLD_SIZE / LOCAL_RANK; :func:`init_from_env`
starts the process group (NCCL on CUDA, gloo on CPU). :func:`shard_model` applies FSDP2
(``torch.distributed.fsdp.fully_shard``) to every decoder layer and then the root, the layout
the PyTorch FSDP2 docs recommend for transformers. Every helper is a no-op in a single process, so
the trainer calls them unconditionally.

Two process groups: the default one (NCCL on CUDA, gloo on CPU) carries the training collectives;
a gloo *control* group (:func:`control_group`) carries the small pickled commands rank 0 sends
its followers between steps (:mod:`lego.training.ranks`). Its timeout is a day: the followers wait
in it while rank 0 runs a step's rollouts, which take minutes, and must not time out there.

How the batch is split: every rank sees the whole list of items (the rollouts are gathered on
rank 0 and broadcast by the caller), computes the same global token weights, and takes micro-batch
k when ``k % world_size == rank``. Each rank's loss is its share of the full-batch loss; FSDP2's
reduce-scatter averages gradients over ranks, so the trainer multiplies its loss by world_size to
get the sum — the gradient of the full-batch loss, as in one process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from lego.errors import ConfigError

__all__ = [
    "DistInfo",
    "all_reduce_max",
    "all_reduce_sum",
    "broadcast_from_main",
    "control_group",
    "current",
    "full_optimizer_state",
    "full_state_dict",
    "gather_cat",
    "gather_labels",
    "init_from_env",
    "load_full_optimizer_state",
    "shard_model",
    "shutdown",
]

CONTROL_TIMEOUT = timedelta(hours=24)
"""How long a follower waits in the control group for rank 0's next command (a step's rollouts)."""

SHUTDOWN_WAIT = timedelta(seconds=60)
"""How long a rank waits at the closing barrier for the others to reach the end of the run."""

_control: Any = None
_owned = False
"""Whether :func:`init_from_env` started the process group (then :func:`shutdown` ends it)."""


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def current() -> DistInfo:
    """This process's rank and the world size (rank 0 of 1 when not distributed)."""
    if not _active():
        return DistInfo()
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank())))


def init_from_env() -> DistInfo:
    """Start the process group from torchrun's environment (no-op without WORLD_SIZE > 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            visible = torch.cuda.device_count()
            if visible < local_world:
                raise ConfigError(
                    f"torchrun started {local_world} processes on this node but {visible} GPU(s) are visible "
                    "(CUDA_VISIBLE_DEVICES); pass --nproc-per-node at most the GPU count, one GPU per rank"
                )
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
        global _owned
        _owned = True
    return current()


def shutdown() -> None:
    """Leave the process group in order, on every rank once the run is over: all ranks meet at a
    barrier on the control group (at most :data:`SHUTDOWN_WAIT`), then each destroys its groups.

    A process that exits with its gloo groups still alive tears them down in the interpreter's
    final destructors, and a peer that closed its sockets first can then abort it there
    ("terminate called without an active exception", SIGABRT: a finished run reported as failed).
    Only a group :func:`init_from_env` started is ended; a barrier that times out (a rank stuck or
    gone) does not stop the others from leaving."""
    global _control, _owned
    if not (_owned and dist.is_initialized()):
        return
    try:
        if _control is not None:
            dist.monitored_barrier(group=_control, timeout=SHUTDOWN_WAIT)
    except (RuntimeError, dist.DistError):
        pass  # the run's own outcome is already decided; a rank that is stuck is torchrun's to end
    finally:
        dist.destroy_process_group()
        _control = None
        _owned = False


def control_group() -> Any:
    """The gloo group for rank 0's commands (created on first call; every rank must make that call)."""
    global _control
    if _control is None and _active():
        _control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
    return _control


def broadcast_from_main(obj: Any, group: Any = None) -> Any:
    """``obj`` as rank 0 has it, on every rank (pickled; a no-op in one process). Blocks until rank 0
    sends: over ``group`` (the control group for commands), whose timeout bounds the wait."""
    if not _active():
        return obj
    box = [obj if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def shard_model(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2: shard each decoder layer, then the root (embeddings, norm, head)."""
    from torch.distributed.fsdp import fully_shard

    if not _active():
        return model
    for module in model.modules():
        if type(module).__name__.endswith("DecoderLayer"):
            fully_shard(module)
    fully_shard(model)
    return model


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded state dict (every rank gets it; gathered from DTensor shards under FSDP2)."""
    if not _active():
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer state, unsharded and keyed by parameter name (so a checkpoint written under
    FSDP2 loads in one process and back). Under FSDP2 a collective: every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=False)
    return dict(get_optimizer_state_dict(model, optimizer, options=opts))


def load_full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a state from :func:`full_optimizer_state` (resharding it under FSDP2)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))  # type: ignore[arg-type]


def all_reduce_sum(values: list[float]) -> list[float]:
    if not _active() or not values:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return [float(x) for x in t]


def all_reduce_max(value: float) -> float:
    if not _active():
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0])


def gather_cat(t: torch.Tensor) -> torch.Tensor:
    """Concatenate a 1-D tensor from every rank (rank order)."""
    if not _active():
        return t
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, t.cpu())
    return torch.cat(parts)


def gather_labels(labels: list[str]) -> list[str]:
    """Concatenate a list of strings from every rank (rank order, matching :func:`gather_cat`)."""
    if not _active():
        return labels
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, labels)
    return [x for p in parts for x in p]
