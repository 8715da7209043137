"""Adapter for the built-in reference agent (``lego/harnesses/lego_agent/agent.py``).

The agent is one stdlib-only script, so nothing is installed: ``prepare`` copies it into the
sandbox's private home and ``run`` starts it with the sandbox's ``python3``.
"""

from __future__ import annotations

from importlib.metadata import version as package_version
from pathlib import Path
from typing import ClassVar

from lego.errors import HarnessError
from lego.harnesses.base import json_lines, result_from_exec, sandbox_home
from lego.harnesses.lego_agent import AGENT_FILE
from lego.harnesses.lego_agent.agent import EXIT_MAX_TURNS, EXIT_OVERLONG, FORMAT_VERSION
from lego.seams import PreparedRun, Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, MainThreadSpec, Task, TerminationLabel

__all__ = ["LegoAgentHarness"]


class LegoAgentHarness:
    """Runs ``python3 agent.py --base-url <session URL> --problem <statement>`` in the repo."""

    name: ClassVar[str] = "lego-agent"
    EXIT_LABELS: ClassVar[dict[int, TerminationLabel]] = {EXIT_MAX_TURNS: "max_turns", EXIT_OVERLONG: "overlong"}
    min_memory_mb: int = 0  # plain CPython: the sandbox's own limit is enough
    main_thread: MainThreadSpec | None = None  # the agent always sends its tools: the proxy's default rule finds it

    def __init__(self, python: str = "python3", temperature: float = 1.0, max_tokens: int = 1024) -> None:
        self.python = python
        self.temperature = temperature
        self.max_tokens = max_tokens

    def version(self) -> str:
        return f"{package_version('lego-rl')}+format{FORMAT_VERSION}"

    def ro_binds(self) -> list[Path]:
        """Nothing to bind: the script is copied into the sandbox and runs on its ``python3``."""
        return []

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        home = sandbox_home(sandbox)
        agent_path = f"{home}/.lego-agent/agent.py"
        sandbox.exec(["mkdir", "-p", agent_path.rsplit("/", 1)[0]], timeout=30)
        sandbox.write(agent_path, AGENT_FILE.read_bytes())
        files = {"agent": agent_path, "trajectory": f"{home}/.lego-agent/trajectory.json"}
        return PreparedRun(endpoint=endpoint, home=home, files=files)

    def command(
        self,
        task: Task | None,
        sandbox: Sandbox,
        prepared: PreparedRun,
        limits: HarnessLimits,
        message: str | None = None,
    ) -> list[str]:
        """The agent's argv (the problem statement travels as an argument, so no file lands in the repo;
        the conversation is kept in the sandbox's home). ``message``: go on with that conversation,
        ``message`` the person's next message (:meth:`reply`)."""
        endpoint = prepared.endpoint
        trajectory = prepared.files.get("trajectory")
        keep = ["--trajectory-file", trajectory] if trajectory else []
        if message is None:
            if task is None:
                raise HarnessError("lego-agent: a run needs its task (or a reply its message)")
            problem = task.problem_statement
        else:
            if not trajectory:
                raise HarnessError("lego-agent: a reply needs the conversation of a run prepared by this adapter")
            keep += ["--resume", trajectory]
            problem = message
        return [
            self.python,
            prepared.files["agent"],
            "--base-url",
            endpoint.base_url,
            "--model",
            endpoint.model,
            "--api-key",
            endpoint.api_key,
            "--problem",
            problem,
            "--repo",
            sandbox.repo_dir,
            "--max-turns",
            str(limits.max_turns),
            "--temperature",
            str(self.temperature),
            "--max-tokens",
            str(self.max_tokens),
            "--request-timeout",
            str(max(30.0, limits.timeout_s)),
            *keep,
        ]

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        return self._launch(self.command(task, sandbox, prepared, limits), sandbox, limits)

    def converse(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        """A person's conversation starts as a run (:class:`lego.seams.Conversing`): the agent saves it as it goes."""
        return self.run(task, sandbox, prepared, limits)

    def waiting(self, prepared: PreparedRun) -> bool:
        """Never: its process has exited when a run or reply returns; the next message resumes it."""
        return False

    def reply(self, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits, message: str) -> HarnessResult:
        """The person's next message after the agent finished (:class:`lego.seams.Conversing`): the agent's
        own ``--resume`` of the conversation it wrote."""
        return self._launch(self.command(None, sandbox, prepared, limits, message), sandbox, limits)

    def end(self, sandbox: Sandbox, prepared: PreparedRun) -> None:
        """Nothing runs between messages, so nothing to end."""

    def _launch(self, argv: list[str], sandbox: Sandbox, limits: HarnessLimits) -> HarnessResult:
        res = sandbox.exec(argv, timeout=limits.timeout_s, cwd=sandbox.repo_dir)
        status = [r for r in json_lines(res.stdout) if "lego_agent" in r]
        turns = int(str(status[-1].get("turns", 0))) if status else 0
        return result_from_exec(res, self.EXIT_LABELS, turns=turns)
