"""The vLLM engine: token ids in, token ids and per-token logprobs out, against `vllm serve`.

Wire format (vLLM's OpenAI-compatible ``POST /v1/completions``, with vLLM's own extensions):

    request   {"model", "prompt": [ids...], "max_tokens", "temperature", "top_p", "top_k", "seed",
               "n": 1, "stream": false, "logprobs": 0, "return_token_ids": true,
               "return_tokens_as_token_ids": true, "skip_special_tokens": false,
               "spaces_between_special_tokens": false, "stop_token_ids": [...],
               "include_stop_str_in_output": true,
               "structured_outputs": {"regex": ...}}  (only for a guided request: a forced tool call)
    response  {"choices": [{"text", "finish_reason", "token_ids": [...], "prompt_token_ids": [...],
               "logprobs": {"tokens": ["token_id:123", ...], "token_logprobs": [...]}}],
               "usage": {...}}
    streamed  with ``on_tokens``, the same request with "stream": true; vLLM answers SSE
              ``data: {"choices": [{"text", "token_ids": [delta...], "logprobs": {"tokens",
              "token_logprobs"} of the delta, "finish_reason" (last chunk), "prompt_token_ids"
              (first chunk)}]}`` chunks, then ``data: [DONE]``

``prompt`` as a list of ints is taken as token ids (no re-tokenization); ``return_token_ids``
(vLLM >= 0.10.2) returns the sampled ids and the prompt ids the engine saw, which are checked
against what was sent; older servers are read through ``return_tokens_as_token_ids``
(``"token_id:123"`` strings). ``logprobs: 0`` returns the sampled token's logprob only.

Guided requests (``SamplingParams.guided_regex``, a forced tool call) send vLLM's structured-output
option; vLLM then samples the regex's language and ends with the end-of-sequence token (the proxy
cuts the call after its closing). vLLM silently ignores options it does not know, so the proxy
still checks what came back. With ``processed_logprobs`` those tokens' logprobs are the
constrained distribution's; they are recorded flagged and never trained on.

What the logprobs mean: start the server with ``--logprobs-mode processed_logprobs`` so they are
taken after temperature scaling (lego's contract: ``log_softmax(logits / T)``); in training mode
the proxy turns off top-p / top-k, so nothing else touches them. The default ``raw_logprobs`` mode
ignores temperature and breaks that contract at T != 1.

Transient failures (connection errors, 429, 5xx) are retried with backoff (a stream only before
its first chunk); a cancelled ``generate`` closes its HTTP request or stream, and vLLM aborts a request whose client disconnected.

Weights reach the server through ``lego.training.weight_sync`` (full reload or LoRA hot-load over
vLLM's own HTTP API, talking to ``base_url`` with ``api_key``); once the server serves them it calls
:meth:`VLLMEngine.serve` with the name requests must use (the adapter's, for LoRA) and the new
version: the engine's capability is ``served_weights`` (an in-process state dict cannot reach a remote
server, so it has no ``in_process_weights``).

Policy versions are per request here, not per token: vLLM's completion reports no weights version,
so every token of a response records the version :meth:`VLLMEngine.serve` last named when the
request was sent (``Generation.versions`` is that one value repeated). Were the weights reloaded
under a request in flight, its later tokens would carry the earlier version; their logprobs are
still the ones the server sampled with (the importance weight stays right), only the lag is
overstated. A per-token boundary needs the server to report it (or the sync to pause requests,
reload and resume them); the in-process engine records it per token (``lego.engines.decode``).
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import aclosing
from typing import Any

import httpx
from httpx_sse import EventSource, SSEError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from lego.config import EngineConfig
from lego.errors import ConfigError, ContextOverflowError, EngineError, EngineUnavailableError, LegoError
from lego.seams import EngineCapabilities, TokenSink
from lego.types import Generation, RequestContext, SamplingParams

__all__ = ["VLLMEngine"]

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_OVERFLOW_HINTS = ("maximum context length", "context length", "max_model_len", "too long")


def _sampled_ids(choice: dict[str, Any], lp: dict[str, Any]) -> list[int]:
    """A choice's sampled ids: ``token_ids``, or on servers before ``return_token_ids`` its
    ``"token_id:123"`` logprob tokens."""
    ids = choice.get("token_ids")
    if ids is not None:
        return [int(i) for i in ids]
    try:
        return [int(str(t).removeprefix("token_id:")) for t in lp["tokens"]]
    except (KeyError, ValueError) as exc:
        raise EngineError("vLLM returned neither token_ids nor token_id:N tokens; upgrade vLLM to >= 0.10.2") from exc


def _worth_another_try(exc: BaseException) -> bool:
    """A connection error (timeouts included) or an answer :meth:`VLLMEngine._failure` marked retryable."""
    return isinstance(exc, httpx.TransportError) or (isinstance(exc, EngineError) and exc.retryable)


class VLLMEngine:
    """An :class:`~lego.seams.Engine` backed by a running `vllm serve` (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        max_model_len: int | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._owns_client = client is None
        self.client = client or httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0)
        )
        self._headers = headers
        self.api_key = api_key
        # The event loop the client's connections belong to (the proxy's): close() runs there.
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.policy_version = 0
        if model is None or max_model_len is None:
            served, window = self._discover(headers)
            model = model or served
            max_model_len = max_model_len or window
        self.model: str = model
        self.max_model_len: int = int(max_model_len)

    @classmethod
    def from_config(cls, cfg: EngineConfig) -> VLLMEngine:
        if not cfg.vllm_url:
            raise ConfigError("engine.kind='vllm' needs engine.vllm_url, e.g. -o engine.vllm_url=http://127.0.0.1:8000")
        return cls(
            cfg.vllm_url, api_key=cfg.vllm_api_key, max_model_len=cfg.max_model_len, timeout_s=cfg.request_timeout_s
        )

    def _discover(self, headers: dict[str, str]) -> tuple[str, int]:
        """The served model name and context window from ``GET /v1/models``."""
        try:
            r = httpx.get(f"{self.base_url}/v1/models", headers=headers, timeout=10.0)
            r.raise_for_status()
            card = r.json()["data"][0]
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise EngineUnavailableError(
                f"cannot read the served model from {self.base_url}/v1/models ({exc}); is `vllm serve` running there?"
            ) from exc
        window = card.get("max_model_len")
        if not isinstance(window, int):
            raise EngineError(f"{self.base_url}/v1/models names no max_model_len; pass max_model_len= explicitly")
        return str(card["id"]), window

    # ------------------------------------------------------------------ requests
    def _failure(self, status: int, text: str, path: str, body: dict[str, Any]) -> LegoError:
        """What an answer other than 200 means; an EngineError with ``retryable`` set is worth another try."""
        if status == 400 and any(h in text.lower() for h in _OVERFLOW_HINTS):
            prompt = body.get("prompt")
            return ContextOverflowError(
                len(prompt) if isinstance(prompt, list) else 0, int(body.get("max_tokens", 0)), self.max_model_len
            )
        err = EngineError(f"vLLM answered {status} to {path}: {text}")
        err.retryable = status in _RETRY_STATUS
        return err

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request(path, body, None)

    async def _request(self, path: str, body: dict[str, Any], on_tokens: TokenSink | None) -> dict[str, Any]:
        """POST ``body``; with ``on_tokens``, read the answer as vLLM's SSE stream (see :meth:`_read_stream`).

        Connection errors and the answers :meth:`_failure` marks ``retryable`` are tried again, up to
        ``max_retries`` more times, waiting ``backoff_s`` and then twice as long before each next try;
        the last failure is raised as it is (a connection error as an EngineUnavailableError). Only
        the opening is retried: once a stream has handed ids to ``on_tokens`` a second try would hand
        them again, so a stream that breaks is an EngineUnavailableError.
        """
        self._client_loop = asyncio.get_running_loop()
        # Built per request: a Retrying object keeps the state of the call it runs.
        retrying = AsyncRetrying(
            retry=retry_if_exception(_worth_another_try),
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=self.backoff_s),
            reraise=True,
        )
        try:
            r: httpx.Response = await retrying(self._open, path, body, on_tokens is not None)
        except httpx.TransportError as exc:
            tries = retrying.statistics["attempt_number"]
            raise EngineUnavailableError(f"vLLM at {self.base_url} unreachable after {tries} tries: {exc}") from exc
        if on_tokens is None:
            data: dict[str, Any] = r.json()
            return data
        try:
            return await self._read_stream(r, on_tokens)
        finally:
            await r.aclose()

    async def _open(self, path: str, body: dict[str, Any], streamed: bool) -> httpx.Response:
        """One try at ``POST path``: a 200, its body read unless ``streamed`` (then the caller reads and
        closes it), or else the failure the answer means, raised."""
        request = self.client.build_request("POST", f"{self.base_url}{path}", json=body, headers=self._headers)
        r = await self.client.send(request, stream=streamed)
        if r.status_code == 200:
            return r
        try:
            await r.aread()  # a streamed answer's error body is still unread
        finally:
            await r.aclose()
        raise self._failure(r.status_code, r.text[:500], path, body)

    async def _read_stream(self, r: httpx.Response, on_tokens: TokenSink) -> dict[str, Any]:
        """Read vLLM's streamed completion, handing each chunk's ids to ``on_tokens`` as it arrives.

        httpx-sse splits the body into events. Each ``data: {...}`` chunk's choice carries the delta: ``token_ids`` (the prompt's
        ``prompt_token_ids`` on the first chunk only), ``logprobs.tokens`` / ``token_logprobs`` for
        the same tokens, and ``finish_reason`` on the last; ``data: [DONE]`` ends the stream, and an
        error after the headers arrives as a chunk with ``error``. Returns the chunks joined into
        the non-stream answer's shape, for :meth:`_generation` to check and read.
        """
        ids: list[int] = []
        tokens: list[str] = []
        token_logprobs: list[Any] = []
        joined: dict[str, Any] = {"finish_reason": None, "prompt_token_ids": None}
        try:
            async with aclosing(EventSource(r).aiter_sse()) as events:
                async for event in events:
                    if event.data == "[DONE]":
                        joined["token_ids"] = ids
                        joined["logprobs"] = {"tokens": tokens, "token_logprobs": token_logprobs}
                        return {"choices": [joined]}
                    chunk = json.loads(event.data)
                    if "error" in chunk or chunk.get("object") == "error":
                        detail = chunk.get("error", chunk)
                        raise EngineError(f"vLLM failed mid-stream after {len(ids)} tokens: {detail}")
                    for choice in chunk.get("choices") or []:  # the usage chunk has none
                        lp = choice.get("logprobs") or {}
                        new = _sampled_ids(choice, lp)
                        tokens.extend(lp.get("tokens") or [])
                        token_logprobs.extend(lp.get("token_logprobs") or [])
                        if choice.get("prompt_token_ids") is not None:
                            joined["prompt_token_ids"] = choice["prompt_token_ids"]
                        joined["finish_reason"] = choice.get("finish_reason") or joined["finish_reason"]
                        if new:
                            ids.extend(new)
                            on_tokens(new)
        except SSEError as exc:  # raised before the first event: the answer is not an event stream
            raise EngineError(f"vLLM answered a streamed request without SSE ({exc}); is it a vLLM server?") from exc
        except httpx.HTTPError as exc:
            raise EngineUnavailableError(f"vLLM's stream broke after {len(ids)} tokens: {exc}") from exc
        except ValueError as exc:
            raise EngineError(f"vLLM sent a stream chunk that is not JSON ({exc}); is it a vLLM server?") from exc
        raise EngineUnavailableError(f"vLLM's stream ended after {len(ids)} tokens without data: [DONE]")

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: TokenSink | None = None,
    ) -> Generation:
        """Sample after ``prompt_ids``; with ``on_tokens``, the same request is streamed (``stream: true``)
        and each chunk's ids are handed on as vLLM sends them."""
        if len(prompt_ids) + 1 > self.max_model_len:
            raise ContextOverflowError(len(prompt_ids), sampling.max_tokens, self.max_model_len)
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt_ids),
            "max_tokens": min(sampling.max_tokens, self.max_model_len - len(prompt_ids)),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k if sampling.top_k > 0 else -1,
            "n": 1,
            "stream": on_tokens is not None,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "include_stop_str_in_output": True,
            "stop_token_ids": list(sampling.stop_token_ids),
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.guided_regex is not None:
            # vLLM >= 0.10.2 (guided_regex before it, removed in 0.12): its structured-output backend
            # (xgrammar) masks every step to the regex and allows only the end of sequence after it.
            body["structured_outputs"] = {"regex": sampling.guided_regex}
        version = self.policy_version
        t0 = time.perf_counter()
        data = await self._request("/v1/completions", body, on_tokens)
        return self._generation(
            data, prompt_ids, version, time.perf_counter() - t0, constrained=sampling.guided_regex is not None
        )

    def _generation(
        self, data: dict[str, Any], prompt_ids: list[int], version: int, elapsed: float, constrained: bool = False
    ) -> Generation:
        try:
            choice = data["choices"][0]
            lp = choice["logprobs"] or {}
            logprobs = [float(x) for x in lp["token_logprobs"]]
        except (KeyError, IndexError, TypeError) as exc:
            raise EngineError(
                f"vLLM's completion lacks choices[0].logprobs.token_logprobs ({exc}); is it a vLLM server?"
            ) from exc
        ids = _sampled_ids(choice, lp)
        seen = choice.get("prompt_token_ids")
        if seen is not None and list(seen) != list(prompt_ids):
            raise EngineError(
                "vLLM saw different prompt ids than were sent (it re-tokenized the prompt); refusing to record"
            )
        if len(ids) != len(logprobs):
            raise EngineError(f"vLLM returned {len(ids)} token ids but {len(logprobs)} logprobs")
        reason = choice.get("finish_reason")
        finish = "length" if reason == "length" else ("abort" if reason == "abort" else "stop")
        return Generation(
            token_ids=[int(i) for i in ids],
            logprobs=logprobs,
            finish_reason=finish,
            policy_version=version,
            prompt_tokens=len(prompt_ids),
            engine_time_s=elapsed,
            constrained=constrained,
        )

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        """Teacher-forced logprobs via ``prompt_logprobs`` (vLLM scores prompts at temperature 1 only)."""
        if temperature not in (0.0, 1.0):
            raise EngineError(
                "vLLM's prompt_logprobs ignore temperature; score at temperature 1 or use the trainer's forward"
            )

        async def one(seq: list[int], plen: int) -> list[float]:
            body = {"model": self.model, "prompt": list(seq), "max_tokens": 1, "prompt_logprobs": 0, "temperature": 1.0}
            data = await self._post("/v1/completions", body)
            entries = data["choices"][0].get("prompt_logprobs") or data.get("prompt_logprobs")
            if entries is None:
                raise EngineError("vLLM returned no prompt_logprobs; is this a vLLM server?")
            out = []
            for pos in range(plen, len(seq)):
                entry = entries[pos] or {}
                hit = entry.get(str(seq[pos]))
                if hit is None:
                    raise EngineError(f"vLLM's prompt_logprobs lack token {seq[pos]} at position {pos}")
                out.append(float(hit["logprob"] if isinstance(hit, dict) else hit))
            return out

        return list(await asyncio.gather(*(one(s, p) for s, p in zip(sequences, prompt_lens, strict=True))))

    @property
    def capabilities(self) -> EngineCapabilities:
        return EngineCapabilities(served_weights=self)

    def serve(self, model: str, version: int) -> None:
        """From now on, request ``model`` (the server already serves it) and record ``version`` on
        every token of the responses to requests sent from now on."""
        self.model = model
        self.policy_version = version

    async def close(self) -> None:
        """Close the HTTP client on the loop its connections belong to (the proxy's, usually not the
        caller's); when that loop is already gone its sockets went with it."""
        if not self._owns_client:
            return
        loop = self._client_loop
        if loop is None or loop is asyncio.get_running_loop():
            await self.client.aclose()
        elif loop.is_running():
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.client.aclose(), loop))
