"""The API-independent core of the proxy: sessions, the generation flow, timing.

Every API route converts its request into a :class:`ChatRequest` (canonical OpenAI-style messages),
calls :meth:`ProxyService.complete`, and converts the :class:`ChatResult` back. ``complete``:

1. takes the session the route resolved (by its token on the model face, by its id on the control
   face; see :mod:`lego.proxies.app`) and the thread's lock -- calls on one thread are serialized,
   threads and sessions run concurrently;
2. asks the session's :class:`~lego.proxies.recorder.SessionRecorder` for the engine prompt;
3. fits ``max_tokens`` into the context window (no room: a non-retryable 400 and, on the main
   thread, the trajectory is labelled ``overlong``), applies the training-mode sampling override;
4. awaits ``engine.generate`` (streaming text deltas to the route as tokens arrive, if it asks; cancelled with the request if the client goes away; nothing is
   recorded then), cuts the generation at the first stop string, parses it into an assistant
   message and commits it to the recorder -- unless the session was sealed or closed meanwhile.

Sessions and secrets. :meth:`ProxyService.open_session` mints a per-session token: on the model
face (what sandboxes reach) the request's API key *is* the session, so an agent holding its own
token can reach its own session's model routes and nothing else. Tokens are kept only as SHA-256
digests (a lookup compares digests, so its timing says nothing about the secret); sealing or
closing the session revokes its token. The task's answer (the gold patch) is kept apart from the
metadata, handed to the engine only as ``RequestContext.answer``, accepted only by an engine that
declares ``takes_answer = True`` (the oracle), and never exported in a trajectory.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from lego.config import ProxyConfig
from lego.engines.base import Engine
from lego.errors import ChatFormatError, ContextOverflowError, EngineError, EngineUnavailableError
from lego.models.tool_parsers import THINK_OPEN, ParsedCompletion
from lego.proxies.errors import Api, ApiError
from lego.proxies.recorder import ChatTemplate, SessionRecorder
from lego.proxies.streaming import DeltaSink, TextDeltas
from lego.types import Generation, MainThreadSpec, RequestContext, SamplingParams, TerminationLabel, Trajectory

__all__ = ["ChatFormatLike", "ChatRequest", "ChatResult", "ProxyService", "Session"]

Message = dict[str, Any]
_CALL_OPEN, _CALL_CLOSE = "<tool_call>", "</tool_call>"
_FORCEABLE = ("hermes", "qwen3_coder")  # tool-call formats whose call opening the proxy can force


class ChatFormatLike(ChatTemplate, Protocol):
    """The chat format the proxy needs: the recorder's template plus completion parsing."""

    def parse(
        self, token_ids: list[int], tools: list[dict[str, Any]] | None = None, id_salt: str = ""
    ) -> ParsedCompletion: ...

    def to_message(self, parsed: ParsedCompletion) -> Message: ...

    tool_call_format: str  # a lego.models.tool_parsers.PARSERS name: how a forced tool call is opened


@dataclass
class ChatRequest:
    """One call in canonical form (OpenAI chat messages and tools), whatever API it came through."""

    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    model: str = ""
    logprobs: bool = False
    """Return each sampled token's logprob (:attr:`ChatResult.token_logprobs`)."""
    parallel_tool_calls: bool = True
    """False: the turn ends after its first complete tool call (the generation is cut there)."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Passed to the chat template for this call, over ``proxy.chat_template_kwargs`` (e.g. enable_thinking)."""
    prefill: str = ""
    """An assistant prefill (Anthropic: the request ends with an assistant turn): the policy
    continues this text; it enters the prompt as template tokens (mask 0) and the reply holds
    only the continuation."""


@dataclass
class ChatResult:
    """What the policy answered: the canonical assistant message plus usage and finish reason."""

    message: Message
    reasoning: str
    finish_reason: str  # stop | length | tool_calls
    prompt_tokens: int
    completion_tokens: int
    headers: dict[str, str]
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))
    stop_sequence: str | None = None
    token_logprobs: list[tuple[str, float]] | None = None
    """(token text, logprob) of each sampled token, final end-of-turn excluded (when asked for)."""
    prefill: str = ""
    """The request's assistant prefill: ``message`` holds prefill + continuation (what the
    recorder keeps); :meth:`reply_content` is what the API returns."""

    def reply_content(self) -> str:
        """The assistant content without the request's prefill (APIs return only what was generated)."""
        content = str(self.message.get("content") or "")
        lead = self.prefill.strip()
        return content[len(lead) :] if lead and content.startswith(lead) else content


