# mypy: disable-error-code="union-attr,arg-type,list-item,attr-defined,index,misc,typeddict-item,call-overload"
"""Each family end to end on its real tokenizer: a random-weight tiny model of the family's
architecture served by the real in-process engine behind the real proxy, driven by the official
OpenAI client through a sampled turn, a tool call and a final answer; the recorded segment checked
token by token; one GSPO step on it with rollout/trainer Pearson >= 0.999."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai

from lego.algos import PEARSON
from lego.config import LegoConfig, ProxyConfig
from lego.engines.scripted import ScriptedEngine
from lego.engines.transformers_engine import TransformersEngine
from lego.models.chat import ChatFormat
from lego.models.families import Family
from lego.models.tiny import build_tiny_on
from lego.proxies.server import ProxyServer
from lego.training.items import items_from_trajectories
from lego.training.trainer import Trainer

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


def _assistant_ids(chat: ChatFormat, messages: list[dict[str, Any]], assistant: dict[str, Any]) -> list[int]:
    """The ids a model following its template samples for ``assistant`` (up to its stop token)."""
    before = chat.render_text(messages, [BASH], add_generation_prompt=True)
    after = chat.render_text([*messages, assistant], [BASH])
    ids = chat.encode(after[len(before) :])
    last = max(i for i, t in enumerate(ids) if t in (chat.end_of_turn_id, *chat.eos_token_ids))
    ids = ids[: last + 1]
    if ids[-1] not in chat.eos_token_ids:  # harmony ends a final answer with <|return|>, history with <|end|>
        ids[-1] = chat.eos_token_ids[-1]
    return ids


def test_family_through_proxy_recorder_and_one_training_step(family: Family, tmp_path: Path) -> None:
    model_dir = build_tiny_on(family.tokenizer_dir(), tmp_path / "model", family.model_type, 0, family.template())
    chat = ChatFormat.from_pretrained(model_dir)
    assert chat.tool_call_format == family.tool_parser
    real = TransformersEngine(model_dir, device="cpu", max_batch_size=4, seed=0)
    assert real.eos_token_ids == chat.eos_token_ids  # the generation config carries the template's stop ids
    engine = ScriptedEngine(real, chat, idle=None)  # an empty script: the model samples for real
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Tests fail in calc.py."},
    ]
    call = {"id": "x", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'}}
    with ProxyServer(engine, chat, ProxyConfig(port=0, default_max_tokens=256)) as srv:  # type: ignore[arg-type]
        client = openai.OpenAI(base_url=srv.session_base_url("r"), api_key="k", max_retries=0)
        # 1: sampled by the model for real
        r = client.chat.completions.create(model="m", messages=messages, tools=[BASH], max_tokens=8, temperature=1.0)
        assert engine.prompts[0] == chat.render(messages, [BASH], add_generation_prompt=True)
        messages += [{"role": "assistant", "content": r.choices[0].message.content or ""}]
        messages += [{"role": "user", "content": "Run the tests."}]
        # 2: a tool call, parsed back into the OpenAI shape
        engine.script.append(_assistant_ids(chat, messages, {"role": "assistant", "content": "", "tool_calls": [call]}))
        r = client.chat.completions.create(model="m", messages=messages, tools=[BASH])
        (tc,) = r.choices[0].message.tool_calls
        assert (tc.function.name, json.loads(tc.function.arguments)) == ("bash", {"command": "pytest -q"})
        assert r.choices[0].finish_reason == "tool_calls"
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [tc.model_dump(exclude_none=True)]},
            {"role": "tool", "tool_call_id": tc.id, "content": "1 failed"},
        ]
        # 3: the final answer
        engine.script.append(_assistant_ids(chat, messages, {"role": "assistant", "content": "Fixed."}))
        r = client.chat.completions.create(model="m", messages=messages, tools=[BASH])
        assert r.choices[0].message.content == "Fixed." and not r.choices[0].message.tool_calls
        traj = srv.trajectory("r")

    # Every sampled token is in a segment with mask 1 and the engine's logprob; teacher forcing agrees.
    assert traj.counters["calls"] == 3
    sampled = sum(seg.num_sampled for seg in traj.segments)
    assert sampled == traj.counters["completion_tokens"] > 0
    for seg in traj.segments:
        (forward,) = real.score_sync([seg.input_ids], [len(seg.prompt_ids)], 1.0)
        pairs = [(lp, f) for lp, f, m in zip(seg.response_logprobs, forward, seg.response_mask, strict=True) if m]
        assert max(abs(lp - f) for lp, f in pairs) <= 1e-4

    cfg = LegoConfig.model_validate({"training": {"micro_batch_size": 4, "lr": 1e-3, "grad_clip": 1.0}})
    items = items_from_trajectories([traj.model_copy(update={"reward": 1.0})], advantages=[1.0])
    metrics = Trainer(model_dir, cfg).step(items)
    assert metrics[PEARSON] >= 0.999, metrics
