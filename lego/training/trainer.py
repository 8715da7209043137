"""The GSPO trainer: loss, fidelity, update — on exactly the tokens the policy sampled.

One :meth:`Trainer.step` is one optimizer update over a batch of :class:`TrainItem` (a recorded
segment + its advantage + which episode and harness it came from):

1. **loss**: per-token weights for the whole batch first (an episode, not a segment, is the unit;
   see :func:`lego.algos.token_weights`), then each micro-batch's loss is its share of the
   full-batch loss, so gradient accumulation over any micro-batch size gives the same gradient.
   Each micro-batch's forward pass computes log πθ on the recorded ids at ``algorithm.temperature``
   (logits / T, then log-softmax); its detached value *is* log π_old, because the weights do not
   change before the single optimizer step (no separate no-grad recompute pass: that pass would
   cost about a quarter of the gradient computation and give the same numbers);
2. **fidelity**: compare π_old with the engine's recorded logprobs over mask-1 tokens of the whole
   batch (:mod:`lego.algos.fidelity`); the gate is checked after the backward passes and *before*
   clipping and the optimizer step: when it trips the gradients are dropped and
   :class:`FidelityError` is raised with the weights untouched; 3. **update**: gradient clipping, AdamW.

With an explicit ``old_logprobs`` (a further update against an older π_old) a no-grad pass over
the batch first gives log πθ's value for GSPO's episode-pooled ratio Δ, which the loss needs before
any micro-batch's backward; :meth:`Trainer.recompute` is that pass, public, per item.

Simplifications, stated: by default one optimizer update per batch, so π_old is the current policy
and every ratio is 1 (GSPO's clip only matters for the off-policy gap, which truncated importance
sampling, ``algorithm.tis_cap``, covers). :meth:`Trainer.train_step` with ``training.ppo_epochs > 1``
adds further updates on the same batch against the sampling weights, where the ratio and clip act.
The model runs in eval mode (no dropout), as the engine does, so the trainer's log-probs match the
engine's forward pass. Sequences are right-padded per micro-batch.

Metrics returned by :meth:`Trainer.step` (floats, namespaced like verl's):

    actor/pg_loss, actor/kl_loss         the aggregated loss terms (kl only with algorithm.kl_coef > 0)
    actor/pg_clipfrac                    share of sampled tokens whose clipped branch is active
    actor/ppo_kl                         mean(log π_old − log πθ) over sampled tokens (k1)
    actor/ratio_mean|max|min             importance ratio sᵢₜ over sampled tokens
    actor/tis_weight_mean, actor/tis_clipfrac   with algorithm.tis_cap
    actor/stale_frac, actor/behaviour_weight_mean, actor/behaviour_{dropfrac,clipfrac}
                                         when some tokens were sampled by an older policy version
                                         (algorithm.off_policy; lego.algos.losses)
    actor/ref_kl                         k3 KL to the reference, with algorithm.kl_coef > 0
    actor/entropy                        mean entropy of softmax(logits / T) at sampled positions
    actor/grad_norm, actor/lr            before clipping (exactly 0: no advantage anywhere, and AdamW is
                                         not stepped -- lego.training.optim); the optimizer's learning rate
    actor/last_epoch/*                   with training.ppo_epochs > 1: the last update's pg_loss,
                                         pg_clipfrac, ppo_kl, ratio_mean|max and grad_norm
    actor/tokens, actor/segments, actor/episodes
    training/rollout_actor_probs_pearson_corr, training/rollout_probs_diff_{max,mean,std},
    rollout_corr/{kl,k3_kl,chi2_token,ess_frac,tokens}    fidelity; each also per harness as
                                         ``<name>/<harness>`` (lego.algos.fidelity), over the
                                         tokens of the trainer's own version
    training/staleness_{mean,max}, rollout_corr/{ratio_mean,ratio_std,tokens}/lag_L
                                         how many versions old the sampled tokens are, and the
                                         ratio π_old/π_rollout per lag (lego.algos.fidelity)
    perf/trainer_step_s, perf/tokens_per_s
    perf/recompute_s                     time spent on π_old and fidelity outside the loss pass: the
                                         fidelity metrics and gate, plus the no-grad pass when
                                         ``old_logprobs`` is given

Where the pieces live: the model (loading, LoRA, forward pass, merged export) in
:mod:`lego.training.policy_model`; AdamW groups, the LR schedule and clipping in
:mod:`lego.training.optim`; the loss, Δ and fidelity as pure functions in :mod:`lego.algos`;
checkpoints in :mod:`lego.training.checkpoint`. This module is the update that composes them.

Distributed: under ``torchrun`` (see :mod:`lego.training.distributed`) each rank takes an interleaved
share of the micro-batches of the same globally-weighted batch and FSDP2 sums the gradients.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from lego.algos import (
    FidelityGate,
    LossInputs,
    behaviour_logp,
    episode_log_ratio_from_sums,
    episode_log_ratio_sums,
    fidelity_metrics,
    policy_loss_for,
    token_weights,
)
from lego.config import LegoConfig
from lego.errors import FidelityError
from lego.training import distributed as dist_utils
from lego.training import optim
from lego.training.checkpoint import restore_checkpoint, save_checkpoint
from lego.training.items import (
    PaddedBatch,
    TrainItem,
    check_old_logprobs,
    items_from_trajectories,
    micro_batch_indices,
    padded_rows,
    with_rollout_logprobs,
)
from lego.training.policy_model import load_policy, merged_state_dict, supports_logits_to_keep, token_logp

__all__ = ["TrainItem", "Trainer", "items_from_trajectories"]

_SUMMED = frozenset({"actor/tokens", "actor/pg_loss", "actor/kl_loss"})
"""Metrics added across micro-batches as they are (counts, and losses already weighted for the whole batch)."""


def _current_version(items: Sequence[TrainItem], policy_version: int | None) -> int:
    """The trainer's policy version: ``policy_version``, else the newest one recorded in ``items``."""
    if policy_version is not None:
        return policy_version
    return max((v for it in items for v in it.segment.response_versions if v is not None), default=0)


