"""The API-independent core of the proxy: sessions, the generation flow, timing.

Every API route converts its request into a :class:`ChatRequest` (canonical OpenAI-style messages),
calls :meth:`ProxyService.complete`, and converts the :class:`ChatResult` back. ``complete``:

1. takes the session the route resolved (by its token on the model face, by its id on the control
   face; see :mod:`lego.proxies.app`) and the thread's lock -- calls on one thread are serialized,
   threads and sessions run concurrently;
2. asks the session's :class:`~lego.proxies.recorder.SessionRecorder` for the engine prompt;
3. fits ``max_tokens`` into the context window (no room: a non-retryable 400 and, on the main
   thread, the trajectory is labelled ``overlong``), applies the training-mode sampling override;
4. awaits ``engine.generate`` (streaming text deltas to the route as the engine hands it tokens, if it asks; cancelled with the request if the client goes away; nothing is
   recorded then), cuts the generation at the first stop string, parses it into an assistant
   message and commits it to the recorder -- unless the session was sealed or closed meanwhile.

Sessions and secrets. :meth:`ProxyService.open_session` mints a per-session token: on the model
face (what sandboxes reach) the request's API key *is* the session, so an agent holding its own
token can reach its own session's model routes and nothing else. Tokens are kept only as SHA-256
digests (a lookup compares digests, so its timing says nothing about the secret); sealing or
closing the session revokes its token. The task's answer (the gold patch) is kept apart from the
metadata, handed to the engine only as ``RequestContext.answer``, accepted only by an engine that
has the ``answer_taker`` capability (the oracle), and never exported in a trajectory.

Around it: the canonical call (:mod:`lego.proxies.canonical`), the session record
(:mod:`lego.proxies.sessions`), sampling and stop cuts (:mod:`lego.proxies.sampling`) and the
``tool_choice`` forcing (:mod:`lego.proxies.tool_choice`).
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

from lego.config import ProxyConfig
from lego.errors import ChatFormatError, ContextOverflowError, EngineError, EngineUnavailableError
from lego.models.tool_parsers import THINK_OPEN
from lego.proxies.canonical import ChatFormatLike, ChatRequest, ChatResult
from lego.proxies.errors import Api, ApiError
from lego.proxies.recorder import SessionRecorder
from lego.proxies.sampling import apply_stop, sampling_params, token_logprobs
from lego.proxies.sessions import Session, token_digest
from lego.proxies.streaming import DeltaSink, TextDeltas
from lego.proxies.tool_choice import check_tool_choice, end_after_first_call, forced_prefix, forced_regex
from lego.proxies.turns import CompletedTurn, TurnSink
from lego.seams import Engine, TokenSink
from lego.types import RequestContext, SessionSpec, Trajectory

# ChatFormatLike, ChatRequest, ChatResult and Session are defined in lego.proxies.canonical and
# lego.proxies.sessions; they are re-exported here because the routes and the server know the
# proxy's core by this module.
__all__ = ["ChatFormatLike", "ChatRequest", "ChatResult", "ProxyService", "Session", "takes_answer"]


def takes_answer(engine: Engine) -> bool:
    """Whether ``engine`` plays the task's answer: it has the ``answer_taker`` capability (the oracle)."""
    return engine.capabilities.answer_taker is not None


