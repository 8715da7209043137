"""The proxy's ASGI apps (starlette): routes, auth, body limits, error shapes, streaming.

The proxy has two faces, two apps over one :class:`~lego.proxies.service.ProxyService`:

* The **model face** (``build_app(service, face="model")``) is all a sandbox can reach. It has the
  model routes only -- ``POST /v1/chat/completions``, ``POST /v1/messages``,
  ``POST /v1/messages/count_tokens``, ``POST /v1/responses``, ``GET /v1/models[/{id}]`` -- and the
  request's API key (``Authorization: Bearer KEY`` or ``x-api-key: KEY``) *is* the session: the
  per-session token :meth:`ProxyService.open_session` minted. An unknown, sealed or closed token is
  a 401 in the calling API's own error shape. The routes also exist under ``/s/{session}`` so
  harness URLs keep their usual form, but the prefix must name the token's own session (any other
  is a 404): an agent that reads its harness's key can act as its own session and nothing else. No
  session is ever created here, and there is no trajectory, metadata, delete or health route.
* The **control face** (``face="control"``) is the trainer's and the ``lego proxy`` user's: the
  same model routes, with and without the ``/s/{session}`` prefix (no prefix: the ``default``
  session; unknown sessions are created on first use unless ``strict_sessions``), plus
  ``GET /healthz``, ``GET /s/{session}/trajectory``, ``POST /s/{session}`` (open a session; returns
  its model-face token) and ``DELETE /s/{session}``. ``proxy.api_key``, when set, guards all of it.

Every request is answered: a bad one gets the calling API's own error shape and status (400
invalid request, 401 bad key, 404 unknown session or route, 405 wrong method, 413 body too large,
502/503 engine failures with ``retry-after``), never ``text/plain``, and the server keeps serving. While a generation runs the app watches the
connection; if the client goes away the generation task is cancelled and nothing is recorded.

Streams (``stream: true``) send text as the policy samples it (:mod:`lego.proxies.streaming`). The
response starts with the first delta (or the end of the generation), so an error before any token
keeps its real status; an error after that ends the stream with the API's error event. An idle
stream gets a keep-alive every ``service.ping_interval_s`` (an SSE comment, or Anthropic's ``ping``
event). A client that disconnects mid-stream cancels the generation: its batch slot is freed and
nothing is recorded.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lego.proxies import anthropic_messages, openai_chat, openai_responses
from lego.proxies.errors import Api, ApiError, error_body
from lego.proxies.service import ChatRequest, ChatResult, ProxyService, Session
from lego.proxies.streaming import LiveReply

__all__ = ["Face", "build_app"]

Face = Literal["model", "control"]

log = logging.getLogger("lego.proxy")
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
_MAX_STORED_RESPONSES = 256


class OpenSessionRequest(BaseModel):
    """``POST /s/{session}`` on the control face: what :meth:`ProxyService.open_session` takes."""

    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, Any] = Field(default_factory=dict)
    answer: str | None = None
    training: bool = False
    temperature: float | None = None
    max_turns: int | None = Field(None, ge=1)
    max_generations: int | None = Field(None, ge=1)


class _ClientGone(Exception):
    """The client closed the connection while its generation ran."""


def _error_response(api: Api, err: ApiError) -> JSONResponse:
    return JSONResponse(error_body(api, err), status_code=err.status, headers=err.headers())


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors()[:5]:
        loc = ".".join(str(x) for x in e["loc"]) or "body"
        parts.append(f"{loc}: {e['msg']}")
    return "invalid request: " + "; ".join(parts)


def _given_key(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key", "")


def build_app(service: ProxyService, face: Face = "control") -> Starlette:
    """The ASGI app serving ``service``'s ``face`` (see the module docstring)."""
    cfg = service.config
    limit = int(cfg.max_body_mb * 1024 * 1024)
    # (session id, response id) -> conversation (Responses API): a response id from one session
    # means nothing in another, so no session can continue (or read) another's conversation.
    stored: OrderedDict[tuple[str, str], list[dict[str, Any]]] = OrderedDict()

    def check_auth(request: Request) -> None:
        if face == "model":
            # The key is the session; resolving it is the authentication (see session_of).
            return
        if not cfg.api_key:
            return
        if not hmac.compare_digest(_given_key(request).encode(), cfg.api_key.encode()):
            raise ApiError(
                401,
                "invalid or missing API key; send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
                "authentication",
            )

    async def read_json(request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"request body of {int(declared)} bytes exceeds the {limit}-byte limit", "too_large")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise ApiError(413, f"request body exceeds the {limit}-byte limit", "too_large")
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ApiError(400, f"the request body must be a JSON object, not {type(data).__name__}")
        return data

    def parse(model: type[M], data: dict[str, Any]) -> M:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise ApiError(400, _validation_message(exc)) from exc

    async def guarded(request: Request, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro``, cancelling it if the client disconnects meanwhile."""
        task = asyncio.ensure_future(coro)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=0.5)
                if done:
                    return task.result()
                if await request.is_disconnected():
                    task.cancel()
                    raise _ClientGone()
        except asyncio.CancelledError:
            task.cancel()
            raise

    def endpoint(api: Api, fn: Callable[[Request], Awaitable[Response]]) -> Handler:
        async def handler(request: Request) -> Response:
            cpu0 = time.process_time()
            try:
                check_auth(request)
                response = await fn(request)
                # CPU the proxy process spent while handling this request (concurrent requests
                # included): a cost figure that a busy machine's preemption does not inflate.
                response.headers["x-lego-cpu-ms"] = f"{(time.process_time() - cpu0) * 1000:.3f}"
                return response
            except ApiError as err:
                return _error_response(api, err)
            except _ClientGone:
                log.info("client disconnected from %s; generation cancelled", request.url.path)
                return Response(status_code=499)
            except Exception as exc:
                log.exception("internal error on %s", request.url.path)
                return _error_response(
                    api, ApiError(500, f"internal proxy error: {type(exc).__name__}: {exc}", "internal")
                )

        return handler

    def session_of(request: Request) -> Session:
        """The session a model call records into.

        Model face: the session whose token the request carries; a ``/s/{session}`` prefix must
        name that same session. Control face: the session the prefix names (``default`` without
        one), created on first use unless strict."""
        named = request.path_params.get("session")
        if face == "control":
            return service.session(str(named or "default"))
        s = service.session_for_token(_given_key(request))
        if s is None:
            raise ApiError(
                401,
                "invalid, missing or revoked session key; send the key of an open session as "
                "'Authorization: Bearer KEY' or 'x-api-key: KEY'",
                "authentication",
            )
        if named is not None and named != s.id:
            raise ApiError(404, f"unknown session {named!r} for this key", "not_found")
        return s

    def named_session(request: Request) -> str:
        return str(request.path_params["session"])

    def model_name(requested: str) -> str:
        return requested or cfg.served_model_name

    def respond(res: ChatResult, body: Any) -> Response:
        return JSONResponse(body, headers=res.headers)

    async def streamed(
        request: Request,
        session: Session,
        creq: ChatRequest,
        api: Api,
        events: Callable[[LiveReply], AsyncIterator[bytes]],
    ) -> Response:
        """Start the generation; answer once its first delta arrives (or it ends: a failure then is
        an ordinary error response with its status); then stream ``events(live)``."""
        live = LiveReply(lambda sink: service.complete(session, creq, api, on_delta=sink), service.ping_interval_s)
        try:
            if not await live.first(0.5, request.is_disconnected):
                raise _ClientGone()
            headers = dict(_SSE_HEADERS)
            if live.task.done():
                headers.update(live.task.result().headers)
        except BaseException:
            live.cancel()
            raise

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in events(live):
                    yield chunk
            finally:  # the client went away mid-stream (or the stream ended): stop the generation
                if not live.task.done():
                    log.info("client disconnected from a stream on %s; generation cancelled", request.url.path)
                live.cancel()

        return StreamingResponse(body(), media_type="text/event-stream", headers=headers)

    async def chat(request: Request) -> Response:
        req = parse(openai_chat.ChatCompletionRequest, await read_json(request))
        creq = openai_chat.to_chat_request(req)
        name = model_name(req.model)
        if creq.stream:
            usage = bool((req.stream_options or {}).get("include_usage"))
            return await streamed(
                request, session_of(request), creq, "chat", lambda live: openai_chat.chat_stream(live, name, usage)
            )
        res = await guarded(request, service.complete(session_of(request), creq, "chat"))
        return respond(res, openai_chat.chat_response(res, name))

    async def messages(request: Request) -> Response:
        req = parse(anthropic_messages.MessagesRequest, await read_json(request))
        creq = anthropic_messages.to_chat_request(req)
        name = model_name(req.model)
        if creq.stream:
            return await streamed(
                request,
                session_of(request),
                creq,
                "messages",
                lambda live: anthropic_messages.messages_stream(live, name),
            )
        res = await guarded(request, service.complete(session_of(request), creq, "messages"))
        return respond(res, anthropic_messages.messages_response(res, name))

    async def count_tokens(request: Request) -> Response:
        if face == "model":
            session_of(request)  # a model-face route like any other: only an open session's key
        data = await read_json(request)
        data.setdefault("max_tokens", 1)
        creq = anthropic_messages.to_chat_request(parse(anthropic_messages.MessagesRequest, data))
        return JSONResponse({"input_tokens": service.count_tokens(creq)})

    async def responses(request: Request) -> Response:
        req = parse(openai_responses.ResponsesRequest, await read_json(request))
        session = session_of(request)
        history = None
        if req.previous_response_id is not None:
            history = stored.get((session.id, req.previous_response_id))
            if history is None:
                raise ApiError(
                    400,
                    f"previous_response_id {req.previous_response_id!r} is unknown to this proxy; send the full input instead",
                    param="previous_response_id",
                )
        creq = openai_responses.to_chat_request(req, history)
        name = model_name(req.model)

        def finished(res: ChatResult, response_id: str | None = None) -> dict[str, Any]:
            body = openai_responses.responses_response(res, req, name, response_id)
            stored[(session.id, body["id"])] = [m for m in creq.messages if m["role"] != "system"] + [res.message]
            while len(stored) > _MAX_STORED_RESPONSES:
                stored.popitem(last=False)
            return body

        if creq.stream:
            start = openai_responses.in_progress(req, name)

            def build(res: ChatResult) -> dict[str, Any]:
                return {**finished(res, start["id"]), "created_at": start["created_at"]}

            return await streamed(
                request, session, creq, "responses", lambda live: openai_responses.responses_stream(live, build, start)
            )
        res = await guarded(request, service.complete(session, creq, "responses"))
        return respond(res, finished(res))

    async def models(request: Request) -> Response:
        if face == "model":
            session_of(request)
        name = cfg.served_model_name
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "lego",
                        "type": "model",
                        "display_name": name,
                    }
                ],
            }
        )

    async def model_card(request: Request) -> Response:
        if face == "model":
            session_of(request)
        name = str(request.path_params["model_id"])  # any name is served by the policy
        return JSONResponse(
            {"id": name, "object": "model", "created": 0, "owned_by": "lego", "type": "model", "display_name": name}
        )

    async def healthz(request: Request) -> Response:
        return JSONResponse(
            {"status": "ok", "sessions": len(service.sessions), "policy_version": service.engine.policy_version}
        )

    async def trajectory(request: Request) -> Response:
        s = service.session(named_session(request), create=False)
        return JSONResponse(service.trajectory(s.id).model_dump(mode="json"))

    async def open_session(request: Request) -> Response:
        sid = named_session(request)
        opts = parse(OpenSessionRequest, await read_json(request))
        try:
            s = service.open_session(sid, **opts.model_dump())
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        return JSONResponse({"session_id": s.id, "token": s.token})

    async def delete_session(request: Request) -> Response:
        sid = named_session(request)
        if not service.close_session(sid):
            raise ApiError(404, f"unknown session {sid!r}", "not_found")
        return JSONResponse({"deleted": sid})

    routes: list[Route] = []
    if face == "control":
        routes.append(Route("/healthz", endpoint("chat", healthz), methods=["GET"]))
    for prefix in ("", "/s/{session}"):
        routes += [
            Route(f"{prefix}/v1/chat/completions", endpoint("chat", chat), methods=["POST"]),
            Route(f"{prefix}/v1/messages", endpoint("messages", messages), methods=["POST"]),
            Route(f"{prefix}/v1/messages/count_tokens", endpoint("messages", count_tokens), methods=["POST"]),
            Route(f"{prefix}/v1/responses", endpoint("responses", responses), methods=["POST"]),
            Route(f"{prefix}/v1/models", endpoint("chat", models), methods=["GET"]),
            Route(f"{prefix}/v1/models/{{model_id:path}}", endpoint("chat", model_card), methods=["GET"]),
        ]
    if face == "control":
        routes += [
            Route("/s/{session}/trajectory", endpoint("chat", trajectory), methods=["GET"]),
            Route("/s/{session}", endpoint("chat", open_session), methods=["POST"]),
            Route("/s/{session}", endpoint("chat", delete_session), methods=["DELETE"]),
        ]

    async def http_error(request: Request, exc: Exception) -> Response:
        """Unknown routes (404) and wrong methods (405) in the calling API's error shape, never text."""
        assert isinstance(exc, HTTPException)
        api: Api = "messages" if "/v1/messages" in request.url.path else "chat"
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            err = ApiError(405, f"method {request.method} is not allowed on {request.url.path}; use {allowed}")
            return JSONResponse(error_body(api, err), status_code=405, headers={**err.headers(), "allow": allowed})
        err = ApiError(exc.status_code, f"no route {request.method} {request.url.path} on the {face} face", "not_found")
        return _error_response(api, err)

    return Starlette(routes=routes, exception_handlers={404: http_error, 405: http_error})
