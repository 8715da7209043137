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
from collections.abc import Callable
from typing import Protocol

import click

from lego.conductor.cli.basic import flag_overrides, override_option
from lego.proxies.server import ProxyServer

__all__ = ["proxy"]


_DEFAULT_PORT = 8100
"""The port `lego proxy` binds when neither a flag, -o nor the config file names one."""


@click.command("proxy")
@click.argument("config", required=False, type=click.Path(exists=True, dir_okay=False))
@override_option("-o engine.model=/path/to/model -o proxy.port=8200")
@click.option("--model", default=None, help="Shortcut for engine.model: an HF model directory, or 'default'.")
@click.option("--engine", "engine_kind", type=click.Choice(["transformers", "vllm"]), default=None, help="engine.kind")
@click.option("--host", default=None, help="proxy.host (default 127.0.0.1); a non-loopback address needs --api-key.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=None, help=f"proxy.port (default {_DEFAULT_PORT}; 0: a free one)."
)
@click.option("--uds", type=click.Path(dir_okay=False), default=None, help="proxy.uds: a Unix socket instead of TCP.")
@click.option(
    "--api-key",
    envvar="LEGO_PROXY_API_KEY",
    default=None,
    help="proxy.api_key: required on every route of the control face (env LEGO_PROXY_API_KEY).",
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
    help="Also serve the model face on this TCP port of the host (0: pick a free one).",
)
@click.option("--vllm-url", default=None, help="engine.vllm_url: base URL of `vllm serve` (with --engine vllm).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None, help="engine.device")
@click.option(
    "--max-model-len", type=click.IntRange(16), default=None, help="engine.max_model_len (default: the model's)."
)
@click.option("--served-model-name", default=None, help="proxy.served_model_name (any name is accepted in requests).")
@click.option(
    "--strict", is_flag=True, default=None, help="proxy.strict_sessions: 404 for sessions not opened explicitly."
)
@click.option(
    "--chat-template",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="engine.chat_template: a Jinja template that replaces the model's own (gpt-oss ships none; needed for "
    "tool use when the model's template cannot express tools).",
)
@click.option("--tool-parser", default=None, help="engine.tool_parser (default: read from the chat template).")
def proxy(
    config: str | None,
    overrides: tuple[str, ...],
    model: str | None,
    engine_kind: str | None,
    host: str | None,
    port: int | None,
    uds: str | None,
    api_key: str | None,
    model_uds: str | None,
    model_port: int | None,
    vllm_url: str | None,
    device: str | None,
    max_model_len: int | None,
    served_model_name: str | None,
    strict: bool | None,
    chat_template: str | None,
    tool_parser: str | None,
) -> None:
    """Serve a policy behind OpenAI chat, Anthropic messages and OpenAI responses endpoints.

    Reads CONFIG (default: the shipped config) and its `engine` and `proxy` sections, like every lego
    command; `-o key.sub=value` overrides any field, and each flag is a shortcut for one field that
    wins over `-o` for that field. `lego config show --doc` lists the fields.
    """
    from lego.config import load_config
    from lego.errors import ConfigError
    from lego.proxies.server import is_loopback

    flags = {
        "engine.model": model,
        "engine.kind": engine_kind,
        "engine.vllm_url": vllm_url,
        "engine.device": device,
        "engine.max_model_len": max_model_len,
        "engine.chat_template": chat_template,
        "engine.tool_parser": tool_parser,
        "proxy.host": host,
        "proxy.port": port,
        "proxy.uds": uds,
        "proxy.api_key": api_key,
        "proxy.served_model_name": served_model_name,
        "proxy.strict_sessions": strict,
    }
    given = [*overrides, *flag_overrides(flags)]
    try:
        cfg = load_config(config, given)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    pcfg = cfg.proxy
    if port is None and config is None and not any(o.startswith("proxy.port=") for o in overrides) and pcfg.port == 0:
        pcfg = pcfg.model_copy(update={"port": _DEFAULT_PORT})
    if pcfg.uds is None and not is_loopback(pcfg.host) and not pcfg.api_key:
        raise click.UsageError(
            f"--host {pcfg.host} is not a loopback address: anyone who can reach it could use the policy; "
            "pass --api-key KEY (clients send it as their API key), or bind 127.0.0.1"
        )
    if pcfg.uds is None:
        refuse_taken_port(pcfg.host, pcfg.port, "--port")
    refuse_taken_port(pcfg.host, model_port, "--model-port")
    from lego.engines import build_engine
    from lego.models.chat import ChatFormat
    from lego.models.tiny import resolve_model

    ecfg = cfg.engine
    engine = build_engine(ecfg)  # the one place engines are built
    chat_format = ChatFormat.from_pretrained(resolve_model(ecfg.model), ecfg.chat_template, ecfg.tool_parser)
    server = ProxyServer(engine, chat_format, pcfg, model_uds=model_uds)
    server.start()
    serve_until_signalled(server, lambda: _print_faces(server, f"{ecfg.model} ({ecfg.kind})", model_port))


def _print_faces(server: ProxyServer, serving: str, model_port: int | None) -> None:
    """Where the two faces listen; with ``model_port`` the model face is opened on TCP too."""
    pcfg = server.config
    root = server.root_url
    where = f"unix socket {pcfg.uds}" if pcfg.uds else root
    click.echo(f"lego proxy serving {serving} on {where}")
    click.echo("control face (yours: sessions, trajectories):")
    click.echo(f"  OpenAI base URL:     {server.base_url}")
    click.echo(f"  Anthropic base URL:  {server.anthropic_base_url}")
    click.echo(f"  per session:         {root}/s/<session>/v1   (trajectory: GET {root}/s/<session>/trajectory)")
    click.echo(f'  open a session:      POST {root}/s/<session> {{"max_turns": 30}}  -> its token')
    click.echo("model face (an agent's: its own session's model routes, the token as its API key):")
    click.echo(f"  unix socket:         {server.model_uds}")
    if model_port is not None:
        bound = server.listen_tcp(pcfg.host, model_port)
        shown = "127.0.0.1" if pcfg.host in ("0.0.0.0", "") else (f"[{pcfg.host}]" if ":" in pcfg.host else pcfg.host)
        click.echo(f"  model base URL:      http://{shown}:{bound}/s/<session>/v1")
    click.echo("Ctrl-C to stop.")


def refuse_taken_port(host: str, port: int | None, flag: str) -> None:
    """A usage error (exit 2) when ``host:port`` is already taken, before any model loads (a 40-60 s load
    used to end in the bind error). 0 and None ask for a free port: nothing to check."""
    import errno
    import socket

    if not port:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no owner
        try:
            probe.bind((host or "0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise click.UsageError(
                    f"port {port} on {host or '0.0.0.0'} is in use by another process; pass {flag} with another "
                    "port (0 picks a free one), or stop the process that holds it"
                ) from None
            raise click.UsageError(f"cannot listen on {host}:{port} ({exc.strerror}); check {flag}") from None


class _Stoppable(Protocol):
    def stop(self) -> None: ...


def serve_until_signalled(server: _Stoppable, ready: Callable[[], None] | None = None) -> None:
    """Block until SIGINT or SIGTERM, then stop the server (`lego proxy`, `lego serve`). ``ready``
    runs once the handlers are in place (what says "Ctrl-C to stop": a Ctrl-C after it is honoured)."""
    stop = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        stop.set()

    # Installed explicitly, not left to Python's KeyboardInterrupt: a process started from a
    # non-interactive shell's background job inherits SIGINT *ignored* and Python then never raises
    # KeyboardInterrupt; SIGTERM is what `kill`, Docker and systemd send.
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if ready is not None:
            ready()
        while not stop.wait(timeout=1.0):
            pass
        click.echo("stopping")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()
