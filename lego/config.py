"""Configuration: one pydantic model per component, composed into :class:`LegoConfig`.

Loaded from TOML or YAML (:func:`load_config`), then dotted ``key.sub=value`` overrides are applied
(:func:`apply_overrides`). Unknown keys and invalid combinations raise :class:`ConfigError` with the
field's dotted name and the fix (for a misspelt key, the nearest valid name).
"""

from __future__ import annotations

import difflib
import json
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lego.errors import ConfigError

__all__ = [
    "AlgorithmConfig",
    "EngineConfig",
    "EvalConfig",
    "FidelityConfig",
    "GuardsConfig",
    "HarnessConfig",
    "LegoConfig",
    "ProxyConfig",
    "SandboxConfig",
    "TasksConfig",
    "TrainingConfig",
    "apply_overrides",
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
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: fp32 on CPU, bf16 on CUDA."
    )
    max_batch_size: int = Field(16, ge=1, description="Most concurrent requests batched into one forward pass.")
    max_model_len: int | None = Field(None, ge=16, description="Context window; default: the model's own.")
    vllm_url: str | None = Field(None, description="Base URL of `vllm serve` (engine.kind='vllm').")
    vllm_api_key: str | None = None
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
    request_timeout_s: float = Field(600.0, gt=0)
    seed: int = 0
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

    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    uds: str | None = Field(None, description="Serve on this Unix socket path instead of a TCP port.")
    api_key: str | None = Field(None, description="If set, every route requires this key (Bearer or x-api-key).")
    served_model_name: str = "lego-policy"
    strict_sessions: bool = Field(False, description="Answer 404 for sessions that were not opened explicitly.")
    max_body_mb: float = Field(8.0, gt=0)
    default_max_tokens: int = Field(
        4096,
        ge=1,
        description="Completion budget when a request names none (clamped to the room left in the context). "
        "Harnesses that send no max_tokens (mini-swe-agent) otherwise get their answers cut mid-tool-call.",
    )

    max_tokens_cap: int | None = Field(
        None,
        ge=1,
        description="Upper bound on every request's completion budget, whatever it asks (Claude Code asks for "
        "32k tokens). For slow engines, e.g. a small policy on a CPU. None: no cap beyond the context window.",
    )


class SandboxConfig(_Section):
    """Where each rollout's repository lives and commands run."""

    kind: Literal["local", "docker"] = "local"
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


class HarnessConfig(_Section):
    """Which agent harness drives each rollout."""

    name: str = Field("lego-agent", description="A registered harness name (`lego harness list`).")
    weights: dict[str, float] = Field(
        default_factory=dict, description="Mixed-harness runs: harness name -> sampling weight. Empty: use `name`."
    )
    max_turns: int = Field(30, ge=1)
    timeout_s: float = Field(600.0, gt=0, description="Wall time of one harness run.")
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-harness constructor settings, e.g. {lego-agent = {max_tokens = 256}} (see `lego harness list`).",
    )


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
    shuffle_seed: int = 0


class AlgorithmConfig(_Section):
    """The policy-gradient objective (GSPO by default; Zheng et al. 2025, arXiv:2507.18071)."""

    ratio_level: Literal["sequence", "token"] = Field(
        "sequence", description="sequence: GSPO's length-normalised sequence ratio; token: PPO/GRPO per-token ratio."
    )
    clip_low: float = Field(3e-4, gt=0, lt=1, description="Ratio clip below 1 (GSPO: 3e-4; token-level PPO: 0.2).")
    clip_high: float = Field(4e-4, gt=0, description="Ratio clip above 1 (GSPO: 4e-4; token-level PPO: 0.28).")
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum"] = "seq-mean-token-mean"
    group_size: int = Field(4, ge=1, description="G: rollouts per task; advantages are normalised within a group.")
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of rollouts and of the trainer's recompute."
    )
    tis_cap: float | None = Field(
        None, gt=0, description="Truncated importance sampling cap on pi_old/pi_rollout (Yao et al. 2025). None: off."
    )
    kl_coef: float = Field(0.0, ge=0, description="k3 reference-KL coefficient (Schulman 2020 estimator). 0: off.")
    adv_eps: float = Field(1e-6, gt=0)


class FidelityConfig(_Section):
    """The rollout-train fidelity gate."""

    min_pearson: float = Field(0.99, ge=-1, le=1, description="Floor on training/rollout_actor_probs_pearson_corr.")
    patience: int = Field(2, ge=1, description="Steps in a row under the floor before the run stops.")


class TrainingConfig(_Section):
    """The training loop."""

    steps: int = Field(10, ge=1)
    tasks_per_step: int = Field(2, ge=1, description="B: tasks per step; each gets algorithm.group_size rollouts.")
    concurrency: int = Field(4, ge=1, description="Rollouts in flight at once.")
    lr: float = Field(1e-5, gt=0)
    warmup_steps: int = Field(
        0,
        ge=0,
        description="Linear lr warmup over the first N updates (lr·k/N at update k). A fresh AdamW's first "
        "updates move every weight by ~lr whatever the gradient's noise; warmup keeps them small.",
    )
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    micro_batch_size: int = Field(
        4,
        ge=1,
        description="Segments per forward/backward pass. A step is ONE optimizer update: the gradients of all "
        "micro-batches are accumulated first, so this trades memory for speed and never changes the result.",
    )
    grad_clip: float | None = Field(1.0, gt=0)
    finetune: Literal["full", "lora"] = "full"
    lora_rank: int = Field(16, ge=1)
    lora_alpha: float = Field(32.0, gt=0)
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
    dtype: Literal["float32", "bfloat16"] = "float32"
    seed: int = 0
    out_dir: str = "runs/default"
    checkpoint_every: int = Field(1, ge=1)
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

    harnesses: list[str] = Field(default_factory=lambda: ["lego-agent"])
    samples: int = Field(2, ge=1, description="N samples per task and cell.")
    limit: int | None = Field(None, ge=1)
    concurrency: int = Field(4, ge=1)
    temperature: float = Field(1.0, ge=0)
    bootstrap: int = Field(2000, ge=100, description="Bootstrap resamples for confidence intervals.")
    seed: int = 0


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