class Trainer:
    """Holds the policy being trained, its optimizer and the fidelity gate.

    ``Trainer(model_dir, config)`` loads ``model_dir`` (a Hugging Face causal-LM directory) with
    ``training.dtype``, wraps it with LoRA when ``training.finetune == "lora"``, and builds AdamW
    over the trainable parameters. ``step_count`` counts completed updates.
    """

    def __init__(self, model_dir: str | Path, config: LegoConfig, device: str | torch.device | None = None) -> None:
        self.config = config
        self.model_dir = Path(model_dir)
        self.algo = config.algorithm
        self.train_cfg = config.training
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = torch.bfloat16 if self.train_cfg.dtype == "bfloat16" else torch.float32
        self.dist = dist_utils.current()
        torch.manual_seed(self.train_cfg.seed)
        self.model, self.reference = load_policy(
            self.model_dir, self.train_cfg, self.device, self.dtype, with_reference=self.algo.kl_coef > 0
        )
        self._logits_to_keep = supports_logits_to_keep(self.model)
        self.optimizer = torch.optim.AdamW(
            self.param_groups(), betas=self.train_cfg.betas, weight_decay=self.train_cfg.weight_decay
        )
        self.loss_fn = policy_loss_for(self.algo)
        self.gate = FidelityGate(self.train_cfg.fidelity.min_pearson, self.train_cfg.fidelity.patience)
        self.step_count = 0

    @classmethod
    def from_config(cls, config: LegoConfig, device: str | torch.device | None = None) -> Trainer:
        """The trainer for ``engine.model`` (``"default"``: the embedded tiny policy, built on first use)."""
        from lego.models.tiny import resolve_model

        return cls(resolve_model(config.engine.model), config, device)

    def param_groups(self) -> list[dict[str, Any]]:
        """AdamW's parameter groups for this policy (:func:`lego.training.optim.param_groups`)."""
        return optim.param_groups(self.model, self.train_cfg)

    def lr_at(self, update: int, base_lr: float | None = None) -> float:
        """The learning rate of update ``update`` (0-based): linear warmup, then ``base_lr``
        (default ``training.lr``)."""
        lr = self.train_cfg.lr if base_lr is None else base_lr
        return optim.lr_at(update, lr, self.train_cfg.warmup_steps)

    # ---- forward passes -------------------------------------------------------------------------

    def micro_batches(self, items: Sequence[TrainItem]) -> list[PaddedBatch]:
        """``items`` as the padded micro-batches of ``training.micro_batch_size`` the trainer runs,
        in order, on the trainer's device."""
        return [PaddedBatch([items[i] for i in c], self.device) for c in self._chunks(items)]

    def token_logp(
        self, mb: PaddedBatch, model: torch.nn.Module | None = None, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log p(response token | prefix) at ``algorithm.temperature``: (B, R), and entropy (B, R)."""
        net = self.model if model is None else model
        return token_logp(net, mb, self.algo.temperature, self._logits_to_keep, with_entropy)

    def _chunks(self, items: Sequence[TrainItem]) -> list[list[int]]:
        lengths = [len(it.segment.prompt_ids) + len(it.segment.response_ids) for it in items]
        return micro_batch_indices(lengths, self.train_cfg.micro_batch_size, self.train_cfg.micro_batch_tokens)

    def _rank_chunks(self, items: Sequence[TrainItem]) -> tuple[list[list[int]], int]:
        """This rank's micro-batches (k % world_size == rank), padded with copies of the first so
        every rank runs the same number of passes; returns (chunks, how many are real)."""
        all_chunks = self._chunks(items)
        mine = [c for k, c in enumerate(all_chunks) if k % self.dist.world_size == self.dist.rank]
        rounds = -(-len(all_chunks) // self.dist.world_size)
        return mine + [all_chunks[0]] * (rounds - len(mine)), len(mine)

    @torch.no_grad()
    def _recompute_batches(self, batches: list[PaddedBatch]) -> list[torch.Tensor]:
        return [self.token_logp(mb)[0] for mb in batches]

    def recompute(self, items: Sequence[TrainItem]) -> list[list[float]]:
        """log π(token | prefix) at ``algorithm.temperature`` for every response position of every
        item (sampled or not), on exactly the recorded ids, with the current weights."""
        out: list[list[float]] = []
        for mb in self.micro_batches(items):
            (logp,) = self._recompute_batches([mb])
            for row, n in enumerate(mb.resp_lens):
                out.append(logp[row, :n].tolist())
        return out

    # ---- the update -----------------------------------------------------------------------------

    def _token_weights(self, items: Sequence[TrainItem]) -> list[torch.Tensor]:
        """Per-item token weights (length = response length) for the whole batch, episodes as units."""
        episodes = {e: i for i, e in enumerate(dict.fromkeys(it.episode_id for it in items))}
        r = max(max(len(it.segment.response_ids) for it in items), 1)
        mask = torch.zeros(len(items), r, dtype=torch.long)
        for i, it in enumerate(items):
            mask[i, : len(it.segment.response_mask)] = torch.tensor(it.segment.response_mask, dtype=torch.long)
        ep = torch.tensor([episodes[it.episode_id] for it in items])
        w = token_weights(mask, self.algo.aggregation, ep)
        return [w[i, : len(it.segment.response_ids)] * it.weight for i, it in enumerate(items)]

    def step(
        self,
        items: Sequence[TrainItem],
        rollout_logprobs: Sequence[Sequence[float | None]] | None = None,
        old_logprobs: Sequence[Sequence[float]] | None = None,
        policy_version: int | None = None,
    ) -> dict[str, float]:
        """One update: forward + loss + backward per micro-batch -> fidelity (gate) -> clip -> AdamW.

        ``rollout_logprobs`` overrides the engine logprobs recorded on the segments (one list per item,
        aligned with ``response_ids``; ``None`` exactly where the token was not sampled). ``old_logprobs``
        (e.g. from :meth:`recompute` before a first update on the same batch; one value per response
        position) makes this a further update against that π_old: ratios and GSPO's clip then act;
        the gate is only consulted when π_old is taken from this step's own forward passes (no
        ``old_logprobs``). Returns the step's metrics: ``actor/*`` (loss, clip fraction, KL, entropy,
        grad norm, tokens), the fidelity metrics and ``perf/*`` timings. Raises
        :class:`FidelityError`, before touching the weights, when the gate trips.

        ``policy_version``: the version of the weights this trainer holds (what the engine served
        after the last push), against which each token's recorded version gives its lag; tokens
        of older versions get the off-policy correction (``algorithm.off_policy``). None: the
        newest version recorded in ``items``, exact whenever every rollout ran on the current
        weights (the synchronous loop)."""
        t0 = time.perf_counter()
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step_count, group["base_lr"])
        metrics = self.compute_gradients(items, rollout_logprobs, old_logprobs, policy_version)
        metrics["actor/grad_norm"] = self.apply_gradients()
        wall = time.perf_counter() - t0
        metrics["perf/trainer_step_s"] = wall
        metrics["perf/tokens_per_s"] = metrics["actor/tokens"] / wall if wall > 0 else 0.0
        self.step_count += 1
        return metrics

    def train_step(self, items: Sequence[TrainItem], policy_version: int | None = None) -> dict[str, float]:
        """One step of the loop: ``training.ppo_epochs`` updates on ``items``, counted as one step.

        The first update is :meth:`step` (on-policy, the fidelity gate checked on the whole batch
        before any weight moves). Each further update runs against π_old, the weights the rollouts
        were sampled with (a no-grad pass before the first update), at the same learning rate, so the
        importance ratio and its clip bound how far the batch is reused. Returns the first update's
        metrics plus ``actor/last_epoch/*`` (loss, clip fraction, ratio, KL to π_old, grad norm) of the last.
        ``policy_version``: as for :meth:`step` (π_old, hence π_prox, is that version's throughout)."""
        epochs = self.train_cfg.ppo_epochs
        if epochs == 1:
            return self.step(items, policy_version=policy_version)
        old = self.recompute(items)
        metrics = self.step(items, policy_version=policy_version)
        t0 = time.perf_counter()
        for _ in range(epochs - 1):
            last = self.compute_gradients(items, old_logprobs=old, policy_version=policy_version)
            last["actor/grad_norm"] = self.apply_gradients()
        keys = ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/ratio_mean", "actor/ratio_max")
        metrics.update(
            {f"actor/last_epoch/{k.split('/', 1)[1]}": last[k] for k in (*keys, "actor/grad_norm") if k in last}
        )
        metrics["perf/trainer_step_s"] += time.perf_counter() - t0
        return metrics

    def compute_gradients(
        self,
        items: Sequence[TrainItem],
        rollout_logprobs: Sequence[Sequence[float | None]] | None = None,
        old_logprobs: Sequence[Sequence[float]] | None = None,
        policy_version: int | None = None,
    ) -> dict[str, float]:
        """Everything in :meth:`step` up to (not including) clipping and the optimizer step: the
        gradient of the full-batch loss is left in ``.grad`` (accumulated over micro-batches).

        Without ``old_logprobs``, π_old is each micro-batch's forward pass detached, and the gate
        is checked once every backward has run; if it trips, the gradients are set to None before
        :class:`FidelityError` propagates, so no later optimizer step can apply them."""
        if not items:
            raise ValueError("Trainer.step needs at least one TrainItem; skip the update when a step has no data")
        t0 = time.perf_counter()
        if rollout_logprobs is not None:
            items = with_rollout_logprobs(items, rollout_logprobs)
        if old_logprobs is not None:
            check_old_logprobs(items, old_logprobs)
        weights = self._token_weights(items)
        chunks, n_real = self._rank_chunks(items)
        batches = [PaddedBatch([items[i] for i in c], self.device) for c in chunks]
        episodes = {e: i for i, e in enumerate(dict.fromkeys(it.episode_id for it in items))}
        lags = [mb.version_lag(_current_version(items, policy_version)) for mb in batches]
        stale = dist_utils.all_reduce_max(float(any(bool(lag.any()) for lag in lags[:n_real]))) > 0
        fused = old_logprobs is None
        old: list[torch.Tensor] = []  # log π_old per real micro-batch
        fid: dict[str, float] = {}
        behaviour: torch.Tensor | None = None  # GSPO's episode behaviour log-weights, with stale tokens
        if old_logprobs is not None:
            current = self._recompute_batches(batches)  # log πθ's value now, for Δ before any backward
            old = [padded_rows(old_logprobs, c, cur) for c, cur in zip(chunks, current, strict=True)]
            fid = self._fidelity(items, chunks[:n_real], batches, old, lags)
            delta = self._episode_deltas(items, episodes, chunks[:n_real], batches, current, old)
            t_recompute = time.perf_counter() - t0
        else:
            # π_old is the loss pass's own forward (detached): log πθ == log π_old, so every Δ is 0.
            delta = torch.zeros(len(episodes), dtype=torch.float64)
            t_recompute = 0.0
        if stale and self.algo.ratio_level == "sequence":
            # The sequence weight pools an episode's rows, possibly over several micro-batches, and
            # multiplies each one's loss before its backward: π_prox's values are needed first.
            # Pooled exactly as Δ is, with (π_behav, π_prox) in place of (π_old, πθ): behaviour_log_weight.
            prox = old if old_logprobs is not None else self._recompute_batches(batches)
            behav = [
                behaviour_logp(p, mb.rollout_logp, mb.mask, lg) for p, mb, lg in zip(prox, batches, lags, strict=True)
            ]
            behaviour = self._episode_deltas(items, episodes, chunks[:n_real], batches, prox, behav)
            t_recompute = time.perf_counter() - t0

        sums: dict[str, float] = {}  # token-weighted sums, except the already-normalised loss terms
        ratio_max, ratio_min = float("-inf"), float("inf")
        for idx, (c, mb) in enumerate(zip(chunks, batches, strict=True)):
            logp, entropy = self.token_logp(mb, with_entropy=True)
            if idx >= n_real:  # padding pass: FSDP needs every rank in every collective; adds zero gradient
                (logp.sum() * 0.0).backward()
                continue
            if fused:
                old.append(logp.detach())
            w = torch.zeros_like(logp)
            for row, i in enumerate(c):
                w[row, : len(weights[i])] = weights[i].to(self.device)
            inputs = LossInputs(
                logp=logp,
                old_logp=old[idx],
                advantages=torch.tensor([items[i].advantage for i in c], device=self.device),
                mask=mb.mask,
                token_weight=w,
                seq_log_ratio=delta[[episodes[items[i].episode_id] for i in c]].to(self.device),
                rollout_logp=mb.rollout_logp,
                ref_logp=self._ref_logp(mb) if self.algo.kl_coef > 0 else None,
                version_lag=lags[idx] if stale else None,
                seq_behaviour_log_weight=(
                    None if behaviour is None else behaviour[[episodes[items[i].episode_id] for i in c]].to(self.device)
                ),
                token_advantages=mb.token_adv,
            )
            loss, m = self.loss_fn(inputs, self.algo)
            (loss * self.dist.world_size).backward()  # FSDP averages over ranks; our weights already sum to 1
            n = m["actor/tokens"]
            ratio_max, ratio_min = max(ratio_max, m.pop("actor/ratio_max")), min(ratio_min, m.pop("actor/ratio_min"))
            if entropy is not None:
                m["actor/entropy"] = float((entropy * mb.mask).sum() / max(n, 1.0))
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + (v if k in _SUMMED else v * n)

        if fused:
            t_fid = time.perf_counter()
            fid = self._fidelity(items, chunks[:n_real], batches, old, lags)
            try:
                self.gate.observe(fid)  # same gathered metrics on every rank: all ranks raise together
            except FidelityError:
                self.optimizer.zero_grad(set_to_none=True)  # the bad update is never applied
                raise
            t_recompute = time.perf_counter() - t_fid

        metrics = self._reduce_metrics(sums, ratio_max, ratio_min)
        metrics.update(fid)
        metrics.update(
            {
                "actor/lr": self.optimizer.param_groups[0]["lr"],
                **(
                    {"actor/lr_modules_to_save": self.optimizer.param_groups[1]["lr"]}
                    if len(self.optimizer.param_groups) > 1
                    else {}
                ),
                "actor/segments": float(len(items)),
                "actor/episodes": float(len(episodes)),
                "perf/recompute_s": t_recompute,
            }
        )
        return metrics

    def apply_gradients(self) -> float:
        """Clip and take the AdamW step on what :meth:`compute_gradients` left in ``.grad``; returns
        the gradient norm before clipping. ``compute_gradients`` + ``apply_gradients`` is :meth:`step`
        without the LR schedule and the step count."""
        return optim.clip_and_step(self.model, self.optimizer, self.train_cfg.grad_clip)

    def _fidelity(
        self,
        items: Sequence[TrainItem],
        chunks: list[list[int]],
        batches: list[PaddedBatch],
        old: list[torch.Tensor],
        lags: list[torch.Tensor],
    ) -> dict[str, float]:
        """Fidelity and staleness metrics over every rank's sampled tokens (rollout vs π_old, by lag)."""
        roll: list[torch.Tensor] = []
        act: list[torch.Tensor] = []
        lag: list[torch.Tensor] = []
        harness: list[str] = []
        for c, mb, o, lg in zip(chunks, batches, old, lags, strict=False):
            sel = mb.mask.bool()  # where rollout_logp is real (PaddedBatch)
            roll.append(mb.rollout_logp[sel])
            act.append(o[sel])
            lag.append(lg[sel])
            harness.extend(items[c[r]].harness or "unknown" for r in sel.nonzero()[:, 0].tolist())
        empty = torch.zeros(0, dtype=torch.float64)
        return fidelity_metrics(
            dist_utils.gather_cat(torch.cat(roll).double().cpu() if roll else empty),
            dist_utils.gather_cat(torch.cat(act).double().cpu() if act else empty),
            dist_utils.gather_labels(harness),
            dist_utils.gather_cat(torch.cat(lag).double().cpu() if lag else empty).long(),
        )

    def _episode_deltas(
        self,
        items: Sequence[TrainItem],
        episodes: dict[str, int],
        chunks: list[list[int]],
        batches: list[PaddedBatch],
        current: list[torch.Tensor],
        old: list[torch.Tensor],
    ) -> torch.Tensor:
        """GSPO's Δ for each episode, pooled over all its segments on every rank: (E,), float64 (with
        π_prox as ``current`` and π_behav as ``old``: the episode's behaviour log-weight).

        The sums of :func:`lego.algos.episode_log_ratio_sums` add over this rank's micro-batches and
        then over ranks; one division gives Δ. The weights do not change while gradients
        accumulate, so the no-grad ``current`` pass gives log πθ's value."""
        num = torch.zeros(len(episodes), dtype=torch.float64)
        den = torch.zeros(len(episodes), dtype=torch.float64)
        for c, mb, cur, o in zip(chunks, batches, current, old, strict=False):
            ep = torch.tensor([episodes[items[i].episode_id] for i in c])
            n, d = episode_log_ratio_sums(o.cpu(), cur.cpu(), mb.mask.cpu(), ep, len(episodes))
            num += n
            den += d
        reduced = dist_utils.all_reduce_sum(num.tolist() + den.tolist())
        e = len(episodes)
        both = torch.tensor(reduced, dtype=torch.float64)
        return episode_log_ratio_from_sums(both[:e], both[e:])

    @torch.no_grad()
    def _ref_logp(self, mb: PaddedBatch) -> torch.Tensor:
        if self.reference is not None:
            return self.token_logp(mb, model=self.reference)[0]
        with self.model.disable_adapter():  # type: ignore[operator]  # LoRA: the base model is the reference
            return self.token_logp(mb)[0]

    def _reduce_metrics(self, sums: dict[str, float], rmax: float, rmin: float) -> dict[str, float]:
        # every rank's names: a rank that ran only padding passes (fewer micro-batches than ranks) has none
        keys = sorted(set(dist_utils.gather_labels(sorted(sums))))
        out = dict(zip(keys, dist_utils.all_reduce_sum([sums.get(k, 0.0) for k in keys]), strict=True))
        n = max(out.get("actor/tokens", 0.0), 1.0)
        out = {k: (v if k in _SUMMED else v / n) for k, v in out.items()}
        out["actor/ratio_max"] = dist_utils.all_reduce_max(rmax)
        out["actor/ratio_min"] = -dist_utils.all_reduce_max(-rmin)
        return out

    # ---- weights out ----------------------------------------------------------------------------

    def engine_state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's full weights under the base model's Hugging Face names (LoRA merged in),
        detached copies — what an in-process engine's ``load_weights`` takes."""
        return merged_state_dict(self.model, self.train_cfg.finetune)

    def save(
        self,
        run_dir: str | Path,
        extra: dict[str, Any] | None = None,
        export_merged: bool = False,
        keep_last: int | None = None,
    ) -> Path:
        """Write a checkpoint under ``run_dir/checkpoints`` (see :mod:`lego.training.checkpoint`)."""
        return save_checkpoint(self, run_dir, extra=extra, export_merged=export_merged, keep_last=keep_last)

    def load(self, checkpoint_dir: str | Path) -> dict[str, Any]:
        """Restore weights, optimizer, RNG, step and gate from a checkpoint; returns its ``extra``."""
        return restore_checkpoint(self, checkpoint_dir)