class ProxyService:
    """Sessions and the generation flow, shared by all routes (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        chat_format: ChatFormatLike,
        config: ProxyConfig | None = None,
        turn_sink: TurnSink | None = None,
    ) -> None:
        self.engine = engine
        self.chat = chat_format
        self.config = config or ProxyConfig()
        self.turn_sink = turn_sink
        """Awaited with every completed turn before its reply is returned (:mod:`lego.proxies.turns`)."""
        self.sessions: dict[str, Session] = {}
        self._by_token: dict[bytes, Session] = {}  # sha256(token) -> session; the model face's only way in
        self.ping_interval_s = 10.0
        """Seconds of silence on a stream before a keep-alive (well under harnesses' idle timeouts)."""

    # ------------------------------------------------------------------ sessions
    def open_session(self, session_id: str, spec: SessionSpec | None = None) -> Session:
        """A fresh session under ``session_id`` (replacing, and revoking, any session of that id), as
        ``spec`` says (:class:`~lego.types.SessionSpec`; None: the harness samples as it asks, no budgets).

        ``spec.answer``: the task's gold patch, only for an engine that takes it (the oracle); any other
        engine would hold a secret it has no use for, so that is refused rather than ignored."""
        spec = spec or SessionSpec()
        if spec.answer is not None and not takes_answer(self.engine):
            raise ValueError(
                f"the {type(self.engine).__name__} engine does not take the task's answer; pass answer= only "
                "when the engine is the oracle (ProxyServer.takes_answer says whether it is)"
            )
        if "gold_patch" in spec.metadata:
            raise ValueError(
                "session metadata is exported with the trajectory and must not hold the gold patch; "
                "pass it as SessionSpec(answer=task.patch), for the oracle engine only"
            )
        self.close_session(session_id)
        token = "lego-" + secrets.token_urlsafe(32)
        s = Session(
            id=session_id,
            recorder=SessionRecorder(self.chat, spec.main_thread, self.config.reasoning_history),
            spec=spec,
            token=token,
            metadata=dict(spec.metadata),
        )
        self.sessions[session_id] = s
        self._by_token[token_digest(token)] = s
        return s

    def session_for_token(self, token: str) -> Session | None:
        """The open, unsealed session whose model-face token is ``token`` (None: no such session)."""
        if not token:
            return None
        return self._by_token.get(token_digest(token))

    def seal_session(self, session_id: str) -> bool:
        """End the episode: revoke the token, record nothing more; the trajectory stays readable."""
        s = self.sessions.get(session_id)
        if s is None:
            return False
        s.sealed = True
        self._by_token.pop(token_digest(s.token), None)
        return True

    def cut_session(self, session_id: str, reason: str) -> bool:
        """Stop the session at its next turn boundary: a generation in flight completes and is recorded,
        every later request is refused (400, the session's termination becomes ``cut``), so the harness
        ends and what the agent did so far is graded. For stragglers (:mod:`lego.conductor.stragglers`)."""
        s = self.sessions.get(session_id)
        if s is None or s.sealed:
            return False
        s.cut = reason or "cut"
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
        self._by_token.pop(token_digest(s.token), None)
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

    async def complete(
        self,
        s: Session,
        req: ChatRequest,
        api: Api,
        on_delta: DeltaSink | None = None,
        on_generate: Callable[[], None] | None = None,
    ) -> ChatResult:
        """Serve ``req`` on session ``s`` (see the module docstring). ``on_delta``: stream the reply's
        text as it is sampled (:class:`~lego.proxies.streaming.TextDeltas`); the result still holds all of it.
        ``on_generate``: called when the request has passed every check and goes to the engine."""
        t0 = time.perf_counter()
        session_id = s.id
        s.check_open()
        s.check_cut()
        rec = s.recorder
        key = rec.resolve_thread(req.messages, req.tools)
        async with s.lock(key):
            s.check_cut()  # cut while this request waited for its thread's lock
            main = rec.is_main(key, req.messages, req.tools)
            max_turns = s.spec.max_turns
            if main and max_turns is not None and rec.generations(key) >= max_turns:
                s.termination = "max_turns"
                raise ApiError(400, f"this session reached its limit of {max_turns} turns", code="max_turns")
            try:
                call = rec.render(
                    req.messages, req.tools, {**self.config.chat_template_kwargs, **req.chat_template_kwargs}
                )
            except (ValueError, ChatFormatError) as exc:
                raise ApiError(400, f"cannot render the conversation with the model's chat template: {exc}") from exc
            forced, wanted = forced_prefix(req, self.chat.tool_call_format)
            forced_ids = self.chat.encode(forced) if forced else []
            # The forced text is the template's, not the policy's: it joins the prompt, so the
            # recorder keeps it as context (mask 0) and only the continuation is sampled (mask 1).
            call.prompt_ids.extend(forced_ids)
            try:
                sampling, headers = sampling_params(
                    s,
                    req,
                    len(call.prompt_ids),
                    int(self.engine.max_model_len),
                    self.config,
                    list(self.chat.eos_token_ids),
                )
            except ContextOverflowError as exc:
                raise self._overflow(s, main, str(exc)) from exc
            # A forced call's arguments and closing are decoded under the tool's schema (tool_choice.py).
            sampling.guided_regex = forced_regex(req, self.chat.tool_call_format, wanted)
            # model_construct: the messages were validated on the way in; re-validating is O(history).
            ctx = RequestContext.model_construct(
                session_id=session_id,
                api=api,
                messages=call.messages,
                tools=req.tools,
                session_metadata=s.metadata,
                answer=s.spec.answer,
            )
            s.spend_generation()
            t_engine = time.perf_counter()
            if on_generate is not None:
                on_generate()
            try:
                on_tokens: TokenSink | None = None
                if on_delta is not None:
                    sink = on_delta
                    deltas = TextDeltas(
                        self.chat,
                        req.tools,
                        req.stop,
                        thinking_open=self.chat.decode(call.prompt_ids[-4:]).rstrip().endswith(THINK_OPEN),
                        enabled=not forced_ids,
                    )

                    def feed(ids: list[int]) -> None:
                        for kind, text in deltas.feed(ids):
                            sink(kind, text)

                    on_tokens = feed
                gen = await self.engine.generate(call.prompt_ids, sampling, ctx, on_tokens=on_tokens)
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
            s.check_open()  # sealed while the engine ran: the episode is over, record nothing
            gen, stop_hit = apply_stop(self.chat, gen, req.stop)
            if wanted is not None or not req.parallel_tool_calls:
                gen = end_after_first_call(self.chat, gen)
            s.calls += 1
            parsed = self.chat.parse(
                forced_ids + gen.token_ids, req.tools or None, id_salt=f"{session_id}:{s.calls}", stop=stop_hit
            )
            message = self.chat.to_message(parsed)
            if req.tool_choice == "none" and message.get("tool_calls"):
                message = {"role": "assistant", "content": parsed.text or message.get("content") or ""}
            if forced_ids and req.tool_choice not in (None, "auto", "none"):
                check_tool_choice(s, req, message, gen, wanted)
            parse_errors = len(parsed.parse_errors)
            rec.commit(call, gen, message, parse_failures=parse_errors)
            rec.counters["hosted_tools_dropped"] += len(req.dropped_tools)  # see lego.proxies.wire.HOSTED_TOOLS
            finish = (
                "tool_calls" if message.get("tool_calls") else ("length" if gen.finish_reason == "length" else "stop")
            )
            if self.turn_sink is not None:  # inside the thread's lock: a thread's turns are kept in order
                turn = CompletedTurn(
                    session_id=s.id,
                    thread=key,
                    main=main,
                    api=api,
                    messages=req.messages,
                    tools=req.tools,
                    reply=message,
                    reasoning=str(parsed.reasoning or ""),
                    prompt_ids=list(call.prompt_ids),
                    output_ids=list(gen.token_ids),
                    logprobs=list(gen.logprobs),
                    finish_reason=finish,
                    policy_version=gen.policy_version,
                    constrained=gen.constrained,
                    versions=list(gen.versions),
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    top_k=sampling.top_k,
                )
                await self._keep(s, turn)
        total = time.perf_counter() - t0
        s.engine_time_s += engine_s
        s.proxy_time_s += total - engine_s
        headers["x-lego-engine-ms"] = f"{engine_s * 1000:.3f}"
        if req.dropped_tools:
            headers["x-lego-dropped-tools"] = ",".join(req.dropped_tools)
        headers["x-lego-proxy-ms"] = f"{(total - engine_s) * 1000:.3f}"
        return ChatResult(
            message=message,
            reasoning=str(parsed.reasoning or message.get("reasoning_content") or ""),
            finish_reason=finish,
            prompt_tokens=len(call.prompt_ids),
            completion_tokens=len(gen.token_ids),
            headers=headers,
            stop_sequence=stop_hit,
            token_logprobs=token_logprobs(self.chat, gen, str(message.get("content") or "")) if req.logprobs else None,
            prefill=req.prefill,
        )

    async def _keep(self, s: Session, turn: CompletedTurn) -> None:
        """Hand the turn to the sink; a sink that fails makes the call fail (never acknowledged unkept)."""
        assert self.turn_sink is not None
        try:
            await self.turn_sink.turn_completed(turn, s.token)
        except Exception as exc:
            raise ApiError(
                503, f"the reply could not be stored ({type(exc).__name__}: {exc}); retry", "unavailable", retry_after=2
            ) from exc

    def _overflow(self, s: Session, main: bool, message: str) -> ApiError:
        s.recorder.note_overflow()
        if main:
            s.termination = "overlong"
        return ApiError(400, message, "context_length", code="context_length_exceeded")


def _jsonable(v: Any) -> bool:
    return isinstance(v, str | int | float | bool | type(None) | list | dict)
