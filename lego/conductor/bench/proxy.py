"""`lego bench proxy`: what the recording proxy adds to each request, beside baselines from the same run.

* Added latency: a real proxy (real HTTP, real chat template and tokenizer of the tiny model) in
  front of :class:`InstantEngine`, which answers every prompt at once with a fixed tool call, so
  the round trip is all proxy. Sessions are driven turn by turn like an agent (assistant tool call,
  ~470-token tool result); latencies are collected around turns 1, 32 and 128 (~64k tokens of
  history by turn 128). Figures: client round trip minus engine time, and the server-side share
  (``x-lego-proxy-ms``: recorder + bookkeeping). Baseline: a bare ``GET /healthz`` round trip. The
  key ratio is turn-128 / turn-1: per-turn cost must be O(new messages), target <= 2. It is given
  on wall time (p50) and on the proxy process's CPU time per request (``x-lego-cpu-ms``), which a
  busy shared machine does not inflate.
* Load: 64 concurrent sessions for 60 s against the same proxy; errors must be zero; requests/s.
* End to end: a short conversation served by the tiny model itself (transformers engine), with
  the proxy's share of each request.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

import click
import httpx
import orjson

from lego.config import ProxyConfig
from lego.seams import EngineCapabilities, TokenSink
from lego.types import Generation, RequestContext, SamplingParams

__all__ = ["InstantEngine", "command", "measure"]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]
_JSON = {"content-type": "application/json"}
_WORDS = "def class return import self value test assert error file line patch tests module fix bug parse token".split()


class InstantEngine:
    """An engine that answers instantly with one fixed completion (so latency is all proxy); it hands a
    stream the whole completion at once."""

    capabilities = EngineCapabilities()

    def __init__(self, completion_ids: list[int], max_model_len: int = 1_000_000) -> None:
        self.completion_ids = completion_ids
        self.max_model_len = max_model_len
        self.policy_version = 0

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: TokenSink | None = None,
    ) -> Generation:
        ids = self.completion_ids[: sampling.max_tokens]
        if on_tokens is not None and ids:
            on_tokens(list(ids))
        return Generation(
            token_ids=ids, logprobs=[-1.0] * len(ids), finish_reason="stop", prompt_tokens=len(prompt_ids)
        )

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        return [[-1.0] * (len(s) - p) for s, p in zip(sequences, prompt_lens, strict=True)]

    async def close(self) -> None:
        return None


def _tool_output(rng: random.Random, words: int) -> str:
    return "\n".join(" ".join(rng.choice(_WORDS) for _ in range(10)) for _ in range(words // 10))


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


class _Driver:
    """Drives one agent-like session over HTTP, one turn per call to :meth:`turn`."""

    def __init__(self, client: httpx.Client | httpx.AsyncClient, url: str, seed: int, words: int) -> None:
        self.client, self.url, self.rng, self.words = client, url, random.Random(seed), words
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the failing test."},
        ]

    def body(self) -> dict[str, Any]:
        return {"model": "bench", "messages": self.messages, "tools": TOOLS, "max_tokens": 64}

    def absorb(self, data: dict[str, Any]) -> None:
        msg = data["choices"][0]["message"]
        self.messages.append({k: v for k, v in msg.items() if k in ("role", "content", "tool_calls")})
        call_id = msg["tool_calls"][0]["id"] if msg.get("tool_calls") else "none"
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": _tool_output(self.rng, self.words)})


def _latency(server: Any, sessions: int, turns: int, words: int, marks: list[int], window: int) -> dict[str, Any]:
    """Per-turn figures. ``server_cpu_*`` is the proxy process's CPU time per request (``x-lego-cpu-ms``): unlike
    wall time it does not grow when other work on a shared machine preempts the proxy."""
    buckets: dict[int, dict[str, list[float]]] = {m: {"rt": [], "server": [], "tokens": [], "cpu": []} for m in marks}
    with httpx.Client(timeout=60) as client:
        warm = _Driver(client, server.session_base_url("warmup") + "/chat/completions", -1, words)
        for _ in range(8):
            warm.absorb(client.post(warm.url, json=warm.body()).json())
        for s in range(sessions):
            d = _Driver(client, server.session_base_url(f"lat-{s}") + "/chat/completions", s, words)
            for t in range(1, turns + window + 1):
                payload = orjson.dumps(d.body())  # serializing the request is the client's cost, not the proxy's
                t0 = time.perf_counter()
                r = client.post(d.url, content=payload, headers=_JSON)
                rt = time.perf_counter() - t0
                r.raise_for_status()
                data = r.json()
                for m in marks:
                    if abs(t - m) <= window:
                        buckets[m]["rt"].append((rt * 1000) - float(r.headers["x-lego-engine-ms"]))
                        buckets[m]["server"].append(float(r.headers["x-lego-proxy-ms"]))
                        buckets[m]["tokens"].append(data["usage"]["prompt_tokens"])
                        buckets[m]["cpu"].append(float(r.headers["x-lego-cpu-ms"]))
                d.absorb(data)
    return {
        f"turn_{m}": {
            "samples": len(b["rt"]),
            "min_ms": round(min(b["rt"]), 3),
            "p50_ms": round(_pct(b["rt"], 0.5), 3),
            "p99_ms": round(_pct(b["rt"], 0.99), 3),
            "server_min_ms": round(min(b["server"]), 3),
            "server_p50_ms": round(_pct(b["server"], 0.5), 3),
            "server_p99_ms": round(_pct(b["server"], 0.99), 3),
            "server_cpu_p50_ms": round(_pct(b["cpu"], 0.5), 3),
            "server_cpu_mean_ms": round(statistics.fmean(b["cpu"]), 3),
            "history_tokens": int(statistics.median(b["tokens"])),
        }
        for m, b in buckets.items()
    }


async def _load(server: Any, concurrency: int, duration: float, words: int, turns_per_session: int) -> dict[str, Any]:
    done = errors = 0
    first_error = ""
    stop_at = time.monotonic() + duration
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def worker(i: int, client: httpx.AsyncClient) -> None:
        nonlocal done, errors, first_error
        n = 0
        while time.monotonic() < stop_at:
            d = _Driver(client, server.session_base_url(f"load-{i}-{n}") + "/chat/completions", i * 1000 + n, words)
            n += 1
            for _ in range(turns_per_session):
                if time.monotonic() >= stop_at:
                    break
                try:
                    r = await client.post(d.url, json=d.body())
                    r.raise_for_status()
                    d.absorb(r.json())
                    done += 1
                except (httpx.HTTPError, KeyError, ValueError) as exc:
                    errors += 1
                    first_error = first_error or f"{type(exc).__name__}: {exc}"
                    break

    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await asyncio.gather(*(worker(i, client) for i in range(concurrency)))
    wall = time.perf_counter() - t0
    return {
        "sessions": concurrency,
        "duration_s": round(wall, 2),
        "requests": done,
        "errors": errors,
        "first_error": first_error,
        "req_per_s": round(done / wall, 1),
    }


def _healthz(server: Any, n: int) -> float:
    xs = []
    with httpx.Client() as client:
        for _ in range(n):
            t0 = time.perf_counter()
            client.get(server.root_url + "/healthz").raise_for_status()
            xs.append((time.perf_counter() - t0) * 1000)
    return round(_pct(xs, 0.5), 3)


def _end_to_end(model: str, turns: int) -> dict[str, Any]:
    from lego.engines.transformers_engine import TransformersEngine
    from lego.models.chat import ChatFormat
    from lego.proxies.server import ProxyServer

    chat = ChatFormat.from_pretrained(model)
    engine = TransformersEngine(model, device="auto")
    totals, engine_ms, proxy_ms = [], [], []
    with ProxyServer(engine, chat, ProxyConfig(port=0)) as srv, httpx.Client(timeout=300) as client:
        d = _Driver(client, srv.session_base_url("e2e") + "/chat/completions", 0, 100)
        for _ in range(turns):
            body = {**d.body(), "max_tokens": 32}
            t0 = time.perf_counter()
            r = client.post(d.url, json=body)
            totals.append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()
            engine_ms.append(float(r.headers["x-lego-engine-ms"]))
            proxy_ms.append(totals[-1] - engine_ms[-1])
            data = r.json()
            msg = data["choices"][0]["message"]
            d.messages.append(
                {
                    "role": "assistant",
                    "content": msg.get("content") or "",
                    **({"tool_calls": msg["tool_calls"]} if msg.get("tool_calls") else {}),
                }
            )
            d.messages.append(
                {"role": "user", "content": "continue"}
                if not msg.get("tool_calls")
                else {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "ok"}
            )
        segments = len(srv.trajectory("e2e").segments)
    return {
        "turns": turns,
        "total_p50_ms": round(_pct(totals, 0.5), 2),
        "engine_p50_ms": round(_pct(engine_ms, 0.5), 2),
        "proxy_p50_ms": round(_pct(proxy_ms, 0.5), 2),
        "proxy_share": round(sum(proxy_ms) / sum(totals), 4),
        "segments": segments,
    }


class _Remote:
    """Addresses of a proxy running in another process."""

    def __init__(self, root_url: str) -> None:
        self.root_url = root_url

    def session_base_url(self, session_id: str) -> str:
        return f"{self.root_url}/s/{session_id}/v1"


def _serve_instant(model_path: str, urls: Any, stop: Any) -> None:
    """Child process: a proxy over InstantEngine, so the load generator never shares its GIL."""
    from lego.models.chat import ChatFormat
    from lego.proxies.server import ProxyServer

    chat = ChatFormat.from_pretrained(model_path)
    completion = chat.encode(
        'Looking.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "pytest -x"}}\n</tool_call><|im_end|>'
    )
    with ProxyServer(InstantEngine(completion), chat, ProxyConfig(port=0)) as srv:  # type: ignore[arg-type]
        urls.put(srv.root_url)
        stop.wait()


def measure(
    model: str = "default",
    sessions: int = 8,
    turns: int = 128,
    words: int = 400,
    concurrency: int = 64,
    duration: float = 60.0,
    e2e_turns: int = 8,
) -> dict[str, Any]:
    """Run the benchmark and return the JSON-ready result."""
    import multiprocessing

    from lego.models.tiny import resolve_model

    path = resolve_model(model)
    marks = [1, 32, turns]
    ctx = multiprocessing.get_context("spawn")
    urls, stop = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_serve_instant, args=(str(path), urls, stop), daemon=True)
    child.start()
    try:
        srv = _Remote(urls.get(timeout=300))
        healthz = _healthz(srv, 300)
        latency = _latency(srv, sessions, turns, words, marks, window=4 if turns > 8 else 0)
        load = asyncio.run(_load(srv, concurrency, duration, words, turns_per_session=32))
    finally:
        stop.set()
        child.join(30)
    t1, tn = latency["turn_1"]["p50_ms"], latency[f"turn_{turns}"]["p50_ms"]
    server_ratio = latency[f"turn_{turns}"]["server_p50_ms"] / latency["turn_1"]["server_p50_ms"]
    cpu_1 = latency["turn_1"]["server_cpu_mean_ms"]
    cpu_ratio = latency[f"turn_{turns}"]["server_cpu_mean_ms"] / cpu_1 if cpu_1 else float("nan")
    return {
        "bench": "proxy",
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "baseline_healthz_p50_ms": healthz,
        "latency": latency,
        "ratio_turn_last_vs_turn_1_p50": round(tn / t1, 3),
        "ratio_turn_last_vs_turn_1_server_p50": round(server_ratio, 3),
        "ratio_turn_last_vs_turn_1_min": round(latency[f"turn_{turns}"]["min_ms"] / latency["turn_1"]["min_ms"], 3),
        "ratio_turn_last_vs_turn_1_server_cpu_mean": round(cpu_ratio, 3),
        "ratio_turn_1_vs_healthz_p50": round(t1 / healthz, 3),
        "load": load,
        "end_to_end_tiny": _end_to_end(str(path), e2e_turns),
        "targets": {
            "turn_ratio_le_2_wall_p50": tn / t1 <= 2.0,
            "turn_ratio_le_2_server_cpu": cpu_ratio <= 2.0,
            "load_zero_errors": load["errors"] == 0,
        },
    }


@click.command("proxy")
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="Write the JSON result here.")
@click.option("--model", default="default", show_default=True)
@click.option(
    "--sessions",
    type=click.IntRange(1),
    default=8,
    show_default=True,
    help="Sessions driven to --turns for the latency figures.",
)
@click.option("--turns", type=click.IntRange(2), default=128, show_default=True)
@click.option("--concurrency", type=click.IntRange(1), default=64, show_default=True)
@click.option(
    "--duration", type=click.FloatRange(1), default=60.0, show_default=True, help="Seconds of the concurrent load test."
)
def command(out: str, model: str, sessions: int, turns: int, concurrency: int, duration: float) -> None:
    """Proxy-added latency at turns 1/32/last, the turn ratio, concurrent load and an end-to-end figure."""
    from lego.io import atomic_write_json

    result = measure(model, sessions=sessions, turns=turns, concurrency=concurrency, duration=duration)
    atomic_write_json(Path(out), result, indent=2)
    click.echo(json.dumps(result, indent=2))
