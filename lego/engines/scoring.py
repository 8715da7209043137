"""Teacher-forced scoring for the in-process engine: the logprob of each given token after its prompt."""

from __future__ import annotations

from typing import Any

import torch

from lego.errors import ContextOverflowError, EngineError

__all__ = ["teacher_forced_logprobs"]


@torch.no_grad()
def teacher_forced_logprobs(
    model: Any,
    sequences: list[list[int]],
    prompt_lens: list[int],
    temperature: float,
    *,
    pad_token_id: int,
    batch_size: int,
    max_model_len: int,
) -> list[list[float]]:
    """``log_softmax(logits / T)`` of each token after its prompt (T=0 scores at 1), in right-padded
    batches of ``batch_size`` (right padding never changes a causal row's earlier logits)."""
    if len(sequences) != len(prompt_lens):
        raise EngineError(f"{len(sequences)} sequences but {len(prompt_lens)} prompt lengths")
    for s, p in zip(sequences, prompt_lens, strict=True):
        if len(s) > max_model_len:
            raise ContextOverflowError(p, len(s) - p, max_model_len)
    device = next(model.parameters()).device
    t = temperature if temperature > 0 else 1.0
    out: list[list[float]] = []
    for start in range(0, len(sequences), batch_size):
        chunk = sequences[start : start + batch_size]
        lens = prompt_lens[start : start + batch_size]
        width = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, s in enumerate(chunk):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        logp = torch.log_softmax(logits.float() / t, dim=-1)  # (B, T, V)
        for i, (s, p) in enumerate(zip(chunk, lens, strict=True)):
            if not 1 <= p <= len(s):
                raise EngineError(f"prompt_len {p} is outside sequence {start + i} of length {len(s)}")
            target = torch.tensor(s[p:], device=device)
            out.append(logp[i, p - 1 : len(s) - 1].gather(-1, target[:, None])[:, 0].tolist())
    return out
