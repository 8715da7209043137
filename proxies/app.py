"""The proxy's ASGI apps (starlette): routes, auth, body limits, error shapes, streaming.

The proxy has two faces, two apps over one :class:`~lego.proxies.service.ProxyService`:

* The **model face** (``build_app(service, face="model")``) is all a sandbox can reach. It has the
  model routes only -- ``POST /v1/chat/completions``, ``POST /v1/messages``,
  ``POST /v1/messages/count_tokens``, ``POST /v1/responses``, ``GET /v1/models[/{id}]``, and
  Gemini's ``POST /{v1,v1beta}/models/{model}:{generateContent,streamGenerateContent,countTokens}``
  -- and the request's API key (``Authorization: Bearer KEY``, ``x-api-key: KEY``, Gemini's
  ``x-goog-api-key: KEY`` or ``?key=KEY``) *is* the session: the
  per-session token :meth:`ProxyService.open_session` minted. An unknown, sealed or closed token is
  a 401 in the calling API's own error shape. The routes also exist under ``/s/{session}`` so
  harness URLs keep their usual form, but the prefix must name the token's own session (any other
  is a 404): an agent that reads its harness's key can act as its own session and nothing else. No
  session is ever created here, and there is no trajectory, metadata, delete or health route.
* The **control face** (``face="control"``) is the trainer's and the ``lego proxy`` user's: the
  same model routes, with and without the ``/s/{session}`` prefix (no prefix: the ``default``
  session; unknown sessions are created on first use unless ``strict_sessions``), plus
  ``GET /healthz``, ``GET /s/{session}/trajectory``, ``POST /s/{session}`` (open a session; returns
  its model-face token), ``DELETE /s/{session}``, ``POST /s/{session}/feedback`` (a person's
  +1/-1 on a turn) and ``POST /s/{session}/said`` (a message the person's side is about to send
  their harness), both kept by the service's turn sink (``lego serve``; 404 without one).
  ``proxy.api_key``, when set, guards all of it.

Every request is answered: a bad one gets the calling API's own error shape and status (400
invalid request, 401 bad key, 404 unknown session or route, 405 wrong method, 413 body too large,
502/503 engine failures with ``retry-after``), never ``text/plain``, and the server keeps serving. While a generation runs the app watches the
connection; if the client goes away the generation task is cancelled and nothing is recorded.

Streams (``stream: true``) send text as the policy samples it (:mod:`lego.proxies.streaming`). The
response starts with the first delta, the end of the generation, or once the engine has held the
request for :data:`~lego.proxies.routing.COMMIT_GRACE_S` without a token (a long prefill: the
headers, the API's opening events, then keep-alives). Every check that can refuse a request runs
before the engine gets it, so such an error keeps its real status; an error after the stream
opened ends it with the API's error event. An idle stream, the prefill included, gets a keep-alive
every ``service.ping_interval_s`` (an SSE comment, Anthropic's ``ping`` event, Gemini's empty-text
chunk). A client that disconnects mid-stream cancels the generation: its batch slot is freed and
nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lego.proxies import anthropic_messages, gemini, openai_chat, openai_responses
from lego.proxies.errors import Api, ApiError, error_body
from lego.proxies.response_store import ResponseStore
from lego.proxies.routing import Face, FaceRouting, error_response
from lego.proxies.service import ChatResult, ProxyService
from lego.proxies.turns import FeedbackBody, SaidBody
from lego.types import SessionSpec

__all__ = ["CONTROL_ROUTES", "MODEL_ROUTES", "Face", "RouteSpec", "build_app"]


def _model_entry(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "lego", "type": "model", "display_name": name}


def _named_session(request: Request) -> str:
    return str(request.path_params["session"])


class FaceHandlers:
    """The handlers of one face's routes. Holds the service, the face's plumbing and its Responses
    store (``previous_response_id`` conversations, one per face); everything of a request stays in
    the request."""

    def __init__(self, service: ProxyService, face: Face) -> None:
        self.service, self.face = service, face
        self.routing = FaceRouting(service, face)
        self.stored = ResponseStore()

    def _model_face_session(self, request: Request) -> None:
        """On the model face a route that generates nothing still needs an open session's key."""
        if self.face == "model":
            self.routing.session_of(request)

    async def chat(self, request: Request) -> Response:
        r = self.routing
        req = r.parse(openai_chat.ChatCompletionRequest, await r.read_json(request))
        creq = openai_chat.to_chat_request(req, self.service.chat)
        name = r.model_name(req.model)
        if creq.stream:
            usage = bool((req.stream_options or {}).get("include_usage"))
            return await r.streamed(
                request, r.session_of(request), creq, "chat", lambda live: openai_chat.chat_stream(live, name, usage)
            )
        res = await r.guarded(request, self.service.complete(r.session_of(request), creq, "chat"))
        return r.respond(res, openai_chat.chat_response(res, name))

    async def messages(self, request: Request) -> Response:
        r = self.routing
        req = r.parse(anthropic_messages.MessagesRequest, await r.read_json(request))
        creq = anthropic_messages.to_chat_request(req)
        name = r.model_name(req.model)
        if creq.stream:
            return await r.streamed(
                request,
                r.session_of(request),
                creq,
                "messages",
                lambda live: anthropic_messages.messages_stream(live, name),
            )
        res = await r.guarded(request, self.service.complete(r.session_of(request), creq, "messages"))
        return r.respond(res, anthropic_messages.messages_response(res, name))

    async def count_tokens(self, request: Request) -> Response:
        self._model_face_session(request)
        data = await self.routing.read_json(request)
        data.setdefault("max_tokens", 1)
        creq = anthropic_messages.to_chat_request(self.routing.parse(anthropic_messages.MessagesRequest, data))
        return JSONResponse({"input_tokens": self.service.count_tokens(creq)})

    async def responses(self, request: Request) -> Response:
        r = self.routing
        req = r.parse(openai_responses.ResponsesRequest, await r.read_json(request))
        session = r.session_of(request)
        history = None
        if req.previous_response_id is not None:
            history = self.stored.get(session.id, req.previous_response_id)
            if history is None:
                raise ApiError(
                    400,
                    f"previous_response_id {req.previous_response_id!r} is unknown to this proxy; send the full input instead",
                    param="previous_response_id",
                )
        creq = openai_responses.to_chat_request(req, history)
        name = r.model_name(req.model)

        def finished(res: ChatResult, response_id: str | None = None) -> dict[str, Any]:
            body = openai_responses.responses_response(res, req, name, response_id)
            self.stored.put(session.id, body["id"], [m for m in creq.messages if m["role"] != "system"] + [res.message])
            return body

        if creq.stream:
            start = openai_responses.in_progress(req, name)

            def build(res: ChatResult) -> dict[str, Any]:
                return {**finished(res, start["id"]), "created_at": start["created_at"]}

            return await r.streamed(
                request, session, creq, "responses", lambda live: openai_responses.responses_stream(live, build, start)
            )
        res = await r.guarded(request, self.service.complete(session, creq, "responses"))
        return r.respond(res, finished(res))

    async def generate(self, request: Request) -> Response:
        """``POST /{v1,v1beta}/models/{model}:{generateContent,streamGenerateContent,countTokens}``."""
        r = self.routing
        name, _, method = str(request.path_params["target"]).rpartition(":")
        if method not in ("generateContent", "streamGenerateContent", "countTokens") or not name:
            raise ApiError(
                404,
                f"no Gemini method {request.url.path!r}; use generateContent, streamGenerateContent or countTokens",
                "not_found",
            )
        req = r.parse(gemini.GenerateContentRequest, await r.read_json(request))
        stream = method == "streamGenerateContent"
        if stream and request.query_params.get("alt") != "sse":
            raise ApiError(400, "streamGenerateContent is served as server-sent events only; add ?alt=sse", param="alt")
        creq = gemini.to_chat_request(req, name, stream)
        session = r.session_of(request)
        if method == "countTokens":
            return JSONResponse({"totalTokens": self.service.count_tokens(creq)})
        thoughts = gemini.include_thoughts(req)
        if stream:
            return await r.streamed(
                request, session, creq, "gemini", lambda live: gemini.generate_stream(live, name, thoughts)
            )
        res = await r.guarded(request, self.service.complete(session, creq, "gemini"))
        return r.respond(res, gemini.generate_response(res, name, thoughts))

    async def models(self, request: Request) -> Response:
        self._model_face_session(request)
        return JSONResponse({"object": "list", "data": [_model_entry(self.service.config.served_model_name)]})

    async def model_card(self, request: Request) -> Response:
        self._model_face_session(request)
        return JSONResponse(_model_entry(str(request.path_params["model_id"])))  # any name is served by the policy

    async def healthz(self, request: Request) -> Response:
        service = self.service
        return JSONResponse(
            {"status": "ok", "sessions": len(service.sessions), "policy_version": service.engine.policy_version}
        )

    async def trajectory(self, request: Request) -> Response:
        s = self.service.session(_named_session(request), create=False)
        return JSONResponse(self.service.trajectory(s.id).model_dump(mode="json"))

    async def open_session(self, request: Request) -> Response:
        sid = _named_session(request)
        opts = self.routing.parse(SessionSpec, await self.routing.read_json(request))
        try:
            s = self.service.open_session(sid, opts)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        return JSONResponse({"session_id": s.id, "token": s.token})

    async def feedback(self, request: Request) -> Response:
        """``POST /s/{session}/feedback`` (:class:`~lego.proxies.turns.FeedbackBody`): kept by the turn sink."""
        sink = self.service.turn_sink
        if sink is None:
            raise ApiError(404, "this proxy keeps no turns; feedback is recorded by `lego serve`", "not_found")
        body = self.routing.parse(FeedbackBody, await self.routing.read_json(request))
        try:
            return JSONResponse(await sink.feedback(_named_session(request), body))
        except KeyError as exc:
            raise ApiError(404, str(exc.args[0]), "not_found") from exc

    async def said(self, request: Request) -> Response:
        """``POST /s/{session}/said`` (:class:`~lego.proxies.turns.SaidBody`): kept by the turn sink."""
        sink = self.service.turn_sink
        if sink is None:
            raise ApiError(404, "this proxy keeps no turns; what a person said is recorded by `lego serve`", "not_found")
        body = self.routing.parse(SaidBody, await self.routing.read_json(request))
        try:
            return JSONResponse(await sink.said(_named_session(request), body))
        except KeyError as exc:
            raise ApiError(404, str(exc.args[0]), "not_found") from exc

    async def delete_session(self, request: Request) -> Response:
        sid = _named_session(request)
        if not self.service.close_session(sid):
            raise ApiError(404, f"unknown session {sid!r}", "not_found")
        return JSONResponse({"deleted": sid})

    async def http_error(self, request: Request, exc: Exception) -> Response:
        """Unknown routes (404) and wrong methods (405) in the calling API's error shape, never text."""
        assert isinstance(exc, HTTPException)
        path = request.url.path
        api: Api = "messages" if "/v1/messages" in path else "gemini" if "/v1beta/" in path or ":" in path else "chat"
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            err = ApiError(405, f"method {request.method} is not allowed on {request.url.path}; use {allowed}")
            return JSONResponse(error_body(api, err), status_code=405, headers={**err.headers(), "allow": allowed})
        err = ApiError(
            exc.status_code, f"no route {request.method} {request.url.path} on the {self.face} face", "not_found"
        )
        return error_response(api, err)


