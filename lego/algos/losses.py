"""Policy-gradient losses as pure functions (verl core_algos style), registered by name.

Every loss has the signature ``(inputs: LossInputs, cfg: AlgorithmConfig) -> (loss, metrics)``.
:class:`LossInputs` names each tensor the loss reads, so a misspelt input is a ``TypeError`` at the
call, not a silently ignored keyword:

    logp           (B, T)  log πθ of each response token (with grad)
    old_logp       (B, T)  log π_old of the same tokens (recomputed by the trainer, no grad)
    advantages     (B,)    one advantage per row (a row is a segment)
    mask           (B, T)  1 for sampled tokens, 0 for tool output, template tokens and padding
    token_weight   (B, T)  optional: the aggregation weights (:func:`token_weights`)
    seq_log_ratio  (B,)    optional: GSPO's Δ for each row's episode (:func:`episode_log_ratio`)
    rollout_logp   (B, T)  optional: the engine's logprobs (the behaviour policy's), for TIS and
                           the off-policy correction
    ref_logp       (B, T)  optional: the reference policy's logprobs, for the KL term
    version_lag    (B, T)  optional: how many policy versions before π_old's each token was
                           sampled (0: by π_old's own weights)
    seq_behaviour_log_weight (B,)  optional: GSPO's behaviour log-weight for each row's episode
                           (:func:`behaviour_log_weight`), when the rows of an episode span calls
    token_advantages (B, T)  optional: one advantage per token, in place of ``advantages``
                           broadcast along the row (hindsight on-policy distillation: log π_teacher −
                           log π_student at each token; with GSPO's sequence ratio this is the
                           GSPO-token objective, the ratio's value per sequence, its gradient per token)

"No logprob" is ``None`` for the whole tensor; inside a tensor, only positions with ``mask == 1``
are read (a recorded segment always has a logprob at a sampled token). Elsewhere the trainer's
batch holds NaN (:data:`lego.types.NO_LOGPROB`), filled in before any arithmetic, so it never
reaches the loss, and a read that forgot the mask shows as NaN, not as log p = 0.

How the per-token losses are averaged is a separate setting (``algorithm.aggregation``), applied
through per-token weights (:func:`token_weights`). The trainer computes those weights once over the
whole batch and passes them to every micro-batch, so summing micro-batch losses gives exactly the
full-batch loss (gradient accumulation 1×8 == 8×1), and so that an *episode* — not a segment — is
the unit: all segments of one trajectory share one ``episode_index``.

The optional terms, each switched on by its own setting:

- ``rollout_logp`` with ``cfg.tis_cap``: truncated importance sampling (Yao et al. 2025, "Your
  efficient RL framework secretly brings you off-policy RL training"): each token's loss is
  multiplied by min(π_old/π_rollout, cap), correcting for the engine sampling from a slightly
  different distribution than the trainer computes.
- ``ref_logp`` with ``cfg.kl_coef > 0``: the k3 estimator of KL(πθ‖π_ref) (Schulman 2020,
  "Approximating KL divergence"), added as ``kl_coef · agg(k3)``.

Off-policy tokens (``version_lag > 0``: sampled by an older policy version, asynchronous training
with ``training.max_staleness``): the objective keeps the decoupled form of AReaL (Fu et al. 2025,
"AReaL: A Large-Scale Asynchronous Reinforcement Learning System", arXiv:2505.24298, §5). Three
policies: π_behav, the version that sampled the token (its logprob is the recorded ``rollout_logp``);
π_prox, the proximal policy, which is ``old_logp`` (the trainer's weights before this update); πθ.
The trust region is centred on π_prox -- the ratio that is clipped is πθ/π_prox, as for a fresh
token -- and the gap between the behaviour and proximal policies is corrected by a detached
importance weight w = π_prox/π_behav outside the clip::

    ℓ = sg[f(w)] · max(−A·s, −A·clip(s, 1 − ε_low, 1 + ε_high)),   s = πθ/π_prox (token or GSPO ratio)

``algorithm.off_policy`` picks f with the cap C = ``algorithm.behaviour_weight_cap``:
``decoupled`` (AReaL's ``behav_imp_weight_cap``): f(w) = w where w ≤ C, and a token (a sequence,
at sequence level) whose weight exceeds C is dropped from the loss (f = 0); ``tis`` (truncated
importance sampling, Yao et al. 2025 above; IMPALA's truncation, Espeholt et al. 2018): f(w) = min(w, C),
kept at the cap. Centring the clip on π_behav instead (plain PPO on stale data) would clip
almost every token of a stale batch and stop learning from it: the decoupled form keeps the
trust region where the update starts.

At a current-version token (lag 0) π_behav *is* π_prox's weights: the recorded logprob differs
from the recompute only by engine numerics, which the fidelity gate watches and ``tis_cap`` corrects
as before, so there w is exactly 1 and ``tis_cap`` keeps acting only on such tokens. With every token
from the current version (``training.max_staleness = 0``, or ``version_lag`` None) the loss is
today's, bit for bit.

The returned ``metrics`` are plain floats averaged over this call's mask-1 tokens, plus
``actor/tokens`` so a caller can combine micro-batches token-weighted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from lego.config import AlgorithmConfig

__all__ = [
    "POLICY_LOSSES",
    "LossInputs",
    "PolicyLoss",
    "behaviour_log_weight",
    "behaviour_logp",
    "episode_log_ratio",
    "episode_log_ratio_from_sums",
    "episode_log_ratio_sums",
    "get_policy_loss",
    "gspo_log_ratio",
    "gspo_policy_loss",
    "k3_kl",
    "policy_loss_for",
    "token_policy_loss",
    "token_weights",
]

_LOG_RATIO_CLAMP = 20.0  # exp(±20) keeps a wildly off-policy token finite; no effect on-policy


@dataclass(frozen=True, kw_only=True)
class LossInputs:
    """The tensors a policy loss reads (shapes in the module docstring); checked on construction."""

    logp: torch.Tensor
    old_logp: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    token_weight: torch.Tensor | None = None
    seq_log_ratio: torch.Tensor | None = None
    rollout_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    version_lag: torch.Tensor | None = None
    seq_behaviour_log_weight: torch.Tensor | None = None
    token_advantages: torch.Tensor | None = None

    def __post_init__(self) -> None:
        bt = tuple(self.logp.shape)
        if len(bt) != 2:
            raise ValueError(f"LossInputs.logp has shape {bt}; pass one row per segment: (B, T)")
        for name in ("old_logp", "mask", "token_weight", "rollout_logp", "ref_logp", "version_lag", "token_advantages"):
            t = getattr(self, name)
            if t is not None and tuple(t.shape) != bt:
                raise ValueError(f"LossInputs.{name} has shape {tuple(t.shape)}; it must match logp's {bt}")
        for name in ("advantages", "seq_log_ratio", "seq_behaviour_log_weight"):
            t = getattr(self, name)
            if t is not None and tuple(t.shape) != bt[:1]:
                raise ValueError(f"LossInputs.{name} has shape {tuple(t.shape)}; pass one value per row: ({bt[0]},)")


class PolicyLoss(Protocol):
    def __call__(self, inputs: LossInputs, cfg: AlgorithmConfig) -> tuple[torch.Tensor, dict[str, float]]: ...


def token_weights(mask: torch.Tensor, aggregation: str, episode_index: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token weights w (B, T) such that the aggregated loss is Σ w·ℓ.

    With ``e(b)`` the episode of row b (default: each row its own episode), Nₑ the mask-1 tokens of
    episode e over all its rows, E the number of episodes with at least one such token:

    - ``seq-mean-token-mean`` (GSPO, Dr.GRPO's "seq-mean"):  w = m / (Nₑ · E)
    - ``seq-mean-token-sum``:                               w = m / E
    - ``token-mean`` (DAPO):                                w = m / Σ m

    Because Nₑ counts the tokens of all of an episode's segments, a trajectory split over several
    segments weighs exactly what one segment holding the same tokens would.
    """
    m = mask.to(torch.float64)
    b = m.shape[0]
    idx = torch.arange(b, device=mask.device) if episode_index is None else episode_index.to(mask.device).long()
    per_row = m.sum(-1)  # (B,)
    n_ep = torch.zeros(int(idx.max().item()) + 1 if b else 0, dtype=torch.float64, device=mask.device)
    n_ep.index_add_(0, idx, per_row)
    num_episodes = float((n_ep > 0).sum().item())
    if num_episodes == 0:
        return torch.zeros_like(mask, dtype=torch.float32)
    if aggregation == "seq-mean-token-mean":
        w = m / n_ep[idx].clamp(min=1.0)[:, None] / num_episodes
    elif aggregation == "seq-mean-token-sum":
        w = m / num_episodes
    elif aggregation == "token-mean":
        w = m / m.sum()
    else:
        raise ValueError(
            f"unknown aggregation {aggregation!r}; use seq-mean-token-mean, seq-mean-token-sum or token-mean"
        )
    return w.to(torch.float32)


