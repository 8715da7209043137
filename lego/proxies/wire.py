"""Small helpers shared by the three API modules: SSE framing, ids, text parts, chunking."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from lego.proxies.errors import ApiError

__all__ = ["chunks", "effort_thinking", "new_id", "refuse", "refuse_unknown", "sse", "text_of_parts"]

IMAGE_PART_TYPES = frozenset({"image_url", "image", "input_image", "input_audio", "file", "input_file", "document"})
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: optional ``event:`` line, one ``data:`` line, blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def text_of_parts(content: Any, where: str) -> str:
    """A message content (a string or a list of parts) as plain text; images are refused with a 400."""
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
