"""Rollouts fanned out over Ray (``training.rollout_backend = "ray"``; needs the ``ray`` extra).

Same jobs, same results as :meth:`lego.conductor.rollout.RolloutRunner.run_many`; only where the sandbox
half of each rollout runs changes. One rollout is split at the seam the threads backend already has:

* driver (this process: engine, proxy, trainer) — opens the proxy session (on the control face,
  which never leaves this process) and sends its model-face token with the job; when the worker is done,
  :meth:`RolloutRunner.finish` reads the recorded trajectory from its own proxy and fills in label,
  grade, guards and timings, then closes the session. The token-exact trajectory never crosses
  the wire, and its fields are exactly the threads backend's.
* worker (one Ray task = one rollout) — starts a forwarder
  ``socat UNIX-LISTEN:<tmp>/proxy.sock,fork TCP:<driver>:<port>``, then runs
  :func:`lego.conductor.drive.drive_and_grade` (fresh sandbox → harness → diff → grade in another fresh
  sandbox) with that socket as the proxy, and returns the :class:`~lego.conductor.drive.DriveOutcome`.

The driver's proxy keeps its control face on a private Unix socket and serves its *model face* on
TCP at ``proxy.host:proxy.port`` (:meth:`lego.proxies.server.ProxyServer.listen_tcp`): model routes only,
each request bound by its token to one session, so the TCP listener exposes no control route.
Workers dial ``proxy.host``, or the driver's node IP when it is a wildcard (``0.0.0.0``/``::``). The
default ``127.0.0.1`` only serves a one-node cluster; for several nodes set ``proxy.host`` to a
routable address. Workers need the project installed, the task repos at the same paths, and
bubblewrap + socat, like the driver's own machine for the threads backend.

At most ``concurrency`` rollouts are in flight (the driver submits the next as one finishes), each
a Ray task asking for one CPU. A task that crashes or loses its worker is recorded as ``env_error``
with cause ``infrastructure`` (retried by the training loop), as the threads backend does; what the
agent caused on the worker is attributed by :meth:`RolloutRunner.finish` on the driver, from the
:class:`~lego.conductor.drive.DriveOutcome` and what the driver's proxy recorded, exactly as for threads.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lego.conductor.rollout import (
    DriveJob,
    DriveOutcome,
    RolloutOptions,
    RolloutRunner,
    crashed_trajectory,
    drive_and_grade,
)
from lego.config import LegoConfig
from lego.errors import ConfigError
from lego.proxies.server import is_loopback
from lego.types import Task, Trajectory

__all__ = ["RayRolloutRunner", "ray_runner", "run_rollout_task"]

log = logging.getLogger("lego.conductor.ray_rollout")

_WILDCARDS = ("0.0.0.0", "::", "")
_FORWARDER_WAIT_S = 10.0

_RUNNERS: weakref.WeakKeyDictionary[RolloutRunner, RayRolloutRunner] = weakref.WeakKeyDictionary()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            "training.rollout_backend='ray' needs Ray; install the extra: pip install 'lego[ray]' "
            "(or set training.rollout_backend='threads')"
        ) from exc
    return ray


def ray_runner(runner: RolloutRunner, address: str | None = None) -> RayRolloutRunner:
    """The Ray backend of ``runner`` (one per runner: its proxy listener is opened once)."""
    if runner not in _RUNNERS:
        _RUNNERS[runner] = RayRolloutRunner(runner, address=address)
    return _RUNNERS[runner]


class RayRolloutRunner:
    """Runs the rollouts of ``runner``'s policy as Ray tasks (see the module doc).

    Connects to Ray at ``address`` unless Ray is already initialised in this process (a test or the
    caller's own ``ray.init`` wins), and opens the proxy's TCP listener."""

    def __init__(self, runner: RolloutRunner, address: str | None = None) -> None:
        ray = _import_ray()
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False)
        self.runner = runner
        proxy = runner.policy.proxy
        host = proxy.config.host
        port = proxy.listen_tcp(host, proxy.config.port)
        dial = ray.util.get_node_ip_address() if host in _WILDCARDS else host
        if is_loopback(dial) and len([n for n in ray.nodes() if n.get("Alive")]) > 1:
            log.warning(
                "the proxy listens on %s but the Ray cluster has several nodes: rollouts on other nodes "
                "cannot reach it; set proxy.host to a routable address",
                dial,
            )
        self.proxy_addr = (dial, port)
        self._task = ray.remote(num_cpus=1, max_retries=0)(run_rollout_task)

    @property
    def cfg(self) -> LegoConfig:
        return self.runner.cfg

    def run(self, task: Task, harness_name: str, opts: RolloutOptions) -> Trajectory:
        """One rollout on a Ray worker."""
        return self.run_many([(task, harness_name, opts)], 1)[0]

    def run_many(
        self,
        jobs: Sequence[tuple[Task, str, RolloutOptions]],
        concurrency: int,
        on_done: Callable[[int, Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        """Run ``jobs`` as Ray tasks with at most ``concurrency`` in flight; results in job order. Stragglers
        are cut as on the threads backend (the sessions live in this process's proxy)."""
        ray = _import_ray()
        runner, proxy = self.runner, self.runner.policy.proxy
        watch = runner.straggler_watch(len(jobs))
        out: list[Trajectory | None] = [None] * len(jobs)
        pending: dict[Any, tuple[int, str, float]] = {}  # object ref -> (job index, session id, t0)

        def record(i: int, traj: Trajectory) -> None:
            out[i] = traj
            if on_done is not None:
                on_done(i, traj)

        def crashed(i: int, exc: BaseException) -> Trajectory:
            task, harness, _ = jobs[i]
            log.error("rollout %s/%s crashed: %s", task.instance_id, harness, exc)
            return crashed_trajectory(task, harness, runner.policy.name, exc)

        nxt = 0
        try:
            watch.__enter__()
            while nxt < len(jobs) or pending:
                while nxt < len(jobs) and len(pending) < max(1, concurrency):
                    i, (task, harness, opts) = nxt, jobs[nxt]
                    nxt += 1
                    t0 = time.monotonic()
                    try:
                        sid, token = runner.open_session(task, harness, opts)
                    except Exception as exc:  # as the threads backend: a bug below must not kill the batch
                        record(i, crashed(i, exc))
                        continue
                    watch.started(sid)
                    job = DriveJob(self.cfg, task, harness, sid, token, opts, proxy.config)
                    ref = self._task.remote(job, self.proxy_addr)
                    pending[ref] = (i, sid, t0)
                if not pending:
                    continue
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    i, sid, t0 = pending.pop(ref)
                    try:
                        outcome: DriveOutcome = ray.get(ref)
                        traj = runner.finish(sid, jobs[i][1], outcome, t0)
                    except Exception as exc:  # RayTaskError, a lost worker, a bug in finish
                        traj = crashed(i, exc)
                    finally:
                        watch.ended(sid)
                        proxy.close_session(sid)
                    record(i, traj)
        finally:
            watch.__exit__(None, None, None)
            for ref, (_, sid, _) in pending.items():  # interrupted: stop the workers, free the sessions
                ray.cancel(ref, force=True)
                proxy.close_session(sid)
        return [t for t in out if t is not None]


def run_rollout_task(job: DriveJob, proxy_addr: tuple[str, int]) -> DriveOutcome:
    """The body of one Ray task: bridge the driver's model face into a local Unix socket, then drive and
    grade ``job``'s session with its token (the only key the worker's sandbox is given).

    A forwarder that cannot start is an ``env_error`` outcome, like a sandbox that cannot be built."""
    from lego.harnesses.base import get_harness

    with tempfile.TemporaryDirectory(prefix="lego-ray-proxy-") as tmp:
        sock = Path(tmp) / "proxy.sock"
        try:
            forwarder = _start_forwarder(sock, *proxy_addr)
        except ConfigError as exc:  # no bridge to the proxy: the sandbox cannot be set up, before the agent exists
            return DriveOutcome.failed("sandbox", f"{type(exc).__name__}: {exc}")
        try:
            harness = get_harness(job.harness_name, **job.cfg.harness.options_for(job.harness_name))
            return drive_and_grade(job, harness, proxy_uds=sock)
        finally:
            forwarder.terminate()
            try:
                forwarder.wait(timeout=5)
            except subprocess.TimeoutExpired:
                forwarder.kill()
                forwarder.wait()


def _start_forwarder(sock: Path, host: str, port: int) -> subprocess.Popen[bytes]:
    """``socat`` listening on ``sock`` (one connection per request, ``fork``) and dialling ``host:port``.

    Mode 666 as uvicorn gives its own socket: the private temp dir guards it on the host, and a
    sandbox running as another uid (docker) can still connect through its bind mount."""
    socat = shutil.which("socat")
    if socat is None:
        raise ConfigError("socat is not installed on this Ray worker; install it (apt-get install socat)")
    target = f"TCP6:[{host}]:{port}" if ":" in host else f"TCP4:{host}:{port}"
    proc = subprocess.Popen(
        [socat, f"UNIX-LISTEN:{sock},fork,mode=666", target], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + _FORWARDER_WAIT_S
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            err = proc.communicate()[1].decode(errors="replace")[-1000:]
            raise ConfigError(f"the proxy forwarder {sock} -> {host}:{port} did not start: {err or 'timed out'}")
        time.sleep(0.01)
    return proc
