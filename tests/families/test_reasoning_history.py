"""The reasoning-history policy on the real Qwen3 template (hybrid thinking, historical <think>
stripped before the last user query): ``template`` gives the engine exactly what
``apply_chat_template`` makes of the client's messages and seals where that is not a prefix;
``keep`` keeps sampled reasoning in context as one segment. Pure recorder, real tokenizer."""

from __future__ import annotations

from typing import Any

from transformers import AutoTokenizer

from lego.conductor.bench.reasoning import drive_session
from lego.models.chat import ChatFormat
from lego.models.families import family
from tests.families.conftest import require


def _qwen3() -> ChatFormat:
    return ChatFormat(AutoTokenizer.from_pretrained(str(require(family("qwen3")).tokenizer_dir())))


def _session(policy: str, queries: int = 2, tool_turns: int = 3, kwargs: Any = None) -> tuple[Any, list[Any]]:
    """A thinking, tool-using session whose client drops reasoning_content (as most OpenAI clients
    do), driven as `lego bench reasoning` drives it."""
    return drive_session(_qwen3(), policy, queries, tool_turns, kwargs)  # type: ignore[arg-type]


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
