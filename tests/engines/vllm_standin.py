"""A stand-in for `vllm serve` (vLLM 0.10.x's OpenAI server) that generates with a real engine.

It implements the routes lego's vLLM client and weight sync call, with vLLM's request and response
shapes, and serves a real :class:`~lego.engines.transformers_engine.TransformersEngine` on a model
directory, so generation and logprobs are real and a weight load changes what is sampled:

- ``GET /v1/models``: the served name and ``max_model_len``.
- ``POST /v1/completions``: token-in (``prompt`` as ids) with ``logprobs: 0``, ``return_token_ids``
  (sampled ids and the prompt ids seen) and ``token_id:N`` tokens; the body is validated against
  the fields lego sends (an unknown field is a 400, as a contract pin). ``model`` must name the
  served model or a loaded adapter (vLLM answers 404 otherwise). With ``stream: true`` it answers
  vLLM's SSE: one ``data:`` chunk per run of ids the engine samples (delta ``token_ids`` and their
  logprobs, ``prompt_token_ids`` on the first, ``finish_reason`` on the last), then ``data: [DONE]``.
  ``structured_outputs: {"regex": ...}`` is honoured with the engine's guided decoding (vLLM's
  xgrammar does the same job; after the match vLLM also samples the end of sequence, which the
  stand-in leaves out: the proxy cuts a forced call after its closing either way).
- ``POST /collective_rpc {"method": "reload_weights"}`` (``VLLM_SERVER_DEV_MODE``): re-read the
  safetensors of the served directory, as vLLM's ``reload_weights()`` does.
- ``POST /reset_prefix_cache`` (``VLLM_SERVER_DEV_MODE``).
- ``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter``: the adapter at ``lora_path`` is
  merged (peft) into the base weights and served under ``lora_name``.

What it does not do: serve the base model and adapters side by side (after a LoRA load every name
is served by the merged weights; lego unloads the previous adapter at once, so it never asks for
both), batching across adapters, ``stream_options`` (usage chunks).

``loads`` records each weight delivery: (route, what was loaded, the engine's version after it).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import BaseModel, ConfigDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from lego.engines.batching import PendingRequest
from lego.engines.transformers_engine import TransformersEngine
from lego.errors import ContextOverflowError
from lego.types import SamplingParams

__all__ = ["CompletionBody", "VLLMStandIn"]


class CompletionBody(BaseModel):
    """The /v1/completions fields lego's VLLMEngine sends (extra keys are refused)."""

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
    structured_outputs: dict[str, Any] | None = None


class LoraBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lora_name: str
    lora_path: str | None = None


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"object": "error", "message": message, "type": "BadRequestError", "code": status}, status)


