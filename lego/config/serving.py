"""How the policy is served: the engine that generates and the proxy that records (``[engine]``, ``[proxy]``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from lego.config.base import Section

__all__ = ["EngineConfig", "ProxyConfig"]


class EngineConfig(Section):
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
    max_batch_tokens: int | None = Field(
        65536,
        ge=1,
        description="transformers engine: admission control. Most KV-cache slots one running batch may reach: "
        "rows x (its padded width + the most tokens a row may still generate), padding included. A request that "
        "would push the batch past it waits (in arrival order) until rows finish; one over it on its own runs "
        "alone. A fixed count, not derived from free memory: memory is about max_batch_tokens x (the model's KV "
        "bytes per token + prefill scratch per engine.prefill_chunk_tokens); the default admits two full 32k "
        "contexts or 16 agent turns of ~3.5k tokens. None: only max_batch_size limits a batch.",
    )
    prefill_chunk_tokens: int | None = Field(
        512,
        ge=1,
        description="transformers engine: prompt columns per prefill forward. A prompt prefilled whole builds "
        "W x W attention scores and masks per row (a 30k-token prompt: gigabytes even for a tiny model); in chunks "
        "of C through the KV cache, C x W, with the same result. None: one forward per prompt.",
    )
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
    session_cache_mb: int = Field(
        256,
        ge=0,
        description="transformers engine, with prefix_cache: MiB of finished requests' KV kept (least recently used "
        "dropped first), so a session's next turn prefills only what its harness appended (the tool result). "
        "0 turns it off. Invalidated by every weight update.",
    )


class ProxyConfig(Section):
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