@dataclass(frozen=True)
class RouteSpec:
    """One row of the route table: a path, its method, the handler and the API whose error shape a failure gets."""

    path: str
    method: str
    handler: Callable[[FaceHandlers, Request], Awaitable[Response]]
    api: Api


MODEL_ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("/v1/chat/completions", "POST", FaceHandlers.chat, "chat"),
    RouteSpec("/v1/messages", "POST", FaceHandlers.messages, "messages"),
    RouteSpec("/v1/messages/count_tokens", "POST", FaceHandlers.count_tokens, "messages"),
    RouteSpec("/v1/responses", "POST", FaceHandlers.responses, "responses"),
    RouteSpec("/v1/models", "GET", FaceHandlers.models, "chat"),
    RouteSpec("/v1/models/{model_id:path}", "GET", FaceHandlers.model_card, "chat"),
    # Gemini: POST on the model's path (the GET above stays the model card); both API versions.
    RouteSpec("/v1/models/{target:path}", "POST", FaceHandlers.generate, "gemini"),
    RouteSpec("/v1beta/models/{target:path}", "POST", FaceHandlers.generate, "gemini"),
)
"""Both faces serve these, bare and under ``/s/{session}``."""

CONTROL_ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("/s/{session}/trajectory", "GET", FaceHandlers.trajectory, "chat"),
    RouteSpec("/s/{session}", "POST", FaceHandlers.open_session, "chat"),
    RouteSpec("/s/{session}", "DELETE", FaceHandlers.delete_session, "chat"),
    RouteSpec("/s/{session}/feedback", "POST", FaceHandlers.feedback, "chat"),
    RouteSpec("/s/{session}/said", "POST", FaceHandlers.said, "chat"),
)
"""The control face's own routes (after the model routes; ``GET /healthz`` comes first)."""

_HEALTHZ = RouteSpec("/healthz", "GET", FaceHandlers.healthz, "chat")


def build_app(service: ProxyService, face: Face = "control") -> Starlette:
    """The ASGI app serving ``service``'s ``face`` (see the module docstring): the route table's rows
    bound to one :class:`FaceHandlers`, in order (starlette takes the first route that matches)."""
    handlers = FaceHandlers(service, face)
    specs = [
        *([_HEALTHZ] if face == "control" else []),
        *(
            RouteSpec(prefix + spec.path, spec.method, spec.handler, spec.api)
            for prefix in ("", "/s/{session}")
            for spec in MODEL_ROUTES
        ),
        *(CONTROL_ROUTES if face == "control" else ()),
    ]
    routes = [
        Route(spec.path, handlers.routing.endpoint(spec.api, partial(spec.handler, handlers)), methods=[spec.method])
        for spec in specs
    ]
    return Starlette(routes=routes, exception_handlers={404: handlers.http_error, 405: handlers.http_error})
