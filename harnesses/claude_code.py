"""Adapter for Claude Code (npm ``@anthropic-ai/claude-code``), run as ``claude -p`` headless.

Claude Code speaks the Anthropic Messages API (streaming) with its own tools (Bash, Read, Edit,
Write, Grep, Glob, Task, ...) as ``tool_use`` blocks. It is pointed at the proxy by
``ANTHROPIC_BASE_URL`` (no ``/v1``: the client appends it) with a dummy key; every model alias
(main, the small/fast model used for titles and summaries, subagents) is the policy's name;
nonessential traffic, experimental API betas (server-side features a local policy cannot
serve), telemetry and the auto-updater are off; its config lives in a scratch
``CLAUDE_CONFIG_DIR`` in the sandbox's private home. ``IS_SANDBOX=1`` lets
``--dangerously-skip-permissions`` run as root, which is right because our sandbox isolates it.

With ``intercept=True`` the base-URL setting is left out: Claude Code calls api.anthropic.com as
shipped, and :class:`lego.harnesses.intercept.Interceptor` routes that host to the session.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from lego.harnesses.base import InstalledHarness, json_lines, result_from_exec, sandbox_home
from lego.harnesses.install import InstallSpec
from lego.harnesses.intercept import Interceptor
from lego.seams import PreparedRun, Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, Task

__all__ = ["ClaudeCodeHarness"]


class ClaudeCodeHarness(InstalledHarness):
    name: ClassVar[str] = "claude-code"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        kind="npm", package="@anthropic-ai/claude-code", version="2.1.332", executable="npm/node_modules/.bin/claude"
    )
    min_memory_mb: int = 16384  # a Bun binary: under a 4 GB RLIMIT_AS it dies at random (SIGILL)

    def __init__(self, intercept: bool = False) -> None:
        self.interceptor = Interceptor() if intercept else None

    def ro_binds(self) -> list[Path]:
        return super().ro_binds() + (self.interceptor.ro_binds() if self.interceptor else [])

    def environment(self, endpoint: Endpoint, home: str) -> dict[str, str]:
        model = endpoint.model
        env = {
            "HOME": home,
            "CLAUDE_CONFIG_DIR": f"{home}/.claude",
            "ANTHROPIC_BASE_URL": endpoint.anthropic_base_url,
            "ANTHROPIC_API_KEY": endpoint.api_key,
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "CLAUDE_CODE_SUBAGENT_MODEL": model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "IS_SANDBOX": "1",
            "NO_COLOR": "1",
        }
        if self.interceptor is not None:
            del env["ANTHROPIC_BASE_URL"]
        return env

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        home = sandbox_home(sandbox)
        env = self.environment(endpoint, home)
        if self.interceptor is not None:
            env.update(self.interceptor.start(sandbox, endpoint))
        return PreparedRun(endpoint=endpoint, home=home, env=env)

    def arguments(self, task: Task, endpoint: Endpoint, max_turns: int) -> list[str]:
        return [
            "-p",
            task.problem_statement,
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--model",
            endpoint.model,
            "--max-turns",
            str(max_turns),
        ]

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        argv = [self.executable(), *self.arguments(task, prepared.endpoint, limits.max_turns)]
        res = self.launch(sandbox, prepared, argv, limits.timeout_s)
        result = result_from_exec(res)
        final = [e for e in json_lines(res.stdout) if e.get("type") == "result"]
        if final:
            turns = final[-1].get("num_turns")
            result.turns = turns if isinstance(turns, int) else 0
            if final[-1].get("subtype") == "error_max_turns" and result.reason != "timeout":
                result.reason = "max_turns"
        return result
