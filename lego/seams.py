"""The seams between packages: one small Protocol each, no inheritance required.

`proxies`, `harnesses` and `sandboxes` never import each other; they meet here, and the engines
(``lego.engines``) implement the :class:`Engine` defined here. An implementation satisfies a Protocol
by having the methods; mypy checks that where an implementation is handed to its seam.

The Engine seam holds only what every engine does (generate, streaming through ``on_tokens``, score,
close). What only some engines do -- take an in-process state dict (:class:`InProcessWeights`), have
their weights rewritten on the server they talk to (:class:`ServedWeights`), play a task's answer
(:class:`AnswerTaker`) -- is a separate small Protocol, reached through the engine's typed
:attr:`Engine.capabilities`: a frozen :class:`EngineCapabilities` whose fields are the capability
objects (in practice the engine itself, typed as that Protocol) or None. A caller asks
``engine.capabilities.in_process_weights`` and gets a value mypy knows the type of, or None; nothing
probes an engine for methods or flags, and nothing asks which class it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from lego.errors import TaskError
from lego.types import (
    Endpoint,
    ExecResult,
    Generation,
    HarnessLimits,
    HarnessResult,
    MainThreadSpec,
    RequestContext,
    SamplingParams,
    Task,
)

__all__ = [
    "AnswerTaker",
    "Conversing",
    "Engine",
    "EngineCapabilities",
    "Harness",
    "InProcessWeights",
    "LiveCommand",
    "LiveSandbox",
    "PreparedRun",
    "Sandbox",
    "ServedWeights",
    "TaskSource",
    "TokenSink",
]

TokenSink = Callable[[list[int]], None]
"""Called on the caller's event loop with each run of newly sampled ids, in order, as they are
sampled; their concatenation is the finished Generation's ``token_ids``."""


class InProcessWeights(Protocol):
    """An engine whose weights live in this process: the trainer's state dict is copied in
    (``lego.training.weight_sync.InProcessCopy``)."""

    def load_weights(self, state_dict: Mapping[str, Any]) -> int:
        """Load new policy weights (between batches); returns the new policy version."""
        ...


class ServedWeights(Protocol):
    """An engine whose weights live on the server it talks to (`vllm serve`): the weight sync rewrites
    them there through the server's own routes at ``base_url`` (with ``api_key``), then tells the engine
    what it now serves (:meth:`serve`)."""

    @property
    def base_url(self) -> str: ...

    @property
    def api_key(self) -> str | None: ...

    @property
    def model(self) -> str:
        """The name requests use now (the served model, or the current LoRA adapter)."""
        ...

    @property
    def policy_version(self) -> int: ...

    def serve(self, model: str, version: int) -> None:
        """From now on, request ``model`` (the server already serves it) and record ``version``."""
        ...


