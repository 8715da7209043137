"""What the proxy decides around a generation: its sampling parameters and where its reply ends.

Both cuts here keep a *prefix* of what was sampled, so the recorded ids and logprobs stay exactly
the engine's.
"""

from __future__ import annotations

import hashlib

from pydantic import ValidationError

from lego.config import ProxyConfig
from lego.errors import ContextOverflowError
from lego.proxies.canonical import ChatFormatLike, ChatRequest
from lego.proxies.errors import ApiError
from lego.proxies.sessions import Session
from lego.types import Generation, SamplingParams

__all__ = ["apply_stop", "generation_seed", "sampling_params", "token_logprobs"]


def sampling_params(
    s: Session, req: ChatRequest, prompt_len: int, window: int, config: ProxyConfig, eos: list[int]
) -> tuple[SamplingParams, dict[str, str]]:
    """The call's sampling parameters and the headers that report an override.

    ``max_tokens`` is fitted into the context ``window`` (no room at all: :class:`ContextOverflowError`)
    and under ``config.max_tokens_cap``. A training session samples at the run's temperature with
    top_p/top_k off, whatever the request asked: the trainer's importance ratios assume it. The seed is
    :func:`generation_seed`'s."""
    room = window - prompt_len
    if room < 1:
        raise ContextOverflowError(prompt_len, req.max_tokens or 1, window)
    max_tokens = min(req.max_tokens or config.default_max_tokens, room)
    if config.max_tokens_cap is not None:
        max_tokens = min(max_tokens, config.max_tokens_cap)
    headers: dict[str, str] = {}
    seed = generation_seed(s.spec.seed, s.generations_started, req.seed)
    override = s.spec.sampling_override
    if override is not None:
        temperature = float(override.temperature)
        headers["x-lego-sampling-override"] = f"temperature={temperature};top_p=1.0;top_k=0"
        params = SamplingParams(
            temperature=temperature, top_p=1.0, top_k=0, max_tokens=max_tokens, stop_token_ids=eos, seed=seed
        )
        return params, headers
    temperature = 1.0 if req.temperature is None else float(req.temperature)
    top_p = 1.0 if req.top_p is None else float(req.top_p)
    top_k = req.top_k or 0
    try:
        params = SamplingParams(
            temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens, stop_token_ids=eos, seed=seed
        )
    except ValidationError as exc:  # every face checks its API's ranges first; this is the last line
        first = exc.errors()[0]
        name = ".".join(str(x) for x in first["loc"])
        raise ApiError(400, f"{name}: {first['msg']} (got {first.get('input')!r})", param=name) from exc
    return params, headers


def generation_seed(session_seed: int | None, index: int, request_seed: int | None) -> int | None:
    """The seed of a session's ``index``-th generation: a function of the session's seed, the index and
    the harness's own request seed (when it sends one), so a rollout samples the same tokens whatever
    else the engine serves meanwhile. Without a session seed the request's own (or None: the engine's)."""
    if session_seed is None:
        return request_seed
    digest = hashlib.blake2b(f"{session_seed}:{index}:{request_seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def apply_stop(chat: ChatFormatLike, gen: Generation, stops: list[str]) -> tuple[Generation, str | None]:
    """Cut at the first stop string: ``(the shortest token prefix whose text holds it, the stop)``.

    The ids run through the token that completes the stop (the policy sampled them, as vLLM returns
    them); the reply's text is cut where the stop begins, by the character (``ChatFormat.parse``'s
    ``stop``), so nothing before it is lost and nothing of it is kept. A constrained generation (a
    forced tool call) is structure the API promised: stop strings do not cut it."""
    if not stops or not gen.token_ids or gen.constrained:
        return gen, None
    text = chat.decode(gen.token_ids)
    hits = [(text.find(st), -len(st), st) for st in stops if st and st in text]
    if not hits:
        return gen, None
    at, _, first = min(hits)
    end = at + len(first)
    n = _covering(chat, gen.token_ids, end)
    return gen.cut(n, "stop"), first


def _offsets(chat: ChatFormatLike, ids: list[int]) -> list[int]:
    """``offsets[k]``: the length of the text of ``ids[:k]`` (k = 0 .. len(ids))."""
    pieces = [chat.decode([t]) for t in ids]
    whole = chat.decode(ids)
    if "".join(pieces) == whole:
        out = [0]
        for piece in pieces:
            out.append(out[-1] + len(piece))
        return out
    # tokens that split a character (byte pieces): measure each prefix instead
    return [len(chat.decode(ids[:k])) for k in range(len(ids) + 1)]


def _covering(chat: ChatFormatLike, ids: list[int], chars: int) -> int:
    """The fewest leading tokens whose text is at least ``chars`` characters long."""
    offsets = _offsets(chat, ids)
    return next((k for k, off in enumerate(offsets) if off >= chars), len(ids))


def token_logprobs(chat: ChatFormatLike, gen: Generation, content: str) -> list[tuple[str, float]]:
    """(token text, logprob) of the tokens that make up ``content`` (the reply's text), each cut to
    its part of it, so the token texts join to exactly ``content``: whitespace the reply trims, a
    reasoning block, tool calls and a stop string are left out. Where ``content`` is not one run of
    the generated text (text around a tool call) the tokens are matched to it character by character."""
    ids, lps = gen.token_ids, gen.logprobs
    if ids and ids[-1] in chat.eos_token_ids:
        ids, lps = ids[:-1], lps[:-1]
    if not content:
        return []
    text = chat.decode(ids)
    offsets = _offsets(chat, ids)
    start = text.rfind(content)
    if start >= 0:
        keep = [start <= i < start + len(content) for i in range(len(text))]
    else:  # in order, character by character (the parts between tool calls)
        keep, j = [False] * len(text), 0
        for i, ch in enumerate(text):
            if j < len(content) and ch == content[j]:
                keep[i], j = True, j + 1
    out = []
    for k, lp in enumerate(lps):
        piece = "".join(ch for i, ch in enumerate(text[offsets[k] : offsets[k + 1]], offsets[k]) if keep[i])
        if piece:
            out.append((piece, float(lp)))
    return out
