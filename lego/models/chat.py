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

Any HF chat family: the template may be the tokenizer's own or a supplied one (``chat_template``,
``--chat-template``); the end-of-turn token is read from what the template writes after an
assistant message, stop ids from it, the tokenizer and the generation config; tool calls are parsed
by the format the template writes (:mod:`lego.models.tool_parsers`). A template that cannot
express tools is refused for tool use (:meth:`ChatFormat.check_tools`).

Prefix stability: lego's own templates are prefix-stable (rendering ``messages[:k]`` is a prefix
of rendering ``messages[:k+1]``, except inside a group of consecutive ``tool`` messages); real
ones such as Qwen3's, which strip historical ``<think>`` blocks, are not. The recorder's
reasoning-history policy (``proxy.reasoning_history``) says what happens then: ``template`` renders
the client's messages in full and seals the segment where the rendering is not a prefix;
``keep`` splices the sampled reasoning and stays one segment.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from jinja2 import TemplateError

from lego.errors import ChatFormatError, ModelError
from lego.models.tool_parsers import PARSERS, ParsedCompletion, ToolCall, detect_parser, parse_completion_text

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


_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "lego_probe_tool",
        "description": "lego checks that the template writes tool schemas",
        "parameters": {"type": "object", "properties": {"lego_probe_arg": {"type": "string"}}},
    },
}
_PROBE_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_probe",
            "type": "function",
            "function": {"name": "lego_probe_tool", "arguments": {"lego_probe_arg": "x"}},
        }
    ],
}
TEMPLATE_FIX = (
    "supply a chat template that can, as a Jinja file: `--chat-template FILE` on the command line "
    "(config: engine.chat_template)"
)


def _template_of(tokenizer: Any) -> str | None:
    template = tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("default") or next(iter(template.values()), None)
    return template if isinstance(template, str) and template else None