@dataclass
class Session:
    """One rollout's state: its recorder, locks, and what the rollout code told us about it.

    ``token``: the model-face secret (see the module docstring). ``answer``: the gold patch, for an
    engine that takes it (the oracle); never exported. ``sealed``: the episode is over, the token
    is revoked and nothing more is recorded (the trajectory is still readable on the control face).
    """

    id: str
    recorder: SessionRecorder
    token: str = field(default="", repr=False)
    answer: str | None = field(default=None, repr=False)
    sealed: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    training: bool = False
    temperature: float | None = None
    max_turns: int | None = None
    max_generations: int | None = None
    generations_started: int = 0
    termination: TerminationLabel = "completed"
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    calls: int = 0
    engine_time_s: float = 0.0
    proxy_time_s: float = 0.0
    engine_unavailable: int = 0
    """Calls the engine could not serve at all (unreachable, timed out): no request can cause that."""
    engine_errors: int = 0
    """Calls the engine failed on (a 502): possibly caused by what the request held, so the rollout code
    attributes a failed rollout to the infrastructure only for ``engine_unavailable``."""
    tool_choice_failures: int = 0
    """Generations under a forcing ``tool_choice`` that did not yield a call of a declared tool (not
    recorded; the client got an error instead of a wrong tool or plain text)."""
    created_at: float = field(default_factory=time.time)

    def lock(self, key: str) -> asyncio.Lock:
        if key not in self.locks:
            self.locks[key] = asyncio.Lock()
        return self.locks[key]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def takes_answer(engine: Engine) -> bool:
    """Whether ``engine`` declares that it plays the task's answer (``takes_answer = True``: the oracle)."""
    return engine.takes_answer is True


