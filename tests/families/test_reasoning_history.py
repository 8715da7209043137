"""The reasoning-history policy on the real Qwen3 template (hybrid thinking, historical <think>
stripped before the last user query): ``template`` gives the engine exactly what
``apply_chat_template`` makes of the client's messages and seals where that is not a prefix;
``keep`` keeps sampled reasoning in context as one segment. Pure recorder, real tokenizer."""

from __future__ import annotations

import json
from typing import Any

from transformers import AutoTokenizer

from lego.models.chat import ChatFormat
from lego.models.families import family
from lego.proxies.recorder import SessionRecorder
from lego.types import Generation
from tests.families.conftest import require

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def _qwen3() -> ChatFormat:
    return ChatFormat(AutoTokenizer.from_pretrained(str(require(family("qwen3")).tokenizer_dir())))


def _sampled(chat: ChatFormat, messages: list[dict[str, Any]], assistant: dict[str, Any], kwargs: Any) -> list[int]:
    """What a Qwen3 model following its template samples for ``assistant`` (through <|im_end|>)."""
    before = chat.render_text(messages, TOOLS, add_generation_prompt=True, template_kwargs=kwargs)
    after = chat.render_text([*messages, assistant], TOOLS, template_kwargs=kwargs)
    ids = chat.encode(after[len(before) :])
    return ids[: ids.index(chat.end_of_turn_id) + 1]


def _session(policy: str, queries: int = 2, tool_turns: int = 3, kwargs: Any = None) -> tuple[Any, list[Any]]:
    """Run a thinking, tool-using session whose client drops reasoning_content (as most OpenAI
    clients do); return the recorder and, per call, (engine prompt, the template's render)."""
    chat = _qwen3()
    rec = SessionRecorder(chat, reasoning_history=policy)  # type: ignore[arg-type]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You fix bugs."}]
    calls = []
    for q in range(queries):
        messages.append({"role": "user", "content": f"Query {q}: tests fail."})
        for t in range(tool_turns + 1):
            final = t == tool_turns
            intended: dict[str, Any] = {"role": "assistant", "reasoning_content": f"Thinking about step {q}.{t}."}
            if final:
                intended["content"] = f"Done with query {q}."
            else:
                args = json.dumps({"command": f"pytest -k t{q}{t}"})
                intended |= {
                    "content": "",
                    "tool_calls": [{"id": "x", "type": "function", "function": {"name": "bash", "arguments": args}}],
                }
            ids = _sampled(chat, messages, intended, kwargs)
            call = rec.prepare(messages, TOOLS, kwargs)
            ideal = chat.render(messages, TOOLS, add_generation_prompt=True, template_kwargs=kwargs)
            calls.append((call.prompt_ids, ideal))
            gen = Generation(token_ids=ids, logprobs=[-1.0] * len(ids), finish_reason="stop", policy_version=0)
            msg = chat.to_message(chat.parse(ids, TOOLS, id_salt=f"{q}.{t}"))
            rec.commit(call, gen, msg)
            echoed = {k: v for k, v in msg.items() if k != "reasoning_content"}  # the client drops reasoning
            messages.append(echoed)
            if not final:
                messages.append({"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "1 failed"})
    return rec, calls


def test_template_policy_prompts_equal_the_templates_render_and_seals_are_counted() -> None:
    rec, calls = _session("template")
    for prompt, ideal in calls:
        assert prompt == ideal
    counters = rec.summary_counters()
    assert counters["reasoning_seals"] == counters["rewrites"] == counters["segments"] - 1 > 0
    assert counters["reprefill_tokens"] > 0 and counters["kept_reasoning_tokens"] == 0
    # every sampled token is still recorded once, with its logprob
    assert sum(s.num_sampled for s in rec.segments()) == counters["completion_tokens"]


def test_keep_policy_is_one_segment_with_the_kept_reasoning_counted() -> None:
    rec, calls = _session("keep")
    counters = rec.summary_counters()
    assert counters["segments"] == 1 and counters["rewrites"] == 0
    assert counters["kept_reasoning_tokens"] > 0
    assert calls[0][0] == calls[0][1]  # the first call has no history yet
    assert all(len(prompt) > len(ideal) for prompt, ideal in calls[1:])  # the reasoning kept in context


def test_chat_template_kwargs_reach_the_template() -> None:
    _, calls = _session("template", queries=1, tool_turns=1, kwargs={"enable_thinking": False})
    chat = _qwen3()
    for prompt, ideal in calls:
        assert prompt == ideal
        assert chat.decode(prompt).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
