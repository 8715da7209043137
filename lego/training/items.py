"""Training items and how they become padded tensors.

A :class:`TrainItem` is one recorded segment plus what the loss needs from its trajectory
(advantage, episode, harness, weight). :class:`PaddedBatch` right-pads a few of them into the
tensors the trainer's forward pass takes; padding never changes a real token's logits because
attention is causal and padding sits after every real token.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from lego.algos.advantages import group_advantages
from lego.types import NO_LOGPROB, Segment, Trajectory, logprobs_to_array

__all__ = [
    "PaddedBatch",
    "TrainItem",
    "check_old_logprobs",
    "items_from_trajectories",
    "micro_batch_indices",
    "padded_rows",
    "with_rollout_logprobs",
]


class TrainItem(BaseModel):
    """One segment to optimise on, with what the loss needs to know about its trajectory."""

    model_config = ConfigDict(extra="forbid")

    segment: Segment
    advantage: float = Field(description="The trajectory's group-normalised advantage (lego.algos.group_advantages).")
    episode_id: str = Field(description="Segments of one trajectory share it, so the trajectory counts once.")
    harness: str = Field("", description="Harness that produced it (per-harness fidelity breakdown).")
    weight: float = Field(1.0, ge=0, description="Multiplies this segment's token weights (guards' down-weighting).")
    token_advantages: list[float] | None = Field(
        None,
        description="One advantage per response token, used in place of `advantage` at every token (hindsight "
        "on-policy distillation's log pi_teacher - log pi_student); None: `advantage` at every token.",
    )

    @model_validator(mode="after")
    def _one_per_token(self) -> TrainItem:
        if self.token_advantages is not None and len(self.token_advantages) != len(self.segment.response_ids):
            raise ValueError(
                f"token_advantages has {len(self.token_advantages)} values for {len(self.segment.response_ids)} "
                "response tokens: give one per token"
            )
        return self


def items_from_trajectories(
    trajectories: Sequence[Trajectory],
    advantages: Sequence[float] | None = None,
    adv_eps: float = 1e-6,
    side_threads: bool = False,
) -> list[TrainItem]:
    """Every main-thread segment with at least one sampled token, tagged with its trajectory's advantage;
    with ``side_threads`` (``training.train_side_threads``) the side threads' segments too, as part of
    the same episode.

    ``advantages`` default: group-normalised over trajectories sharing a ``task_id``
    (:func:`lego.algos.group_advantages`), counting only trajectories that have a reward and are
    not infrastructure failures. Infrastructure failures and unrewarded trajectories are dropped:
    masked out of the loss, never scored 0."""
    usable = [not t.is_infra_failure and t.reward is not None for t in trajectories]
    if advantages is None:
        rewards = [t.reward if t.reward is not None else 0.0 for t in trajectories]
        advantages = group_advantages(rewards, [t.task_id for t in trajectories], usable, adv_eps)
    items = []
    for traj, adv, ok in zip(trajectories, advantages, usable, strict=True):
        if not ok:
            continue
        side = [seg for thread in traj.side_threads for seg in thread.segments] if side_threads else []
        for seg in [*traj.segments, *side]:
            if seg.num_sampled:
                items.append(TrainItem(segment=seg, advantage=adv, episode_id=traj.trajectory_id, harness=traj.harness))
    return items


def micro_batch_indices(lengths: Sequence[int], size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Item indices in consecutive micro-batches of at most ``size`` items (``training.micro_batch_size``)
    whose padded size, rows × the longest row of ``lengths``, stays within ``max_tokens``
    (``training.micro_batch_tokens``; an item longer than that runs alone). Order is kept."""
    out: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        wider = max(longest, n)
        if cur and (len(cur) == size or (max_tokens is not None and (len(cur) + 1) * wider > max_tokens)):
            out.append(cur)
            cur, wider = [], n
        cur.append(i)
        longest = wider
    if cur:
        out.append(cur)
    return out


