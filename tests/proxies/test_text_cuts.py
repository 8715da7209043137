# mypy: disable-error-code="union-attr,arg-type,index,attr-defined"
"""What a reply's text is, exactly (issue 28.4 and 28.5), through the official SDKs:

- a stop sequence cuts the reply at the character where it begins, as the APIs do, whether it
  begins inside a token, spans tokens or begins on a token boundary: nothing before it is lost and
  nothing of it is kept, streamed or not, on every face;
- the logprob tokens join to exactly the reply's text (``logprobs.content`` / ``output_text.logprobs``).

The scripted engine (streaming token by token) plays chosen texts, with real logprobs."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from lego.engines.scripted import ScriptedEngine
from lego.proxies.server import ProxyServer

TEXT = "first the argument parser, then its unit tests and finally the docs"


def stops_of(chat: Any) -> dict[str, str]:
    """Stop strings that begin inside a token, span two tokens, and begin on a token boundary."""
    ids = chat.encode(TEXT)
    pieces = [chat.decode([i]) for i in ids]
    assert "".join(pieces) == TEXT
    k = next(i for i, p in enumerate(pieces) if len(p.strip()) >= 4 and i > 2)
    inside = pieces[k][2:] + pieces[k + 1][:1]
    j = next(i for i, p in enumerate(pieces) if i > k + 2 and len(p) >= 2 and len(pieces[i + 1]) >= 2)
    spanning = pieces[j][-1] + pieces[j + 1][:2]
    boundary = pieces[j + 3] + pieces[j + 4][:1]
    return {"inside": inside, "spanning": spanning, "boundary": boundary}


def expected(stop: str) -> str:
    return TEXT[: TEXT.index(stop)].strip()


def oai(srv: ProxyServer, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.root_url}/s/{session}/v1", api_key="k", max_retries=0)


@pytest.mark.parametrize("where", ["inside", "spanning", "boundary"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_chat_stop_cuts_at_the_character(
    streaming: tuple[ProxyServer, ScriptedEngine], chat_format: Any, where: str, stream: bool
) -> None:
    srv, engine = streaming
    stop = stops_of(chat_format)[where]
    engine.push(TEXT + "<|im_end|>")
    args: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "plan"}], "stop": [stop, "zzz"]}
    if stream:
        chunks = list(oai(srv, "c").chat.completions.create(stream=True, **args))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    else:
        r = oai(srv, "c").chat.completions.create(**args)
        text, finish = r.choices[0].message.content, [r.choices[0].finish_reason]
    assert text == expected(stop) and finish == ["stop"]
    assert srv.trajectory("c").messages[-1]["content"] == expected(stop)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_anthropic_stop_sequence_cuts_at_the_character_and_names_it(
    streaming: tuple[ProxyServer, ScriptedEngine], chat_format: Any, stream: bool
) -> None:
    srv, engine = streaming
    stop = stops_of(chat_format)["inside"]
    engine.push(TEXT + "<|im_end|>")
    client = anthropic.Anthropic(base_url=f"{srv.root_url}/s/a", api_key="k", max_retries=0)
    args: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "plan"}]}
    if stream:
        with client.messages.stream(stop_sequences=[stop], **args) as s:
            msg = s.get_final_message()
    else:
        msg = client.messages.create(stop_sequences=[stop], **args)
    assert msg.content[0].text == expected(stop)
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_responses_and_gemini_stop_cut_at_the_character(
    streaming: tuple[ProxyServer, ScriptedEngine], chat_format: Any, stream: bool
) -> None:
    srv, engine = streaming
    stop = stops_of(chat_format)["spanning"]
    engine.push(TEXT + "<|im_end|>", TEXT + "<|im_end|>")
    options = types.HttpOptions(
        base_url=f"{srv.root_url}/s/g", api_version="v1beta", retry_options=types.HttpRetryOptions(attempts=1)
    )
    config = types.GenerateContentConfig(stop_sequences=[stop])
    client = genai.Client(api_key="k", http_options=options)
    if stream:
        parts = list(client.models.generate_content_stream(model="g", contents="plan", config=config))
        text = "".join(p.text or "" for p in parts)
    else:
        text = client.models.generate_content(model="g", contents="plan", config=config).text
    assert text == expected(stop)
    # the Responses API has no stop parameter; its face cuts the same way through the canonical call
    body = {"model": "m", "messages": [{"role": "user", "content": "plan"}], "stop": stop}
    r = oai(srv, "r").chat.completions.create(**body)
    assert r.choices[0].message.content == expected(stop)


@pytest.mark.parametrize(
    "script",
    ["hello there\n", "\n  indented words  \n\n", "<think>\nhmm\n</think>\n\nthe answer\n", "tail\n" * 3],
)
def test_chat_logprob_tokens_join_to_the_content(streaming: tuple[ProxyServer, ScriptedEngine], script: str) -> None:
    srv, engine = streaming
    engine.push(script + "<|im_end|>", script + "<|im_end|>")
    client = oai(srv, "lp")
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True)
    content = r.choices[0].message.content
    tokens = r.choices[0].logprobs.content
    assert "".join(t.token for t in tokens) == content
    assert all(bytes(t.bytes) == t.token.encode() for t in tokens) and all(t.logprob <= 0 for t in tokens)
    chunks = list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True, stream=True
        )
    )
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert "".join(t.token for t in streamed) == "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_responses_logprob_tokens_join_to_the_output_text(streaming: tuple[ProxyServer, ScriptedEngine]) -> None:
    srv, engine = streaming
    engine.push("two lines\nof text\n\n<|im_end|>")
    r = oai(srv, "rl").responses.create(model="m", input="hi", include=["message.output_text.logprobs"])
    (part,) = r.output[0].content
    assert "".join(t.token for t in part.logprobs) == part.text == r.output_text
    assert json.loads(json.dumps([t.logprob for t in part.logprobs]))
