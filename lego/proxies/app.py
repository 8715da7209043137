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
  its model-face token) and ``DELETE /s/{session}``. ``proxy.api_key``, when set, guards all of it.

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
from lego.types import SessionSpec

__all__ = ["Face", "build_app"]


def build_app(service: ProxyService, face: Face = "control") -> Starlette:
    """The ASGI app serving ``service``'s ``face`` (see the module docstring)."""
    cfg = service.config
    routing = FaceRouting(service, face)
    # The Responses API's previous_response_id conversations: one store per app (per face).
    stored = ResponseStore()
    # The shared plumbing (lego.proxies.routing), bound under the names the routes below use.
    read_json, parse, guarded, endpoint = routing.read_json, routing.parse, routing.guarded, routing.endpoint
    session_of, model_name, respond, streamed = (
        routing.session_of,
        routing.model_name,
        routing.respond,
        routing.streamed,
    )

    def named_session(request: Request) -> str:
        return str(request.path_params["session"])

    async def chat(request: Request) -> Response:
        req = parse(openai_chat.ChatCompletionRequest, await read_json(request))
        creq = openai_chat.to_chat_request(req, service.chat)
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
            history = stored.get(session.id, req.previous_response_id)
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
            stored.put(session.id, body["id"], [m for m in creq.messages if m["role"] != "system"] + [res.message])
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

    async def generate(request: Request) -> Response:
        """``POST /{v1,v1beta}/models/{model}:{generateContent,streamGenerateContent,countTokens}``."""
        name, _, method = str(request.path_params["target"]).rpartition(":")
        if method not in ("generateContent", "streamGenerateContent", "countTokens") or not name:
            raise ApiError(
                404,
                f"no Gemini method {request.url.path!r}; use generateContent, streamGenerateContent or countTokens",
                "not_found",
            )
        req = parse(gemini.GenerateContentRequest, await read_json(request))
        stream = method == "streamGenerateContent"
        if stream and request.query_params.get("alt") != "sse":
            raise ApiError(400, "streamGenerateContent is served as server-sent events only; add ?alt=sse", param="alt")
        creq = gemini.to_chat_request(req, name, stream)
        session = session_of(request)
        if method == "countTokens":
            return JSONResponse({"totalTokens": service.count_tokens(creq)})
        thoughts = gemini.include_thoughts(req)
        if stream:
            return await streamed(
                request, session, creq, "gemini", lambda live: gemini.generate_stream(live, name, thoughts)
            )
        res = await guarded(request, service.complete(session, creq, "gemini"))
        return respond(res, gemini.generate_response(res, name, thoughts))

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
        opts = parse(SessionSpec, await read_json(request))
        try:
            s = service.open_session(sid, opts)
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
        # Gemini: POST on the model's path (the GET above stays the model card); both API versions.
        routes += [
            Route(f"{prefix}/{version}/models/{{target:path}}", endpoint("gemini", generate), methods=["POST"])
            for version in ("v1", "v1beta")
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
        path = request.url.path
        api: Api = "messages" if "/v1/messages" in path else "gemini" if "/v1beta/" in path or ":" in path else "chat"
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            err = ApiError(405, f"method {request.method} is not allowed on {request.url.path}; use {allowed}")
            return JSONResponse(error_body(api, err), status_code=405, headers={**err.headers(), "allow": allowed})
        err = ApiError(exc.status_code, f"no route {request.method} {request.url.path} on the {face} face", "not_found")
        return error_response(api, err)

    return Starlette(routes=routes, exception_handlers={404: http_error, 405: http_error})