class PaddedBatch:
    """Right-padded tensors for a micro-batch of segments, aligned on response positions.

    ``L`` = longest prompt+response, ``R`` = longest response. ``gather_pos[b, j]`` is the position
    whose logits predict response token j of row b (prompt length − 1 + j): the next-token shift.

    ``rollout_logp`` holds the engine's logprob where ``mask`` is 1 — a :class:`Segment` has one at
    every sampled token — and at constrained tokens, and :data:`~lego.types.NO_LOGPROB` (NaN) where
    the segment has none and in the padding; readers (the loss, the fidelity metrics) look only
    under ``mask``, and one that did not would get NaN, not a plausible 0.0 (log p = 0).

    ``versions`` holds the policy version that sampled each token, -1 where the segment records
    none (context tokens, padding, a record without versions); :meth:`version_lag` turns it into
    how many versions before the trainer's each sampled token was drawn.
    """

    def __init__(self, items: Sequence[TrainItem], device: torch.device, pad_id: int = 0) -> None:
        segs = [it.segment for it in items]
        if any(not s.prompt_ids and s.response_ids for s in segs):
            raise ValueError("a segment with an empty prompt has no context for its first token; record the prompt ids")
        lens = [len(s.prompt_ids) + len(s.response_ids) for s in segs]
        self.prompt_lens = [len(s.prompt_ids) for s in segs]
        self.resp_lens = [len(s.response_ids) for s in segs]
        b, length, r = len(segs), max(lens), max(max(self.resp_lens), 1)
        self.input_ids = torch.full((b, length), pad_id, dtype=torch.long)  # (B, L)
        self.attention_mask = torch.zeros(b, length, dtype=torch.long)  # (B, L)
        self.mask = torch.zeros(b, r, dtype=torch.long)  # (B, R) sampled tokens
        self.rollout_logp = torch.full((b, r), NO_LOGPROB, dtype=torch.float32)  # (B, R) real where mask == 1
        self.resp_ids = torch.zeros(b, r, dtype=torch.long)  # (B, R)
        self.versions = torch.full((b, r), -1, dtype=torch.long)  # (B, R) -1: no version recorded
        self.gather_pos = torch.zeros(b, r, dtype=torch.long)  # (B, R) logits position predicting each token
        # (B, R) per-token advantages when some item has them (the others' scalar at each token); else None
        self.token_adv: torch.Tensor | None = None
        if any(it.token_advantages is not None for it in items):
            self.token_adv = torch.zeros(b, r, dtype=torch.float32)
            for i, it in enumerate(items):
                n = len(it.segment.response_ids)
                if n:
                    adv = it.token_advantages if it.token_advantages is not None else [it.advantage] * n
                    self.token_adv[i, :n] = torch.tensor(adv, dtype=torch.float32)
            self.token_adv = self.token_adv.to(device)
        for i, s in enumerate(segs):
            ids = s.prompt_ids + s.response_ids
            self.input_ids[i, : len(ids)] = torch.tensor(ids)
            self.attention_mask[i, : len(ids)] = 1
            n = len(s.response_ids)
            if n:
                self.resp_ids[i, :n] = torch.tensor(s.response_ids)
                self.mask[i, :n] = torch.tensor(s.response_mask)
                self.rollout_logp[i, :n] = torch.tensor(logprobs_to_array(s.response_logprobs))
                self.versions[i, :n] = torch.tensor([-1 if v is None else v for v in s.response_versions])
                self.gather_pos[i, :n] = torch.arange(n) + len(s.prompt_ids) - 1
        for name in ("input_ids", "attention_mask", "mask", "rollout_logp", "resp_ids", "gather_pos", "versions"):
            setattr(self, name, getattr(self, name).to(device))

    def version_lag(self, current: int) -> torch.Tensor:
        """(B, R): ``current − version`` at every sampled token, 0 elsewhere and where no version was
        recorded (such a token counts as current). A version newer than ``current`` is an error:
        the trainer would be training on tokens of weights it has not reached."""
        known = (self.mask == 1) & (self.versions >= 0)
        lag = torch.where(known, current - self.versions, torch.zeros_like(self.versions))
        if bool((lag < 0).any()):
            raise ValueError(
                f"a token was sampled by policy version {int(self.versions[known].max())}, newer than the "
                f"trainer's {current}; pass the version of the weights the trainer holds"
            )
        return lag


def with_rollout_logprobs(
    items: Sequence[TrainItem], rollout_logprobs: Sequence[Sequence[float | None]]
) -> list[TrainItem]:
    """``items`` with their segments' engine logprobs replaced, each segment validated again (so a
    ``None`` at a sampled token or a list of the wrong length is refused, as on recording)."""
    if len(rollout_logprobs) != len(items):
        raise ValueError(f"rollout_logprobs has {len(rollout_logprobs)} rows for {len(items)} items; pass one per item")
    out = []
    for i, (it, lp) in enumerate(zip(items, rollout_logprobs, strict=True)):
        try:
            seg = Segment.model_validate({**it.segment.model_dump(), "response_logprobs": list(lp)})
        except ValueError as exc:
            raise ValueError(f"rollout_logprobs[{i}] does not fit item {i}'s segment: {exc}") from exc
        out.append(it.model_copy(update={"segment": seg}))
    return out


def check_old_logprobs(items: Sequence[TrainItem], old_logprobs: Sequence[Sequence[float]]) -> None:
    """One π_old value for every response position of every item (what :meth:`lego.training.trainer.Trainer.recompute` returns)."""
    if len(old_logprobs) != len(items):
        raise ValueError(f"old_logprobs has {len(old_logprobs)} rows for {len(items)} items; pass one per item")
    for i, (it, row) in enumerate(zip(items, old_logprobs, strict=True)):
        if len(row) != len(it.segment.response_ids):
            raise ValueError(
                f"old_logprobs[{i}] has {len(row)} values for {len(it.segment.response_ids)} response tokens; "
                "pass one per response position (Trainer.recompute gives exactly that)"
            )


def padded_rows(rows: Sequence[Sequence[float]], chunk: list[int], like: torch.Tensor) -> torch.Tensor:
    """The rows of ``chunk`` as a right-padded tensor shaped like ``like`` (padding is under mask 0)."""
    out = torch.zeros_like(like)
    for r, i in enumerate(chunk):
        out[r, : len(rows[i])] = torch.tensor(list(rows[i]), dtype=like.dtype)
    return out
