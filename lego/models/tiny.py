"""The embedded default policy: a tiny Qwen3-architecture causal LM built from a seed.

``build_tiny(out_dir, seed)`` writes an ordinary Hugging Face model directory (config.json,
model.safetensors, tokenizer.json, tokenizer_config.json, chat_template.jinja,
generation_config.json), so every loader treats it exactly like a real checkpoint such as
Qwen3-0.6B. The weights are random (seeded): the model is for exercising the whole pipeline on a
CPU, not for solving tasks. Same seed, same bytes.

``resolve_model(name_or_path)`` is the one place that decides what a model name means:
``"default"`` is the embedded default policy -- the warm-started checkpoint shipped in
``lego/models/warm/`` (the tiny architecture after ``lego sft``; its ``lego_sft.json`` holds the
command that reproduces it), copied once into the user cache; without a shipped checkpoint it
falls back to the random-weight tiny model. ``"tiny"`` is always the random-weight tiny model.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

from lego.errors import ModelError
from lego.models.tokenizer import corpus_fingerprint, train_tokenizer
from lego.paths import cache_dir

__all__ = [
    "BUILDER_VERSION",
    "FAMILY_ARCH",
    "TINY_ARCH",
    "build_tiny",
    "build_tiny_on",
    "chat_template",
    "resolve_model",
]

BUILDER_VERSION = 1
"""Bump when the architecture or the directory layout changes (invalidates cached builds)."""

TINY_ARCH: dict[str, Any] = dict(
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=32768,  # harness system prompts are long; RoPE makes this free
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
)
"""Qwen3 shape of the tiny model (about 4 M parameters with its ~2-8 k vocabulary)."""

_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def chat_template(tool_format: str = "hermes") -> str:
    """The Jinja chat template shipped with lego ("hermes" or "qwen3_coder" tool calls)."""
    path = resources.files("lego.models") / "templates" / f"{tool_format}.jinja"
    if not path.is_file():
        raise ModelError(f"unknown tool_format {tool_format!r}; use 'hermes' or 'qwen3_coder'")
    return path.read_text(encoding="utf-8")


def _token_id(tokenizer: Any, token: str) -> int:
    tid = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(tid, int):
        raise ModelError(f"the trained tokenizer lacks {token!r}")
    return tid


def build_tiny(out_dir: str | Path, seed: int = 0, tool_format: str = "hermes") -> Path:
    """Write the tiny model to ``out_dir`` (created; existing files are overwritten) and return it.

    Deterministic: the tokenizer depends only on the shipped corpus, the weights only on ``seed``
    (initialised under a forked RNG so the caller's torch RNG is untouched).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    tokenizer.chat_template = chat_template(tool_format)
    pad_id = _token_id(tokenizer, "<|endoftext|>")
    eos_id = _token_id(tokenizer, "<|im_end|>")
    vocab = len(tokenizer)  # exact: every id the model can sample decodes to text
    config = Qwen3Config(
        vocab_size=vocab, bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id, dtype="float32", **TINY_ARCH
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=True, temperature=1.0, top_k=0, top_p=1.0
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    # Also keep the template inside tokenizer_config.json, where older loaders look for it.
    cfg_path = out / "tokenizer_config.json"
    tok_cfg = json.loads(cfg_path.read_text())
    tok_cfg["chat_template"] = tokenizer.chat_template
    cfg_path.write_text(json.dumps(tok_cfg, indent=2, ensure_ascii=False) + "\n")
    (out / "chat_template.jinja").write_text(tokenizer.chat_template, encoding="utf-8")
    (out / "lego_build.json").write_text(
        json.dumps({"builder_version": BUILDER_VERSION, "seed": seed, "tool_format": tool_format}, indent=2) + "\n"
    )
    return out


FAMILY_ARCH: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)
"""Shape of a random tiny model on a real tokenizer: the embedding of a 128-200 k vocabulary
dominates, so the layers stay minimal (a few MB of weights besides it)."""


def build_tiny_on(
    tokenizer_dir: str | Path,
    out_dir: str | Path,
    model_type: str = "qwen3",
    seed: int = 0,
    chat_template: str | None = None,
) -> Path:
    """Write a random-weight tiny ``model_type`` model (e.g. "qwen3", "llama", "gpt_oss") on a real
    tokenizer (a directory with tokenizer.json and tokenizer_config.json) to ``out_dir``.

    The vocabulary is the tokenizer's full length, so every id it produces is embeddable; the
    generation config's eos ids are the chat format's stop ids (end of turn, eos), read from the
    template as ``ChatFormat`` reads them. ``chat_template`` (Jinja text) is stored with the
    tokenizer when given (gpt-oss ships none). Same seed, same weights.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from lego.models.chat import ChatFormat

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    chat = ChatFormat(tokenizer, chat_template)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else chat.eos_token_ids[0]
    arch = dict(FAMILY_ARCH)
    if model_type == "gpt_oss":  # a mixture of experts: keep it tiny too
        arch.update(num_local_experts=4, num_experts_per_tok=2, layer_types=["sliding_attention", "full_attention"])
    if model_type == "qwen3_moe":
        arch.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, decoder_sparse_step=1)
    config = AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=chat.eos_token_ids[0],
        pad_token_id=pad_id,
        dtype="float32",
        **arch,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=list(chat.eos_token_ids),
        pad_token_id=pad_id,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "lego_build.json").write_text(
        json.dumps({"builder_version": BUILDER_VERSION, "seed": seed, "model_type": model_type}, indent=2) + "\n"
    )
    return out


def _default_key(seed: int) -> str:
    h = hashlib.sha256(f"{BUILDER_VERSION}:{seed}:{corpus_fingerprint()}".encode())
    h.update(chat_template("hermes").encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:12]


def _is_complete(path: Path) -> bool:
    return all((path / name).is_file() for name in _REQUIRED)


def _build_default(target: Path) -> None:
    """Build into a temporary sibling, then rename: readers never see a half-written model."""
    from rich.console import Console

    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / f".{target.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent first use waits here, then finds it built
        if _is_complete(target):
            return
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            with Console(stderr=True).status(f"building the embedded default model into {target} (once) ..."):
                build_tiny(tmp, seed=0)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(tmp)


WARM_DIR = Path(__file__).parent / "warm"
"""The shipped warm start (written by ``lego sft``; see ``lego_sft.json`` inside for how)."""


def _install_warm(target: Path) -> None:
    """Copy the shipped warm start into the cache (temp sibling + rename, under a lock)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_complete(target):
            return
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            shutil.copytree(WARM_DIR, tmp, dirs_exist_ok=True)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(tmp)


def resolve_model(name_or_path: str | Path) -> Path:
    """Turn a model name or path into a local HF model directory.

    ``"default"`` is the embedded default policy: the shipped warm start when present, else the
    random tiny model (either placed once into ``cache_dir()/models``); ``"tiny"`` is the random
    tiny model; any other value must be a directory holding an HF checkpoint (config.json plus
    weights).
    """
    if str(name_or_path) == "default" and _is_complete(WARM_DIR) and (WARM_DIR / "lego_sft.json").is_file():
        digest = hashlib.sha256((WARM_DIR / "model.safetensors").read_bytes())
        digest.update((WARM_DIR / "lego_sft.json").read_bytes())
        target = cache_dir() / "models" / f"warm-{digest.hexdigest()[:12]}"
        if not _is_complete(target):
            _install_warm(target)
        return target
    if str(name_or_path) in ("default", "tiny"):
        target = cache_dir() / "models" / f"tiny-{_default_key(0)}"
        if not _is_complete(target):
            _build_default(target)
        return target
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise ModelError(
            f"model {str(name_or_path)!r} is not a directory; pass an HF model directory "
            "(e.g. one made by `lego models build-tiny DIR`), 'default' for the embedded default "
            "or 'tiny' for the random-weight tiny model"
        )
    if not (path / "config.json").is_file():
        raise ModelError(f"{path} has no config.json; it is not a Hugging Face model directory")
    return path.resolve()
