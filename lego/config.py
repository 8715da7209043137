"""Configuration: one pydantic model per component, composed into :class:`LegoConfig`.

Loaded from TOML or YAML (:func:`load_config`), then dotted ``key.sub=value`` overrides are applied
(:func:`apply_overrides`). Unknown keys and invalid combinations raise :class:`ConfigError` with the
field's dotted name and the fix (for a misspelt key, the nearest valid name).
"""

from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lego.errors import ConfigError

__all__ = [
    "HARNESS_OPTIONS",
    "AlgorithmConfig",
    "ClaudeCodeOptions",
    "CodexOptions",
    "EngineConfig",
    "EvalConfig",
    "FidelityConfig",
    "FieldDoc",
    "GuardsConfig",
    "HarnessConfig",
    "LegoAgentOptions",
    "LegoConfig",
    "NoOptions",
    "OpenCodeOptions",
    "ProxyConfig",
    "SFTConfig",
    "SandboxConfig",
    "TasksConfig",
    "TrainingConfig",
    "apply_overrides",
    "config_doc",
    "default_config_path",
    "load_config",
    "validate_config",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EngineConfig(_Section):
    """Which engine serves the policy."""

    kind: Literal["transformers", "vllm", "oracle"] = Field(
        "transformers",
        description="transformers: in-process (CPU/GPU); vllm: a `vllm serve` endpoint; oracle: plays gold patches.",
    )
    model: str = Field(
        "default", description="A model directory (HF layout), or 'default' for the embedded default policy."
    )
    chat_template: str | None = Field(
        None,
        description="A Jinja chat-template file that replaces the model's own (gpt-oss ships none; a template "
        "that cannot express tools is refused for tool use). CLI: --chat-template.",
    )
    tool_parser: str | None = Field(
        None,
        description="The tool-call format the policy writes (hermes, qwen3_coder, llama3_json, harmony, "
        "deepseek_v3, mistral, glm). None: read from the chat template.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="transformers engine: where the model runs (auto: CUDA when available, else CPU)."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: fp32 on CPU, bf16 on CUDA."
    )
    max_batch_size: int = Field(16, ge=1, description="Most concurrent requests batched into one forward pass.")
    max_model_len: int | None = Field(None, ge=16, description="Context window; default: the model's own.")
    vllm_url: str | None = Field(None, description="Base URL of `vllm serve` (engine.kind='vllm').")
    vllm_api_key: str | None = Field(None, description="API key `vllm serve` was started with (--api-key), if any.")
    vllm_weight_sync: Literal["full", "lora"] = Field(
        "full",
        description="engine.kind='vllm': how trained weights reach the server. full: rewrite the safetensors in "
        "engine.vllm_weights_dir (the directory vLLM serves) and reload them; lora: hot-load the adapter "
        "(training.finetune='lora', vLLM run with --enable-lora).",
    )
    vllm_weights_dir: str | None = Field(
        None,
        description="engine.kind='vllm', training: where the trainer writes weights for vLLM (full: the model "
        "directory `vllm serve` was started on; lora: adapters go under <dir>/adapters).",
    )
    vllm_weights_dir_remote: str | None = Field(
        None, description="engine.vllm_weights_dir as the vLLM server sees it (default: the same path)."
    )
    request_timeout_s: float = Field(
        600.0, gt=0, description="vllm engine: wall time of one HTTP request to the server."
    )
    seed: int = Field(0, description="Seeds the engine's sampling; each session derives its own stream from it.")
    num_threads: int | None = Field(
        None,
        ge=1,
        description="transformers engine on CPU: torch intra-op threads (process-wide, so the in-process trainer "
        "uses them too). None: half the cores, safest when harnesses and sandboxes compete for them.",
    )
    prefix_cache: bool = Field(
        True,
        description="transformers engine: keep the KV of the prompt prefix shared by recent requests (an agent's "
        "system prompt and tools) and prefill only what follows it. Invalidated by every weight update.",
    )


class ProxyConfig(_Section):
    """The recording proxy in front of the engine."""

    host: str = Field("127.0.0.1", description="Address the proxy binds; a non-loopback address needs proxy.api_key.")
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    uds: str | None = Field(None, description="Serve on this Unix socket path instead of a TCP port.")
    api_key: str | None = Field(None, description="If set, every route requires this key (Bearer or x-api-key).")
    served_model_name: str = Field(
        "lego-policy", description="Model name /v1/models lists and harnesses are told to ask for (any name is served)."
    )
    strict_sessions: bool = Field(False, description="Answer 404 for sessions that were not opened explicitly.")
    max_body_mb: float = Field(8.0, gt=0, description="Largest request body accepted; a bigger one gets a 413.")
    default_max_tokens: int = Field(
        4096,
        ge=1,
        description="Completion budget when a request names none (clamped to the room left in the context). "
        "Harnesses that send no max_tokens (mini-swe-agent) otherwise get their answers cut mid-tool-call.",
    )

    reasoning_history: Literal["template", "keep"] = Field(
        "template",
        description="template: the engine sees what the model's own template renders from the client's messages "
        "(historical reasoning stripped where the template strips it; a segment seals where that is not a prefix "
        "of the last one, counted as reasoning_seals). keep: sampled reasoning stays in context (interleaved "
        "thinking), one segment, counted as kept_reasoning_tokens.",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Passed to every render of the chat template (e.g. {enable_thinking = false}); a request's "
        "own chat_template_kwargs win key by key.",
    )
    max_tokens_cap: int | None = Field(
        None,
        ge=1,
        description="Upper bound on every request's completion budget, whatever it asks (Claude Code asks for "
        "32k tokens). For slow engines, e.g. a small policy on a CPU. None: no cap beyond the context window.",
    )


class SandboxConfig(_Section):
    """Where each rollout's repository lives and commands run."""

    kind: Literal["local", "docker"] = Field(
        "local", description="local: bubblewrap on this host; docker: one container per sandbox (the docker extra)."
    )
    unsafe_no_isolation: bool = Field(
        False,
        description="Run agents without bubblewrap when it is missing. Only for trusted code on a disposable machine.",
    )
    cpu_seconds: int = Field(600, ge=1, description="RLIMIT_CPU per process.")
    memory_mb: int = Field(
        16384,
        ge=64,
        description="RLIMIT_AS (address space) per process. JS runtimes (node, bun: opencode, claude-code, codex) "
        "reserve several GB of address space up front, so a tight value fails them with 'Out of memory'.",
    )
    max_processes: int = Field(256, ge=8, description="Most processes inside one sandbox.")
    disk_mb: int = Field(
        2048,
        ge=16,
        description="Disk budget of one sandbox: the repo, /tmp, /var/tmp and HOME together. A write past it "
        "fails inside the sandbox (ENOSPC / EFBIG); the host disk is never filled by an agent.",
    )
    memory_budget_mb: int = Field(
        8192,
        ge=64,
        description="One memory budget for everything a sandbox holds: its processes and its in-memory file "
        "systems together, enforced by a memory cgroup where the host offers one (`lego doctor` says which).",
    )
    command_timeout_s: float = Field(
        120.0, gt=0, description="Wall time of one exec() before its process group is killed."
    )
    docker_image: str | None = Field(None, description="Default image for the docker backend when a task names none.")
    workdir: str | None = Field(None, description="Where sandboxes are created; default: a temp dir.")


class GuardsConfig(_Section):
    """What a detected reward hack does to the reward (see `lego.sandboxes.guards`)."""

    on_detect: Literal["zero", "flag"] = Field(
        "zero",
        description="'zero': a rollout whose grading or trajectory shows a hack (tampering with tests or the "
        "grader, hack signatures) gets reward 0 and is kept for inspection; 'flag': the flag is recorded and the "
        "reward stands (for studying hacks, never for training).",
    )


class NoOptions(_Section):
    """A harness configured entirely by lego (aider, mini-swe-agent, openhands): it takes no options."""


class LegoAgentOptions(_Section):
    """Options of the built-in reference agent (``lego.harnesses.lego_agent_adapter.LegoAgentHarness``)."""

    python: str = Field("python3", description="The interpreter that runs the agent script inside the sandbox.")
    temperature: float = Field(
        1.0, ge=0, description="Temperature the agent asks for; the proxy's sampling override replaces it in training."
    )
    max_tokens: int = Field(1024, ge=1, description="Completion budget the agent asks for on every turn.")


class OpenCodeOptions(_Section):
    """Options of the opencode adapter."""

    context_window: int = Field(32768, ge=1, description="Context window opencode is told the model has.")
    max_output_tokens: int = Field(4096, ge=1, description="Completion budget opencode asks for on every turn.")


class CodexOptions(_Section):
    """Options of the Codex CLI adapter."""

    context_window: int = Field(32768, ge=1, description="Context window Codex is told the model has.")
    intercept: bool = Field(
        False, description="Route Codex through the mitmproxy interceptor instead of its base-URL setting."
    )


class ClaudeCodeOptions(_Section):
    """Options of the Claude Code adapter."""

    intercept: bool = Field(
        False, description="Route Claude Code through the mitmproxy interceptor instead of ANTHROPIC_BASE_URL."
    )


HARNESS_OPTIONS: dict[str, type[BaseModel]] = {
    "lego-agent": LegoAgentOptions,
    "mini-swe-agent": NoOptions,
    "aider": NoOptions,
    "openhands": NoOptions,
    "opencode": OpenCodeOptions,
    "claude-code": ClaudeCodeOptions,
    "codex": CodexOptions,
}
"""Registered harness name -> the typed model of its adapter's constructor options (same names as the
harness registry, :data:`lego.harnesses.base.HARNESSES`; a test keeps the two and the constructors in step)."""


class HarnessConfig(_Section):
    """Which agent harness drives each rollout."""

    name: str = Field("lego-agent", description="A registered harness name (`lego harness list`).")
    weights: dict[str, float] = Field(
        default_factory=dict, description="Mixed-harness runs: harness name -> sampling weight. Empty: use `name`."
    )
    max_turns: int = Field(
        30, ge=1, description="Most model calls of the main conversation in one rollout (then max_turns)."
    )
    timeout_s: float = Field(600.0, gt=0, description="Wall time of one harness run.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Per-harness adapter settings, e.g. {lego-agent = {max_tokens = 256}}: each harness's are typed "
        "(harness.options.<name>.* in `lego config show --doc`) and checked at load; a module:Class harness's go "
        "to its constructor as given.",
    )

    @field_validator("options")
    @classmethod
    def _typed_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Each registered harness's options become its typed model, so a misspelt key fails at load."""
        out: dict[str, Any] = {}
        for name, raw in value.items():
            model = HARNESS_OPTIONS.get(name)
            if model is None:
                if ":" in name:  # a user's own module:Class adapter: its constructor checks its options
                    out[name] = raw
                    continue
                raise ValueError(
                    f"no harness named {name!r}; valid names: {', '.join(sorted(HARNESS_OPTIONS))} "
                    "(or a module:Class path)"
                )
            if isinstance(raw, model):
                out[name] = raw
                continue
            if not isinstance(raw, dict):
                raise ValueError(f"{name!r} must be a table of options, e.g. {{max_tokens = 256}}")
            valid = ", ".join(model.model_fields) or "none"
            unknown = sorted(set(raw) - set(model.model_fields))
            if unknown:
                raise ValueError(
                    f"{name!r} has no option(s) {', '.join(unknown)}; valid options: {valid}"
                )
            try:
                out[name] = model.model_validate(raw)
            except ValidationError as exc:
                reasons = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"{name!r}: {reasons}") from exc
        return out

    def options_for(self, name: str) -> dict[str, Any]:
        """The constructor keyword arguments of harness ``name``'s adapter (its defaults when none are set)."""
        given = self.options.get(name)
        if isinstance(given, BaseModel):
            return given.model_dump()
        if given is not None:
            return dict(given)
        model = HARNESS_OPTIONS.get(name)
        return model().model_dump() if model is not None else {}