def episode_log_ratio_sums(
    old_logp: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor, episode_index: torch.Tensor, num_episodes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two sums GSPO's Δ is the quotient of, per episode, float64: (E,), (E,).

    ``Σ mₜ (log πθₜ − log π_oldₜ)`` and ``Σ mₜ`` over the rows of each episode. Sums add across
    micro-batches and ranks, so a trainer that sees an episode's segments in pieces adds these up
    and divides once (:func:`episode_log_ratio_from_sums`), getting the same Δ as one big batch.
    """
    m = mask.to(torch.float64)
    diff = ((logp.detach().double() - old_logp.detach().double()) * m).sum(-1)  # (B,)
    idx = episode_index.to(mask.device).long()
    num = torch.zeros(num_episodes, dtype=torch.float64, device=mask.device).index_add_(0, idx, diff)
    den = torch.zeros(num_episodes, dtype=torch.float64, device=mask.device).index_add_(0, idx, m.sum(-1))
    return num, den


def episode_log_ratio_from_sums(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """Δₑ = num / den per episode (an episode without sampled tokens gets 0): (E,), float64."""
    return num / den.clamp(min=1.0)


def episode_log_ratio(
    old_logp: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor, episode_index: torch.Tensor | None = None
) -> torch.Tensor:
    """GSPO's Δ per row, pooled over the row's episode, detached: (B,), in ``logp``'s dtype.

    Δₑ = Σ_{rows of e} Σₜ mₜ (log πθₜ − log π_oldₜ) / Σ_{rows of e} Σₜ mₜ, so log sᵢ = Δ is the
    log of the length-normalised sequence likelihood ratio (πθ(yᵢ)/π_old(yᵢ))^(1/|yᵢ|). Summed in
    float64, rounded once to ``logp``'s dtype. Default: each row is its own episode.
    """
    b = mask.shape[0]
    idx = torch.arange(b, device=mask.device) if episode_index is None else episode_index.to(mask.device).long()
    size = int(idx.max().item()) + 1 if b else 0
    num, den = episode_log_ratio_sums(old_logp, logp, mask, idx, size)
    return episode_log_ratio_from_sums(num, den)[idx].to(logp.dtype)


def behaviour_logp(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, version_lag: torch.Tensor
) -> torch.Tensor:
    """log π_behav as the off-policy correction reads it: (B, T).

    The recorded ``rollout_logp`` at a sampled token an older version drew (``version_lag > 0``),
    ``old_logp`` (π_prox) everywhere else, so log π_prox − log π_behav is exactly 0 at every
    current-version token and wherever the mask is 0 (see the module docstring for why)."""
    stale = (version_lag > 0) & (mask == 1)
    return torch.where(stale, rollout_logp, old_logp)


def behaviour_log_weight(
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    version_lag: torch.Tensor,
    episode_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """GSPO's behaviour log-weight per row, pooled over the row's episode, detached: (B,).

    log wᵢ = Σₜ mₜ (log π_proxₜ − log π_behav,ₜ) / Σₜ mₜ, each token against the version that
    sampled it. Why that, for a sequence sampled under several versions: with the weights swapped
    between decode steps (and the KV recomputed, ``lego.engines.decode``), token t was drawn from
    π_{v(t)}(· | y<t), so the distribution the sequence came from is μ(y) = Πₜ π_{v(t)}(yₜ | y<t),
    and its likelihood ratio to π_prox is exactly the product of per-token ratios, each against
    its own version's logprob. GSPO takes the length-normalised ratio (its 1/|y| power), the same
    normalisation as its Δ, so a weight and a ratio of one sequence are on one scale; current-version
    tokens contribute 0 and count in the length. Attributing the whole sequence to one version (its
    oldest, say) would be the ratio against a distribution none of its tokens was drawn from. The
    pooling over an episode's rows is Δ's (:func:`episode_log_ratio`, whose sums a trainer adds
    across micro-batches the same way)."""
    behav = behaviour_logp(old_logp, rollout_logp, mask, version_lag)
    return episode_log_ratio(behav, old_logp, mask, episode_index)


def gspo_log_ratio(logp: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """log sᵢₜ = sg[Δᵢ] + log πθₜ − sg[log πθₜ]: value Δᵢ, gradient ∇log πθₜ. (B, T).

    Computed in verl's order, ``logp − sg[logp] + Δ``: ``logp − sg[logp]`` is exactly 0 in any
    float format, so every token of a row gets bitwise the same ratio and a sequence is clipped
    whole. The other order, ``(Δ + logp) − logp``, rounds Δ against each token's logp and in fp32
    spreads the ratio over a row by ~1e-6 — enough to clip part of a sequence near a clip edge.
    """
    return logp - logp.detach() + delta.detach()[:, None].to(logp.dtype)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = exp(r) − r − 1 with r = log π_ref − log πθ: unbiased, non-negative estimate of KL(πθ‖π_ref)."""
    r = (ref_logp - logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return torch.exp(r) - r - 1.0


def _stale(inputs: LossInputs) -> torch.Tensor | None:
    """Sampled tokens an older policy version drew (B, T), or None when there are none."""
    if inputs.version_lag is None:
        return None
    stale = (inputs.version_lag > 0) & (inputs.mask == 1)
    if not bool(stale.any()):
        return None
    if inputs.rollout_logp is None:
        raise ValueError(
            "LossInputs.version_lag marks tokens of older policy versions but rollout_logp is None; "
            "pass the engine's recorded logprobs (the behaviour policy's): the off-policy correction needs them"
        )
    return stale


def _behaviour_weight(
    log_w: torch.Tensor, stale: torch.Tensor | None, m: torch.Tensor, n: torch.Tensor, cfg: AlgorithmConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    """f(w) of the module docstring (B, T), detached, and its metrics (means over mask-1 tokens).
    ``log_w`` is (B, T) or (B, 1); it is 0 wherever no correction applies (w = 1 then, kept)."""
    w = torch.exp(log_w.detach().clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)).expand_as(m)
    over = (w > cfg.behaviour_weight_cap) & (m == 1)
    if cfg.off_policy == "decoupled":
        f = torch.where(over, torch.zeros_like(w), w)
        cut = "actor/behaviour_dropfrac"
    else:
        f = w.clamp(max=cfg.behaviour_weight_cap)
        cut = "actor/behaviour_clipfrac"
    metrics = {
        "actor/stale_frac": 0.0 if stale is None else float((stale.to(m.dtype) * m).sum() / n),
        "actor/behaviour_weight_mean": float((f * m).sum() / n),
        cut: float((over.to(m.dtype) * m).sum() / n),
    }
    return f, metrics


def _clipped_objective(
    log_ratio: torch.Tensor,
    inputs: LossInputs,
    cfg: AlgorithmConfig,
    behaviour_log_w: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """max(−A·s, −A·clip(s, 1−ε_low, 1+ε_high)) per token, then the off-policy weight, TIS,
    aggregation and KL. ``behaviour_log_w``: log w, (B, T) or (B, 1), when some weight is not 1."""
    logp, old_logp, mask = inputs.logp, inputs.old_logp, inputs.mask
    a = inputs.advantages[:, None] if inputs.token_advantages is None else inputs.token_advantages
    ratio = torch.exp(log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))  # (B, T)
    loss1 = -a * ratio
    loss2 = -a * ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    per_token = torch.maximum(loss1, loss2)  # (B, T)
    m = mask.to(per_token.dtype)
    n = m.sum().clamp(min=1.0)
    metrics: dict[str, float] = {}
    stale = _stale(inputs)

    if behaviour_log_w is not None:
        f, more = _behaviour_weight(behaviour_log_w, stale, m, n, cfg)
        per_token = per_token * f.to(per_token.dtype)
        metrics.update(more)

    if cfg.tis_cap is not None:
        if inputs.rollout_logp is None:
            raise ValueError(
                "algorithm.tis_cap is set but LossInputs.rollout_logp is None; "
                "pass the engine's logprobs or set algorithm.tis_cap to null"
            )
        # Masked positions are zeroed before exp so a filler value there never reaches the loss;
        # so are stale ones: their behaviour weight above is their correction (w = 1 here).
        off = m == 0 if stale is None else (m == 0) | stale
        diff = (old_logp - inputs.rollout_logp).masked_fill(off, 0.0)
        raw = torch.exp(diff.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)) * m
        tis = raw.clamp(max=cfg.tis_cap).detach()
        if stale is not None:
            tis = torch.where(stale, torch.ones_like(tis), tis)
        per_token = per_token * tis
        metrics["actor/tis_weight_mean"] = float((tis * m).sum() / n)
        metrics["actor/tis_clipfrac"] = float(((raw > cfg.tis_cap).to(m.dtype) * m).sum() / n)

    w = inputs.token_weight if inputs.token_weight is not None else token_weights(mask, cfg.aggregation)
    w = w.to(per_token.dtype)
    pg_loss = (per_token * w).sum()
    loss = pg_loss

    if cfg.kl_coef > 0:
        if inputs.ref_logp is None:
            raise ValueError(
                "algorithm.kl_coef > 0 but LossInputs.ref_logp is None; "
                "pass the reference policy's logprobs or set algorithm.kl_coef to 0"
            )
        kl = k3_kl(logp, inputs.ref_logp)
        kl_loss = (kl * w).sum()
        loss = loss + cfg.kl_coef * kl_loss
        metrics["actor/kl_loss"] = float(kl_loss.detach())
        metrics["actor/ref_kl"] = float((kl.detach() * m).sum() / n)

    with torch.no_grad():
        clipped = (loss2 > loss1).to(m.dtype) * m
        rm = ratio.detach()
        metrics.update(
            {
                "actor/pg_loss": float(pg_loss.detach()),
                "actor/pg_clipfrac": float(clipped.sum() / n),
                "actor/ppo_kl": float(((old_logp - logp.detach()) * m).sum() / n),
                "actor/ratio_mean": float((rm * m).sum() / n),
                "actor/ratio_max": float(rm.masked_fill(m == 0, float("-inf")).max()) if m.any() else 1.0,
                "actor/ratio_min": float(rm.masked_fill(m == 0, float("inf")).min()) if m.any() else 1.0,
                "actor/tokens": float(m.sum()),
            }
        )
    return loss, metrics


def gspo_policy_loss(inputs: LossInputs, cfg: AlgorithmConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (Zheng et al. 2025, arXiv:2507.18071), token form of the sequence-level ratio.

    Δᵢ = Σₜ mₜ (log πθₜ − log π_oldₜ) / Σₜ mₜ                      (``seq_log_ratio``, or per row)
    log sᵢₜ = sg[Δᵢ] + log πθₜ − sg[log πθₜ]                        (value exp(Δᵢ), grad sᵢ·∇log πθₜ)
    ℓᵢₜ = max(−Aᵢ sᵢₜ, −Aᵢ clip(sᵢₜ, 1 − ε_low, 1 + ε_high))      (ε = 3e-4 / 4e-4 in the paper)

    Every token of a sequence shares one ratio, bitwise (:func:`gspo_log_ratio`), so the sequence
    is clipped as a whole; with ``seq-mean-token-mean`` aggregation the gradient equals the paper's
    sequence-level GSPO gradient.

    Tokens of older versions (``version_lag``): the sequence's behaviour weight wᵢ
    (:func:`behaviour_log_weight`: length-normalised, each token against its own version; or
    ``seq_behaviour_log_weight``) multiplies every token of the row, outside the clip, as
    ``algorithm.off_policy`` says (module docstring).
    """
    delta = inputs.seq_log_ratio
    if delta is None:
        delta = episode_log_ratio(inputs.old_logp, inputs.logp, inputs.mask)
    # The episode's weight: given (pooled over rows that may sit in other calls), or from this call's rows.
    log_w = inputs.seq_behaviour_log_weight
    if log_w is None and _stale(inputs) is not None:
        assert inputs.rollout_logp is not None and inputs.version_lag is not None  # _stale checked
        log_w = behaviour_log_weight(inputs.old_logp, inputs.rollout_logp, inputs.mask, inputs.version_lag)
    behaviour = None if log_w is None or not bool((log_w != 0).any()) else log_w.to(inputs.logp.dtype)[:, None]
    return _clipped_objective(gspo_log_ratio(inputs.logp, delta), inputs, cfg, behaviour)


def token_policy_loss(inputs: LossInputs, cfg: AlgorithmConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip with a per-token ratio (Schulman et al. 2017, arXiv:1707.06347; GRPO's objective).

    sᵢₜ = exp(log πθₜ − log π_oldₜ);  ℓᵢₜ = max(−Aᵢ sᵢₜ, −Aᵢ clip(sᵢₜ, 1 − ε_low, 1 + ε_high))
    (ε = 0.2 / 0.28 with DAPO's clip-higher). A token of an older version (``version_lag``) is
    weighted by its own w = π_prox/π_behav, as ``algorithm.off_policy`` says (module docstring).
    """
    behaviour = None
    if _stale(inputs) is not None:
        assert inputs.rollout_logp is not None and inputs.version_lag is not None  # _stale checked
        behaviour = inputs.old_logp - behaviour_logp(
            inputs.old_logp, inputs.rollout_logp, inputs.mask, inputs.version_lag
        )
    return _clipped_objective(inputs.logp - inputs.old_logp, inputs, cfg, behaviour)


POLICY_LOSSES: dict[str, PolicyLoss] = {
    "gspo": gspo_policy_loss,
    "ppo": token_policy_loss,
}
"""Losses by name: ``gspo`` (sequence-level ratio), ``ppo`` (token-level ratio)."""

_BY_RATIO_LEVEL = {"sequence": "gspo", "token": "ppo"}


def get_policy_loss(name: str) -> PolicyLoss:
    """The loss registered as ``name``; an unknown name lists the valid ones."""
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {name!r}; valid names: {', '.join(sorted(POLICY_LOSSES))}")
    return POLICY_LOSSES[name]


def policy_loss_for(cfg: AlgorithmConfig) -> PolicyLoss:
    """The loss that ``algorithm.ratio_level`` selects (sequence -> gspo, token -> ppo)."""
    return get_policy_loss(_BY_RATIO_LEVEL[cfg.ratio_level])
