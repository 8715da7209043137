"""``tool_choice`` and ``parallel_tool_calls``, enforced by forcing the model's own call syntax.

A forcing ``tool_choice`` makes the reply start with the opening of a tool call in the model's
tool-call format (:func:`forced_prefix`); the forced text joins the prompt (mask 0). The rest --
the arguments, valid against the tool's JSON schema, and the call's closing -- is decoded under the
constraint :func:`forced_regex` gives the engine (``SamplingParams.guided_regex``), so the promised
call is always produced unless even its shortest form does not fit ``max_tokens`` (a 400 naming
it). Those tokens are the constrained distribution's draw, not the policy's: the recorder keeps
them with mask 0, flagged in ``Segment.constrained_spans``, and training never sees them.

What was written is still checked (:func:`check_tool_choice`): an engine that does not honour the
constraint (a scripted test double, the oracle) gets a 502, never a 200 with the wrong tool or
plain text. ``parallel_tool_calls = false`` ends the turn after its first complete call
(:func:`end_after_first_call`).
"""

from __future__ import annotations

import json
from typing import Any

from lego.models.tool_grammar import call_regex
from lego.proxies.canonical import ChatFormatLike, ChatRequest, Message
from lego.proxies.errors import ApiError
from lego.proxies.sampling import apply_stop
from lego.proxies.sessions import Session
from lego.types import Generation

__all__ = ["FORCEABLE", "allowed_names", "check_tool_choice", "end_after_first_call", "forced_prefix", "forced_regex"]

_CALL_OPEN, _CALL_CLOSE = "<tool_call>", "</tool_call>"
FORCEABLE = ("hermes", "qwen3_coder")
"""Tool-call formats whose call opening the proxy can force."""


def forced_prefix(req: ChatRequest, fmt: str) -> tuple[str, str | None]:
    """``(text the reply is forced to start with, the tool it must call)`` under tool-call format ``fmt``.

    A named function (or "required" with one tool) forces the call's opening up to the
    arguments; "required" with several tools forces the call opener and the policy picks the
    tool. The wanted tool is ``""`` for "any declared tool", None when nothing is forced. An
    assistant prefill is forced the same way. Anything else that would force a call is refused
    with a 400."""
    tc = req.tool_choice
    if not req.parallel_tool_calls and req.tools and fmt not in FORCEABLE:
        raise ApiError(
            400,
            f"parallel_tool_calls=false cannot be enforced for the {fmt!r} tool-call format (only {FORCEABLE})",
            param="parallel_tool_calls",
        )
    if tc in (None, "auto", "none"):
        return req.prefill, None
    if fmt not in FORCEABLE:
        raise ApiError(
            400,
            f"tool_choice {tc!r} cannot be enforced for the {fmt!r} tool-call format (only {FORCEABLE}); use 'auto'",
            param="tool_choice",
        )
    names = [str(t["function"]["name"]) for t in req.tools]
    if not names:
        raise ApiError(400, f"tool_choice {tc!r} needs at least one tool in 'tools'", param="tool_choice")
    if req.prefill:
        raise ApiError(
            400,
            "tool_choice that forces a tool call cannot be combined with an assistant prefill",
            param="tool_choice",
        )
    allowed = allowed_names(req)
    if allowed is not None:
        unknown = sorted(set(allowed) - set(names))
        if unknown or not allowed:
            raise ApiError(
                400,
                f"tool_choice allows {unknown or 'no'} tool(s) not among the tools {names}",
                param="tool_choice",
            )
        wanted = allowed[0] if len(allowed) == 1 else ""
    elif tc == "required":
        wanted = names[0] if len(names) == 1 else ""
    elif isinstance(tc, dict) and tc.get("type") == "function":
        fn = tc.get("function")
        wanted = str((fn if isinstance(fn, dict) else tc).get("name") or "")
        if wanted not in names:
            raise ApiError(
                400,
                f"tool_choice names function {wanted!r}, which is not among the tools {names}",
                param="tool_choice",
            )
    else:
        raise ApiError(
            400,
            f"unsupported tool_choice {tc!r}; use 'auto', 'none', 'required', a named function or "
            "allowed_tools with mode 'required'",
            param="tool_choice",
        )
    coder = fmt == "qwen3_coder"
    if not wanted:
        return (_CALL_OPEN + "\n<function=") if coder else (_CALL_OPEN + '\n{"name": "'), ""
    if coder:
        return f"{_CALL_OPEN}\n<function={wanted}>\n", wanted
    return _CALL_OPEN + '\n{"name": ' + json.dumps(wanted, ensure_ascii=False) + ', "arguments": ', wanted


def allowed_names(req: ChatRequest) -> list[str] | None:
    """The tools an ``allowed_tools`` tool_choice with mode "required" restricts the call to (OpenAI's
    chat shape ``{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}`` or the Responses one,
    ``{"type": "allowed_tools", "mode", "tools"}``; Gemini's ``allowedFunctionNames`` maps onto it);
    None for any other tool_choice. Mode "auto" (text or one of them) is not enforceable: a 400."""
    tc = req.tool_choice
    if not isinstance(tc, dict) or tc.get("type") != "allowed_tools":
        return None
    inner = tc.get("allowed_tools")
    spec: dict[str, Any] = inner if isinstance(inner, dict) else tc
    if spec.get("mode", "auto") != "required":
        raise ApiError(
            400,
            "allowed_tools with mode 'auto' cannot be enforced; use mode 'required' (or tool_choice 'auto')",
            param="tool_choice",
        )
    out = []
    for t in spec.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) and isinstance(t.get("function"), dict) else t
        out.append(str(fn.get("name") if isinstance(fn, dict) else fn))
    return out


def forced_regex(req: ChatRequest, fmt: str, wanted: str | None) -> str | None:
    """The constraint on what follows :func:`forced_prefix`'s text (None when nothing is forced)."""
    if wanted is None:
        return None
    allowed = allowed_names(req)
    tools = req.tools if allowed is None else [t for t in req.tools if t["function"]["name"] in allowed]
    return call_regex(fmt, tools, wanted)


def check_tool_choice(s: Session, req: ChatRequest, message: Message, gen: Generation, wanted: str | None) -> None:
    """Refuse (nothing recorded) a reply under a forcing tool_choice that holds no call of a
    declared tool, or calls another than the named one: never a 200 with the wrong tool."""
    names = set(allowed_names(req) or (str(t["function"]["name"]) for t in req.tools))
    called = [str(c["function"]["name"]) for c in message.get("tool_calls") or []]
    if called and all(n in names and (not wanted or n == wanted) for n in called):
        return
    s.tool_choice_failures += 1
    if gen.finish_reason == "length":
        raise ApiError(
            400,
            f"the tool call that tool_choice forces was cut at max_tokens ({len(gen.token_ids)} tokens); "
            "raise max_tokens",
            param="max_tokens",
        )
    what = f"calls {called}" if called else "no parseable tool call"
    raise ApiError(
        502,
        f"tool_choice {req.tool_choice!r} was forced, but the policy wrote {what}; "
        f"the tools are {sorted(names)} (a new sample may succeed)",
        "engine",
        code="tool_choice_unsatisfied",
        retry_after=1,
    )


def end_after_first_call(chat: ChatFormatLike, gen: Generation) -> Generation:
    """Keep the sampled ids up to and including the token that closes the first tool call
    (a prefix of what was sampled, so ids and logprobs stay exact): one call per turn."""
    cut, hit = apply_stop(chat, gen.model_copy(update={"constrained": False}), [_CALL_CLOSE])
    if hit is None:
        return gen
    return gen.cut(len(cut.token_ids), "stop")
