"""`lego serve` below the CLI: the long-lived recording endpoint and the client of its control face.

    server = LearnServer(engine, chat_format, cfg.proxy, cfg.serve)
    server.start()        # model face on serve.host:serve.port, control face on <dir>/control.sock
    ...                   # harnesses talk to server.model_url with a session's key
    server.stop()

    client = ControlClient.connect(serve_dir(cfg.serve))     # from another process
    opened = client.new_session(private=False, label="fix the parser")
    opened.env()          # OPENAI_BASE_URL=..., OPENAI_API_KEY=<the session's key>, ANTHROPIC_...

**Opting in.** An unmodified harness can set a base URL and an API key, nothing else, so the key
is the opt-in: `lego serve session new` registers a session in the store (private or not) and
opens it on the running server, whose answer is the session's key. A request with that key on
the model face is served and recorded into that session (the model face's rule: the key *is* the
session, see :mod:`lego.proxies.app`); a request without a key of an open session is a 401 -- the
server serves only sessions someone opened, and records only registered ones. Keys live as long
as the server process (they are never written, only compared); after a restart, open new ones.

**The two faces.** The model face is the harnesses' (TCP, loopback by default; the key grants one
session's model routes and nothing else). The control face -- sessions, trajectories, feedback,
what the person said (:meth:`ControlClient.said`) --
is a Unix socket in the serve directory, which is created ``0700``: only its owner reaches it or
the database. ``serve.json`` there says where the model face listens (no secrets), for the CLI.
One server per directory (a lock file); sessions the control face opens are ``strict_sessions``
(no session is created by a model call).

**Ended sessions.** A session is marked ended in the store when its key is revoked (`lego serve
session end`) and, for every open one, when the server stops or the next one starts (keys die with
the process): a judge then reads a thread's last turn as the session's end rather than waiting
for a turn that can no longer come.

**Retention.** ``serve.retention_days``: turns older than that are deleted at start-up and hourly.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from lego.config import ProxyConfig, ServeConfig
from lego.errors import ConfigError, LegoError
from lego.io import atomic_write_json, atomic_write_text
from lego.learn.recorder import LearnRecorder
from lego.learn.records import SessionRow
from lego.learn.redact import Redactor
from lego.learn.store import SqliteStore
from lego.paths import data_dir
from lego.proxies.server import ProxyServer
from lego.proxies.service import ChatFormatLike
from lego.seams import Engine

__all__ = ["ControlClient", "LearnServer", "OpenedSession", "ServeNotRunningError", "open_store", "serve_dir"]

RETENTION_SWEEP_S = 3600.0
"""How often a running server applies ``serve.retention_days``."""


class ServeNotRunningError(LegoError):
    """No `lego serve` answers on this serve directory."""


def serve_dir(cfg: ServeConfig) -> Path:
    """The serve directory (``serve.dir``, default ``<data dir>/serve``), created private to this user."""
    path = Path(cfg.dir).expanduser() if cfg.dir else data_dir() / "serve"
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


_CURRENT = "serve.current"
"""In the data dir: the directory of the `lego serve` running now, for its companions (`lego serve
session new`, `lego feedback`...) that name no ``serve.dir``: the banner's commands work as printed."""


def remembered_dir() -> Path | None:
    """The directory of the `lego serve` running now (None: none runs, or it left no pointer)."""
    try:
        path = Path((data_dir() / _CURRENT).read_text(encoding="utf-8").strip())
    except OSError:
        return None
    return path if (path / "serve.json").is_file() else None


def open_store(cfg: ServeConfig) -> SqliteStore:
    """The store of the serve directory (for the CLI's export, purge, feedback: the server need not run)."""
    return SqliteStore(serve_dir(cfg) / "learn.db")


