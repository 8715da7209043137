"""How the policy learns and is measured: ``[algorithm]``, ``[training]`` (with its fidelity gate),
``[eval]`` and ``[sft]``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from lego.config.base import Section

__all__ = ["AlgorithmConfig", "EvalConfig", "FidelityConfig", "SFTConfig", "TrainingConfig"]


class AlgorithmConfig(Section):
    """The policy-gradient objective (GSPO by default; Zheng et al. 2025, arXiv:2507.18071)."""

    ratio_level: Literal["sequence", "token"] = Field(
        "sequence", description="sequence: GSPO's length-normalised sequence ratio; token: PPO/GRPO per-token ratio."
    )
    clip_low: float = Field(3e-4, gt=0, lt=1, description="Ratio clip below 1 (GSPO: 3e-4; token-level PPO: 0.2).")
    clip_high: float = Field(4e-4, gt=0, description="Ratio clip above 1 (GSPO: 4e-4; token-level PPO: 0.28).")
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum"] = Field(
        "seq-mean-token-mean",
        description="How per-token losses become one number (verl's loss_agg_mode): seq-mean-token-mean averages "
        "tokens within an episode, then episodes (GSPO); token-mean averages every token of the batch (DAPO); "
        "seq-mean-token-sum sums tokens within an episode, then averages episodes (Dr. GRPO).",
    )
    group_size: int = Field(4, ge=1, description="G: rollouts per task; advantages are normalised within a group.")
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of rollouts and of the trainer's recompute."
    )
    tis_cap: float | None = Field(
        None, gt=0, description="Truncated importance sampling cap on pi_old/pi_rollout (Yao et al. 2025). None: off."
    )
    kl_coef: float = Field(0.0, ge=0, description="k3 reference-KL coefficient (Schulman 2020 estimator). 0: off.")
    off_policy: Literal["decoupled", "tis"] = Field(
        "decoupled",
        description="How a token sampled by an older policy version (asynchronous training, "
        "training.max_staleness >= 1) is corrected; the clip stays centred on pi_prox (the trainer's weights before "
        "the update) and w = pi_prox/pi_behav multiplies the loss outside it, per token or, at sequence level, as "
        "GSPO's length-normalised sequence weight (lego.algos.losses). decoupled: AReaL's decoupled PPO (Fu et al. "
        "2025, arXiv:2505.24298), a token or sequence whose w exceeds algorithm.behaviour_weight_cap is dropped; "
        "tis: truncated importance sampling (Yao et al. 2025), w is cut to the cap and kept. Current-version tokens "
        "have w = 1 under both, so a synchronous run is unaffected.",
    )
    behaviour_weight_cap: float = Field(
        2.0,
        gt=1,
        description="The cap C on the off-policy weight pi_prox/pi_behav (algorithm.off_policy): above it a token is "
        "dropped (decoupled) or cut to C (tis). > 1, so a current-version token's weight of 1 is never touched.",
    )
    adv_eps: float = Field(
        1e-6, gt=0, description="ε in A = (r - mean)/(std + ε) over a group: keeps a near-constant group finite."
    )


class FidelityConfig(Section):
    """The rollout-train fidelity gate."""

    min_pearson: float = Field(0.99, ge=-1, le=1, description="Floor on training/rollout_actor_probs_pearson_corr.")
    patience: int = Field(2, ge=1, description="Steps in a row under the floor before the run stops.")


class TrainingConfig(Section):
    """The training loop."""

    steps: int = Field(
        10, ge=1, description="Steps of the run; each is one batch of B x G rollouts and training.ppo_epochs updates."
    )
    tasks_per_step: int = Field(2, ge=1, description="B: tasks per step; each gets algorithm.group_size rollouts.")
    concurrency: int = Field(4, ge=1, description="Rollouts in flight at once.")
    max_staleness: int = Field(
        0,
        ge=0,
        description="Asynchronous training (lego.conductor.async_train): k >= 1 keeps `concurrency` rollouts in "
        "flight all the time, each update takes the first tasks_per_step groups whose rollouts have all ended, "
        "rollouts in flight continue on the pushed weights (every token records the version that sampled it), "
        "and a group whose oldest token is more than k versions old is dropped and counted. 0: the synchronous "
        "loop (each step waits for its slowest rollout), bit for bit.",
    )
    straggler_multiple: float = Field(
        0.0,
        ge=0,
        description="Synchronous loop: once half a step's rollouts have ended, one still running after this many "
        "times their median duration is cut at its next turn boundary (the proxy serves it no new generation) and "
        "graded on the diff it left, termination `cut`, the policy's (lego.conductor.stragglers). 0: off, every "
        "step waits for its slowest rollout. With training.max_staleness >= 1 a straggler joins a later update "
        "instead, so set one or the other.",
    )
    lr: float = Field(1e-5, gt=0, description="AdamW learning rate (peak, after training.warmup_steps).")
    warmup_steps: int = Field(
        0,
        ge=0,
        description="Linear lr warmup over the first N updates (lr·k/N at update k). A fresh AdamW's first "
        "updates move every weight by ~lr whatever the gradient's noise; warmup keeps them small.",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay (Loshchilov & Hutter 2019).")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW (beta1, beta2) moment decay rates.")
    ppo_epochs: int = Field(
        1,
        ge=1,
        description="Optimizer updates per step on the same rollouts (verl's ppo_epochs). The first is the "
        "on-policy update (the fidelity gate applies); each further one reuses the batch against π_old, the "
        "weights it was sampled with, so the ratio and its clip act (token level: clip_low 0.2 / clip_high "
        "0.28). More learning per rollout where a rollout batch costs far more than an update; on a 2-core CPU "
        "one epoch over 32 agent rollouts of the default costs ~25 s against 50-80 s of rollouts. The "
        "schedule, checkpoints and resume still count steps.",
    )
    micro_batch_size: int = Field(
        4,
        ge=1,
        description="Segments per forward/backward pass. A step is ONE optimizer update: the gradients of all "
        "micro-batches are accumulated first, so this trades memory for speed and never changes the result.",
    )
    micro_batch_tokens: int | None = Field(
        16384,
        ge=1,
        description="Most padded tokens (segments × the longest one) in one forward/backward pass: long agent "
        "segments (a 30k-token harness prompt) go in smaller micro-batches, one alone if longer, so the "
        "trainer's activations stay bounded. Like micro_batch_size it never changes the result. None: no cap.",
    )
    grad_clip: float | None = Field(
        1.0, gt=0, description="Clip the global gradient L2 norm to this before each update. None: no clipping."
    )
    finetune: Literal["full", "lora"] = Field(
        "full", description="full: train every weight; lora: train low-rank adapters (Hu et al. 2021), base frozen."
    )
    lora_rank: int = Field(16, ge=1, description="LoRA only: rank r of each adapter.")
    lora_alpha: float = Field(
        32.0, gt=0, description="LoRA only: scale; the adapter's update is multiplied by alpha/r."
    )
    lora_modules_to_save: list[str] = Field(
        default_factory=list,
        description="LoRA only: modules trained in full next to the adapter (peft's modules_to_save), matched by "
        "name suffix: ['norm'] is every RMSNorm gain of a Qwen3/Llama model, ['model.norm'] the final one. RMSNorm "
        "is scale-invariant, so an adapter on the linear layers cannot change the logit scale (how sharply the "
        "policy samples); the final norm's gain sets it directly, q_norm/k_norm the attention's.",
    )
    lora_modules_to_save_lr: float | None = Field(
        None,
        gt=0,
        description="LoRA only: lr of lora_modules_to_save (None: training.lr). AdamW moves a weight by about lr per update "
        "whatever its size: a norm gain near 1 needs a larger lr than an adapter that starts at 0 to move as far.",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="Trainer weights and optimizer precision; the recompute of old logprobs uses it too."
    )
    seed: int = Field(0, description="Seeds task order, rollout seeds and the trainer.")
    out_dir: str = Field(
        "runs/default", description="Run directory: config.toml, metrics.jsonl, trajectories/, checkpoints/."
    )
    checkpoint_every: int = Field(1, ge=1, description="Write a checkpoint (a loadable model dir) every N steps.")
    eval_every: int = Field(
        0, ge=0, description="Validate every N steps on tasks.eval_split with eval.harness (0: off)."
    )
    fidelity: FidelityConfig = Field(default_factory=FidelityConfig)
    retry_infra: int = Field(1, ge=0, description="Retries for a rollout that ended in an infrastructure failure.")
    train_side_threads: bool = Field(
        False,
        description="Also train on a trajectory's side threads (subagents, title calls, quota probes the harness "
        "sent to its session), with the trajectory's advantage. Off: only the agent's own conversation is trained on.",
    )
    rollout_backend: Literal["threads", "ray"] = Field(
        "threads",
        description="Where rollouts run: 'threads' in this process; 'ray' as Ray tasks (the 'ray' extra), each "
        "driving its harness and grading on a worker node while the proxy stays here, reached over TCP at "
        "proxy.host (set it to a routable address for a multi-node cluster; that listener serves only the model "
        "routes, where each rollout's session token is its key, so proxy.api_key is not needed there). With "
        "training.max_staleness >= 1 each rollout is its own Ray call.",
    )
    ray_address: str | None = Field(
        None, description="ray.init address for rollout_backend='ray' ('auto', 'ray://host:10001'); None: a local Ray."
    )
    sampling_override: bool = Field(
        True,
        description="The proxy samples at algorithm.temperature with no top-p/top-k truncation, whatever the harness "
        "asks (truncation biases the importance ratio). False lets the harness choose: off-policy unless it asks "
        "for exactly that; the fidelity gate reports the mismatch.",
    )

    @model_validator(mode="after")
    def _one_straggler_rule(self) -> TrainingConfig:
        if 0 < self.straggler_multiple < 1:
            raise ValueError(
                f"training.straggler_multiple={self.straggler_multiple} would cut rollouts shorter than the median: "
                "give 0 (off) or a multiple >= 1, e.g. 3"
            )
        if self.straggler_multiple and self.max_staleness:
            raise ValueError(
                f"training.straggler_multiple={self.straggler_multiple} cuts stragglers of the synchronous loop, but "
                f"training.max_staleness={self.max_staleness} already carries them into a later update: set "
                "training.straggler_multiple=0 or training.max_staleness=0"
            )
        return self


class EvalConfig(Section):
    """Cross-harness evaluation."""

    harnesses: list[str] = Field(
        default_factory=lambda: ["lego-agent"], description="Harnesses to evaluate in (`lego eval --harness`)."
    )
    samples: int = Field(2, ge=1, description="N samples per task and cell.")
    limit: int | None = Field(
        None,
        ge=1,
        description="Evaluate the first N tasks (after tasks.where), in the source's order (`lego eval --limit`; a "
        "run's validation takes the same N, so the two see the same tasks). None: all.",
    )
    concurrency: int = Field(4, ge=1, description="Samples in flight at once (`lego eval --concurrency`).")
    temperature: float = Field(
        1.0, ge=0, description="Sampling temperature of every eval sample, whatever the harness asks."
    )
    bootstrap: int = Field(2000, ge=100, description="Bootstrap resamples for confidence intervals.")
    seed: int = Field(0, description="Base seed of an eval; every sample's seed derives from it.")

    @field_validator("harnesses")
    @classmethod
    def _registered_harnesses(cls, value: list[str]) -> list[str]:
        from lego.config.environment import harness_name

        return [harness_name(name) for name in value]

    tasks: str | None = Field(
        None,
        description="Task source of `lego eval` as SOURCE[:split] (e.g. builtin:heldout). None: tasks.source at "
        "tasks.eval_split.",
    )
    out_dir: str = Field("runs/eval", description="Eval directory: spec, per-sample JSON, trajectories, report.")
    infra_retries: int = Field(1, ge=0, description="Retries of a sample that ended in an infrastructure failure.")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="Policy-side generation limit of `lego eval` and `lego bench learn` samples: the most tokens "
        "one policy completion may take, whatever the harness asks (the proxy's max_tokens_cap of every evaluated "
        "policy; the oracle keeps its own budget). Bounds what a runaway sample costs. Validation during training "
        "(training.eval_every) shares the training policy's proxy and keeps the harness's budget. None: the "
        "harness's budget, as in training.",
    )
    temperatures: list[float] = Field(
        default_factory=lambda: [0.6, 0.8, 1.0, 1.2],
        min_length=1,
        description="`lego bench learn`'s temperature sweep: the start and the trained policy are each sampled at "
        "every one of these, on the same tasks and per-sample seeds, and compared at their own best (a trained "
        "policy that is only sharper than its start then shows no gain a temperature knob would give).",
    )
    sweep_samples: int = Field(
        2,
        ge=1,
        description="`lego bench learn`: samples per task at each temperature of the sweep, on which each policy's "
        "best temperature is chosen (and the same-temperature deltas are measured).",
    )
    confirm_samples: int = Field(
        8,
        ge=0,
        description="`lego bench learn`: fresh samples per task (new per-sample seeds) drawn at each policy's chosen "
        "temperature after its sweep. Best-vs-best and pass@k are scored on these, so the choice of temperature "
        "does not bias them, and only one temperature pays for the many samples pass@k needs. 0: no confirm "
        "stage; best-vs-best and pass@k come from the sweep's own samples (each needing eval.sweep_samples >= k).",
    )
    pass_at_k: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8],
        min_length=1,
        description="`lego bench learn`: the k of unbiased pass@k (Chen et al. 2021, arXiv:2107.03374) before and "
        "after training, each policy at its best temperature. Each k needs eval.confirm_samples >= k (or, with "
        "eval.confirm_samples = 0, eval.sweep_samples >= k).",
    )

    @field_validator("temperatures")
    @classmethod
    def _positive_distinct(cls, temps: list[float]) -> list[float]:
        if any(t <= 0 for t in temps) or len(set(temps)) != len(temps):
            raise ValueError(f"{temps}: give distinct temperatures > 0, e.g. [0.6, 0.8, 1.0, 1.2]")
        return sorted(temps)

    @model_validator(mode="after")
    def _enough_samples(self) -> EvalConfig:
        field, have = (
            ("eval.confirm_samples", self.confirm_samples)
            if self.confirm_samples
            else ("eval.sweep_samples", self.sweep_samples)
        )
        if max(self.pass_at_k) > have or min(self.pass_at_k) < 1:
            flag = "--confirm-samples" if self.confirm_samples else "--samples"
            raise ValueError(
                f"eval.pass_at_k={self.pass_at_k} needs 1 <= k <= {field} ({have}): set "
                f"{field}={max(max(self.pass_at_k), 1)} (`lego bench learn {flag}`) or drop the larger k"
            )
        return self


class SFTConfig(Section):
    """`lego sft`: supervised warm start on lego-agent conversations (stored in the output as ``lego_sft.json``)."""

    base: str = Field("tiny", description="'tiny' (build_tiny with `seed`) or an HF model directory.")
    seed: int = Field(0, description="Seeds the base weights (tiny), the generated data and the example order.")
    source: str = Field(
        "starter",
        description="Task source to learn from (see `lego tasks list`): a shipped suite, or a JSONL file whose "
        "tasks have local repos (conversations are planned from each gold patch and run on a copy of the repo).",
    )
    split: str = Field("train", description="Split of that source to learn from.")
    variants: int = Field(2, ge=1, description="Conversations per task (different exploration/recovery).")
    limit: int | None = Field(None, ge=1, description="Use only the first N tasks of the split.")
    extra: dict[str, int] = Field(
        default_factory=lambda: {"boundary": 30},
        description="More tasks after those: {source = N} takes the first N of that source's `split`. The shipped "
        "warm start adds 30 boundary tasks to the starter suite's 600, so it knows the off-by-one fix but applies "
        "it to ~17% of the lines that need it (the rest get the starter suite's negation): the preference "
        "`lego train` on the boundary suite corrects (README).",
    )
    steps: int = Field(300, ge=1, description="Optimizer steps.")
    batch: int = Field(8, ge=1, description="Examples per optimizer step (gradient accumulation).")
    lr: float = Field(2e-3, gt=0, description="Peak AdamW learning rate (linear warmup, then cosine to 10%).")
    warmup: int = Field(5, ge=0, description="Linear warmup steps before the peak learning rate.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW decoupled weight decay.")
    max_len: int = Field(2048, ge=16, description="Tokens; longer conversations are cut (their tail is dropped).")
    window: int = Field(
        0,
        ge=0,
        description="0: one example per conversation. N > 0: one example per assistant turn, the N tokens "
        "ending with that turn (loss on the assistant tokens inside). Several times cheaper per "
        "assistant token on a CPU; the protocol and the local edits are learnt from nearby context.",
    )
    threads: int = Field(
        2,
        ge=0,
        description="torch CPU threads (0: torch's default). The result is bit-identical only for the same count; "
        "fewer threads than cores is faster on a busy machine (timings: docs/ARCHITECTURE.md).",
    )
