"""Small helpers shared by the API modules: SSE framing, ids, text parts, chunking, refusals.

Message-level fields follow one rule on every face (:func:`refuse_fields`): a key the face
converts is honoured; a key in the face's named set of echoes and hints (what its SDKs send back
from a reply, cache hints, citations, signatures) is accepted because it changes nothing the
policy samples; a key whose value is null or empty says nothing and is accepted; anything else is
a 400 naming its exact path (``messages[3].name``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from lego.proxies.errors import ApiError

__all__ = [
    "chunks",
    "effort_thinking",
    "new_id",
    "refuse",
    "refuse_fields",
    "refuse_unknown",
    "says_nothing",
    "sse",
    "text_of_parts",
]

IMAGE_PART_TYPES = frozenset({"image_url", "image", "input_image", "input_audio", "file", "input_file", "document"})
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
_TEXT_PART_KEYS = frozenset({"type", "text"})


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: optional ``event:`` line, one ``data:`` line, blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def text_of_parts(content: Any, where: str, inert: frozenset[str] = frozenset(), field: str = "content") -> str:
    """A message content (a string or a list of text parts) as plain text; images are refused with a
    400, and so is any key of a part other than ``type``, ``text`` and the face's ``inert`` ones
    (named by its path: ``{where}.{field}[i].key``, or ``{where}[i].key`` without a field)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(
            400, f"{where}: content must be a string or a list of content parts, not {type(content).__name__}"
        )
    texts = []
    for i, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise ApiError(400, f"{where}: content part {i} must be an object")
        kind = part.get("type")
        if kind in IMAGE_PART_TYPES:
            raise ApiError(400, f"{where}: images are unsupported (content part {i} has type {kind!r}); send text only")
        if kind not in TEXT_PART_TYPES or not isinstance(part.get("text"), str):
            raise ApiError(400, f"{where}: content part {i} of type {kind!r} is unsupported; use text parts")
        refuse_fields(part, f"{where}.{field}[{i}]" if field else f"{where}[{i}]", _TEXT_PART_KEYS, inert)
        texts.append(part["text"])
    return "\n".join(texts)


def chunks(text: str, size: int = 48) -> Iterator[str]:
    """Split text into stream deltas (at least one, possibly empty, for an empty text)."""
    if not text:
        return
    for i in range(0, len(text), size):
        yield text[i : i + size]


def refuse(name: str, why: str) -> ApiError:
    """The 400 for a request option the proxy cannot honour (DESIGN rule 9: never dropped silently)."""
    return ApiError(400, f"{name}: {why}; remove it or change it to a supported value", param=name)


def refuse_unknown(extra: dict[str, Any] | None, advisory: frozenset[str]) -> None:
    """Refuse every request field not modelled and not in ``advisory`` (fields that change nothing
    the policy samples: user ids, cache keys, storage hints)."""
    for name in extra or {}:
        if name not in advisory:
            raise refuse(name, "this proxy does not support this request field")


def says_nothing(value: Any) -> bool:
    """A null or empty value (None, "", [], {}): the request means the same with or without it."""
    return value is None or (isinstance(value, str | list | dict) and not value)


def refuse_fields(obj: dict[str, Any], where: str, known: frozenset[str], inert: frozenset[str] = frozenset()) -> None:
    """The 400 for the first key of ``obj`` (a message, item, block or part at ``where``) that the face
    neither converts (``known``) nor lists as an echo or hint (``inert``), unless its value says nothing."""
    for key, value in obj.items():
        if key not in known and key not in inert and not says_nothing(value):
            raise refuse(f"{where}.{key}", "this proxy does not support this field here")


_EFFORT_OFF = frozenset({"none", "minimal"})
_EFFORT_ON = frozenset({"low", "medium", "high", "xhigh", "max"})


def effort_thinking(effort: Any, name: str) -> dict[str, Any]:
    """A reasoning effort (OpenAI's ``reasoning_effort`` / Responses ``reasoning.effort``) as chat-template
    kwargs: "none"/"minimal" turn the model's thinking off, "low".."max" on (``enable_thinking``, the
    switch hybrid-thinking templates such as Qwen3's read); how long the model thinks stays its own
    choice, within ``max_tokens``. Anything else is a 400 naming ``name``."""
    if effort is None:
        return {}
    if effort in _EFFORT_OFF:
        return {"enable_thinking": False}
    if effort in _EFFORT_ON:
        return {"enable_thinking": True}
    raise refuse(name, f"unknown effort {effort!r}; use one of {sorted(_EFFORT_OFF | _EFFORT_ON)}")


HOSTED_TOOLS = """Hosted tools are run by the API provider, not the client: OpenAI's ``web_search`` (and
``file_search``, ``code_interpreter``, ...), Anthropic's server tools (``web_search_*``,
``web_fetch_*``, ``code_execution_*``), Gemini's ``googleSearch`` / ``codeExecution`` / ``urlContext``.
Behind this proxy there is no provider to run them (and a sandboxed agent has no network), so a
request that declares one is served without it, as a provider with the tool switched off would be:
the policy is not offered it, and the response says so (``x-lego-dropped-tools``, the trajectory's
``hosted_tools_dropped``). Codex declares ``web_search`` when its config enables search."""

OPENAI_HOSTED = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "web_search_2025_08_26",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "mcp",
    }
)
ANTHROPIC_HOSTED_PREFIXES = ("web_search_", "web_fetch_", "code_execution_")
GEMINI_HOSTED = frozenset(
    {"googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext", "enterpriseWebSearch", "googleMaps"}
)