class TasksConfig(_Section):
    """Where tasks come from."""

    source: str = Field(
        "builtin",
        description="'builtin' (eight libraries, issue-only reports), 'starter' (generated one-module repos with "
        "precise reports: the embedded default's suite) or a path to a SWE-bench-format JSONL file.",
    )
    split: str = Field("train", description="Split to sample training tasks from.")
    eval_split: str = Field("heldout", description="Split used for validation.")
    limit: int | None = Field(None, ge=1, description="Use at most this many tasks.")
    shuffle_seed: int = Field(0, description="Seeds the shuffle that picks tasks.limit tasks and the step order.")


class AlgorithmConfig(_Section):
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
    adv_eps: float = Field(
        1e-6, gt=0, description="ε in A = (r - mean)/(std + ε) over a group: keeps a near-constant group finite."
    )


class FidelityConfig(_Section):
    """The rollout-train fidelity gate."""

    min_pearson: float = Field(0.99, ge=-1, le=1, description="Floor on training/rollout_actor_probs_pearson_corr.")
    patience: int = Field(2, ge=1, description="Steps in a row under the floor before the run stops.")


class TrainingConfig(_Section):
    """The training loop."""

    steps: int = Field(10, ge=1, description="Optimizer updates of the run; each is one step of B x G rollouts.")
    tasks_per_step: int = Field(2, ge=1, description="B: tasks per step; each gets algorithm.group_size rollouts.")
    concurrency: int = Field(4, ge=1, description="Rollouts in flight at once.")
    lr: float = Field(1e-5, gt=0, description="AdamW learning rate (peak, after training.warmup_steps).")
    warmup_steps: int = Field(
        0,
        ge=0,
        description="Linear lr warmup over the first N updates (lr·k/N at update k). A fresh AdamW's first "
        "updates move every weight by ~lr whatever the gradient's noise; warmup keeps them small.",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay (Loshchilov & Hutter 2019).")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW (beta1, beta2) moment decay rates.")
    micro_batch_size: int = Field(
        4,
        ge=1,
        description="Segments per forward/backward pass. A step is ONE optimizer update: the gradients of all "
        "micro-batches are accumulated first, so this trades memory for speed and never changes the result.",
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
        "proxy.host (set it to a routable address, and proxy.api_key, for a multi-node cluster).",
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


class EvalConfig(_Section):
    """Cross-harness evaluation."""

    harnesses: list[str] = Field(
        default_factory=lambda: ["lego-agent"], description="Harnesses to evaluate in (`lego eval --harness`)."
    )
    samples: int = Field(2, ge=1, description="N samples per task and cell.")
    limit: int | None = Field(None, ge=1, description="Use the first N tasks (`lego eval --limit`). None: all.")
    concurrency: int = Field(4, ge=1, description="Samples in flight at once (`lego eval --concurrency`).")
    temperature: float = Field(
        1.0, ge=0, description="Sampling temperature of every eval sample, whatever the harness asks."
    )
    bootstrap: int = Field(2000, ge=100, description="Bootstrap resamples for confidence intervals.")
    seed: int = Field(0, description="Base seed of an eval; every sample's seed derives from it.")
    tasks: str | None = Field(
        None,
        description="Task source of `lego eval` as SOURCE[:split] (e.g. builtin:heldout). None: tasks.source at "
        "tasks.eval_split.",
    )
    out_dir: str = Field("runs/eval", description="Eval directory: spec, per-sample JSON, trajectories, report.")
    infra_retries: int = Field(1, ge=0, description="Retries of a sample that ended in an infrastructure failure.")


class SFTConfig(_Section):
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


class LegoConfig(_Section):
    """The whole configuration of a run."""

    engine: EngineConfig = Field(default_factory=EngineConfig)
    proxy: ProxyConfig = Field(default_factory=ProxyConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    guards: GuardsConfig = Field(default_factory=GuardsConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)

    @model_validator(mode="after")
    def _combinations(self) -> LegoConfig:
        a = self.algorithm
        if a.ratio_level == "token" and max(a.clip_low, a.clip_high) < 0.01:
            raise ValueError(
                "algorithm.ratio_level='token' with GSPO's sequence clip range "
                f"(clip_low={a.clip_low}, clip_high={a.clip_high}) clips nearly every token; "
                "set algorithm.clip_low=0.2 and algorithm.clip_high=0.28, or use algorithm.ratio_level='sequence'"
            )
        if a.ratio_level == "sequence" and min(a.clip_low, a.clip_high) > 0.05:
            raise ValueError(
                "algorithm.ratio_level='sequence' with a token-level clip range "
                f"(clip_low={a.clip_low}, clip_high={a.clip_high}) never clips the length-normalised ratio; "
                "set algorithm.clip_low=3e-4 and algorithm.clip_high=4e-4 (GSPO), or use algorithm.ratio_level='token'"
            )
        if a.kl_coef > 0 and self.training.finetune == "full" and self.engine.kind == "vllm":
            raise ValueError(
                "algorithm.kl_coef>0 needs a reference model; with training.finetune='full' on a vLLM engine the "
                "trainer would hold two full copies; use training.finetune='lora' (the base is the reference) or set "
                "algorithm.kl_coef=0"
            )
        if self.engine.kind == "vllm" and not self.engine.vllm_url:
            raise ValueError("engine.kind='vllm' needs engine.vllm_url, e.g. -o engine.vllm_url=http://127.0.0.1:8000")
        if self.engine.kind == "vllm" and self.engine.vllm_weight_sync == "lora":
            if self.training.finetune != "lora":
                raise ValueError(
                    "engine.vllm_weight_sync='lora' hot-loads an adapter; set training.finetune='lora' "
                    "or engine.vllm_weight_sync='full'"
                )
            if self.training.lora_modules_to_save:
                raise ValueError(
                    "vLLM serves LoRA adapters on linear layers only, so training.lora_modules_to_save "
                    f"({self.training.lora_modules_to_save}) cannot travel as an adapter; set "
                    "engine.vllm_weight_sync='full' (pushes the merged weights) or training.lora_modules_to_save=[]"
                )
        if self.harness.weights:
            bad = [k for k, w in self.harness.weights.items() if w < 0]
            if bad or sum(self.harness.weights.values()) <= 0:
                raise ValueError("harness.weights must be non-negative with a positive sum, e.g. {lego-agent=1.0}")
        return self


def default_config_path() -> Path:
    """The shipped config of the embedded default (tiny policy, built-in tasks, lego-agent, local sandbox)."""
    return Path(__file__).parent / "configs" / "default.toml"


def _read_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist; pass an existing .toml or .yaml file")
    text = path.read_text()
    try:
        if path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot parse {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a table/mapping at the top level, not {type(data).__name__}")
    return data


def _parse_value(raw: str) -> Any:
    """An override value: TOML/JSON literal if it parses (numbers, booleans, lists, inline tables), else a string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _model_for_path(path: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = LegoConfig
    for key in path:
        field = model.model_fields.get(key)
        if field is None:
            return None
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        else:
            return None
    return model


def _check_keys(data: dict[str, Any], model: type[BaseModel], prefix: list[str]) -> None:
    """Reject unknown keys, naming the nearest valid one."""
    for key, value in data.items():
        fields = model.model_fields
        if key not in fields:
            dotted = ".".join([*prefix, key])
            near = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.5)
            hint = f"did you mean '{'.'.join([*prefix, near[0]])}'?" if near else f"valid keys: {', '.join(fields)}"
            raise ConfigError(f"unknown config key '{dotted}'; {hint}")
        sub = _model_for_path([*prefix, key])
        if sub is not None and isinstance(value, dict):
            _check_keys(value, sub, [*prefix, key])


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides to a raw config mapping (returns a new mapping)."""
    out = json.loads(json.dumps(data))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} has no '='; write it as key.sub=value, e.g. training.steps=3")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"override {item!r} names no key; write it as key.sub=value")
        _check_keys(_nest(parts, None), LegoConfig, [])
        node = out
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {item!r}: '{p}' is a value, not a section")
            node = nxt
        node[parts[-1]] = _parse_value(raw.strip())
    return out


def _nest(parts: list[str], value: Any) -> dict[str, Any]:
    node: Any = value
    for p in reversed(parts):
        node = {p: node}
    return node  # type: ignore[no-any-return]


def validate_config(data: dict[str, Any]) -> LegoConfig:
    """Validate a raw mapping into a :class:`LegoConfig`, translating pydantic errors to :class:`ConfigError`."""
    _check_keys(data, LegoConfig, [])
    try:
        return LegoConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "config"
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"{loc}: {msg}" if loc != "config" else msg)
        raise ConfigError("invalid config: " + "; ".join(lines)) from exc


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> LegoConfig:
    """Load a config file (TOML/YAML/JSON; None: the shipped default) and apply dotted overrides."""
    data = _read_file(Path(path)) if path is not None else _read_file(default_config_path())
    return validate_config(apply_overrides(data, overrides or []))


@dataclass(frozen=True)
class FieldDoc:
    """One config field as `lego config show --doc` prints it."""

    key: str
    type: str
    default: str
    description: str


def config_doc(model: type[BaseModel] = LegoConfig, prefix: str = "") -> list[FieldDoc]:
    """Every leaf field of ``model`` (sections recursed, each harness's typed options under
    ``harness.options.<name>``) with its dotted key, type, default and description."""
    out: list[FieldDoc] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(config_doc(ann, key + "."))
            continue
        default = field.get_default(call_default_factory=True)
        out.append(FieldDoc(key, _type_name(ann), json.dumps(default, default=str), field.description or ""))
        if model is HarnessConfig and name == "options":
            for harness, options in HARNESS_OPTIONS.items():
                out.extend(config_doc(options, f"{key}.{harness}."))
    return out


def _type_name(ann: Any) -> str:
    return ann.__name__ if isinstance(ann, type) else str(ann).replace("typing.", "")
