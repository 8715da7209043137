"""The real rollout path the red-team attacks go through, built once per test module.

``redteam`` is one :class:`~lego.rollout.Policy` around a scripted engine (the one test double:
it plays the attacker's tool calls; every logprob is still the real tiny model's) behind the real
proxy on a Unix socket in a private temp dir, exactly as ``Policy.start`` serves a policy. Each
attack is then ``RolloutRunner(cfg, policy).run(task, "lego-agent", ...)``: the real ``lego-agent``
process in a real bubblewrap sandbox, grading in a fresh sandbox, guards, a Trajectory.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.config import LegoConfig
from lego.rollout import Policy
from lego.types import Task
from tests.redteam.helpers import RedTeam, RoutedScriptEngine, marked_task
from tests.sandboxes.sbx_fixtures import make_task


@pytest.fixture(scope="module")
def redteam(tiny_model_dir: Path, chat_format: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedTeam]:
    """A served scripted policy and the config its rollouts run under (module-scoped: one proxy)."""
    from lego.engines.transformers_engine import TransformersEngine
    from proxies.server import ProxyServer

    real = TransformersEngine(tiny_model_dir, device="cpu", max_batch_size=8, seed=0)
    engine = RoutedScriptEngine(real, chat_format)
    sock_dir = tempfile.TemporaryDirectory(prefix="lego-proxy-")
    base = LegoConfig()
    proxy_cfg = base.proxy.model_copy(update={"uds": str(Path(sock_dir.name) / "proxy.sock")})
    proxy = ProxyServer(engine, chat_format, proxy_cfg)  # type: ignore[arg-type]
    proxy.start()
    policy = Policy(name="redteam", engine=engine, chat=chat_format, proxy=proxy, model_path=tiny_model_dir)  # type: ignore[arg-type]
    workdir = tmp_path_factory.mktemp("sandboxes")
    rt = RedTeam(policy=policy, engine=engine, cfg=RedTeam.config(base, workdir), workdir=workdir)
    try:
        yield rt
    finally:
        proxy.stop()
        sock_dir.cleanup()
        asyncio.run(real.close())


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    """The calc task with a gold patch that carries a unique marker (so any leak of it is visible)."""
    return marked_task(make_task(tmp_path_factory.mktemp("redteam-task"), name="calc-redteam"))


@pytest.fixture(scope="module")
def victim_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    """A second task whose rollout runs next to (or whose session is open during) an attack."""
    return marked_task(make_task(tmp_path_factory.mktemp("redteam-victim"), name="calc-victim"))
