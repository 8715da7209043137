"""HTTP errors of the proxy, rendered in each calling API's own error shape.

A handler raises :class:`ApiError` (status + message + a kind); the app renders it as the calling
API expects -- OpenAI chat/responses: ``{"error": {"message", "type", "param", "code"}}``;
Anthropic: ``{"type": "error", "error": {"type", "message"}}``; Gemini:
``{"error": {"code", "message", "status"}}`` -- so SDKs raise their own typed
exceptions (``BadRequestError``, ``APIStatusError`` ...) and retry exactly the retryable ones.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["Api", "ApiError", "error_body"]

Api = Literal["chat", "messages", "responses", "gemini", "internal"]

# kind -> (OpenAI "type", Anthropic "type", Google "status")
_KINDS: dict[str, tuple[str, str, str]] = {
    "invalid_request": ("invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT"),
    "authentication": ("authentication_error", "authentication_error", "UNAUTHENTICATED"),
    "not_found": ("not_found_error", "not_found_error", "NOT_FOUND"),
    "too_large": ("invalid_request_error", "request_too_large", "INVALID_ARGUMENT"),
    "context_length": ("invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT"),
    "engine": ("server_error", "api_error", "INTERNAL"),
    "unavailable": ("server_error", "overloaded_error", "UNAVAILABLE"),
    "internal": ("server_error", "api_error", "INTERNAL"),
}


class ApiError(Exception):
    """An error answered to the client. ``retry_after`` (seconds) adds a Retry-After header."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request",
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind if kind in _KINDS else "internal"
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        h = {"x-should-retry": "true" if self.retry_after is not None else "false"}
        if self.retry_after is not None:
            h["retry-after"] = str(max(1, round(self.retry_after)))
        return h


def error_body(api: Api, err: ApiError) -> dict[str, Any]:
    """The JSON body of ``err`` in the shape ``api`` clients parse."""
    openai_type, anthropic_type, google_status = _KINDS[err.kind]
    if api == "gemini":
        return {"error": {"code": err.status, "message": err.message, "status": google_status}}
    if api == "messages":
        return {"type": "error", "error": {"type": anthropic_type, "message": err.message}}
    return {"error": {"message": err.message, "type": openai_type, "param": err.param, "code": err.code}}
