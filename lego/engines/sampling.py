"""Per-request sampling for the in-process engine: temperature, top-k, top-p, seed, stop ids.

The logprob returned for a sampled token is ``log_softmax(logits / T)[token]`` over the full
vocabulary, before truncation (truncation biases the importance ratio the trainer computes, so it
only restricts *which* tokens can be drawn). Greedy rows (``T == 0``) report the T=1 logprob.
A guided row (``SamplingParams.guided_regex``) draws through its
:class:`~lego.engines.guided.GuidedRow` instead (top-k / top-p do not apply there) and stops when
the constraint is complete.
"""

from __future__ import annotations

import torch

from lego.engines.guided import GuidedRow
from lego.types import SamplingParams

__all__ = ["RowSampler"]


class RowSampler:
    """The sampling state of one request: its own torch.Generator, so a seeded request draws the
    same tokens whatever else shares its batch."""

    def __init__(
        self,
        params: SamplingParams,
        seed: int,
        eos_token_ids: list[int],
        device: torch.device,
        guide: GuidedRow | None = None,
    ) -> None:
        self.params = params
        self.guide = guide
        self.temperature = params.temperature if params.temperature > 0 else 1.0
        self.greedy = params.temperature == 0
        self.stop_ids = frozenset(eos_token_ids) | frozenset(params.stop_token_ids)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def is_stop(self, token: int) -> bool:
        """Whether the row ends with ``token`` (just drawn): a stop id, or a guided row's constraint complete."""
        if self.guide is not None:
            return self.guide.done
        return token in self.stop_ids

    def draw(self, logp: torch.Tensor) -> int:
        """Draw one token id from the truncated distribution given full logprobs ``logp`` (V,)."""
        if self.guide is not None:
            return self.guide.choose(logp, self.generator, self.greedy)
        if self.greedy:
            return int(logp.argmax())
        p = self.params
        scores = logp
        if p.top_k and p.top_k < scores.shape[-1]:
            kth = torch.topk(scores, p.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if p.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=True)
            probs = torch.softmax(sorted_scores, dim=-1)
            # drop a token when the mass before it already reaches top_p (the first token always stays)
            drop = (probs.cumsum(-1) - probs) >= p.top_p
            scores = scores.scatter(-1, order, sorted_scores.masked_fill(drop, float("-inf")))
        probs = torch.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))

    @staticmethod
    def sample_rows(samplers: list[RowSampler], logits: torch.Tensor) -> tuple[list[int], list[float]]:
        """One token per row of ``logits`` (B, V) fp32: returns ids and their pre-truncation logprobs."""
        temps = torch.tensor([s.temperature for s in samplers], device=logits.device, dtype=logits.dtype)
        logp = torch.log_softmax(logits / temps[:, None], dim=-1)  # (B, V)
        tokens = [s.draw(logp[i]) for i, s in enumerate(samplers)]
        chosen = logp.gather(-1, torch.tensor(tokens, device=logits.device)[:, None])[:, 0]
        return tokens, chosen.tolist()
