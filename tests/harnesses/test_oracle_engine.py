"""OracleEngine.generate end to end on the real tiny model: the ids parse back to the planned tool
call, and every id carries a real logprob that matches an independent teacher-forced score."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from lego.engines.oracle import OracleEngine, apply_command
from lego.engines.transformers_engine import TransformersEngine
from lego.errors import EngineError
from lego.harnesses.lego_agent.agent import TOOLS
from lego.types import RequestContext, SamplingParams

PATCH = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"


def test_generate_scores_the_oracle_reply(tiny_model_dir: Path, chat_format) -> None:
    scorer = TransformersEngine(tiny_model_dir)
    engine = OracleEngine(chat_format, scorer, score_context=64)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Fix x."}]
    prompt = chat_format.render(messages, TOOLS, add_generation_prompt=True)
    context = RequestContext(messages=messages, tools=TOOLS, answer=PATCH)
    gen = asyncio.run(engine.generate(prompt, SamplingParams(temperature=1.0, max_tokens=4096), context))
    assert gen.finish_reason == "stop" and gen.token_ids[-1] == chat_format.im_end_id
    call = chat_format.parse(gen.token_ids, tools=TOOLS).tool_calls[0]
    assert call.name == "bash" and json.loads(call.arguments) == {"command": apply_command(PATCH)}
    assert len(gen.logprobs) == len(gen.token_ids) and all(lp <= 0 and math.isfinite(lp) for lp in gen.logprobs)
    window = prompt[-64:]
    expected = scorer.score_sync([window + gen.token_ids], [len(window)], 1.0)[0]
    assert gen.logprobs == pytest.approx(expected, abs=1e-5)
    asyncio.run(scorer.close())


def test_generate_without_a_gold_patch_says_how_to_provide_it(chat_format) -> None:
    engine = OracleEngine(chat_format, scorer=None)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match=r"answer=task.patch"):
        asyncio.run(engine.generate([1, 2], SamplingParams(), RequestContext()))
