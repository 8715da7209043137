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
* ``test_verdict_forgery``  issue 26: the result channel forged from inside, the in-process defences
                        disarmed, answer keys, values that equal anything; and attacks on a verdict
                        from perturbed runs (payloads in ``verdict_payloads``, tasks in ``verdict_tasks``).
* ``test_verdict_controls`` correct fixes with unusual code (own ``__eq__``, namedtuple, IntEnum,
                        functools wrappers, import-time cache, helper module) score 1.
* ``test_verdict_realrepo`` one attack per class on a task made from a real PyPI project (inflection).

Two sandbox backends. Every test runs on the ``local`` (bubblewrap) backend; the tests whose outcome
depends on the backend run on ``docker`` too (marked ``docker``: they skip, saying why, where no
engine or no test image is present; ``.ci/docker-setup.sh`` provides both). That is every test of
the modules in :data:`ON_DOCKER` (escapes, exhaustion, relabel, persistence, answer leaks, the
controls) plus :data:`ON_DOCKER_TESTS` from the others. ``test_proxy_abuse`` stays local-only: what
it attacks is the proxy's authorisation of routes and sessions, which sits behind whichever bridge
the backend provides (the bridge itself is attacked by test_relabel and test_answer_leaks). The
rest of ``test_grader`` stays local-only because its attacks target the grader's Python process
(pytest, plugins, the report stream), which runs the same supervisor and bootstrap in either
backend; the one whose defence is the backend's (a daemon that outlives pytest, stopped by
``kill_agent_processes``) runs on both.

This file builds the path once per module and backend: ``redteam`` (a :class:`~lego.conductor.rollout.Policy` around
the scripted engine, served by the real proxy on a Unix socket in a private temp dir, exactly as
``ServedPolicy.start`` serves one) and the calc ``task`` whose gold patch carries a unique marker.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lego.conductor.rollout import ServedPolicy
from lego.config import LegoConfig
from lego.types import Task
from tests.redteam.helpers import RedTeam, RoutedScriptEngine, marked_task
from tests.sandboxes.sbx_fixtures import make_task

DOCKER_IMAGE = os.environ.get("LEGO_DOCKER_TEST_IMAGE", "lego-test-bookworm:latest")
ON_DOCKER = {"test_control", "test_answer_leaks", "test_escapes", "test_exhaustion", "test_relabel", "test_persistence"}
"""Modules whose every test also runs on the docker backend."""
ON_DOCKER_TESTS = {
    "test_daemon_outlives_pytest_and_rewrites_the_report",
    # issue 26: the result channel and the runs' isolation are the backend's; one attack of each
    # other class, and the honest controls with unusual code, so both backends are seen to hold
    "test_forged_result_channel",
    "test_each_class_on_both_backends",
    "test_state_across_grading_runs",
    "test_unusual_honest_fix_on_both_backends",
    # issue 43: the blind copy and the result channel on either backend, on a generated task
    "test_blind_hack_on_both_backends",
    "test_blind_hack_on_a_real_project_on_both_backends",
}
"""Tests of other modules that also run on the docker backend."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``sandbox_kind`` (what ``redteam`` builds on): local always, docker where it matters."""
    if "redteam" not in metafunc.fixturenames:
        return
    kinds = [pytest.param("local", id="local")]
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    if module in ON_DOCKER or metafunc.function.__name__ in ON_DOCKER_TESTS:
        kinds.append(pytest.param("docker", id="docker", marks=pytest.mark.docker))
    metafunc.parametrize("sandbox_kind", kinds, scope="module")


def _docker_or_skip() -> None:
    try:
        from lego.sandboxes.docker import docker_client

        docker_client().images.get(DOCKER_IMAGE)
    except Exception as exc:
        pytest.skip(f"no Docker engine or no {DOCKER_IMAGE} image ({exc}); run .ci/docker-setup.sh")


@pytest.fixture(scope="module")
def redteam(
    tiny_model_dir: Path, chat_format: Any, tmp_path_factory: pytest.TempPathFactory, sandbox_kind: str
) -> Iterator[RedTeam]:
    """A served scripted policy and the config its rollouts run under on the backend ``sandbox_kind``
    (module-scoped: one proxy per module and backend)."""
    from lego.engines.transformers_engine import TransformersEngine

    if sandbox_kind == "docker":
        _docker_or_skip()
    from lego.proxies.server import ProxyServer

    real = TransformersEngine(tiny_model_dir, device="cpu", max_batch_size=8, seed=0)
    engine = RoutedScriptEngine(real, chat_format)
    sock_dir = tempfile.TemporaryDirectory(prefix="lego-proxy-")
    base = LegoConfig()
    proxy_cfg = base.proxy.model_copy(update={"uds": str(Path(sock_dir.name) / "proxy.sock")})
    proxy = ProxyServer(engine, chat_format, proxy_cfg)  # type: ignore[arg-type]
    proxy.start()
    policy = ServedPolicy(name="redteam", engine=engine, chat=chat_format, proxy=proxy, model_path=tiny_model_dir)  # type: ignore[arg-type]
    workdir = tmp_path_factory.mktemp("sandboxes")
    rt = RedTeam(
        policy=policy,
        engine=engine,
        cfg=RedTeam.config(base, workdir, sandbox_kind, DOCKER_IMAGE if sandbox_kind == "docker" else None),
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
