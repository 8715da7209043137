"""ChatFormat: the single place that turns chat messages into token ids and generated ids back
into a chat message.

Canonical messages are OpenAI chat-completions dicts::

    {"role": "system" | "user" | "assistant" | "tool", "content": str,
     "tool_calls": [{"id", "type": "function", "function": {"name", "arguments": "<JSON>"}}],
     "tool_call_id": str, "name": str, "reasoning_content": str}

and tools are OpenAI tool dicts ``{"type": "function", "function": {"name", "description",
"parameters"}}``. Rendering always goes through the tokenizer's own chat template (the model's,
never a copy), so ``render`` equals ``tokenizer.apply_chat_template(..., tokenize=True)``.
Before rendering, tool-call arguments given as JSON strings are decoded to objects, as vLLM and
the transformers chat pipeline do, so templates that iterate over arguments (qwen3-coder) work.

Prefix stability (lego's own templates; the proxy relies on it): rendering ``messages[:k]``
without a generation prompt is a prefix, in text and in ids, of rendering ``messages[:k+1]`` --
except between two consecutive ``tool`` messages, which share one user turn as in Qwen3 (a
request never ends inside such a group). Real Qwen3 templates strip historical ``<think>``
blocks and are not prefix-stable; the proxy then seals the segment, as the design says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from jinja2 import TemplateError

from lego.errors import ChatFormatError, ModelError
from lego.models.tool_parsers import ParsedCompletion, ToolCall, parse_completion_text

__all__ = ["ChatFormat", "ParsedCompletion", "ToolCall"]

Messages = list[dict[str, Any]]
Tools = list[dict[str, Any]] | None


def _text_of(content: Any) -> str:
    """OpenAI content may be a string, None, or a list of parts; templates want a string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") in ("text", None))
    raise ChatFormatError(f"message content must be a string or a list of parts, got {type(content).__name__}")


def _normalize(messages: Messages) -> Messages:
    """Copy messages into the shape chat templates expect (strings, decoded arguments)."""
    if not messages:
        raise ChatFormatError("cannot render an empty conversation; send at least one message")
    out: Messages = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise ChatFormatError(
                f"message {i} has no 'role'; each message is a dict like {{'role': 'user', 'content': '...'}}"
            )
        m = dict(message)
        m["content"] = _text_of(m.get("content"))
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                call = dict(call)
                fn = dict(call.get("function") or {})
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError as exc:
                        raise ChatFormatError(
                            f"message {i}: arguments of tool call {fn.get('name')!r} are not valid JSON ({exc.msg}); "
                            "send a JSON object string"
                        ) from exc
                call["function"] = fn
                calls.append(call)
            m["tool_calls"] = calls
        out.append(m)
    return out


class ChatFormat:
    """Render messages with a tokenizer's chat template; parse generated ids back (Qwen3 families)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        template = tokenizer.chat_template
        if isinstance(template, dict):
            template = template.get("default") or next(iter(template.values()), None)
        if not isinstance(template, str) or not template:
            raise ModelError("this tokenizer has no chat template; lego needs a chat model (e.g. a Qwen3 checkpoint)")
        self.template: str = template
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        if not isinstance(im_end, int) or im_end == tokenizer.unk_token_id:
            raise ModelError("the tokenizer has no <|im_end|> token; lego's chat format supports ChatML (Qwen) models")
        self.im_end_id: int = im_end
        eos = [im_end]
        for token in ("<|endoftext|>", tokenizer.eos_token):
            tid = tokenizer.convert_tokens_to_ids(token) if token else None
            if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid not in eos:
                eos.append(tid)
        self.eos_token_ids: list[int] = eos
        self.tool_call_format: Literal["hermes", "qwen3_coder"] = (
            "qwen3_coder" if "<function=" in template else "hermes"
        )

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ChatFormat:
        """Load the tokenizer of a model directory (or "default", the embedded default)."""
        from transformers import AutoTokenizer

        from lego.models.tiny import resolve_model

        return cls(AutoTokenizer.from_pretrained(str(resolve_model(path))))

    def render_text(self, messages: Messages, tools: Tools = None, add_generation_prompt: bool = False) -> str:
        """The prompt text the template makes of ``messages`` (and ``tools``)."""
        try:
            text = self.tokenizer.apply_chat_template(
                _normalize(messages), tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False
            )
        except TemplateError as exc:
            raise ChatFormatError(f"the chat template rejected these messages: {exc}") from exc
        return str(text)

    def render(self, messages: Messages, tools: Tools = None, add_generation_prompt: bool = False) -> list[int]:
        """Token ids of the rendered conversation (the tokenizer's own apply_chat_template)."""
        try:
            ids = self.tokenizer.apply_chat_template(
                _normalize(messages),
                tools=tools or None,
                add_generation_prompt=add_generation_prompt,
                tokenize=True,
                return_dict=False,
            )
        except TemplateError as exc:
            raise ChatFormatError(f"the chat template rejected these messages: {exc}") from exc
        return [int(i) for i in ids]

    def assistant_mask(self, messages: Messages, tools: Tools = None) -> tuple[list[int], list[int]]:
        """``(ids, mask)``: mask is 1 on tokens inside the template's {% generation %} blocks."""
        try:
            out = self.tokenizer.apply_chat_template(
                _normalize(messages),
                tools=tools or None,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
            )
        except TemplateError as exc:
            raise ChatFormatError(f"the chat template rejected these messages: {exc}") from exc
        return list(out["input_ids"]), list(out["assistant_masks"])

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``; special tokens written in the text become their ids, nothing is added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` with special tokens kept (so <|im_end|> and <tool_call> stay visible)."""
        return str(self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))

    def generation_prompt_ids(self, messages: Messages, tools: Tools = None) -> list[int]:
        """Ids the template appends for ``add_generation_prompt`` (e.g. ``<|im_start|>assistant\\n``)."""
        base = self.render(messages, tools)
        full = self.render(messages, tools, add_generation_prompt=True)
        if full[: len(base)] == base:
            return full[len(base) :]
        base_text = self.render_text(messages, tools)
        full_text = self.render_text(messages, tools, add_generation_prompt=True)
        if not full_text.startswith(base_text):
            raise ChatFormatError("the chat template's generation prompt is not an append-only suffix")
        return self.encode(full_text[len(base_text) :])

    def parse(self, token_ids: list[int], tools: Tools = None, id_salt: str = "") -> ParsedCompletion:
        """Turn generated ids into content, reasoning and tool calls.

        A final eos id (``<|im_end|>``/``<|endoftext|>``) is dropped and sets ``finished``. ``tools``
        (optional) types qwen3-coder parameter values by their JSON schema. ``id_salt`` (e.g. the
        session id and turn number) makes tool-call ids unique across turns; within one
        completion they are always unique.
        """
        ids = list(token_ids)
        finished = bool(ids) and ids[-1] in self.eos_token_ids
        if finished:
            ids = ids[:-1]
        return parse_completion_text(self.decode(ids), finished=finished, tools=tools, id_salt=id_salt)

    @staticmethod
    def to_message(parsed: ParsedCompletion) -> dict[str, Any]:
        """The canonical assistant message for a parsed completion."""
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.reasoning is not None:
            message["reasoning_content"] = parsed.reasoning
        if parsed.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in parsed.tool_calls
            ]
        return message
