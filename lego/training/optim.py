"""The trainer's optimizer settings: AdamW parameter groups, the learning-rate schedule, clipping.

Kept apart from the update itself (:mod:`lego.training.trainer`) and shared with checkpoint
restore, which rebuilds each group's learning rate from the current config.
"""

from __future__ import annotations

from typing import Any

import torch

from lego.config import TrainingConfig

__all__ = ["clip_and_step", "lr_at", "param_groups"]


def param_groups(model: torch.nn.Module, cfg: TrainingConfig) -> list[dict[str, Any]]:
    """AdamW's parameter groups: the trained weights at ``training.lr``, and with LoRA the
    ``lora_modules_to_save`` copies at ``lora_modules_to_save_lr`` when that is set. Each group
    carries its ``base_lr`` for the schedule."""
    saved: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (saved if ".modules_to_save." in name else rest).append(p)
    if not saved or cfg.lora_modules_to_save_lr is None:
        return [{"params": saved + rest, "lr": cfg.lr, "base_lr": cfg.lr}]
    lr2 = cfg.lora_modules_to_save_lr
    return [{"params": rest, "lr": cfg.lr, "base_lr": cfg.lr}, {"params": saved, "lr": lr2, "base_lr": lr2}]


def lr_at(update: int, base_lr: float, warmup_steps: int) -> float:
    """The learning rate of update ``update`` (0-based): linear warmup over ``warmup_steps``, then ``base_lr``."""
    return base_lr * min(1.0, (update + 1) / warmup_steps) if warmup_steps else base_lr


def clip_and_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float | None) -> float:
    """Clip the gradient norm to ``grad_clip`` (None: no clipping), step, zero the gradients; returns
    the norm before clipping (gathered over ranks under FSDP2).

    A gradient that is exactly zero everywhere (every advantage 0 and no KL term: every group's
    rewards agreed) takes no step: AdamW would still move every weight by its momentum and weight
    decay, and measured so in `lego serve --learn` (51 of 64 such steps moved the weights as far as
    the steps with a gradient; held-out pass@1 fell). The norm is the same on every rank, so all skip."""
    params = [p for p in model.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip is not None else float("inf"))
    if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor sharded over ranks
        norm = norm.full_tensor()
    if float(norm) != 0.0:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)
