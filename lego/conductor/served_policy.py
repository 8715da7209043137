"""The served policy: an engine, its chat format and the recording proxy in front of it.

Started once per policy and shared by every rollout of it (:class:`lego.conductor.rollout.RolloutRunner`);
it holds configuration and the running servers only, never per-rollout state (that lives in the
proxy session each rollout opens).
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from lego.config import EngineConfig, ProxyConfig
from lego.engines import build_engine
from lego.engines.metered import MeteredEngine
from lego.models.chat import ChatFormat
from lego.paths import owned_tmpdir
from lego.proxies.server import ProxyServer
from lego.seams import Engine

__all__ = ["ServedPolicy"]


@dataclass
class ServedPolicy:
    """A served policy: its engine, its chat format and the recording proxy in front of it.

    The proxy's control face listens on a Unix socket in a private temp dir (the trainer's side:
    sessions are opened, read and closed there); sandboxes bind only its model face
    (:attr:`model_uds`), where a session's token reaches that session's model routes and nothing else.
    """

    name: str
    engine: Engine
    chat: ChatFormat
    proxy: ProxyServer
    model_path: Path | None
    meter: MeteredEngine | None = None
    """The proxy's view of ``engine``: how long it had generations in flight (``perf/engine_busy``)."""
    owns_engine: bool = True
    """:meth:`close` closes the engine too (not when someone else serves it: :meth:`around`)."""
    _tmp: Path | None = field(default=None, repr=False)

    @classmethod
    def start(cls, engine_cfg: EngineConfig, proxy_cfg: ProxyConfig, name: str = "policy") -> ServedPolicy:
        """Build the engine named by ``engine_cfg`` (``lego.engines.build_engine``) and start a proxy."""
        from lego.models.tiny import resolve_model  # torch: imported here, so Ray workers (drive only) stay light

        model_path = resolve_model(engine_cfg.model)
        chat = ChatFormat.from_pretrained(model_path, engine_cfg.chat_template, engine_cfg.tool_parser)
        engine = build_engine(engine_cfg)
        meter = MeteredEngine(engine)
        tmp = owned_tmpdir("lego-proxy-")
        # Strict: rollouts open every session explicitly, so a request naming any other is a bug or an
        # attack, answered 404 rather than recorded into a session of its own making.
        cfg = proxy_cfg.model_copy(update={"uds": str(tmp / "proxy.sock"), "strict_sessions": True})
        proxy = ProxyServer(meter, chat, cfg)
        proxy.start()
        return cls(name=name, engine=engine, chat=chat, proxy=proxy, model_path=model_path, meter=meter, _tmp=tmp)

    @classmethod
    def around(cls, engine: Engine, chat: ChatFormat, proxy_cfg: ProxyConfig, name: str = "policy") -> ServedPolicy:
        """A recording proxy of its own in front of an engine that is served and closed elsewhere (`lego
        serve --learn`'s held-out check samples the weights it serves): :meth:`close` stops the proxy only."""
        tmp = owned_tmpdir("lego-proxy-")
        cfg = proxy_cfg.model_copy(update={"uds": str(tmp / "proxy.sock"), "strict_sessions": True})
        proxy = ProxyServer(engine, chat, cfg)
        proxy.start()
        return cls(name=name, engine=engine, chat=chat, proxy=proxy, model_path=None, owns_engine=False, _tmp=tmp)

    @property
    def model_uds(self) -> Path:
        """The model face's socket: the only proxy socket a sandbox is given."""
        return Path(self.proxy.model_uds)

    def close(self) -> None:
        self.proxy.stop()
        if self.owns_engine:
            asyncio.run(self.engine.close())
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
