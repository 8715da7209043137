"""The red-team suite: attacks a hostile policy would try, each through the real rollout path.

Run it with ``.venv/bin/python -m pytest -q tests/redteam`` (a few minutes on 2 cores; Linux with
bubblewrap). Every attack is one rollout (two for the concurrency one): a scripted engine plays the
attacker's tool calls -> the real proxy -> the real ``lego-agent`` in a real bubblewrap sandbox ->
``RolloutRunner`` grading in a fresh sandbox -> guards -> a Trajectory. Each test asserts the
secure outcome (reward 0 / blocked / ``cause == "policy"``), never the attack's mechanics, so it
holds whichever defence lands. What each file covers:

* ``test_control``      the legitimate fix scores 1, cause "policy" (calc, starter and builtin tasks).
* ``test_answer_leaks`` gold patch and hidden tests: proxy control routes found via /proc, another
                        session's id, host run dirs, the pristine .git, environment variables.
* ``test_proxy_abuse``  DELETE / create sessions, sampling and turn-limit overrides, floods, a
                        concurrent honest rollout next to an attacker.
* ``test_grader``       fake pytest, config files, plugins, dist-info entry points, import-time and
                        exit-time report forging, a daemon outliving pytest, always-equal values,
                        patched builtins, skipped / deleted / edited / symlinked tests.
* ``test_escapes``      kernel settings, host paths, uid map and capabilities, nested user
                        namespaces, mountinfo, ptrace and host processes, network, setuid binaries.
* ``test_exhaustion``   disk, every tmpfs together, fork bomb, memory across processes (all bounded).
* ``test_relabel``      self-inflicted failures (killing the harness or the bridge, files colliding
                        with the hidden tests, a repo git cannot diff) stay the policy's, reward 0.
* ``test_persistence``  daemons that write the fix or call the model after the harness returned.

This file builds the path once per module: ``redteam`` (a :class:`~lego.conductor.rollout.Policy` around
the scripted engine, served by the real proxy on a Unix socket in a private temp dir, exactly as
``Policy.start`` serves one) and the calc ``task`` whose gold patch carries a unique marker.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.conductor.rollout import Policy
from lego.config import LegoConfig
from lego.types import Task
from tests.redteam.helpers import RedTeam, RoutedScriptEngine, marked_task
from tests.sandboxes.sbx_fixtures import make_task


@pytest.fixture(scope="module")
def redteam(tiny_model_dir: Path, chat_format: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedTeam]:
    """A served scripted policy and the config its rollouts run under (module-scoped: one proxy)."""
    from lego.engines.transformers_engine import TransformersEngine
    from lego.proxies.server import ProxyServer

    real = TransformersEngine(tiny_model_dir, device="cpu", max_batch_size=8, seed=0)
    engine = RoutedScriptEngine(real, chat_format)
    sock_dir = tempfile.TemporaryDirectory(prefix="lego-proxy-")
    base = LegoConfig()
    proxy_cfg = base.proxy.model_copy(update={"uds": str(Path(sock_dir.name) / "proxy.sock")})
    proxy = ProxyServer(engine, chat_format, proxy_cfg)  # type: ignore[arg-type]
    proxy.start()
    policy = Policy(name="redteam", engine=engine, chat=chat_format, proxy=proxy, model_path=tiny_model_dir)  # type: ignore[arg-type]
    workdir = tmp_path_factory.mktemp("sandboxes")
    rt = RedTeam(
        policy=policy,
        engine=engine,
        cfg=RedTeam.config(base, workdir),
        workdir=workdir,
        proxy_dir=Path(sock_dir.name),
    )
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
