"""`lego proxy`: serve a policy to any harness and record token-exact trajectories.

Prints the base URLs to give a harness (OpenAI-style ``.../v1``, Anthropic-style without ``/v1``,
and the per-session form), then serves until Ctrl-C. Trajectories are read at
``GET /s/{session}/trajectory``.
"""

from __future__ import annotations

import signal
import threading

import click

from lego.config import ProxyConfig
from lego.errors import ConfigError
from proxies.server import ProxyServer

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
def proxy(
    model: str,
    engine_kind: str,
    host: str,
    port: int,
    uds: str | None,
    api_key: str | None,
    vllm_url: str | None,
    device: str,
    max_model_len: int | None,
    served_model_name: str,
    strict: bool,
) -> None:
    """Serve MODEL behind OpenAI chat, Anthropic messages and OpenAI responses endpoints."""
    from lego.models.chat import ChatFormat

    if engine_kind == "vllm" and not vllm_url:
        raise ConfigError("--engine vllm needs --vllm-url, e.g. --vllm-url http://127.0.0.1:8000")
    chat_format = ChatFormat.from_pretrained(model)
    if engine_kind == "vllm":
        from lego.engines.vllm import VLLMEngine

        engine = VLLMEngine(str(vllm_url), max_model_len=max_model_len)
    else:
        from lego.engines.transformers_engine import TransformersEngine

        engine = TransformersEngine(model, device=device, max_model_len=max_model_len)  # type: ignore[assignment]
    config = ProxyConfig(
        host=host, port=port, uds=uds, api_key=api_key, served_model_name=served_model_name, strict_sessions=strict
    )
    server = ProxyServer(engine, chat_format, config)
    server.start()
    where = f"unix socket {uds}" if uds else server.root_url
    click.echo(f"lego proxy serving {model} ({engine_kind}) on {where}")
    click.echo(f"  OpenAI base URL:     {server.base_url}")
    click.echo(f"  Anthropic base URL:  {server.anthropic_base_url}")
    click.echo(
        f"  per session:         {server.root_url}/s/<session>/v1   (trajectory: GET {server.root_url}/s/<session>/trajectory)"
    )
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