class ProxyService:
    """Sessions and the generation flow, shared by all routes (see the module docstring)."""

    def __init__(self, engine: Engine, chat_format: ChatFormatLike, config: ProxyConfig | None = None) -> None:
        self.engine = engine
        self.chat = chat_format
        self.config = config or ProxyConfig()
        self.sessions: dict[str, Session] = {}
        self._by_token: dict[bytes, Session] = {}  # sha256(token) -> session; the model face's only way in
        self.ping_interval_s = 10.0
        """Seconds of silence on a stream before a keep-alive (well under harnesses' idle timeouts)."""

    # ------------------------------------------------------------------ sessions
    def open_session(
        self,
        session_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        answer: str | None = None,
        training: bool = False,
        temperature: float | None = None,
        max_turns: int | None = None,
        max_generations: int | None = None,
        main_thread: MainThreadSpec | None = None,
    ) -> Session:
        """A fresh session under ``session_id`` (replacing, and revoking, any session of that id).

        ``answer``: the task's gold patch, only for an engine that takes it (the oracle); any other
        engine would hold a secret it has no use for, so that is refused rather than ignored.
        ``max_turns``: turns of the main thread; ``max_generations``: generations of the session on
        every thread together (side calls, subagents, whatever the agent sends itself), the bound on
        the engine time one rollout can take (None: unbounded). ``main_thread``: the harness's main
        request as its adapter declares it (None: the recorder's default rule; see
        :mod:`lego.proxies.recorder`)."""
        if training and temperature is None:
            raise ValueError("a training session needs the run's temperature (temperature=...)")
        if answer is not None and not takes_answer(self.engine):
            raise ValueError(
                f"the {type(self.engine).__name__} engine does not take the task's answer; pass answer= only "
                "when the engine is the oracle (ProxyServer.takes_answer says whether it is)"
            )
        if metadata and "gold_patch" in metadata:
            raise ValueError(
                "session metadata is exported with the trajectory and must not hold the gold patch; "
                "pass it as open_session(..., answer=task.patch), for the oracle engine only"
            )
        self.close_session(session_id)
        token = "lego-" + secrets.token_urlsafe(32)
        s = Session(
            id=session_id,
            recorder=SessionRecorder(self.chat, main_thread, self.config.reasoning_history),
            token=token,
            answer=answer,
            metadata=dict(metadata or {}),
            training=training,
            temperature=temperature,
            max_turns=max_turns,
            max_generations=max_generations,
        )
        self.sessions[session_id] = s
        self._by_token[_digest(token)] = s
        return s

    def session_for_token(self, token: str) -> Session | None:
        """The open, unsealed session whose model-face token is ``token`` (None: no such session)."""
        if not token:
            return None
        return self._by_token.get(_digest(token))

    def seal_session(self, session_id: str) -> bool:
        """End the episode: revoke the token, record nothing more; the trajectory stays readable."""
        s = self.sessions.get(session_id)
        if s is None:
            return False
        s.sealed = True
        self._by_token.pop(_digest(s.token), None)
        return True

    def session(self, session_id: str, *, create: bool = True) -> Session:
        """The control face's lookup by id: unknown ids are created unless strict (or ``create=False``)."""
        s = self.sessions.get(session_id)
        if s is None:
            if self.config.strict_sessions or not create:
                why = (
                    "open it first (strict mode)"
                    if self.config.strict_sessions
                    else "it was never opened or was closed"
                )
                raise ApiError(404, f"unknown session {session_id!r}; {why}", "not_found")
            s = self.open_session(session_id)
        return s

    def close_session(self, session_id: str) -> bool:
        """Forget the session and revoke its token; in-flight calls of it record nothing."""
        s = self.sessions.pop(session_id, None)
        if s is None:
            return False
        s.sealed = True
        self._by_token.pop(_digest(s.token), None)
        return True

    def trajectory(self, session_id: str) -> Trajectory:
        s = self.session(session_id, create=False)
        rec = s.recorder
        messages, tools = rec.snapshot()
        counters = rec.summary_counters()
        counters["engine_time_s"] = s.engine_time_s
        counters["proxy_time_s"] = s.proxy_time_s
        counters["engine_unavailable"] = float(s.engine_unavailable)
        counters["engine_errors"] = float(s.engine_errors)
        counters["tool_choice_failures"] = float(s.tool_choice_failures)
        return Trajectory(
            trajectory_id=f"{session_id}-{uuid.uuid4().hex[:8]}",
            session_id=session_id,
            task_id=str(s.metadata.get("task_id", "")),
            harness=str(s.metadata.get("harness", "")),
            segments=rec.segments(),
            messages=messages,
            tools=tools,
            discarded=list(rec.discarded),
            side_threads=rec.side_threads(),
            termination=s.termination,
            counters=counters,
            metadata={k: v for k, v in s.metadata.items() if _jsonable(v)},
        )

    # ------------------------------------------------------------------ generation
    def count_tokens(self, req: ChatRequest) -> int:
        try:
            text = self.chat.render_text(req.messages, req.tools or None, add_generation_prompt=True)
        except (ValueError, ChatFormatError) as exc:
            raise ApiError(400, f"cannot render the conversation with the model's chat template: {exc}") from exc
        return len(self.chat.encode(text)) + (len(self.chat.encode(req.prefill)) if req.prefill else 0)

    async def complete(self, s: Session, req: ChatRequest, api: Api, on_delta: DeltaSink | None = None) -> ChatResult:
        """Serve ``req`` on session ``s`` (see the module docstring). ``on_delta``: stream the reply's
        text as it is sampled (:class:`~lego.proxies.streaming.TextDeltas`); the result still holds all of it."""
        t0 = time.perf_counter()
        session_id = s.id
        self._check_open(s)
        rec = s.recorder
        key = rec.resolve_thread(req.messages, req.tools)
        async with s.lock(key):
            main = rec.is_main(key, req.messages, req.tools)
            if main and s.max_turns is not None:
                if rec.generations(key) >= s.max_turns:
                    s.termination = "max_turns"
                    raise ApiError(400, f"this session reached its limit of {s.max_turns} turns", code="max_turns")
            try:
                call = rec.prepare(
                    req.messages, req.tools, {**self.config.chat_template_kwargs, **req.chat_template_kwargs}
                )
            except (ValueError, ChatFormatError) as exc:
                raise ApiError(400, f"cannot render the conversation with the model's chat template: {exc}") from exc
            forced, wanted = self._forced_prefix(req)
            forced_ids = self.chat.encode(forced) if forced else []
            # The forced text is the template's, not the policy's: it joins the prompt, so the
            # recorder keeps it as context (mask 0) and only the continuation is sampled (mask 1).
            call.prompt_ids.extend(forced_ids)
            sampling, headers = self._sampling(s, req, len(call.prompt_ids), main)
            # model_construct: the messages were validated on the way in; re-validating is O(history).
            ctx = RequestContext.model_construct(
                session_id=session_id,
                api=api,
                messages=call.messages,
                tools=req.tools,
                session_metadata=s.metadata,
                answer=s.answer,
            )
            self._spend_generation(s)
            t_engine = time.perf_counter()
            try:
                if on_delta is not None and _streams(self.engine):
                    deltas = TextDeltas(
                        self.chat,
                        req.tools,
                        req.stop,
                        thinking_open=self.chat.decode(call.prompt_ids[-4:]).rstrip().endswith(THINK_OPEN),
                        enabled=not forced_ids,
                    )

                    def on_tokens(ids: list[int]) -> None:
                        for kind, text in deltas.feed(ids):
                            on_delta(kind, text)

                    gen = await self.engine.generate(call.prompt_ids, sampling, ctx, on_tokens=on_tokens)
                else:
                    gen = await self.engine.generate(call.prompt_ids, sampling, ctx)
            except ContextOverflowError as exc:
                raise self._overflow(s, main, str(exc)) from exc
            except EngineUnavailableError as exc:
                s.engine_unavailable += 1
                raise ApiError(503, f"the policy engine is unavailable: {exc}", "unavailable", retry_after=2) from exc
            except EngineError as exc:
                s.engine_errors += 1
                raise ApiError(502, f"the policy engine failed: {exc}", "engine", retry_after=1) from exc
            except Exception as exc:  # an engine bug or device error: still the engine's failure, not the request's
                s.engine_errors += 1
                raise ApiError(
                    502, f"the policy engine failed: {type(exc).__name__}: {exc}", "engine", retry_after=1
                ) from exc
            engine_s = time.perf_counter() - t_engine
            self._check_open(s)  # sealed while the engine ran: the episode is over, record nothing
            gen, stop_hit = self._apply_stop(gen, req.stop)
            if wanted is not None or not req.parallel_tool_calls:
                gen = self._end_after_first_call(gen)
            s.calls += 1
            parsed = self.chat.parse(forced_ids + gen.token_ids, req.tools or None, id_salt=f"{session_id}:{s.calls}")
            message = self.chat.to_message(parsed)
            if req.tool_choice == "none" and message.get("tool_calls"):
                message = {"role": "assistant", "content": parsed.text or message.get("content") or ""}
            if forced_ids and req.tool_choice not in (None, "auto", "none"):
                self._check_tool_choice(s, req, message, gen, wanted)
            parse_errors = len(parsed.parse_errors)
            rec.commit(call, gen, message, parse_failures=parse_errors)
        finish = "tool_calls" if message.get("tool_calls") else ("length" if gen.finish_reason == "length" else "stop")
        total = time.perf_counter() - t0
        s.engine_time_s += engine_s
        s.proxy_time_s += total - engine_s
        headers["x-lego-engine-ms"] = f"{engine_s * 1000:.3f}"
        headers["x-lego-proxy-ms"] = f"{(total - engine_s) * 1000:.3f}"
        return ChatResult(
            message=message,
            reasoning=str(parsed.reasoning or message.get("reasoning_content") or ""),
            finish_reason=finish,
            prompt_tokens=len(call.prompt_ids),
            completion_tokens=len(gen.token_ids),
            headers=headers,
            stop_sequence=stop_hit,
            token_logprobs=self._token_logprobs(gen) if req.logprobs else None,
            prefill=req.prefill,
        )

    def _forced_prefix(self, req: ChatRequest) -> tuple[str, str | None]:
        """``(text the reply is forced to start with, the tool it must call)``.

        ``tool_choice`` is enforced by forcing the start of the model's own tool-call syntax: a
        named function (or "required" with one tool) forces the call's opening up to the
        arguments; "required" with several tools forces the call opener and the policy picks the
        tool. What the policy then writes is checked (:meth:`_check_tool_choice`). The wanted
        tool is ``""`` for "any declared tool", None when nothing is forced. An assistant prefill
        is forced the same way. Anything else that would force a call is refused with a 400."""
        tc = req.tool_choice
        fmt = self.chat.tool_call_format
        if not req.parallel_tool_calls and req.tools and fmt not in _FORCEABLE:
            raise ApiError(
                400,
                f"parallel_tool_calls=false cannot be enforced for the {fmt!r} tool-call format (only {_FORCEABLE})",
                param="parallel_tool_calls",
            )
        if tc in (None, "auto", "none"):
            return req.prefill, None
        if fmt not in _FORCEABLE:
            raise ApiError(
                400,
                f"tool_choice {tc!r} cannot be enforced for the {fmt!r} tool-call format (only {_FORCEABLE}); use 'auto'",
                param="tool_choice",
            )
        names = [str(t["function"]["name"]) for t in req.tools]
        if not names:
            raise ApiError(400, f"tool_choice {tc!r} needs at least one tool in 'tools'", param="tool_choice")
        if req.prefill:
            raise ApiError(
                400,
                "tool_choice that forces a tool call cannot be combined with an assistant prefill",
                param="tool_choice",
            )
        if tc == "required":
            wanted = names[0] if len(names) == 1 else ""
        elif isinstance(tc, dict) and tc.get("type") == "function":
            fn = tc.get("function")
            wanted = str((fn if isinstance(fn, dict) else tc).get("name") or "")
            if wanted not in names:
                raise ApiError(
                    400,
                    f"tool_choice names function {wanted!r}, which is not among the tools {names}",
                    param="tool_choice",
                )
        else:
            raise ApiError(
                400,
                f"unsupported tool_choice {tc!r}; use 'auto', 'none', 'required' or a named function",
                param="tool_choice",
            )
        coder = fmt == "qwen3_coder"
        if not wanted:
            return (_CALL_OPEN + "\n<function=") if coder else (_CALL_OPEN + '\n{"name": "'), ""
        if coder:
            return f"{_CALL_OPEN}\n<function={wanted}>\n", wanted
        return _CALL_OPEN + '\n{"name": ' + json.dumps(wanted, ensure_ascii=False) + ', "arguments": ', wanted

    def _check_tool_choice(
        self, s: Session, req: ChatRequest, message: Message, gen: Generation, wanted: str | None
    ) -> None:
        """Refuse (nothing recorded) a reply under a forcing tool_choice that holds no call of a
        declared tool, or calls another than the named one: never a 200 with the wrong tool."""
        names = {str(t["function"]["name"]) for t in req.tools}
        called = [str(c["function"]["name"]) for c in message.get("tool_calls") or []]
        if called and all(n in names and (not wanted or n == wanted) for n in called):
            return
        s.tool_choice_failures += 1
        if gen.finish_reason == "length":
            raise ApiError(
                400,
                f"the tool call that tool_choice forces was cut at max_tokens ({len(gen.token_ids)} tokens); "
                "raise max_tokens",
                param="max_tokens",
            )
        what = f"calls {called}" if called else "no parseable tool call"
        raise ApiError(
            502,
            f"tool_choice {req.tool_choice!r} was forced, but the policy wrote {what}; "
            f"the tools are {sorted(names)} (a new sample may succeed)",
            "engine",
            code="tool_choice_unsatisfied",
            retry_after=1,
        )

    def _end_after_first_call(self, gen: Generation) -> Generation:
        """Keep the sampled ids up to and including the token that closes the first tool call
        (a prefix of what was sampled, so ids and logprobs stay exact): one call per turn."""
        cut, hit = self._apply_stop(gen, [_CALL_CLOSE])  # cut just before the closing token
        if hit is None:
            return gen
        n = len(cut.token_ids) + 1
        return gen.model_copy(
            update={"token_ids": gen.token_ids[:n], "logprobs": gen.logprobs[:n], "finish_reason": "stop"}
        )

    def _token_logprobs(self, gen: Generation) -> list[tuple[str, float]]:
        ids, lps = gen.token_ids, gen.logprobs
        if ids and ids[-1] in self.chat.eos_token_ids:
            ids, lps = ids[:-1], lps[:-1]
        return [(self.chat.decode([t]), float(lp)) for t, lp in zip(ids, lps, strict=True)]

    @staticmethod
    def _spend_generation(s: Session) -> None:
        """Count a generation against the session's budget on every thread, or refuse it.

        Check and count run with no await between them (one event loop), so concurrent requests
        cannot overshoot; a generation counts once it starts, served or not: it is the engine
        time an agent can make the rollout spend (side calls and floods included)."""
        if s.max_generations is not None and s.generations_started >= s.max_generations:
            s.termination = "max_turns"
            raise ApiError(
                400,
                f"this session reached its limit of {s.max_generations} generations (all threads together)",
                code="max_turns",
            )
        s.generations_started += 1

    @staticmethod
    def _check_open(s: Session) -> None:
        if s.sealed:
            raise ApiError(
                401,
                f"session {s.id!r} has ended (sealed or closed by the rollout); its key no longer works",
                "authentication",
            )

    def _sampling(
        self, s: Session, req: ChatRequest, prompt_len: int, main: bool
    ) -> tuple[SamplingParams, dict[str, str]]:
        window = int(self.engine.max_model_len)
        room = window - prompt_len
        if room < 1:
            raise self._overflow(s, main, str(ContextOverflowError(prompt_len, req.max_tokens or 1, window)))
        max_tokens = min(req.max_tokens or self.config.default_max_tokens, room)
        if self.config.max_tokens_cap is not None:
            max_tokens = min(max_tokens, self.config.max_tokens_cap)
        headers: dict[str, str] = {}
        eos = list(self.chat.eos_token_ids)
        if s.training:
            temperature = float(s.temperature if s.temperature is not None else 1.0)
            headers["x-lego-sampling-override"] = f"temperature={temperature};top_p=1.0;top_k=0"
            params = SamplingParams(
                temperature=temperature, top_p=1.0, top_k=0, max_tokens=max_tokens, stop_token_ids=eos, seed=req.seed
            )
            return params, headers
        temperature = 1.0 if req.temperature is None else float(req.temperature)
        top_p = 1.0 if req.top_p is None else float(req.top_p)
        top_k = req.top_k or 0
        params = SamplingParams(
            temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens, stop_token_ids=eos, seed=req.seed
        )
        return params, headers

    def _overflow(self, s: Session, main: bool, message: str) -> ApiError:
        s.recorder.note_overflow()
        if main:
            s.termination = "overlong"
        return ApiError(400, message, "context_length", code="context_length_exceeded")

    def _apply_stop(self, gen: Generation, stops: list[str]) -> tuple[Generation, str | None]:
        """Cut at the first stop string: keep the longest token prefix whose text holds none.

        Only a prefix of what was sampled is kept, so the kept ids and logprobs stay exact.
        """
        if not stops or not gen.token_ids:
            return gen, None
        text = self.chat.decode(gen.token_ids)
        hits = [(text.find(st), st) for st in stops if st and st in text]
        if not hits:
            return gen, None
        _, first = min(hits)
        lo, hi = 0, len(gen.token_ids)  # the smallest n whose decoded prefix contains a stop string
        while lo < hi:
            mid = (lo + hi) // 2
            if any(st in self.chat.decode(gen.token_ids[: mid + 1]) for st in stops if st):
                hi = mid
            else:
                lo = mid + 1
        n = lo
        cut = gen.model_copy(
            update={"token_ids": gen.token_ids[:n], "logprobs": gen.logprobs[:n], "finish_reason": "stop"}
        )
        return cut, first


def _streams(engine: Engine) -> bool:
    """Whether ``engine.generate`` takes ``on_tokens`` (an engine without it answers all at once)."""
    try:
        return "on_tokens" in inspect.signature(engine.generate).parameters
    except (TypeError, ValueError):
        return False


def _jsonable(v: Any) -> bool:
    return isinstance(v, str | int | float | bool | type(None) | list | dict)
