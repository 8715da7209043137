"""The seams between packages: one small Protocol each, no inheritance required.

`proxies`, `harnesses` and `sandboxes` never import each other; they meet here. An implementation
satisfies a Protocol by having the methods (checked with ``isinstance`` where it matters, since the
Protocols are runtime-checkable).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from lego.engines.base import Engine
from lego.errors import TaskError
from lego.types import Endpoint, ExecResult, HarnessLimits, HarnessResult, MainThreadSpec, Task

__all__ = ["Engine", "Harness", "PreparedRun", "Sandbox", "TaskSource"]


@runtime_checkable
class Sandbox(Protocol):
    """A fresh, isolated working copy of one task's repository.

    ``root`` is the repo on the host; ``repo_dir`` is the same directory as seen by commands run
    inside the sandbox. ``proxy_port`` is the loopback port inside the sandbox that reaches the
    recording proxy (None when the sandbox was created without a proxy bridge). ``history_strip``:
    whether the repo the agent sees was verified, when the backend built it, to hold one commit, no
    remotes, no reflog and no object of any other commit (the ``history_strip`` guard).
    """

    root: Path
    repo_dir: str
    proxy_port: int | None
    history_strip: bool

    def exec(
        self,
        cmd: str | Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a shell string or an argv) inside, ``stdin`` on its standard input (else it reads
        nothing); kill its whole process group on timeout."""
        ...

    def read(self, path: str) -> bytes:
        """Read a file (path relative to ``repo_dir``, or absolute inside the sandbox)."""
        ...

    def write(self, path: str, data: bytes) -> None:
        """Write a file (path relative to ``repo_dir``, or absolute inside the sandbox)."""
        ...

    def diff(self) -> str:
        """The agent's changes against the base commit, untracked files included, as a git patch."""
        ...

    def kill_agent_processes(self) -> None:
        """Kill every process started inside (the agent's, daemons included); the files stay for
        :meth:`diff`. Called when the harness returns, before the diff is taken, so nothing the agent
        left running can write to the repo or its session afterwards."""
        ...

    def close(self) -> None:
        """Kill everything still running and delete the sandbox."""
        ...


@dataclass(frozen=True)
class PreparedRun:
    """Everything one rollout's :meth:`Harness.prepare` set up, handed to :meth:`Harness.run` of the same
    rollout. An adapter holds configuration only, so one instance serves concurrent rollouts: state kept
    on the adapter between ``prepare`` and ``run`` is how one rollout's harness ends up talking to
    another rollout's session.

    ``endpoint``: the session this rollout's harness must talk to; ``home``: ``$HOME`` inside the
    sandbox; ``env``: the harness process's environment; ``files``: what ``prepare`` wrote, by role
    (e.g. ``{"config": "/home/.../config.toml"}``), paths inside the sandbox."""

    endpoint: Endpoint
    home: str
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class Harness(Protocol):
    """An unmodified agent harness, driven through configuration only; holds no per-rollout state.

    ``min_memory_mb``: the least per-process address space (RLIMIT_AS) the harness runs under; the
    sandbox gets at least that (Bun-built CLIs reserve several GB at start and die at random under
    less); 0: the sandbox's own limit. ``main_thread``: how the proxy tells the harness's main
    conversation from its side calls when its default rule cannot (a harness whose main request has
    no tools); None: the default rule."""

    name: str
    min_memory_mb: int
    main_thread: MainThreadSpec | None

    def ro_binds(self) -> list[Path]:
        """Host paths whoever creates the sandbox must bind read-only (same path inside) for the harness
        to run: its install dir, an interpreter outside /usr; empty for a harness that brings nothing."""
        ...

    def version(self) -> str:
        """The installed harness version (recorded on every trajectory)."""
        ...

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        """Write env files / config files so the harness talks to ``endpoint``; return them for :meth:`run`.
        Never patches the harness."""
        ...

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        """Launch the harness's own CLI (or SDK entry point) on ``task`` inside ``sandbox`` as ``prepared``
        set it up; block until it ends."""
        ...


@runtime_checkable
class TaskSource(Protocol):
    """Yields :class:`Task` records (SWE-bench JSONL shape) and makes them ready to run.

    ``records`` lists a split without touching any repo (fast, for listing and sampling);
    ``materialize`` makes one record ready (its ``repo_path`` a local checkout: a shipped suite builds
    it then, a JSONL record is ready as read); ``tasks`` and ``get`` return ready tasks. ``errors``
    holds the malformed records that were skipped (each names its line and the reason)."""

    name: str
    errors: list[TaskError]

    def splits(self) -> list[str]:
        """The split names this source holds."""
        ...

    def records(self, split: str | None = None) -> list[Task]:
        """The records of ``split`` (default: the source's own split; None: all), repos not yet made."""
        ...

    def materialize(self, task: Task) -> Task:
        """``task`` ready to run: ``repo_path`` set to a local checkout where the source provides one."""
        ...

    def tasks(self, split: str | None = None) -> Iterator[Task]:
        """The ready tasks of ``split``: :meth:`materialize` of each of :meth:`records`."""
        ...

    def get(self, instance_id: str) -> Task:
        """One ready task by id, or a :class:`~lego.errors.TaskError` naming the fix."""
        ...
