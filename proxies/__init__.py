"""The recording proxy: OpenAI chat, Anthropic messages, OpenAI responses and Gemini in front of a policy,
recording token-exact trajectory segments (DESIGN.md, "Faithful rollouts").

Two faces (see app.py): the *model face* is all a sandbox reaches -- model routes only, for the one
session whose token is the request's API key; the *control face* (the trainer's listener and the
ProxyServer methods) opens, reads, seals and closes sessions. The task's answer reaches only an
engine that takes it (the oracle) and is never exported.

Modules, from the outside in:

    server.py               ProxyServer: the in-process background server the rollout code uses
    cli.py                  `lego proxy`: the same, standalone
    app.py                  the starlette apps (both faces): routes, auth, body limits, error shapes, streaming
    openai_chat.py          \\
    anthropic_messages.py    \\ each API's request schema, conversion to canonical messages, SSE
    openai_responses.py      /
    gemini.py               /
    service.py              ProxyService: sessions and the generation flow shared by all APIs
    recorder.py             SessionRecorder: the pure segment recorder (no I/O)
    errors.py, wire.py      error shapes; SSE framing and content-part helpers

Only the kernel is imported (lego.types, lego.config, lego.errors, lego.engines, lego.models, lego.io).
"""

from lego.proxies.recorder import SessionRecorder
from lego.proxies.server import ProxyServer

__all__ = ["ProxyServer", "SessionRecorder"]
