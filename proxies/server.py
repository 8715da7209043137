"""The in-process proxy server the rollout code uses.

    server = ProxyServer(engine, chat_format, ProxyConfig(port=0))   # or ProxyConfig(uds="/tmp/p.sock")
    server.start()                          # uvicorn in a background thread; returns once bound
    server.open_session("rollout-7", metadata={"task_id": ...}, training=True, temperature=1.0, max_turns=30)
    endpoint = server.endpoint("rollout-7")  # lego.types.Endpoint for the harness
    ...                                      # the harness talks to endpoint.base_url
    traj = server.trajectory("rollout-7")    # lego.types.Trajectory (segments, messages, counters ...)
    server.persist("rollout-7", "out/traj.json")
    server.close_session("rollout-7")
    server.stop()

The server runs its own event loop in its own thread; the engine's async ``generate`` runs there.
Session methods may be called from any thread: they run on the server's loop (so a trajectory is
never read while a commit is half done). ``base_url`` is the OpenAI base (``.../v1``),
``anthropic_base_url`` the Anthropic one (no ``/v1``); ``session_base_url(sid)`` adds the
``/s/{sid}`` prefix. With a Unix socket, URLs use host ``localhost`` and clients need a UDS
transport (``httpx.HTTPTransport(uds=server.uds)``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import uvicorn

from lego.config import ProxyConfig
from lego.engines.base import Engine
from lego.errors import ConfigError
from lego.io import atomic_write_json
from lego.types import Endpoint, Trajectory
from proxies.app import build_app
from proxies.service import ChatFormatLike, ProxyService

__all__ = ["ProxyServer", "is_loopback"]

log = logging.getLogger("lego.proxy")
T = TypeVar("T")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ProxyServer:
    """The recording proxy as a background server (see the module docstring)."""

    def __init__(self, engine: Engine, chat_format: ChatFormatLike, config: ProxyConfig | None = None) -> None:
        self.config = config or ProxyConfig()
        self.service = ProxyService(engine, chat_format, self.config)
        self.app = build_app(self.service)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._port: int | None = None
        self._listeners: list[tuple[uvicorn.Server, concurrent.futures.Future[None]]] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 30.0) -> None:
        """Bind and serve in a daemon thread; returns when the socket accepts connections."""
        if self._thread is not None:
            return
        cfg = self.config
        if cfg.uds is None and not is_loopback(cfg.host) and not cfg.api_key:
            log.warning(
                "the proxy binds %s without an API key: anyone who can reach it can use the policy; set proxy.api_key",
                cfg.host,
            )
        kwargs: dict[str, Any] = {"uds": cfg.uds} if cfg.uds else {"host": cfg.host, "port": cfg.port}
        ucfg = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", access_log=False, timeout_keep_alive=30, **kwargs
        )
        self._server = uvicorn.Server(ucfg)
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            started.set()
            assert self._server is not None
            loop.run_until_complete(self._server.serve())
            loop.close()

        self._thread = threading.Thread(target=run, name="lego-proxy", daemon=True)
        self._thread.start()
        started.wait(timeout)
        deadline = timeout
        step = 0.01
        while not self._server.started:
            if not self._thread.is_alive():
                raise ConfigError(
                    f"the proxy could not bind {cfg.uds or f'{cfg.host}:{cfg.port}'}; is the port in use?"
                )
            deadline -= step
            if deadline <= 0:
                raise ConfigError("the proxy did not start within the timeout")
            threading.Event().wait(step)
        if not cfg.uds:
            sock = self._server.servers[0].sockets[0]
            self._port = int(sock.getsockname()[1])

    def listen_tcp(self, host: str, port: int = 0, timeout: float = 30.0) -> int:
        """Also serve the same app (same sessions, same loop) on ``host:port``; returns the bound port.

        For a proxy started on a Unix socket that remote workers must reach (the Ray rollout
        backend): a second listener, not a second server, so sessions opened here are the ones
        requests sent there record into. Stopped by :meth:`stop`."""
        loop = self._loop
        if loop is None or self._server is None:
            raise RuntimeError("the proxy is not started; call start() first")
        if not is_loopback(host) and not self.config.api_key:
            log.warning(
                "the proxy listens on %s without an API key: anyone who can reach it can use the policy; "
                "set proxy.api_key",
                host,
            )
        ucfg = uvicorn.Config(
            self.app, host=host, port=port, log_level="warning", lifespan="off", access_log=False, timeout_keep_alive=30
        )
        server = uvicorn.Server(ucfg)
        done = asyncio.run_coroutine_threadsafe(server.serve(), loop)
        waited = 0.0
        while not server.started:
            if done.done() or waited >= timeout:
                server.should_exit = True
                raise ConfigError(f"the proxy could not listen on {host}:{port}; is the port in use or the host wrong?")
            threading.Event().wait(0.01)
            waited += 0.01
        self._listeners.append((server, done))
        return int(server.servers[0].sockets[0].getsockname()[1])

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        for server, done in self._listeners:
            server.should_exit = True
            try:
                done.result(timeout=10)
            except Exception:  # a listener that failed to stop must not keep the main one alive
                log.warning("a TCP listener of the proxy did not stop cleanly", exc_info=True)
        self._listeners.clear()
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._server = None
        self._thread = None

    def __enter__(self) -> ProxyServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ addresses
    @property
    def port(self) -> int | None:
        return self._port

    @property
    def uds(self) -> str | None:
        return self.config.uds

    @property
    def root_url(self) -> str:
        if self.config.uds:
            return "http://localhost"
        if self._port is None:
            raise RuntimeError("the proxy is not started; call start() first")
        host = self.config.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else (f"[{host}]" if ":" in host else host)
        return f"http://{host}:{self._port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.root_url

    def session_base_url(self, session_id: str) -> str:
        return f"{self.root_url}/s/{session_id}/v1"

    def endpoint(self, session_id: str) -> Endpoint:
        return Endpoint(
            base_url=self.session_base_url(session_id),
            anthropic_base_url=f"{self.root_url}/s/{session_id}",
            api_key=self.config.api_key or "lego-local",
            model=self.config.served_model_name,
            session_id=session_id,
        )

    # ------------------------------------------------------------------ sessions
    def _on_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop thread (or directly when not serving)."""
        loop = self._loop
        if loop is None or not loop.is_running() or threading.current_thread() is self._thread:
            return fn()

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=60)

    def open_session(
        self,
        session_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        training: bool = False,
        temperature: float | None = None,
        max_turns: int | None = None,
    ) -> None:
        """Start recording ``session_id``. ``training``: sample at ``temperature`` with no top-p/top-k
        truncation whatever the client asks (stated in the ``x-lego-sampling-override`` header)."""
        self._on_loop(
            lambda: self.service.open_session(
                session_id, metadata=metadata, training=training, temperature=temperature, max_turns=max_turns
            )
        )

    def trajectory(self, session_id: str) -> Trajectory:
        """The session's trajectory so far (main thread segments, snapshot, discarded, counters)."""
        return self._on_loop(lambda: self.service.trajectory(session_id))

    def close_session(self, session_id: str) -> None:
        self._on_loop(lambda: self.service.close_session(session_id))

    def persist(self, session_id: str, path: str | Path) -> Path:
        """Write the session's trajectory as JSON, atomically."""
        traj = self.trajectory(session_id)
        atomic_write_json(path, traj.model_dump(mode="json"))
        return Path(path)
