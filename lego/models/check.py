"""``lego models check DIR``: what lego will make of a model directory, on one screen.

Reads the directory the way the proxy and the engine do (ChatFormat, generation_config.json,
config.json, the safetensors index) and reports the chat template, the tool-call format and
whether the template can express tools, the stop ids, and whether input and output embeddings
are tied -- each problem with its fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from lego.errors import LegoError

__all__ = ["ModelReport", "check_model_dir", "unsupported_architecture"]


class ModelReport(BaseModel):
    """The findings of :func:`check_model_dir`."""

    path: str
    architecture: str = ""
    vocab_size: int | None = None
    chat_template: str = Field("", description="Where the template comes from, or '' when there is none.")
    tool_parser: str = ""
    supports_tools: bool = False
    end_of_turn: str = ""
    stop_tokens: list[str] = Field(default_factory=list)
    tied_embeddings: bool | None = None
    lm_head_stored: bool | None = Field(None, description="A separate lm_head tensor is in the weights.")
    problems: list[str] = Field(default_factory=list)

    def render(self) -> str:
        """The one-screen text report."""
        rows = [
            ("model", self.path),
            ("architecture", f"{self.architecture} (vocab {self.vocab_size})"),
            ("chat template", self.chat_template or "none"),
            ("tool calls", f"{self.tool_parser} ({'supported' if self.supports_tools else 'NOT expressible'})"),
            ("end of turn", self.end_of_turn or "?"),
            ("stop tokens", ", ".join(self.stop_tokens) or "?"),
            ("tied embeddings", {True: "yes", False: "no", None: "?"}[self.tied_embeddings]),
        ]
        lines = [f"{k:<16}{v}" for k, v in rows]
        lines += [f"problem: {p}" for p in self.problems] or ["ok: lego can serve and train this model"]
        return "\n".join(lines)


def _stored_tensor_names(path: Path) -> set[str] | None:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text())["weight_map"])
    single = path / "model.safetensors"
    if single.is_file():
        from safetensors import safe_open

        with safe_open(str(single), "pt") as f:
            return set(f.keys())
    return None


def unsupported_architecture(config: dict[str, Any]) -> str | None:
    """Why lego's in-process engine cannot run a model of this ``config.json`` (None: nothing known).

    Multi-head latent attention (DeepSeek-V2/V3, Kimi K2 and their kin: a low-rank KV, query/key heads
    of another size than value heads) needs a KV cache the engine does not keep: such a model loads,
    then every generation fails on tensor shapes. vLLM serves it."""
    arch = ",".join(config.get("architectures") or [str(config.get("model_type", "?"))])
    qk = (config.get("qk_nope_head_dim") or 0) + (config.get("qk_rope_head_dim") or 0)
    v = config.get("v_head_dim")
    if config.get("kv_lora_rank") or (qk and v and qk != v):
        shape = f"query/key heads of {qk} dims, value heads of {v}" if qk and v else "a low-rank KV"
        return (
            f"{arch} uses multi-head latent attention ({shape}), which lego's in-process engine cannot run; "
            "serve it with vLLM (`vllm serve MODEL`, then -o engine.kind=vllm -o engine.vllm_url=URL)"
        )
    return None


def check_model_dir(path: str | Path, chat_template: str | Path | None = None) -> ModelReport:
    """Inspect an HF model directory; ``chat_template`` is a replacement template file to check with."""
    from lego.models.chat import ChatFormat

    path = Path(path)
    report = ModelReport(path=str(path))
    config: dict[str, Any] = {}
    if (path / "config.json").is_file():
        config = json.loads((path / "config.json").read_text())
        report.architecture = ",".join(config.get("architectures") or [config.get("model_type", "?")])
        report.vocab_size = config.get("vocab_size")
        report.tied_embeddings = bool(config.get("tie_word_embeddings", False))
        why = unsupported_architecture(config)
        if why is not None:
            report.problems.append(why)
    else:
        report.problems.append("no config.json: not a Hugging Face model directory (GGUF? `lego models import`)")
    names = _stored_tensor_names(path)
    if names is not None:
        report.lm_head_stored = any(n.endswith("lm_head.weight") for n in names)
        if report.tied_embeddings and report.lm_head_stored:
            report.problems.append(
                "tie_word_embeddings is set but a separate lm_head.weight is stored (an untied copy): "
                "re-save the model from a loaded copy so the tie holds"
            )
    try:
        chat = ChatFormat.from_pretrained(path, chat_template)
    except LegoError as exc:
        report.problems.append(str(exc))
        return report
    report.chat_template = str(chat_template) if chat_template else "the tokenizer's own"
    report.tool_parser = chat.tool_call_format
    report.supports_tools = chat.supports_tools
    tok = chat.tokenizer
    report.end_of_turn = str(tok.convert_ids_to_tokens(chat.end_of_turn_id))
    report.stop_tokens = [f"{tok.convert_ids_to_tokens(i)} ({i})" for i in chat.eos_token_ids]
    if not chat.supports_tools:
        report.problems.append(
            "the chat template cannot express tools: agent harnesses would lose their tools; "
            "pass a template that can with --chat-template FILE (config: engine.chat_template)"
        )
    if report.vocab_size is not None and len(tok) > report.vocab_size:
        report.problems.append(
            f"the tokenizer has {len(tok)} tokens but the model embeds {report.vocab_size}: ids past the "
            "embedding would crash the engine; use the tokenizer the model was trained with"
        )
    return report