class ChatFormat:
    """Render messages with a chat template; parse generated ids back, for any HF chat family.

    ``chat_template`` (Jinja text) replaces the tokenizer's own (gpt-oss ships none; a template
    without tool support can be swapped for one with it). ``tool_parser`` names the tool-call
    format (:data:`~lego.models.tool_parsers.PARSERS`); by default it is read from the template.
    ``template_kwargs`` (e.g. ``{"enable_thinking": False}``) go to every render; a request's own
    ``chat_template_kwargs`` are passed per call and win.

    Stop ids: the template's end-of-turn token (the first special token it writes after an
    assistant message), the tokenizer's eos, the model's generation-config eos (``extra_eos_ids``)
    and, for harmony, ``<|call|>`` and ``<|return|>`` instead of ``<|end|>``, which in harmony
    only closes a channel message.
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str | None = None,
        tool_parser: str | None = None,
        extra_eos_ids: list[int] | tuple[int, ...] = (),
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        template = chat_template or _template_of(tokenizer)
        if template is None:
            raise ModelError(
                "this tokenizer has no chat template (gpt-oss ships none): pass one as a Jinja file, "
                "`--chat-template FILE` (config: engine.chat_template)"
            )
        self.template: str = template
        self.template_kwargs: dict[str, Any] = dict(template_kwargs or {})
        parser = tool_parser or detect_parser(template)
        if parser not in PARSERS:
            raise ModelError(
                f"unknown tool parser {parser!r} (engine.tool_parser); use one of {', '.join(sorted(PARSERS))}"
            )
        self.tool_call_format: str = parser
        self.end_of_turn_id: int = self._find_end_of_turn()
        eos: list[int] = []
        if parser == "harmony":
            eos += [i for i in (self._special_id("<|call|>"), self._special_id("<|return|>")) if i is not None]
        else:
            eos.append(self.end_of_turn_id)
        for tid in [self._special_id(tokenizer.eos_token or ""), *extra_eos_ids]:
            if tid is not None and tid not in eos and not (parser == "harmony" and tid == self.end_of_turn_id):
                eos.append(int(tid))
        self.eos_token_ids: list[int] = eos
        self.supports_tools: bool = self._probe_tools()
        self.prefix_stable: bool = self._probe_prefix_stable()

    @property
    def im_end_id(self) -> int:
        """The end-of-turn id under its ChatML name (``<|im_end|>`` in Qwen models)."""
        return self.end_of_turn_id

    def _special_id(self, token: str) -> int | None:
        tid = self.tokenizer.convert_tokens_to_ids(token) if token else None
        return tid if isinstance(tid, int) and tid != self.tokenizer.unk_token_id else None

    def _find_end_of_turn(self) -> int:
        """The first added (special) token the template writes after an assistant message's text."""
        marker = "lego end of turn probe"
        text = self.render_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": marker}])
        tail = text[text.rfind(marker) + len(marker) :]
        added = sorted(self.tokenizer.get_added_vocab(), key=len, reverse=True)
        for pos in range(len(tail)):
            for token in added:
                if tail.startswith(token, pos):
                    return int(self.tokenizer.convert_tokens_to_ids(token))
        raise ModelError(
            "the chat template writes no special token after an assistant message, so lego cannot tell where "
            f"a turn ends (it wrote {tail!r}); {TEMPLATE_FIX}"
        )

    def _probe_tools(self) -> bool:
        """Whether the template writes tool schemas and assistant tool calls at all."""
        user = {"role": "user", "content": "q"}
        try:
            schema = "lego_probe_tool" in self.render_text([user], [_PROBE_TOOL], check_tools=False)
            call = "lego_probe_arg" in self.render_text([user, _PROBE_CALL], [_PROBE_TOOL], check_tools=False)
        except ChatFormatError:
            return False
        return schema and call

    def _probe_prefix_stable(self) -> bool:
        """Whether rendering ``messages[:k]`` is a prefix of rendering ``messages[:k+1]`` on a probe
        conversation with reasoning, a tool call and a second query (Qwen3's template is not: it
        strips earlier reasoning when a new user query arrives). A probe, not a proof: the recorder
        uses it only to skip re-rendering history it would otherwise check in full."""
        tools = [_PROBE_TOOL] if self.supports_tools else None
        first: dict[str, Any] = {"role": "assistant", "content": "a1", "reasoning_content": "r1"}
        convo: Messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"}]
        if tools:
            first = {**first, **{k: v for k, v in _PROBE_CALL.items() if k == "tool_calls"}}
            convo += [first, {"role": "tool", "tool_call_id": "call_probe", "content": "t1"}]
        else:
            convo.append(first)
        convo += [
            {"role": "assistant", "content": "a2", "reasoning_content": "r2"},
            {"role": "user", "content": "u2"},
            {"role": "assistant", "content": "a3", "reasoning_content": "r3"},
        ]
        try:
            texts = [self.render_text(convo[:k], tools, check_tools=False) for k in range(2, len(convo) + 1)]
        except ChatFormatError:
            return False
        return all(b.startswith(a) for a, b in itertools.pairwise(texts))

    def check_tools(self, tools: Tools) -> None:
        """Refuse tool use with a template that would silently drop the tools."""
        if tools and not self.supports_tools:
            raise ChatFormatError(
                "this model's chat template cannot express tools (the tool schemas or the assistant's tool "
                f"calls vanish from the prompt); {TEMPLATE_FIX}"
            )

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        chat_template: str | Path | None = None,
        tool_parser: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> ChatFormat:
        """Load the tokenizer of a model directory (or "default", the embedded default).

        ``chat_template`` is a path to a Jinja file that replaces the tokenizer's template; the
        directory's generation_config.json eos ids are stop ids too.
        """
        from transformers import AutoTokenizer, GenerationConfig

        from lego.models.tiny import resolve_model

        model_dir = resolve_model(path)
        template = None
        if chat_template is not None:
            template_path = Path(chat_template).expanduser()
            if not template_path.is_file():
                raise ModelError(f"chat template {str(template_path)!r} (engine.chat_template) is not a file")
            template = template_path.read_text(encoding="utf-8")
        extra: list[int] = []
        if (model_dir / "generation_config.json").is_file():
            eos = GenerationConfig.from_pretrained(str(model_dir)).eos_token_id
            extra = [int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None]
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        return cls(tokenizer, template, tool_parser, extra, template_kwargs)

    def _kwargs(self, template_kwargs: dict[str, Any] | None) -> dict[str, Any]:
        return {**self.template_kwargs, **(template_kwargs or {}), "chat_template": self.template}

    def render_text(
        self,
        messages: Messages,
        tools: Tools = None,
        add_generation_prompt: bool = False,
        template_kwargs: dict[str, Any] | None = None,
        check_tools: bool = True,
    ) -> str:
        """The prompt text the template makes of ``messages`` (and ``tools``)."""
        if check_tools:
            self.check_tools(tools)
        try:
            text = self.tokenizer.apply_chat_template(
                _normalize(messages),
                tools=tools or None,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **self._kwargs(template_kwargs),
            )
        except TemplateError as exc:
            raise ChatFormatError(f"the chat template rejected these messages: {exc}") from exc
        return str(text)

    def render(
        self,
        messages: Messages,
        tools: Tools = None,
        add_generation_prompt: bool = False,
        template_kwargs: dict[str, Any] | None = None,
    ) -> list[int]:
        """Token ids of the rendered conversation (the tokenizer's own apply_chat_template)."""
        self.check_tools(tools)
        try:
            ids = self.tokenizer.apply_chat_template(
                _normalize(messages),
                tools=tools or None,
                add_generation_prompt=add_generation_prompt,
                tokenize=True,
                return_dict=False,
                **self._kwargs(template_kwargs),
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
                **self._kwargs(None),
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

    def parse(
        self, token_ids: list[int], tools: Tools = None, id_salt: str = "", stop: str | None = None
    ) -> ParsedCompletion:
        """Turn generated ids into content, reasoning and tool calls.

        A final stop id (the end-of-turn token, an eos) is dropped and sets ``finished``. ``tools``
        (optional) types qwen3-coder parameter values by their JSON schema. ``id_salt`` (e.g. the
        session id and turn number) makes tool-call ids unique across turns; within one
        completion they are always unique. ``stop``: the stop sequence that ended the generation;
        the text is cut at the character where it first begins (the ids may run past it).
        """
        ids = list(token_ids)
        finished = bool(ids) and ids[-1] in self.eos_token_ids
        if finished:
            ids = ids[:-1]
        text = self.decode(ids)
        if stop and stop in text:
            text, finished = text[: text.index(stop)], True
        return parse_completion_text(
            text, finished=finished, tools=tools, id_salt=id_salt, parser=self.tool_call_format
        )

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
