"""The harness registry and what every adapter shares: launching the harness in the sandbox and
turning how it ended into a :class:`~lego.types.HarnessResult`.

An adapter implements :class:`lego.seams.Harness` (``name``, ``version()``, ``prepare``, ``run``,
``ro_binds()``: the host paths whoever creates the sandbox must bind read-only for it,
``min_memory_mb``: the least per-process address-space limit it runs under, Bun-built CLIs reserve
several GB of virtual memory at start, and ``main_thread``: a :class:`~lego.types.MainThreadSpec`
for a harness whose main request the proxy's default rule cannot tell apart, None otherwise).
It only writes environment variables and config files and launches the harness's own CLI or SDK
entry point inside the sandbox; it never patches the harness. An adapter holds configuration only:
``prepare`` returns a :class:`~lego.seams.PreparedRun` (home, environment, files written) that
``run`` of the same rollout receives, so one cached adapter serves any number of concurrent rollouts. Installs live under
``lego.paths.data_dir()/harnesses/<name>/`` (see :mod:`lego.harnesses.install`), which the sandbox
binds read-only at the same path.
"""

from __future__ import annotations

import inspect
import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from lego.errors import ConfigError, HarnessError
from lego.harnesses.install import InstallSpec, installed_version
from lego.registry import Registry
from lego.seams import Harness, PreparedRun, Sandbox
from lego.types import ExecResult, HarnessResult, MainThreadSpec, TerminationLabel

__all__ = [
    "HARNESSES",
    "LOG_TAIL_CHARS",
    "InstalledHarness",
    "get_harness",
    "install_spec_of",
    "json_lines",
    "log_tail",
    "result_from_exec",
    "sandbox_home",
]

HARNESSES = Registry(
    "harness",
    {
        "lego-agent": "lego.harnesses.lego_agent_adapter:LegoAgentHarness",
        "mini-swe-agent": "lego.harnesses.mini_swe_agent:MiniSweAgentHarness",
        "aider": "lego.harnesses.aider:AiderHarness",
        "openhands": "lego.harnesses.openhands:OpenHandsHarness",
        "opencode": "lego.harnesses.opencode:OpenCodeHarness",
        "claude-code": "lego.harnesses.claude_code:ClaudeCodeHarness",
        "codex": "lego.harnesses.codex:CodexHarness",
        "qwen-code": "lego.harnesses.qwen_code:QwenCodeHarness",
        "gemini-cli": "lego.harnesses.gemini_cli:GeminiCliHarness",
    },
)
"""Harness name -> adapter class. A ``module:Class`` path works too."""

LOG_TAIL_CHARS = 6000


def get_harness(name: str, **options: Any) -> Harness:
    """Build the adapter registered as ``name`` (or a ``module:Class`` path) with its constructor
    ``options`` (``harness.options.<name>`` in the config, e.g. ``max_tokens`` for lego-agent)."""
    cls = HARNESSES.resolve(name)
    try:
        harness = cls(**options)
    except TypeError as exc:
        params = [p for p in inspect.signature(cls).parameters if p != "self"]
        raise ConfigError(
            f"harness.options.{name} = {options} does not fit {cls.__name__}: {exc}; "
            f"valid options: {', '.join(params) or 'none'}"
        ) from exc
    if not isinstance(harness, Harness):
        raise HarnessError(f"{name!r} does not implement the Harness protocol (name, version, prepare, run)")
    return harness


def install_spec_of(name: str) -> InstallSpec | None:
    """How the harness registered as ``name`` is installed; None for one that needs no install
    (the built-in lego-agent)."""
    cls = HARNESSES.resolve(name)
    return cls.install_spec if isinstance(cls, type) and issubclass(cls, InstalledHarness) else None