class LearnServer:
    """The recording proxy as `lego serve` runs it (see the module docstring)."""

    def __init__(self, engine: Engine, chat_format: ChatFormatLike, proxy: ProxyConfig, serve: ServeConfig) -> None:
        self.serve_config = serve
        self.dir = serve_dir(serve)
        self.control_uds = str(self.dir / "control.sock")
        self.store = SqliteStore(self.dir / "learn.db")
        self.recorder = LearnRecorder(self.store, chat_format.decode, Redactor(serve.redact_literals))
        control = proxy.model_copy(update={"uds": self.control_uds, "strict_sessions": True})
        self.proxy = ProxyServer(engine, chat_format, control, turn_sink=self.recorder)
        self.model_url = ""
        self._lock_file: IO[str] | None = None
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    def start(self) -> None:
        lock = open(self.dir / "serve.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            lock.close()
            raise ConfigError(f"another `lego serve` runs on {self.dir}; stop it or set serve.dir") from exc
        self._lock_file = lock
        # The keys of sessions a predecessor opened died with it (a SIGKILL ran no stop()).
        self.store.end_open_sessions()
        self.proxy.start()
        os.chmod(self.control_uds, 0o600)
        cfg = self.serve_config
        port = self.proxy.listen_tcp(cfg.host, cfg.port)
        host = "127.0.0.1" if cfg.host in ("0.0.0.0", "") else (f"[{cfg.host}]" if ":" in cfg.host else cfg.host)
        self.model_url = f"http://{host}:{port}"
        atomic_write_text(data_dir() / _CURRENT, f"{self.dir.resolve()}\n")
        atomic_write_json(
            self.dir / "serve.json",
            {
                "model_url": self.model_url,
                "control_uds": self.control_uds,
                "pid": os.getpid(),
                "started_at": time.time(),
            },
        )
        self.sweep()
        self._sweeper = threading.Thread(target=self._sweep_hourly, name="lego-serve-retention", daemon=True)
        self._sweeper.start()

    def sweep(self) -> int:
        """Apply ``serve.retention_days`` now; returns the turns deleted."""
        days = self.serve_config.retention_days
        return 0 if days is None else self.store.delete_before(time.time() - days * 86400.0)

    def _sweep_hourly(self) -> None:
        while not self._stop.wait(RETENTION_SWEEP_S):
            self.sweep()

    def stop(self) -> None:
        self._stop.set()
        self.proxy.stop()
        self.recorder.close()
        self.store.end_open_sessions()  # their keys die with this process: no turn follows any more
        self.store.close()
        (self.dir / "serve.json").unlink(missing_ok=True)
        if remembered_dir() is None:  # the pointer named this server (its serve.json is gone now)
            (data_dir() / _CURRENT).unlink(missing_ok=True)
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def __enter__(self) -> LearnServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class OpenedSession:
    """A session `lego serve session new` opened: where a harness points and the key it sends."""

    row: SessionRow
    key: str
    model_url: str

    def env(self) -> dict[str, str]:
        """The environment that points OpenAI- and Anthropic-style harnesses at the session."""
        return {
            "OPENAI_BASE_URL": f"{self.model_url}/v1",
            "OPENAI_API_KEY": self.key,
            "ANTHROPIC_BASE_URL": self.model_url,
            "ANTHROPIC_API_KEY": self.key,
        }


class ControlClient:
    """Talks to a running `lego serve`'s control face (its Unix socket) and registers sessions in its store."""

    def __init__(self, directory: Path, state: dict[str, Any], api_key: str | None = None) -> None:
        self.dir = directory
        self.model_url = str(state["model_url"])
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(state["control_uds"])),
            base_url="http://localhost",
            headers=headers,
            timeout=30.0,
        )

    @classmethod
    def connect(cls, directory: Path, api_key: str | None = None) -> ControlClient:
        state_file = directory / "serve.json"
        why = ServeNotRunningError(f"no `lego serve` is running on {directory}; start it with `lego serve`")
        if not state_file.exists():
            raise why
        client = cls(directory, json.loads(state_file.read_text()), api_key)
        try:
            client.http.get("/healthz").raise_for_status()
        except httpx.HTTPError as exc:
            raise why from exc
        return client

    def new_session(self, *, private: bool, label: str = "", session_id: str | None = None) -> OpenedSession:
        """Register a session in the store (the opt-in), then open it on the server for its key."""
        sid = session_id or f"s-{secrets.token_hex(4)}"
        store = SqliteStore(self.dir / "learn.db")
        try:
            row = store.register_session(sid, private=private, label=label)
            r = self.http.post(f"/s/{sid}", json={})
            if r.status_code != 200:
                raise LegoError(f"lego serve refused to open session {sid!r}: {r.status_code} {r.text}")
            return OpenedSession(row=row, key=str(r.json()["token"]), model_url=self.model_url)
        finally:
            store.close()

    def end_session(self, session_id: str) -> bool:
        """Revoke the session's key (its turns stay in the store, which marks it ended: the judge
        then reads its last turns as the session's end); False: no such open session."""
        if self.http.delete(f"/s/{session_id}").status_code != 200:
            return False
        store = SqliteStore(self.dir / "learn.db")
        try:
            store.end_session(session_id)
        finally:
            store.close()
        return True

    def feedback(self, session_id: str, score: int, turn: int | None = None, text: str = "") -> dict[str, Any]:
        r = self.http.post(f"/s/{session_id}/feedback", json={"score": score, "turn": turn, "text": text})
        if r.status_code != 200:
            raise LegoError(f"feedback refused: {r.status_code} {r.text}")
        return dict(r.json())

    def said(self, session_id: str, text: str) -> bool:
        """Report a message the person is about to send their harness in this session (before sending it):
        the judge then takes a user-role message of a later request as theirs only if it holds one of
        these (:mod:`lego.learn.signals`). False: a private session, which keeps nothing."""
        r = self.http.post(f"/s/{session_id}/said", json={"text": text})
        if r.status_code != 200:
            raise LegoError(f"lego serve refused what was said in session {session_id!r}: {r.status_code} {r.text}")
        return bool(r.json()["kept"])

    def close(self) -> None:
        self.http.close()
