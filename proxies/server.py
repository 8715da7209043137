"""The in-process proxy server the rollout code uses.

    server = ProxyServer(engine, chat_format, ProxyConfig(uds="/tmp/lego/control.sock"))
    server.start()                      # uvicorn in a background thread; returns once bound
    spec = SessionSpec(sampling_override=SamplingOverride(temperature=1.0), seed=7, max_turns=30,
                       metadata={"task_id": ...}, answer=task.patch if server.takes_answer else None)
    token = server.open_session("rollout-7", spec)
    # the sandbox gets server.model_uds (bound at its proxy socket) and this endpoint:
    endpoint = server.endpoint("rollout-7", root_url=f"http://127.0.0.1:{sandbox.proxy_port}")
    ...                                 # the harness talks to endpoint.base_url with endpoint.api_key (= token)
    server.seal_session("rollout-7")    # the episode is over: the token stops working, nothing more is recorded
    traj = server.trajectory("rollout-7")   # lego.types.Trajectory (segments, messages, counters ...)
    server.persist("rollout-7", "out/traj.json")
    server.close_session("rollout-7")
    server.stop()

Two faces (see :mod:`lego.proxies.app`). The *control face* is the listener ``config`` names (``uds``, or
``host:port``) and this object's methods: sessions are opened, read, sealed and closed here, by the
trainer. The *model face* is what agents reach: a Unix socket at :attr:`model_uds` (bind it into
local sandboxes) and, for remote workers, TCP listeners from :meth:`listen_tcp`. On the model face
the API key is the session's token, so a sandbox can reach its own session's model routes and
nothing else; it can never name another session, create, export or delete one.

The server runs its own event loop in its own thread; the engine's async ``generate`` runs there.
Session methods may be called from any thread: they run on the server's loop (so a trajectory is
never read while a commit is half done). ``base_url`` is the control face's OpenAI base
(``.../v1``), ``anthropic_base_url`` its Anthropic one (no ``/v1``); ``session_base_url(sid)`` adds
the ``/s/{sid}`` prefix. With a Unix socket, URLs use host ``localhost`` and clients need a UDS
transport (``httpx.HTTPTransport(uds=server.uds)``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
from starlette.applications import Starlette

from lego.config import ProxyConfig
from lego.errors import ConfigError
from lego.io import atomic_write_json
from lego.paths import owned_tmpdir
from lego.proxies.app import build_app
from lego.proxies.service import ChatFormatLike, ProxyService, takes_answer
from lego.proxies.turns import TurnSink
from lego.seams import Engine
from lego.types import Endpoint, SessionSpec, Trajectory

__all__ = ["ProxyServer", "is_loopback", "session_endpoint"]

log = logging.getLogger("lego.proxy")
T = TypeVar("T")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def session_endpoint(root_url: str, session_id: str, token: str, model: str) -> Endpoint:
    """How a harness reaches session ``session_id`` on the model face at ``root_url``.

    The key is the session's token; the ``/s/{session_id}`` prefix keeps the usual URL form (the
    model face checks it names the token's own session, so crossed wiring fails loudly with a 404
    instead of recording into another session). Pure: a Ray worker builds it from the token the
    driver sends along."""
    root = root_url.rstrip("/")
    return Endpoint(
        base_url=f"{root}/s/{session_id}/v1",
        anthropic_base_url=f"{root}/s/{session_id}",
        api_key=token,
        model=model,
        session_id=session_id,
    )


class ProxyServer:
    """The recording proxy as a background server (see the module docstring).

    ``model_uds``: where the model face's Unix socket goes; default: ``model.sock`` in a private
    temp dir this server creates and removes. ``turn_sink``: keeps every completed turn before its
    reply is returned (``lego serve``'s store; :mod:`lego.proxies.turns`)."""

    def __init__(
        self,
        engine: Engine,
        chat_format: ChatFormatLike,
        config: ProxyConfig | None = None,
        *,
        model_uds: str | Path | None = None,
        turn_sink: TurnSink | None = None,
    ) -> None:
        self.config = config or ProxyConfig()
        self.service = ProxyService(engine, chat_format, self.config, turn_sink)
        self.app = build_app(self.service, "control")
        self.model_app = build_app(self.service, "model")
        self._model_uds_arg = str(model_uds) if model_uds is not None else None
        self._model_uds: str | None = None
        self._model_tmp: str | None = None
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
        if self._model_uds_arg is None:
            self._model_tmp = str(owned_tmpdir("lego-model-"))  # removed by stop(), at exit, or by the next sweep
            path = str(Path(self._model_tmp) / "model.sock")
        else:
            path = self._model_uds_arg
        self._listen(self.model_app, {"uds": path}, f"the model face's socket {path}", timeout)
        # Whoever the socket is bound into (a sandbox's agent, whatever uid it maps to) may connect:
        # the socket grants nothing without a session's token, and who can reach it is decided by
        # where it is bound (the default temp dir is private to this user).
        os.chmod(path, 0o666)
        self._model_uds = path

    def _listen(self, app: Starlette, bind: dict[str, Any], what: str, timeout: float) -> uvicorn.Server:
        """Serve ``app`` on one more listener on the server's loop (same sessions); stopped by :meth:`stop`."""
        loop = self._loop
        if loop is None or self._server is None:
            raise RuntimeError("the proxy is not started; call start() first")
        ucfg = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_keep_alive=30,
            **bind,
        )
        server = uvicorn.Server(ucfg)
        done = asyncio.run_coroutine_threadsafe(server.serve(), loop)
        waited = 0.0
        while not server.started:
            if done.done() or waited >= timeout:
                server.should_exit = True
                raise ConfigError(f"the proxy could not listen on {what}; is it in use, or the address wrong?")
            threading.Event().wait(0.01)
            waited += 0.01
        self._listeners.append((server, done))
        return server

    def listen_tcp(self, host: str, port: int = 0, timeout: float = 30.0) -> int:
        """Also serve the **model face** on ``host:port``; returns the bound port.

        For remote workers (the Ray rollout backend) whose sandboxes forward to the driver's proxy:
        a second listener on the same loop and sessions, reachable with a session's token only
        (see :mod:`lego.proxies.app`), so exposing it on a routable address exposes no control route."""
        server = self._listen(self.model_app, {"host": host, "port": port}, f"{host}:{port}", timeout)
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
        self._model_uds = None
        if self._model_tmp is not None:
            shutil.rmtree(self._model_tmp, ignore_errors=True)
            self._model_tmp = None

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
        """The control face's Unix socket (None when it serves TCP). Never bind it into a sandbox."""
        return self.config.uds

    @property
    def model_uds(self) -> str:
        """The model face's Unix socket: bind this (and only this) into sandboxes."""
        if self._model_uds is None:
            raise RuntimeError("the proxy is not started; call start() first")
        return self._model_uds

    @property
    def takes_answer(self) -> bool:
        """Whether the engine plays the task's answer (the oracle): only then may ``open_session`` get ``answer=``."""
        return takes_answer(self.service.engine)

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

    def endpoint(self, session_id: str, root_url: str = "http://localhost") -> Endpoint:
        """The model-face endpoint of an open session, as a harness reaches it at ``root_url``.

        ``root_url``: where the model face is, seen from the harness (a sandbox's forwarder,
        ``http://127.0.0.1:<sandbox.proxy_port>``; the default suits a client with a UDS transport
        on :attr:`model_uds`)."""
        return session_endpoint(root_url, session_id, self.session_token(session_id), self.config.served_model_name)

    def session_token(self, session_id: str) -> str:
        """The model-face token of the open session ``session_id`` (what :meth:`open_session` returned)."""

        def find() -> str:
            s = self.service.sessions.get(session_id)
            if s is None:
                raise KeyError(f"no open proxy session {session_id!r}; open_session() it first")
            return s.token

        return self._on_loop(find)

    # ------------------------------------------------------------------ sessions
    def _on_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop thread (or directly when not serving)."""
        loop = self._loop
        if loop is None or not loop.is_running() or threading.current_thread() is self._thread:
            return fn()

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=60)

    def open_session(self, session_id: str, spec: SessionSpec | None = None) -> str:
        """Start recording ``session_id`` as ``spec`` says (:class:`~lego.types.SessionSpec`: sampling
        override and seed, budgets, main-thread identity, metadata, and the gold patch only when
        :attr:`takes_answer`, i.e. the oracle engine); returns its model-face token (the harness's API
        key). Reopening an id replaces the session and revokes its old token. Nothing of the spec can be
        changed from the model face."""
        s = self._on_loop(lambda: self.service.open_session(session_id, spec))
        return s.token

    def seal_session(self, session_id: str) -> None:
        """End the session's episode: its token stops working and nothing more is recorded (a call
        still in flight is answered 401, not committed); the trajectory stays readable. Call it when
        the harness has ended, before reading the final trajectory."""
        self._on_loop(lambda: self.service.seal_session(session_id))

    def cut_session(self, session_id: str, reason: str) -> bool:
        """Stop the session at its next turn boundary (:meth:`~lego.proxies.service.ProxyService.cut_session`);
        False when no open session has that id."""
        return self._on_loop(lambda: self.service.cut_session(session_id, reason))

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
