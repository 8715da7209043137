"""The request plumbing every route of one face shares (see :mod:`lego.proxies.app` for the faces).

:class:`FaceRouting` holds the service and the face a route serves, and does what each route would
otherwise repeat: check the control face's key, read a bounded JSON body, validate it into the
API's request model (a 400 in the API's shape), resolve the session a call records into, watch the
connection while a generation runs (cancel it if the client goes away), stream a reply, and turn
every failure into the calling API's error response.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from lego.proxies.errors import Api, ApiError, error_body
from lego.proxies.service import ChatRequest, ChatResult, ProxyService, Session
from lego.proxies.streaming import LiveReply

__all__ = ["Face", "FaceRouting", "Handler", "error_response"]

Face = Literal["model", "control"]

log = logging.getLogger("lego.proxy")
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
COMMIT_GRACE_S = 1.0
"""Seconds the engine may hold a streamed request without a token before the stream opens anyway: every
check that can refuse a request ran before it reached the engine, so only an engine's own late failure
(after this grace) goes in-stream; a long prefill gets its headers, opening events and pings."""


class _ClientGone(Exception):
    """The client closed the connection while its generation ran."""


def error_response(api: Api, err: ApiError) -> JSONResponse:
    return JSONResponse(error_body(api, err), status_code=err.status, headers=err.headers())


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors()[:5]:
        loc = ".".join(str(x) for x in e["loc"]) or "body"
        parts.append(f"{loc}: {e['msg']}")
    return "invalid request: " + "; ".join(parts)


def _validation_param(exc: ValidationError) -> str | None:
    """The dotted path of the first invalid field (the OpenAI error's ``param``)."""
    errors = exc.errors()
    if not errors:
        return None
    return ".".join(str(x) for x in errors[0]["loc"]) or None


def _given_key(request: Request) -> str:
    """The API key as each API's clients send it: ``Authorization: Bearer``, ``x-api-key``, or
    Gemini's ``x-goog-api-key`` header or ``?key=`` query parameter."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    for header in ("x-api-key", "x-goog-api-key"):
        if header in request.headers:
            return request.headers[header]
    return request.query_params.get("key", "")


class FaceRouting:
    """Auth, bodies, sessions, disconnects and streams for the routes of ``service``'s ``face``."""

    def __init__(self, service: ProxyService, face: Face) -> None:
        self.service = service
        self.face = face
        self.config = service.config
        self.body_limit = int(service.config.max_body_mb * 1024 * 1024)

    def check_auth(self, request: Request) -> None:
        if self.face == "model":
            # The key is the session; resolving it is the authentication (see session_of).
            return
        if not self.config.api_key:
            return
        if not hmac.compare_digest(_given_key(request).encode(), self.config.api_key.encode()):
            raise ApiError(
                401,
                "invalid or missing API key; send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
                "authentication",
            )

    async def read_json(self, request: Request) -> dict[str, Any]:
        limit = self.body_limit
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

    @staticmethod
    def parse(model: type[M], data: dict[str, Any]) -> M:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise ApiError(400, _validation_message(exc), param=_validation_param(exc)) from exc

    @staticmethod
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

    def endpoint(self, api: Api, fn: Handler) -> Handler:
        """``fn`` behind the face's auth, answering every failure in ``api``'s error shape."""

        async def handler(request: Request) -> Response:
            cpu0 = time.process_time()
            try:
                self.check_auth(request)
                response = await fn(request)
                # CPU the proxy process spent while handling this request (concurrent requests
                # included): a cost figure that a busy machine's preemption does not inflate.
                response.headers["x-lego-cpu-ms"] = f"{(time.process_time() - cpu0) * 1000:.3f}"
                return response
            except ApiError as err:
                return error_response(api, err)
            except _ClientGone:
                log.info("client disconnected from %s; generation cancelled", request.url.path)
                return Response(status_code=499)
            except Exception as exc:
                log.exception("internal error on %s", request.url.path)
                return error_response(
                    api, ApiError(500, f"internal proxy error: {type(exc).__name__}: {exc}", "internal")
                )

        return handler

    def session_of(self, request: Request) -> Session:
        """The session a model call records into.

        Model face: the session whose token the request carries; a ``/s/{session}`` prefix must
        name that same session. Control face: the session the prefix names (``default`` without
        one), created on first use unless strict."""
        named = request.path_params.get("session")
        if self.face == "control":
            return self.service.session(str(named or "default"))
        s = self.service.session_for_token(_given_key(request))
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

    def model_name(self, requested: str) -> str:
        return requested or self.config.served_model_name

    @staticmethod
    def respond(res: ChatResult, body: Any) -> Response:
        return JSONResponse(body, headers=res.headers)

    async def streamed(
        self,
        request: Request,
        session: Session,
        creq: ChatRequest,
        api: Api,
        events: Callable[[LiveReply], AsyncIterator[bytes]],
    ) -> Response:
        """Start the generation; answer once its first delta arrives, it ends (a failure then is an
        ordinary error response with its status) or the engine has held it for a grace without a
        token (a long prefill: the stream opens and pings, a failure after that is an error event);
        then stream ``events(live)``."""
        service = self.service
        live = LiveReply(
            lambda sink, generating: service.complete(session, creq, api, on_delta=sink, on_generate=generating),
            service.ping_interval_s,
        )
        try:
            if not await live.first(0.5, request.is_disconnected, min(COMMIT_GRACE_S, service.ping_interval_s)):
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
