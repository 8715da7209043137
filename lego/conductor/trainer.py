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
   :class:`FidelityError` is raised with the weights untouched;
3. **update**: gradient clipping, AdamW.

With an explicit ``old_logprobs`` (a further update against an older π_old) a no-grad pass over
the batch first gives log πθ's value for GSPO's episode-pooled ratio Δ, which the loss needs before
any micro-batch's backward; :meth:`Trainer.recompute` is that pass, public, per item.

Simplifications, stated: one optimizer update per batch, so π_old is the current policy and every
ratio is 1 (GSPO's clip only matters for the off-policy gap, which truncated importance sampling,
``algorithm.tis_cap``, covers). The model runs in eval mode (no dropout), as the engine does, so
the trainer's log-probs match the engine's forward pass. Sequences are right-padded per micro-batch.

Metrics returned by :meth:`Trainer.step` (floats, namespaced like verl's):

    actor/pg_loss, actor/kl_loss         the aggregated loss terms (kl only with algorithm.kl_coef > 0)
    actor/pg_clipfrac                    share of sampled tokens whose clipped branch is active
    actor/ppo_kl                         mean(log π_old − log πθ) over sampled tokens (k1)
    actor/ratio_mean|max|min             importance ratio sᵢₜ over sampled tokens
    actor/tis_weight_mean, actor/tis_clipfrac   with algorithm.tis_cap
    actor/ref_kl                         k3 KL to the reference, with algorithm.kl_coef > 0
    actor/entropy                        mean entropy of softmax(logits / T) at sampled positions
    actor/grad_norm, actor/lr            before clipping; the optimizer's learning rate
    actor/tokens, actor/segments, actor/episodes
    training/rollout_actor_probs_pearson_corr, training/rollout_probs_diff_{max,mean,std},
    rollout_corr/{kl,k3_kl,chi2_token,ess_frac,tokens}    fidelity; each also per harness as
                                         ``<name>/<harness>`` (lego.algos.fidelity)
    perf/trainer_step_s, perf/tokens_per_s
    perf/recompute_s                     time spent on π_old and fidelity outside the loss pass: the
                                         fidelity metrics and gate, plus the no-grad pass when
                                         ``old_logprobs`` is given

Distributed: under ``torchrun`` (see :mod:`lego.conductor.distributed`) each rank takes an interleaved
share of the micro-batches of the same globally-weighted batch and FSDP2 sums the gradients.
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from lego.conductor import distributed as dist_utils
from lego.algos import FidelityGate, fidelity_metrics, policy_loss_for, token_weights
from lego.conductor.items import PaddedBatch, TrainItem, items_from_trajectories
from lego.config import LegoConfig
from lego.errors import FidelityError, ModelError

__all__ = ["TrainItem", "Trainer", "items_from_trajectories"]

_SUMMED = frozenset({"actor/tokens", "actor/pg_loss", "actor/kl_loss"})
"""Metrics added across micro-batches as they are (counts, and losses already weighted for the whole batch)."""


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
        try:
            model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=self.dtype)
        except (OSError, ValueError) as exc:
            raise ModelError(
                f"cannot load a causal LM from {self.model_dir}: {exc}; pass a Hugging Face model directory"
            ) from exc
        model.to(self.device)
        self.reference: torch.nn.Module | None = None
        if self.train_cfg.finetune == "lora":
            model = self._wrap_lora(model)
        elif self.algo.kl_coef > 0:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        model.eval()  # no dropout: the recompute must match the engine's forward pass
        if self.dist.world_size > 1:
            dist_utils.shard_model(model)
        self.model = model
        self._logits_to_keep = self._supports_logits_to_keep(model)
        self.optimizer = torch.optim.AdamW(
            self.param_groups(model), betas=self.train_cfg.betas, weight_decay=self.train_cfg.weight_decay
        )
        self.loss_fn = policy_loss_for(self.algo)
        self.gate = FidelityGate(self.train_cfg.fidelity.min_pearson, self.train_cfg.fidelity.patience)
        self.step_count = 0

    def param_groups(self, model: torch.nn.Module | None = None) -> list[dict[str, Any]]:
        """AdamW's parameter groups: the trained weights at ``training.lr``, and with LoRA the
        ``lora_modules_to_save`` copies at ``lora_modules_to_save_lr`` when that is set."""
        cfg = self.train_cfg
        saved: list[torch.nn.Parameter] = []
        rest: list[torch.nn.Parameter] = []
        for name, p in (model if model is not None else self.model).named_parameters():
            if p.requires_grad:
                (saved if ".modules_to_save." in name else rest).append(p)
        if not saved or cfg.lora_modules_to_save_lr is None:
            return [{"params": saved + rest, "lr": cfg.lr, "base_lr": cfg.lr}]
        lr2 = cfg.lora_modules_to_save_lr
        return [{"params": rest, "lr": cfg.lr, "base_lr": cfg.lr}, {"params": saved, "lr": lr2, "base_lr": lr2}]

    @staticmethod
    def _supports_logits_to_keep(model: torch.nn.Module) -> bool:
        """Whether the model's forward takes per-row ``logits_to_keep`` positions (most HF causal LMs)."""
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # type: ignore[operator]
        return "logits_to_keep" in inspect.signature(base.forward).parameters

    @classmethod
    def from_config(cls, config: LegoConfig, device: str | torch.device | None = None) -> Trainer:
        """The trainer for ``engine.model`` (``"default"``: the embedded tiny policy, built on first use)."""
        from lego.models.tiny import resolve_model

        return cls(resolve_model(config.engine.model), config, device)

    def _wrap_lora(self, model: torch.nn.Module) -> torch.nn.Module:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:
            raise ModelError("training.finetune='lora' needs peft: pip install 'peft>=0.12'") from exc
        cfg = LoraConfig(
            r=self.train_cfg.lora_rank,
            lora_alpha=self.train_cfg.lora_alpha,  # type: ignore[arg-type]  # peft accepts floats
            lora_dropout=0.0,
            target_modules="all-linear",
            modules_to_save=list(self.train_cfg.lora_modules_to_save) or None,
            task_type="CAUSAL_LM",
        )
        names = {n for n, _ in model.named_modules()}
        for wanted in self.train_cfg.lora_modules_to_save:
            if not any(n.endswith(wanted) for n in names):  # peft's rule: a plain name-suffix match
                raise ModelError(
                    f"training.lora_modules_to_save: no module name ends with {wanted!r} in {self.model_dir}; "
                    "give a name suffix, e.g. 'norm' (every RMSNorm of a Qwen3/Llama model) or 'model.norm' (the final one)"
                )
        return get_peft_model(model, cfg)  # type: ignore[arg-type, no-any-return]

    # ---- forward passes -------------------------------------------------------------------------

    def _chunks(self, n: int) -> list[list[int]]:
        mb = self.train_cfg.micro_batch_size
        return [list(range(i, min(i + mb, n))) for i in range(0, n, mb)]

    def _token_logp(
        self, mb: PaddedBatch, model: torch.nn.Module | None = None, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log p(response token | prefix) at ``algorithm.temperature``: (B, R), and entropy (B, R)."""
        net = self.model if model is None else model
        if self._logits_to_keep:
            # Project only the response positions onto the vocabulary (transformers' logits_to_keep
            # takes (B, R) positions): a long agentic prompt costs no lm_head work or logits memory.
            logits = net(
                input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False, logits_to_keep=mb.gather_pos
            ).logits  # (B, R, V)
        else:
            full = net(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits  # (B, L, V)
            logits = torch.gather(full, 1, mb.gather_pos[..., None].expand(-1, -1, full.shape[-1]))  # (B, R, V)
        resp_logits = logits.float() / self.algo.temperature  # (B, R, V)
        logz = torch.logsumexp(resp_logits, dim=-1)  # (B, R)
        logp = resp_logits.gather(-1, mb.resp_ids[..., None]).squeeze(-1) - logz
        entropy = None
        if with_entropy:
            with torch.no_grad():
                probs = torch.softmax(resp_logits, dim=-1)
                entropy = logz - (probs * resp_logits).sum(-1)
        return logp, entropy

    def _rank_chunks(self, n: int) -> tuple[list[list[int]], int]:
        """This rank's micro-batches (k % world_size == rank), padded with copies of the first so
        every rank runs the same number of passes; returns (chunks, how many are real)."""
        all_chunks = self._chunks(n)
        mine = [c for k, c in enumerate(all_chunks) if k % self.dist.world_size == self.dist.rank]
        rounds = -(-len(all_chunks) // self.dist.world_size)
        return mine + [all_chunks[0]] * (rounds - len(mine)), len(mine)

    @torch.no_grad()
    def _recompute_batches(self, batches: list[PaddedBatch]) -> list[torch.Tensor]:
        return [self._token_logp(mb)[0] for mb in batches]

    def recompute(self, items: Sequence[TrainItem]) -> list[list[float]]:
        """log π(token | prefix) at ``algorithm.temperature`` for every response position of every
        item (sampled or not), on exactly the recorded ids, with the current weights."""
        out: list[list[float]] = []
        for chunk in self._chunks(len(items)):
            mb = PaddedBatch([items[i] for i in chunk], self.device)
            (logp,) = self._recompute_batches([mb])
            for row, n in enumerate(mb.resp_lens):
                out.append(logp[row, :n].tolist())
        return out

    # ---- the update -----------------------------------------------------------------------------

    def _weights(self, items: Sequence[TrainItem]) -> list[torch.Tensor]:
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
    ) -> dict[str, float]:
        """One update: forward + loss + backward per micro-batch -> fidelity (gate) -> clip -> AdamW.

        ``rollout_logprobs`` overrides the engine logprobs recorded on the segments (one list per item,
        aligned with ``response_ids``). ``old_logprobs`` (e.g. from :meth:`recompute` before a first
        update on the same batch) makes this a further update against that π_old: ratios and GSPO's
        clip then act; the gate is only consulted when π_old is taken from this step's own forward
        passes (no ``old_logprobs``). Returns the step's
        metrics: ``actor/*`` (loss, clip fraction, KL, entropy, grad norm, tokens), the fidelity
        metrics and ``perf/*`` timings. Raises :class:`FidelityError`, before touching the weights,
        when the gate trips."""
        t0 = time.perf_counter()
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step_count, group["base_lr"])
        metrics = self.compute_gradients(items, rollout_logprobs, old_logprobs)
        metrics["actor/grad_norm"] = self._clip_and_step()
        wall = time.perf_counter() - t0
        metrics["perf/trainer_step_s"] = wall
        metrics["perf/tokens_per_s"] = metrics["actor/tokens"] / wall if wall > 0 else 0.0
        self.step_count += 1
        return metrics

    def compute_gradients(
        self,
        items: Sequence[TrainItem],
        rollout_logprobs: Sequence[Sequence[float | None]] | None = None,
        old_logprobs: Sequence[Sequence[float]] | None = None,
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
            items = [
                it.model_copy(update={"segment": it.segment.model_copy(update={"response_logprobs": list(lp)})})
                for it, lp in zip(items, rollout_logprobs, strict=True)
            ]
        weights = self._weights(items)
        chunks, n_real = self._rank_chunks(len(items))
        batches = [PaddedBatch([items[i] for i in c], self.device) for c in chunks]
        episodes = {e: i for i, e in enumerate(dict.fromkeys(it.episode_id for it in items))}
        fused = old_logprobs is None
        old: list[torch.Tensor] = []  # log π_old per real micro-batch
        fid: dict[str, float] = {}
        if old_logprobs is not None:
            current = self._recompute_batches(batches)  # log πθ's value now, for Δ before any backward
            old = [self._pad_rows(old_logprobs, c, cur) for c, cur in zip(chunks, current, strict=True)]
            fid = self._fidelity(items, chunks[:n_real], batches, old)
            delta = self._episode_deltas(items, episodes, chunks[:n_real], batches, current, old)
            t_recompute = time.perf_counter() - t0
        else:
            # π_old is the loss pass's own forward (detached): log πθ == log π_old, so every Δ is 0.
            delta = torch.zeros(len(episodes), dtype=torch.float64)
            t_recompute = 0.0

        sums: dict[str, float] = {}  # token-weighted sums, except the already-normalised loss terms
        ratio_max, ratio_min = float("-inf"), float("inf")
        for idx, (c, mb) in enumerate(zip(chunks, batches, strict=True)):
            logp, entropy = self._token_logp(mb, with_entropy=True)
            if idx >= n_real:  # padding pass: FSDP needs every rank in every collective; adds zero gradient
                (logp.sum() * 0.0).backward()
                continue
            if fused:
                old.append(logp.detach())
            o = old[idx]
            w = torch.zeros_like(logp)
            for row, i in enumerate(c):
                w[row, : len(weights[i])] = weights[i].to(self.device)
            adv = torch.tensor([items[i].advantage for i in c], device=self.device)
            seq = delta[[episodes[items[i].episode_id] for i in c]].to(device=self.device, dtype=logp.dtype)
            ref = self._ref_logp(mb) if self.algo.kl_coef > 0 else None
            loss, m = self.loss_fn(
                o, logp, adv, mb.mask, self.algo,
                token_weight=w, seq_log_ratio=seq, rollout_logp=mb.rollout_logp, ref_logp=ref,
            )  # fmt: skip
            (loss * self.dist.world_size).backward()  # FSDP averages over ranks; our weights already sum to 1
            n = m["actor/tokens"]
            ratio_max, ratio_min = max(ratio_max, m.pop("actor/ratio_max")), min(ratio_min, m.pop("actor/ratio_min"))
            if entropy is not None:
                m["actor/entropy"] = float((entropy * mb.mask).sum() / max(n, 1.0))
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + (v if k in _SUMMED else v * n)

        if fused:
            t_fid = time.perf_counter()
            fid = self._fidelity(items, chunks[:n_real], batches, old)
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

    def _pad_rows(self, rows: Sequence[Sequence[float]], chunk: list[int], like: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(like)
        for r, i in enumerate(chunk):
            if rows[i]:
                out[r, : len(rows[i])] = torch.tensor(list(rows[i]), dtype=like.dtype)
        return out

    def _fidelity(
        self, items: Sequence[TrainItem], chunks: list[list[int]], batches: list[PaddedBatch], old: list[torch.Tensor]
    ) -> dict[str, float]:
        """Fidelity metrics over every rank's sampled tokens (rollout vs π_old)."""
        roll: list[torch.Tensor] = []
        act: list[torch.Tensor] = []
        harness: list[str] = []
        for c, mb, o in zip(chunks, batches, old, strict=False):
            sel = mb.mask.bool()
            roll.append(mb.rollout_logp[sel])
            act.append(o[sel])
            harness.extend(items[c[r]].harness or "unknown" for r in sel.nonzero()[:, 0].tolist())
        empty = torch.zeros(0, dtype=torch.float64)
        return fidelity_metrics(
            dist_utils.gather_cat(torch.cat(roll).double().cpu() if roll else empty),
            dist_utils.gather_cat(torch.cat(act).double().cpu() if act else empty),
            dist_utils.gather_labels(harness),
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
        """GSPO's Δ for each episode, pooled over all its segments (on every rank): (E,).

        Δₑ = Σ m (log πθ − log π_old) / Σ m over the episode's sampled tokens. The weights do not
        change while gradients accumulate, so the no-grad ``current`` pass gives log πθ's value."""
        num = torch.zeros(len(episodes), dtype=torch.float64)
        den = torch.zeros(len(episodes), dtype=torch.float64)
        for c, mb, cur, o in zip(chunks, batches, current, old, strict=False):
            diff = ((cur - o).double() * mb.mask).sum(-1).cpu()
            for row, i in enumerate(c):
                num[episodes[items[i].episode_id]] += diff[row]
        for it in items:
            den[episodes[it.episode_id]] += it.segment.num_sampled
        num = torch.tensor(dist_utils.all_reduce_sum(num.tolist()), dtype=torch.float64) if len(num) else num
        return num / den.clamp(min=1.0)

    @torch.no_grad()
    def _ref_logp(self, mb: PaddedBatch) -> torch.Tensor:
        if self.reference is not None:
            return self._token_logp(mb, model=self.reference)[0]
        with self.model.disable_adapter():  # type: ignore[operator]  # LoRA: the base model is the reference
            return self._token_logp(mb)[0]

    def lr_at(self, update: int, base_lr: float | None = None) -> float:
        """The learning rate of update ``update`` (0-based): linear warmup, then ``base_lr``
        (default ``training.lr``)."""
        lr = self.train_cfg.lr if base_lr is None else base_lr
        warmup = self.train_cfg.warmup_steps
        return lr * min(1.0, (update + 1) / warmup) if warmup else lr

    def _clip_and_step(self) -> float:
        params = [p for p in self.model.parameters() if p.requires_grad]
        max_norm = self.train_cfg.grad_clip if self.train_cfg.grad_clip is not None else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def _reduce_metrics(self, sums: dict[str, float], rmax: float, rmin: float) -> dict[str, float]:
        keys = sorted(sums)
        out = dict(zip(keys, dist_utils.all_reduce_sum([sums[k] for k in keys]), strict=True))
        n = max(out.get("actor/tokens", 0.0), 1.0)
        out = {k: (v if k in _SUMMED else v / n) for k, v in out.items()}
        out["actor/ratio_max"] = dist_utils.all_reduce_max(rmax)
        out["actor/ratio_min"] = -dist_utils.all_reduce_max(-rmin)
        return out

    # ---- weights out ----------------------------------------------------------------------------

    def engine_state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's full weights under the base model's Hugging Face names (LoRA merged in),
        detached copies — what an in-process engine's ``load_weights`` takes."""
        if self.train_cfg.finetune != "lora":
            return {k: v.detach().clone() for k, v in dist_utils.full_state_dict(self.model).items()}
        from peft.tuners.lora import LoraLayer

        base = self.model.get_base_model()  # type: ignore[operator]
        out: dict[str, torch.Tensor] = {}
        for name, tensor in base.state_dict().items():
            if ".lora_" in name or ".original_module." in name:  # modules_to_save: the trained copy wins
                continue
            if ".modules_to_save." in name:
                if ".modules_to_save.default." not in name:
                    continue
                name = name.replace(".modules_to_save.default.", ".")
            out[name.replace(".base_layer.", ".")] = tensor.detach().clone()
        for mod_name, module in base.named_modules():
            if isinstance(module, LoraLayer) and "default" in module.lora_A:
                key = f"{mod_name}.weight"
                delta = module.get_delta_weight("default")  # type: ignore[attr-defined]
                out[key] = (out[key].float() + delta.float()).to(out[key].dtype)
        return out

    def save(
        self,
        run_dir: str | Path,
        extra: dict[str, Any] | None = None,
        export_merged: bool = False,
        keep_last: int | None = None,
    ) -> Path:
        """Write a checkpoint under ``run_dir/checkpoints`` (see :mod:`lego.conductor.checkpoint`)."""
        from lego.conductor.checkpoint import save_checkpoint

        return save_checkpoint(self, run_dir, extra=extra, export_merged=export_merged, keep_last=keep_last)

    def load(self, checkpoint_dir: str | Path) -> dict[str, Any]:
        """Restore weights, optimizer, RNG, step and gate from a checkpoint; returns its ``extra``."""
        from lego.conductor.checkpoint import restore_checkpoint

        return restore_checkpoint(self, checkpoint_dir)