class AnswerTaker(Protocol):
    """An engine that plays the task's answer (the oracle): its ``generate`` reads the session's gold
    patch from ``context.answer``. The proxy hands a session's answer to such an engine only, and
    refuses ``open_session(..., answer=...)`` for every other (which would hold a secret it has no use
    for)."""

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext,
        on_tokens: TokenSink | None = None,
    ) -> Generation: ...


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine does beyond the :class:`Engine` seam; None: it does not. Each field is the
    capability object (usually the engine itself, typed as that Protocol, so mypy checks it has the
    methods)."""

    in_process_weights: InProcessWeights | None = None
    served_weights: ServedWeights | None = None
    answer_taker: AnswerTaker | None = None


class Engine(Protocol):
    """Serves a policy: token ids in, sampled token ids and their logprobs out. ``generate`` is async
    and may be called many times concurrently.

    ``policy_version`` increases by one each time new weights are served; every Generation records
    the version that produced it. ``capabilities``: what else this engine does (see the module
    docstring); an engine that does nothing more has ``EngineCapabilities()``.
    """

    @property
    def policy_version(self) -> int: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def capabilities(self) -> EngineCapabilities: ...

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        context: RequestContext | None = None,
        on_tokens: TokenSink | None = None,
    ) -> Generation:
        """Sample a continuation of ``prompt_ids``.

        Every engine takes ``on_tokens``: given one, it hands the sampled ids to it, in order, before
        returning the Generation (which holds them all) -- as they are sampled, or all at once for an
        engine whose reply is decided, not sampled. Cancelling the call stops the generation.
        Raises ContextOverflowError if the prompt does not fit, EngineError on failure.
        """
        ...

    async def score(self, sequences: list[list[int]], prompt_lens: list[int], temperature: float) -> list[list[float]]:
        """Logprob of each token after its prompt (teacher forcing), at ``temperature``."""
        ...

    async def close(self) -> None: ...


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


class LiveCommand(Protocol):
    """A command running in a sandbox whose standard input lego keeps open (:meth:`LiveSandbox.start`):
    a harness that waits at its own prompt for the person's next line. Output is what the command
    wrote to its stdout so far (capped as :meth:`Sandbox.exec`'s); stderr is kept apart."""

    def write(self, data: bytes) -> None:
        """Write ``data`` to the command's stdin (raises SandboxError once it has exited or closed it)."""
        ...

    def close_stdin(self) -> None: ...

    def output(self) -> bytes:
        """Everything the command wrote to stdout so far."""
        ...

    def errors(self) -> bytes:
        """Everything the command wrote to stderr so far."""
        ...

    def poll(self) -> int | None:
        """The exit code once the command has been reaped (negative: a signal), else None."""
        ...

    def wait(self, timeout: float | None = None) -> int | None:
        """:meth:`poll` after waiting up to ``timeout`` seconds (None: forever) for the exit."""
        ...

    def kill(self) -> None:
        """Kill the command's process group and every descendant; :meth:`wait` then returns."""
        ...

    def reading_stdin(self) -> bool:
        """Whether the command's own process is, right now, blocked waiting for its stdin with
        everything written so far consumed and no child of it alive: decided by the backend from
        outside the sandbox (the kernel's view of the process), never from the command's output,
        which the agent's own commands can write to."""
        ...

    def close(self) -> None:
        """Kill it if it still runs and release the pipes (idempotent)."""
        ...


@runtime_checkable
class LiveSandbox(Protocol):
    """A sandbox backend that can run a command whose stdin stays open: a capability of some
    backends (the local one); a caller that needs it asks ``isinstance(sandbox, LiveSandbox)`` and
    names the backend when it is missing."""

    def start(
        self, cmd: str | Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> LiveCommand:
        """Start ``cmd`` (a shell string or an argv) inside, as :meth:`Sandbox.exec` would, and return
        at once; the command is killed when the sandbox closes."""
        ...


@dataclass(frozen=True)
class PreparedRun:
    """Everything one rollout's :meth:`Harness.prepare` set up, handed to :meth:`Harness.run` of the same
    rollout. An adapter holds configuration only, so one instance serves concurrent rollouts: state kept
    on the adapter between ``prepare`` and ``run`` is how one rollout's harness ends up talking to
    another rollout's session.

    ``endpoint``: the session this rollout's harness must talk to; ``home``: ``$HOME`` inside the
    sandbox; ``env``: the harness process's environment; ``files``: what ``prepare`` wrote, by role
    (e.g. ``{"config": "/home/.../config.toml"}``), paths inside the sandbox; ``state``: what a
    conversation (:class:`Conversing`) keeps between its calls, e.g. the harness process still waiting
    at its prompt: per rollout, so it lives here and never on the adapter."""

    endpoint: Endpoint
    home: str
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)


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
class Conversing(Protocol):
    """A harness a person can answer once it has finished: the next message of the same conversation
    (what they say after the agent said it is done: "it still fails", "thanks"). The next request
    the proxy sees holds the whole conversation so far and the message, so what the person said is
    the next state of the turn before it.

    Two ways to do it: a harness that saves its conversation and resumes it in a new process
    (lego-agent's ``--resume``), or one whose process stays up and asks at its own prompt what to
    do next (mini-swe-agent), its stdin kept open by the sandbox (:class:`LiveSandbox`). Either way the
    calls of one conversation are :meth:`converse`, any number of :meth:`reply`, then :meth:`end`,
    all with the same ``prepared`` (which holds whatever they keep between calls)."""

    def converse(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        """Start the conversation on ``task``; block until the agent says it is done (the harness then
        waits for the person, :meth:`waiting`) or the harness ended."""
        ...

    def waiting(self, prepared: PreparedRun) -> bool:
        """Whether the harness's own process is still running, waiting at its prompt for the person (so
        what the agent left running is the person's terminal session, not to be killed); False for a
        harness that resumes in a new process and for one that has exited."""
        ...

    def reply(
        self, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits, message: str
    ) -> HarnessResult | None:
        """Go on with the conversation, the person's ``message`` its next user message; block until the
        agent is done again or the harness ended. None: the conversation had already ended (the harness
        exited, e.g. at its step limit) and the message went nowhere."""
        ...

    def end(self, sandbox: Sandbox, prepared: PreparedRun) -> None:
        """The person is done: let a harness still waiting quit as its prompt offers (else kill it).
        Never raises for what the harness did; safe to call after anything (or twice)."""
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
