"""VLLMEngine against a small fake `vllm serve` speaking exactly the documented wire format
(``POST /v1/completions`` with token-id prompts, ``logprobs``, ``return_token_ids``,
``return_tokens_as_token_ids``, ``prompt_logprobs``; ``GET /v1/models`` with ``max_model_len``).
With ``stream: true`` it answers vLLM's SSE, one ``data:`` chunk per token, then ``data: [DONE]``.
The fake is a real starlette app on loopback; a real-vLLM test is marked ``gpu``."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import uvicorn
from pydantic import BaseModel, ConfigDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lego.engines.vllm import VLLMEngine
from lego.errors import ContextOverflowError, EngineError, EngineUnavailableError
from lego.types import SamplingParams


class CompletionBody(BaseModel):
    """What VLLMEngine must send (extra keys are refused, as a contract pin)."""

    model_config = ConfigDict(extra="forbid")
    model: str
    prompt: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    n: int = 1
    stream: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    stop_token_ids: list[int] = []
    seed: int | None = None


class FakeVLLM:
    """Samples ``prompt[-1] + 1, + 2, ...`` with logprob ``-0.1 * k``; scripted failures first."""

    def __init__(self) -> None:
        self.requests: list[CompletionBody] = []
        self.fail_with: list[tuple[int, str]] = []
        self.legacy = False  # answer like vLLM < 0.10.2 (no token_ids fields)
        self.delay = 0.0
        self.disconnected = threading.Event()
        self.retokenize = False
        self.cut_stream_after: int | None = None  # end a stream after this many chunks, without [DONE]
        self.stream_error_after: int | None = None  # after this many chunks, send vLLM's error chunk
        self.stream_as_json = False  # answer a stream request with the non-stream JSON

    async def completions(self, request: Request) -> Response:
        body = CompletionBody.model_validate(await request.json())
        self.requests.append(body)
        if self.fail_with:
            status, msg = self.fail_with.pop(0)
            return JSONResponse(
                {"object": "error", "message": msg, "type": "BadRequestError", "code": status}, status_code=status
            )
        if self.delay:
            t_end = time.monotonic() + self.delay
            while time.monotonic() < t_end:
                if await request.is_disconnected():
                    self.disconnected.set()
                    return JSONResponse({}, status_code=499)
                await asyncio.sleep(0.02)
        if body.prompt_logprobs is not None:
            # One entry per prompt position (the first has no context: None); keys are token ids.
            entries: list[Any] = [None] + [
                {str(t): {"logprob": -0.01 * i, "rank": 1, "decoded_token": "x"}}
                for i, t in enumerate(body.prompt)
                if i > 0
            ]
            return JSONResponse(
                {"choices": [{"index": 0, "text": "x", "finish_reason": "length", "prompt_logprobs": entries}]}
            )
        n = body.max_tokens
        ids = [body.prompt[-1] + k for k in range(1, n + 1)]
        logprobs = {
            "tokens": [f"token_id:{i}" for i in ids],
            "token_logprobs": [-0.1 * k for k in range(1, n + 1)],
            "top_logprobs": None,
            "text_offset": list(range(n)),
        }
        choice: dict[str, Any] = {
            "index": 0,
            "text": "t" * n,
            "logprobs": logprobs,
            "finish_reason": "length",
            "stop_reason": None,
        }
        if not self.legacy:
            choice["token_ids"] = ids
            choice["prompt_token_ids"] = [*body.prompt, 9] if self.retokenize else body.prompt
        if body.stream and not self.stream_as_json:
            return StreamingResponse(self._stream(body.prompt, choice), media_type="text/event-stream")
        usage = {"prompt_tokens": len(body.prompt), "completion_tokens": n, "total_tokens": len(body.prompt) + n}
        return JSONResponse(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 0,
                "model": body.model,
                "choices": [choice],
                "usage": usage,
            }
        )

    async def _stream(self, prompt: list[int], whole: dict[str, Any]) -> AsyncIterator[str]:
        """``whole`` (the non-stream choice) as vLLM streams it: one chunk per token, the prompt ids
        on the first, the finish reason on the last."""
        n = len(whole["logprobs"]["tokens"])
        for k in range(n):
            if k == self.cut_stream_after:
                return
            if k == self.stream_error_after:
                yield 'data: {"error": {"object": "error", "message": "engine dead", "code": 500}}\n\n'
                return
            lp = {key: whole["logprobs"][key][k : k + 1] for key in ("tokens", "token_logprobs")}
            choice = {"index": 0, "text": "t", "logprobs": lp, "finish_reason": "length" if k == n - 1 else None}
            if not self.legacy:
                choice["token_ids"] = whole["token_ids"][k : k + 1]
                choice["prompt_token_ids"] = prompt if k == 0 else None
            yield f"data: {json.dumps({'id': 'cmpl-1', 'object': 'text_completion', 'choices': [choice]})}\n\n"
        yield "data: [DONE]\n\n"

    async def models(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": "Qwen/Qwen3-0.6B", "object": "model", "owned_by": "vllm", "max_model_len": 128}],
            }
        )


@pytest.fixture()
def fake() -> Iterator[tuple[FakeVLLM, str]]:
    fv = FakeVLLM()
    app = Starlette(routes=[Route("/v1/completions", fv.completions, methods=["POST"]), Route("/v1/models", fv.models)])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield fv, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(5)


def _gen(engine: VLLMEngine, prompt: list[int], **kw: Any) -> Any:
    async def go() -> Any:
        try:
            return await engine.generate(prompt, SamplingParams(**kw))
        finally:
            await engine.close()

    return asyncio.run(go())


def test_discovers_model_and_window_and_sends_token_ids(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    engine = VLLMEngine(url + "/v1", backoff_s=0.01)
    assert engine.model == "Qwen/Qwen3-0.6B" and engine.max_model_len == 128
    gen = _gen(engine, [5, 6, 7], max_tokens=3, temperature=0.7, top_k=0, stop_token_ids=[2], seed=4)
    assert gen.token_ids == [8, 9, 10] and gen.logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert gen.finish_reason == "length" and gen.prompt_tokens == 3
    (req,) = fv.requests
    assert req.prompt == [5, 6, 7] and req.logprobs == 0 and req.return_token_ids and req.return_tokens_as_token_ids
    assert req.top_k == -1 and req.temperature == 0.7 and req.stop_token_ids == [2] and req.seed == 4
    assert req.skip_special_tokens is False and req.include_stop_str_in_output is True


def test_reads_legacy_token_id_strings(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    fv.legacy = True
    gen = _gen(VLLMEngine(url), [1], max_tokens=2)
    assert gen.token_ids == [2, 3]


def test_refuses_a_retokenized_prompt(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    fv.retokenize = True
    with pytest.raises(EngineError, match="re-tokenized"):
        _gen(VLLMEngine(url), [1, 2], max_tokens=2)


def _stream(engine: VLLMEngine, prompt: list[int], runs: list[list[int]], **kw: Any) -> Any:
    async def go() -> Any:
        try:
            return await engine.generate(prompt, SamplingParams(**kw), on_tokens=runs.append)
        finally:
            await engine.close()

    return asyncio.run(go())


def test_retries_transient_errors_then_succeeds(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    fv.fail_with = [(503, "busy"), (500, "oops")]
    gen = _gen(VLLMEngine(url, backoff_s=0.01), [1], max_tokens=1)
    assert gen.token_ids == [2] and len(fv.requests) == 3


def test_waits_backoff_then_twice_as_long_before_each_next_try(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    fv.fail_with = [(429, "slow down"), (503, "busy")]
    t0 = time.monotonic()
    gen = _gen(VLLMEngine(url, backoff_s=0.2), [1], max_tokens=1)
    assert gen.token_ids == [2] and time.monotonic() - t0 >= 0.2 + 0.4


def test_a_stream_is_retried_until_it_opens_and_a_400_is_not(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    fv.fail_with = [(503, "busy")]
    runs: list[list[int]] = []
    gen = _stream(VLLMEngine(url, backoff_s=0.01), [1], runs, max_tokens=3)
    assert runs == [[2], [3], [4]] and gen.token_ids == [2, 3, 4] and len(fv.requests) == 2
    assert gen.logprobs == pytest.approx([-0.1, -0.2, -0.3]) and gen.finish_reason == "length"
    fv.requests.clear()
    fv.fail_with = [(400, "unknown field")]
    with pytest.raises(EngineError, match="400") as err:
        _stream(VLLMEngine(url, backoff_s=0.01), [1], [], max_tokens=3)
    assert type(err.value) is EngineError and len(fv.requests) == 1


def test_a_stream_cut_before_done_or_failing_mid_stream_raises_and_is_not_retried(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    fv.cut_stream_after = 2
    runs: list[list[int]] = []
    with pytest.raises(EngineUnavailableError, match=r"stream ended after 2 tokens without data: \[DONE\]"):
        _stream(VLLMEngine(url, backoff_s=0.01), [1], runs, max_tokens=4)
    assert runs == [[2], [3]] and len(fv.requests) == 1
    fv.cut_stream_after, fv.stream_error_after = None, 1
    with pytest.raises(EngineError, match=r"failed mid-stream after 1 tokens: .*engine dead"):
        _stream(VLLMEngine(url, backoff_s=0.01), [1], [], max_tokens=4)
    assert len(fv.requests) == 2


def test_a_stream_answered_without_sse_is_refused(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    fv.stream_as_json = True
    with pytest.raises(EngineError, match=r"without SSE .*application/json"):
        _stream(VLLMEngine(url, backoff_s=0.01), [1], [], max_tokens=2)
    assert len(fv.requests) == 1


def test_an_unreachable_server_is_tried_max_retries_more_times() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the engine connects: refused
    engine = VLLMEngine(f"http://127.0.0.1:{port}", model="m", max_model_len=128, max_retries=2, backoff_s=0.01)
    with pytest.raises(EngineUnavailableError, match="unreachable after 3 tries"):
        _gen(engine, [1], max_tokens=1)


def test_gives_up_after_max_retries_and_does_not_retry_4xx(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    fv.fail_with = [(503, "busy")] * 3
    with pytest.raises(EngineError, match="503"):
        _gen(VLLMEngine(url, max_retries=2, backoff_s=0.01), [1], max_tokens=1)
    fv.requests.clear()
    fv.fail_with = [(422, "bad field")]
    with pytest.raises(EngineError, match="422"):
        _gen(VLLMEngine(url, backoff_s=0.01), [1], max_tokens=1)
    assert len(fv.requests) == 1


def test_context_overflow(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    with pytest.raises(ContextOverflowError):
        _gen(VLLMEngine(url), list(range(200)), max_tokens=1)
    fv.fail_with = [(400, "This model's maximum context length is 128 tokens")]
    with pytest.raises(ContextOverflowError):
        _gen(VLLMEngine(url), [1, 2], max_tokens=5)


def test_cancelling_generate_disconnects_so_vllm_aborts(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    fv.delay = 10.0
    engine = VLLMEngine(url)

    async def go() -> None:
        task = asyncio.create_task(engine.generate([1], SamplingParams(max_tokens=2)))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await engine.close()

    asyncio.run(go())
    assert fv.disconnected.wait(5)


def test_score_uses_prompt_logprobs_and_weights_are_served_not_loaded(fake: tuple[FakeVLLM, str]) -> None:
    fv, url = fake
    engine = VLLMEngine(url)
    (lps,) = asyncio.run(engine.score([[4, 5, 6, 7]], [2], 1.0))
    assert lps == pytest.approx([-0.02, -0.03])
    assert fv.requests[0].prompt_logprobs == 0
    # an in-process state dict cannot reach the server: weight_sync rewrites them there instead
    caps = engine.capabilities
    assert caps.served_weights is engine and caps.in_process_weights is None and caps.answer_taker is None


def test_each_response_records_the_version_it_was_sent_under_on_every_token(fake: tuple[FakeVLLM, str]) -> None:
    """vLLM reports no weights version: a response's tokens all carry the one serve() named when it was sent."""
    fv, url = fake
    engine = VLLMEngine(url)

    async def go() -> tuple[Any, Any]:
        first = await engine.generate([5, 6, 7], SamplingParams(max_tokens=3))
        engine.serve("lego-v3", 3)
        second = await engine.generate([5, 6, 7], SamplingParams(max_tokens=3))
        await engine.close()
        return first, second

    first, second = asyncio.run(go())
    assert first.versions == [0, 0, 0] and second.policy_version == 3 and second.versions == [3, 3, 3]
    assert fv.requests[-1].model == "lego-v3"


@pytest.mark.gpu
def test_real_vllm_token_in_token_out() -> None:
    """Needs `vllm serve MODEL --logprobs-mode processed_logprobs` at $LEGO_VLLM_URL."""
    url = os.environ.get("LEGO_VLLM_URL")
    if not url:
        pytest.skip("set LEGO_VLLM_URL to a running `vllm serve` to run this test")
    engine = VLLMEngine(url)
    gen = _gen(engine, [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198], max_tokens=8, temperature=1.0)
    assert len(gen.token_ids) == len(gen.logprobs) >= 1 and all(lp <= 0 for lp in gen.logprobs)
