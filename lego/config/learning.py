"""Learning from use: ``lego serve``, the long-lived endpoint for a person's own harnesses (``[serve]``)."""

from __future__ import annotations

from pydantic import Field

from lego.config.base import Section

__all__ = ["ServeConfig"]


class ServeConfig(Section):
    """`lego serve`: where sessions are stored, where harnesses connect, how long turns are kept.

    The engine and chat template come from ``[engine]`` and the recording from ``[proxy]``'s
    settings (``default_max_tokens``, ``reasoning_history``, ...), exactly as for `lego proxy`."""

    dir: str | None = Field(
        None,
        description="The serve directory: learn.db (the store), control.sock (the control face, this user "
        "only), serve.json (where the model face listens). None: <data dir>/serve (LEGO_DATA_DIR).",
    )
    host: str = Field(
        "127.0.0.1",
        description="Address of the model face harnesses connect to (each request's API key names its session, "
        "so it grants nothing else). Nothing leaves the machine unless you bind a routable address.",
    )
    port: int = Field(8200, ge=0, le=65535, description="Port of the model face (0: a free one, printed).")
    retention_days: float | None = Field(
        30.0,
        gt=0,
        description="Turns (and their feedback) older than this are deleted, at start-up and hourly while serving. "
        "None: kept until `lego serve purge`.",
    )
    redact_literals: list[str] = Field(
        default_factory=list,
        description="Exact strings redacted wherever they appear, besides the built-in patterns (API keys, tokens, "
        "private keys, secret-looking KEY=value lines) and the harness's own API key: e.g. a password of yours.",
    )