class VLLMStandIn:
    """Serve ``model_dir`` like ``vllm serve model_dir --served-model-name NAME`` (see the module doc)."""

    def __init__(self, model_dir: Path, served_model_name: str = "lego-policy", max_model_len: int = 2048) -> None:
        self.model_dir = Path(model_dir)
        self.served_model_name = served_model_name
        self.engine = TransformersEngine(
            model_dir, device="cpu", dtype="float32", max_model_len=max_model_len, num_threads=1
        )
        self.adapters: set[str] = set()
        self.loads: list[tuple[str, str, int]] = []
        self.completions_served = 0
        self.structured: list[dict[str, Any] | None] = []  # each completion's structured_outputs
        routes = [
            Route("/v1/models", self.models),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/collective_rpc", self.collective_rpc, methods=["POST"]),
            Route("/reset_prefix_cache", self.reset_prefix_cache, methods=["POST"]),
            Route("/v1/load_lora_adapter", self.load_lora_adapter, methods=["POST"]),
            Route("/v1/unload_lora_adapter", self.unload_lora_adapter, methods=["POST"]),
        ]
        self._server = uvicorn.Server(
            uvicorn.Config(Starlette(routes=routes), host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> VLLMStandIn:
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(5)

    @property
    def url(self) -> str:
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    # ---- serving
    async def models(self, request: Request) -> JSONResponse:
        names = [self.served_model_name, *sorted(self.adapters)]
        card = {"object": "model", "owned_by": "vllm", "max_model_len": self.engine.max_model_len}
        return JSONResponse({"object": "list", "data": [{"id": n, **card} for n in names]})

    async def completions(self, request: Request) -> Response:
        body = CompletionBody.model_validate(await request.json())
        if body.model != self.served_model_name and body.model not in self.adapters:
            return _error(404, f"The model `{body.model}` does not exist.")
        if body.logprobs != 0 or not body.return_token_ids or body.n != 1:
            return _error(400, "the stand-in serves lego's request shape only: logprobs=0, return_token_ids, n=1")
        sampling = SamplingParams(
            max_tokens=body.max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=max(body.top_k, 0),
            seed=body.seed,
            stop_token_ids=body.stop_token_ids,
            guided_regex=self._regex(body),
        )
        self.structured.append(body.structured_outputs)
        if body.stream:
            if len(body.prompt) + 1 > self.engine.max_model_len:
                return _error(400, f"This model's maximum context length is {self.engine.max_model_len} tokens.")
            self.completions_served += 1
            return StreamingResponse(self._stream(body, sampling), media_type="text/event-stream")
        try:
            gen = await self.engine.generate(body.prompt, sampling)
        except ContextOverflowError as exc:
            return _error(400, f"This model's maximum context length is {self.engine.max_model_len} tokens. {exc}")
        self.completions_served += 1
        choice: dict[str, Any] = {
            "index": 0,
            "text": "",
            "logprobs": {
                "tokens": [f"token_id:{t}" for t in gen.token_ids],
                "token_logprobs": gen.logprobs,
                "top_logprobs": None,
                "text_offset": list(range(len(gen.token_ids))),
            },
            "finish_reason": gen.finish_reason,
            "stop_reason": None,
            "token_ids": gen.token_ids,
            "prompt_token_ids": body.prompt,
        }
        n_out = len(gen.token_ids)
        usage = {
            "prompt_tokens": len(body.prompt),
            "completion_tokens": n_out,
            "total_tokens": len(body.prompt) + n_out,
        }
        return JSONResponse(
            {
                "id": "cmpl-standin",
                "object": "text_completion",
                "created": 0,
                "model": body.model,
                "choices": [choice],
                "usage": usage,
            }
        )

    @staticmethod
    def _regex(body: CompletionBody) -> str | None:
        """``structured_outputs.regex`` (vLLM >= 0.10.2); the stand-in serves no other structured output."""
        so = body.structured_outputs
        if so is None:
            return None
        if set(so) != {"regex"}:
            raise ValueError(f"the stand-in serves structured_outputs.regex only, not {sorted(so)}")
        return str(so["regex"])

    async def _stream(self, body: CompletionBody, sampling: SamplingParams) -> AsyncIterator[str]:
        """vLLM's SSE chunks, one per run of ids the engine hands its sink.

        The engine's sink receives ids only, so the stand-in submits the request to the engine's
        scheduler itself and reads each id's logprob from the request (the decode loop appends the
        logprob before it hands the id on). One chunk is held back so the last carries finish_reason.
        """
        loop = asyncio.get_running_loop()
        runs: asyncio.Queue[list[int] | None] = asyncio.Queue()
        request = PendingRequest(
            prompt_ids=list(body.prompt),
            sampling=sampling,
            max_tokens=min(body.max_tokens, self.engine.max_model_len - len(body.prompt)),
            seed=sampling.seed if sampling.seed is not None else random.randrange(2**31),
            loop=loop,
            future=loop.create_future(),
            on_tokens=runs.put_nowait,
        )
        # Runs before the done-callback: emit() and resolve() both go through call_soon_threadsafe.
        request.future.add_done_callback(lambda _: runs.put_nowait(None))
        self.engine.scheduler.submit(request)

        def chunk(ids: list[int], start: int, first: bool, finish: str | None) -> str:
            choice: dict[str, Any] = {
                "index": 0,
                "text": "",
                "logprobs": {
                    "tokens": [f"token_id:{t}" for t in ids],
                    "token_logprobs": request.logprobs[start : start + len(ids)],
                    "top_logprobs": [None] * len(ids),
                    "text_offset": list(range(start, start + len(ids))),
                },
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_token_ids": body.prompt if first else None,
                "token_ids": ids,
            }
            out = {"id": "cmpl-standin", "object": "text_completion", "created": 0, "model": body.model}
            return f"data: {json.dumps({**out, 'choices': [choice]})}\n\n"

        try:
            held: list[int] = []
            sent = 0
            while (run := await runs.get()) is not None:
                if held:
                    yield chunk(held, sent, sent == 0, None)
                    sent += len(held)
                held = run
            gen = request.future.result()
            yield chunk(held, sent, sent == 0, gen.finish_reason)
            yield "data: [DONE]\n\n"
        finally:
            if not request.future.done():  # the client left: the engine drops the row at its next step
                request.future.cancel()

    # ---- weights
    async def collective_rpc(self, request: Request) -> Response:
        body = await request.json()
        if body.get("method") != "reload_weights":
            return _error(
                400, f"the stand-in implements collective_rpc('reload_weights') only, not {body.get('method')!r}"
            )
        from safetensors.torch import load_file

        state: dict[str, Any] = {}
        for shard in sorted(self.model_dir.glob("*.safetensors")):
            state.update(load_file(shard))
        version = await asyncio.to_thread(self.engine.load_weights, state)
        self.loads.append(("/collective_rpc", str(self.model_dir), version))
        return JSONResponse({"results": [None]})

    async def reset_prefix_cache(self, request: Request) -> Response:
        return PlainTextResponse("")

    async def load_lora_adapter(self, request: Request) -> Response:
        body = LoraBody.model_validate(await request.json())
        if not body.lora_path or not (Path(body.lora_path) / "adapter_config.json").exists():
            return _error(400, f"No adapter found for {body.lora_path}")
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        base = AutoModelForCausalLM.from_pretrained(self.model_dir)
        merged = PeftModel.from_pretrained(base, body.lora_path).merge_and_unload()
        version = await asyncio.to_thread(self.engine.load_weights, merged.state_dict())
        self.adapters.add(body.lora_name)
        self.loads.append(("/v1/load_lora_adapter", body.lora_name, version))
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    async def unload_lora_adapter(self, request: Request) -> Response:
        body = LoraBody.model_validate(await request.json())
        if body.lora_name not in self.adapters:
            return _error(404, f"The lora adapter '{body.lora_name}' cannot be found.")
        self.adapters.discard(body.lora_name)
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")