def log_tail(result: ExecResult, limit: int = LOG_TAIL_CHARS) -> str:
    """The last ``limit`` characters of a run's stdout and stderr, labelled."""
    text = f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def result_from_exec(
    result: ExecResult, extra_codes: Mapping[int, TerminationLabel] | None = None, turns: int = 0
) -> HarnessResult:
    """Map a harness process's end onto a termination label.

    Timeout -> ``timeout``; exit 0 -> ``completed``; a code the adapter knows (``extra_codes``,
    e.g. lego-agent's "turn limit reached") -> that label; any other non-zero exit or a crash ->
    ``harness_error`` with the log excerpt.
    """
    if result.timed_out:
        reason: TerminationLabel = "timeout"
    elif result.exit_code == 0:
        reason = "completed"
    else:
        reason = (extra_codes or {}).get(result.exit_code, "harness_error")
    return HarnessResult(
        exit_code=None if result.timed_out else result.exit_code,
        reason=reason,
        logs=log_tail(result),
        wall_s=result.wall_s,
        turns=turns,
    )


def sandbox_home(sandbox: Sandbox) -> str:
    """``$HOME`` as seen inside the sandbox (private per sandbox), where config files go."""
    res = sandbox.exec(["sh", "-c", 'printf %s "$HOME"'], timeout=30)
    home = res.stdout.strip()
    if res.exit_code != 0 or not home.startswith("/"):
        raise HarnessError(f"cannot read $HOME inside the sandbox (exit {res.exit_code}): {res.stderr[-500:]}")
    return home


class InstalledHarness:
    """Shared plumbing for adapters of harnesses installed under the lego data dir.

    Subclasses set ``name`` and ``install_spec`` and implement ``prepare`` / ``run``; the
    variables ``prepare`` computed travel in its :class:`~lego.seams.PreparedRun`, and :meth:`launch`
    passes them to the harness process.
    """

    name: ClassVar[str]
    install_spec: ClassVar[InstallSpec]
    min_memory_mb: int = 0
    """Least per-process address space (RLIMIT_AS) the harness runs under; 0: the sandbox default."""
    main_thread: MainThreadSpec | None = None
    """How the proxy finds the main conversation when its default rule cannot; None: the default rule."""

    def version(self) -> str:
        return installed_version(self.name)

    @property
    def install_dir(self) -> Path:
        return self.install_spec.install_dir(self.name)

    def ro_binds(self) -> list[Path]:
        """Host paths the sandbox must bind read-only (same path inside) for this harness to run:
        its install dir and, for a venv on an interpreter outside /usr, that interpreter's prefix."""
        binds = [self.install_dir]
        if self.install_spec.kind == "pip":
            prefix = Path(self.install_spec.python).resolve().parent.parent
            if not str(prefix).startswith("/usr"):
                binds.append(prefix)
        return binds

    def executable(self) -> str:
        """Absolute path of the harness entry point (same path inside the sandbox: read-only bind)."""
        path = self.install_spec.executable_path(self.name)
        if not path.exists():
            raise HarnessError(f"{self.name} is not installed ({path} missing); run `lego harness install {self.name}`")
        return str(path)

    def write_file(self, sandbox: Sandbox, path: str, text: str) -> None:
        """Write a config file inside the sandbox (an absolute path there, outside the repo)."""
        parent = str(Path(path).parent)
        res = sandbox.exec(["mkdir", "-p", parent], timeout=30)
        if res.exit_code != 0:
            raise HarnessError(f"cannot create {parent} in the sandbox: {res.stderr[-500:]}")
        sandbox.write(path, text.encode())

    def launch(
        self,
        sandbox: Sandbox,
        prepared: PreparedRun,
        argv: Sequence[str],
        timeout: float,
        extra_env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run the harness inside the sandbox from the repo directory, stdin closed, in ``prepared``'s environment."""
        env = {**prepared.env, **(extra_env or {})}
        cmd = " ".join(shlex.quote(a) for a in argv) + " < /dev/null"
        return sandbox.exec(["bash", "-c", cmd], env=env, timeout=timeout, cwd=sandbox.repo_dir)


def json_lines(text: str) -> list[dict[str, object]]:
    """Parse the JSON objects in a JSON-lines stream (harness event logs), skipping other lines."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out
