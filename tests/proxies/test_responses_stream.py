# mypy: disable-error-code="union-attr,arg-type,attr-defined,index"
"""Responses streams as the openai SDK's own stream helper (``client.responses.stream``) reads them:
it tracks every output item from ``output_item.added`` to ``.done`` and ``response.completed`` and
raises when an item's id changes on the way (issue 28.2). Each stream here is read with it, for
text streamed as it is sampled, text held back because it looked like a tool call, reasoning, and
calls, from an engine that streams its tokens one by one."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from lego.engines.scripted import ScriptedEngine
from lego.proxies.server import ProxyServer

CALL = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>'
TOOLS = [
    {
        "type": "function",
        "name": "bash",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    }
]


def read(srv: ProxyServer, session: str, **extra: Any) -> tuple[list[Any], Any]:
    client = openai.OpenAI(base_url=f"{srv.root_url}/s/{session}/v1", api_key="k", max_retries=0)
    with client.responses.stream(model="m", input="list files", **extra) as stream:
        events = list(stream)
        final = stream.get_final_response()
    added = {e.output_index: e.item.id for e in events if e.type == "response.output_item.added"}
    done = {e.output_index: e.item.id for e in events if e.type == "response.output_item.done"}
    assert added == done and len(set(added.values())) == len(added)  # one id per item, from start to end
    assert [o.id for o in final.output] == [added[i] for i in sorted(added)]
    for e in events:
        if hasattr(e, "item_id") and hasattr(e, "output_index"):
            assert e.item_id == added[e.output_index], e.type
    return events, final


@pytest.mark.parametrize(
    "script",
    [
        '{"looks": "like a call"} but it is text<|im_end|>',  # held back: it may be a call, it is not
        "let me look\n" + CALL + "<|im_end|>",  # streamed text, then a call
        "<think>\nhmm\n</think>\n\nplain words<|im_end|>",  # reasoning, then streamed text
        CALL + "<|im_end|>",  # a call alone
        '{"x": 1}\n' + CALL + "<|im_end|>",  # held-back text and a call
    ],
)
def test_every_item_keeps_one_id_from_added_to_done_to_completed(
    streaming: tuple[ProxyServer, ScriptedEngine], script: str
) -> None:
    srv, engine = streaming
    engine.push(script)
    _, final = read(srv, "s", tools=TOOLS)
    assert final.status == "completed"


def test_the_real_model_streams_text_the_sdk_accepts(server: ProxyServer) -> None:
    _, final = read(server, "real", max_output_tokens=16)
    assert final.output and final.output[0].type == "message"
