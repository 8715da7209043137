"""`lego proxy`: serve a policy to any harness and record token-exact trajectories.

Prints the base URLs of the control face (OpenAI-style ``.../v1``, Anthropic-style without
``/v1``, and the per-session form) and of the model face, then serves until Ctrl-C. The control
face is yours: a harness you trust can use it directly, sessions are opened with
``POST /s/{session}`` (the answer holds the session's model-face token), read at
``GET /s/{session}/trajectory`` and closed with ``DELETE /s/{session}``. An agent you do not trust
gets the model face and a session's token as its API key: its own session's model routes, nothing
else (see :mod:`lego.proxies.app`).
"""

from __future__ import annotations

import signal
import threading

import click

from lego.config import EngineConfig, ProxyConfig
from lego.proxies.server import ProxyServer

__all__ = ["proxy"]


@click.command("proxy")
@click.option(
    "--model",
    "model",
    default="default",
    show_default=True,
    help="HF model directory (its chat template and tokenizer), or 'default'.",
)
@click.option(
    "--engine", "engine_kind", type=click.Choice(["transformers", "vllm"]), default="transformers", show_default=True
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind; non-loopback needs --api-key.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8100, show_default=True, help="TCP port (0: pick a free one)."
)
@click.option(
    "--uds", type=click.Path(dir_okay=False), default=None, help="Serve on this Unix socket instead of a TCP port."
)
@click.option(
    "--api-key",
    envvar="LEGO_PROXY_API_KEY",
    default=None,
    help="Require this key on every route (env LEGO_PROXY_API_KEY).",
)
@click.option(
    "--model-uds",
    type=click.Path(dir_okay=False),
    default=None,
    help="Put the model face's Unix socket here (default: a private temp path, printed).",
)
@click.option(
    "--model-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Also serve the model face on this TCP port of --host (0: pick a free one).",
)
@click.option("--vllm-url", default=None, help="Base URL of `vllm serve` (with --engine vllm).")
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="transformers engine device.",
)
@click.option(
    "--max-model-len", type=click.IntRange(16), default=None, help="Context window (default: the model's own)."
)
@click.option(
    "--served-model-name",
    default="lego-policy",
    show_default=True,
    help="Name listed by /v1/models (any name is accepted in requests).",
)
@click.option("--strict", is_flag=True, help="Answer 404 for sessions not opened explicitly.")
@click.option(
    "--chat-template",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="A Jinja chat template that replaces the model's own (gpt-oss ships none; needed for tool use when "
    "the model's template cannot express tools).",
)
@click.option("--tool-parser", default=None, help="Tool-call format (default: read from the chat template).")
def proxy(
    model: str,
    engine_kind: str,
    host: str,
    port: int,
    uds: str | None,
    api_key: str | None,
    model_uds: str | None,
    model_port: int | None,
    vllm_url: str | None,
    device: str,
    max_model_len: int | None,
    served_model_name: str,
    strict: bool,
    chat_template: str | None,
    tool_parser: str | None,
) -> None:
    """Serve MODEL behind OpenAI chat, Anthropic messages and OpenAI responses endpoints."""
    from lego.proxies.server import is_loopback

    if uds is None and not is_loopback(host) and not api_key:
        raise click.UsageError(
            f"--host {host} is not a loopback address: anyone who can reach it could use the policy; "
            "pass --api-key KEY (clients send it as their API key), or bind 127.0.0.1"
        )
    from lego.engines import build_engine
    from lego.models.chat import ChatFormat
    from lego.models.tiny import resolve_model

    # EngineConfig validates the engine settings (vllm without a URL names the fix) and
    # build_engine is the one place engines are built.
    engine = build_engine(
        EngineConfig(kind=engine_kind, model=model, device=device, max_model_len=max_model_len, vllm_url=vllm_url)  # type: ignore[arg-type]
    )
    chat_format = ChatFormat.from_pretrained(resolve_model(model), chat_template, tool_parser)
    config = ProxyConfig(
        host=host, port=port, uds=uds, api_key=api_key, served_model_name=served_model_name, strict_sessions=strict
    )
    server = ProxyServer(engine, chat_format, config, model_uds=model_uds)
    server.start()
    root = server.root_url
    where = f"unix socket {uds}" if uds else root
    click.echo(f"lego proxy serving {model} ({engine_kind}) on {where}")
    click.echo("control face (yours: sessions, trajectories):")
    click.echo(f"  OpenAI base URL:     {server.base_url}")
    click.echo(f"  Anthropic base URL:  {server.anthropic_base_url}")
    click.echo(f"  per session:         {root}/s/<session>/v1   (trajectory: GET {root}/s/<session>/trajectory)")
    click.echo(f'  open a session:      POST {root}/s/<session> {{"max_turns": 30}}  -> its token')
    click.echo("model face (an agent's: its own session's model routes, the token as its API key):")
    click.echo(f"  unix socket:         {server.model_uds}")
    if model_port is not None:
        bound = server.listen_tcp(host, model_port)
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else (f"[{host}]" if ":" in host else host)
        model_root = f"http://{shown}:{bound}"
        click.echo(f"  model base URL:      {model_root}/s/<session>/v1")
    click.echo("Ctrl-C to stop.")
    stop = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        stop.set()

    # Installed explicitly, not left to Python's KeyboardInterrupt: a process started from a
    # non-interactive shell's background job inherits SIGINT *ignored* and Python then never raises
    # KeyboardInterrupt; SIGTERM is what `kill`, Docker and systemd send.
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(timeout=1.0):
            pass
        click.echo("stopping")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()
