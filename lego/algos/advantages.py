"""Group-normalised advantages (GRPO, Shao et al. 2024, arXiv:2402.03300; used unchanged by GSPO,
Zheng et al. 2025, arXiv:2507.18071).

For the G rollouts of one task, Aᵢ = (rᵢ − mean(r)) / (std(r) + eps). Three rules make this safe
for agentic rollouts:

- a group whose rewards have no spread carries no signal, so every member gets exactly 0 (not
  ``0 / eps`` rounding noise) and contributes nothing to the gradient;
- infrastructure failures (``valid=False``) are left out of the group statistics and get 0 — they
  are masked out of the loss, never scored as reward 0;
- a group with fewer than two valid members has no spread either (0).

``std`` is the unbiased sample standard deviation (``torch.std``'s default, as verl and TRL use).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

__all__ = ["group_advantages"]


def group_advantages(
    rewards: Sequence[float],
    groups: Sequence[Hashable],
    valid: Sequence[bool] | None = None,
    eps: float = 1e-6,
) -> list[float]:
    """Aᵢ = (rᵢ − mean_g) / (std_g + eps) within each group ``g`` (e.g. the task id).

    Args:
        rewards: one reward per rollout.
        groups: one group key per rollout (rollouts of the same task share a key).
        valid: False for a rollout that must not count (infrastructure failure); it gets 0.
        eps: added to the standard deviation (``algorithm.adv_eps``).

    Returns one advantage per rollout, in input order.
    """
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group keys")
    ok = [True] * len(rewards) if valid is None else [bool(v) for v in valid]
    if len(ok) != len(rewards):
        raise ValueError(f"{len(rewards)} rewards but {len(ok)} valid flags")
    members: dict[Hashable, list[int]] = {}
    for i, (g, v) in enumerate(zip(groups, ok, strict=True)):
        if v:
            members.setdefault(g, []).append(i)
    out = [0.0] * len(rewards)
    for idx in members.values():
        r = torch.tensor([float(rewards[i]) for i in idx], dtype=torch.float64)
        if len(idx) < 2 or bool((r == r[0]).all()):
            continue  # no spread: exactly zero advantage for every member
        adv = (r - r.mean()) / (r.std() + eps)
        for i, a in zip(idx, adv.tolist(), strict=True):
            out[i] = float(a)
    return out
