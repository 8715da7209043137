"""Adapter for Qwen Code (npm ``@qwen-code/qwen-code``), run as ``qwen --prompt ... --yolo`` headless.

Qwen Code speaks OpenAI chat completions (streaming) with its own tools (``run_shell_command``,
``read_file``, ``edit``, ``write_file``, ``grep_search``, ...) as function calls. It is pointed at the
proxy by its own settings: ``OPENAI_BASE_URL`` = the session URL, ``OPENAI_API_KEY`` = the session
token, ``OPENAI_MODEL`` = the policy's name, with ``--auth-type openai``. Its global state
(``QWEN_HOME``: settings, chat recordings, memory) lives in the sandbox's private home, where a
``settings.json`` turns off usage statistics, telemetry, auto-update and chat recording. ``--yolo``
approves every tool call, which is right because our sandbox isolates it. ``--max-session-turns``
carries the turn limit; Qwen Code exits 53 when it is reached.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from lego.harnesses.base import InstalledHarness, result_from_exec, sandbox_home
from lego.harnesses.install import InstallSpec
from lego.seams import PreparedRun, Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, Task

__all__ = ["QwenCodeHarness"]

TURN_LIMIT_EXIT = 53  # Qwen Code's exit code when --max-session-turns is reached


class QwenCodeHarness(InstalledHarness):
    name: ClassVar[str] = "qwen-code"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        kind="npm", package="@qwen-code/qwen-code", version="0.24.4", executable="npm/node_modules/.bin/qwen"
    )

    def settings(self, endpoint: Endpoint) -> dict[str, Any]:
        """``$QWEN_HOME/settings.json``: the proxy's model selected, nothing reported or updated."""
        return {
            "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
            "model": {"name": endpoint.model},
            "general": {"enableAutoUpdate": False, "chatRecording": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        }

    def environment(self, endpoint: Endpoint, home: str) -> dict[str, str]:
        return {
            "HOME": home,
            "QWEN_HOME": f"{home}/.qwen",
            "OPENAI_BASE_URL": endpoint.base_url,
            "OPENAI_API_KEY": endpoint.api_key,
            "OPENAI_MODEL": endpoint.model,
            "QWEN_USAGE_STATISTICS_ENABLED": "false",
            "QWEN_TELEMETRY_ENABLED": "false",
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
            # Node compiles WebAssembly (its fetch's HTTP parser, tree-sitter) with ~10 GB address-space
            # reservations, which fail under the sandbox's RLIMIT_AS; inline bounds checks need none
            "NODE_OPTIONS": "--disable-wasm-trap-handler",
            "NO_COLOR": "1",
        }

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        home = sandbox_home(sandbox)
        settings = f"{home}/.qwen/settings.json"
        self.write_file(sandbox, settings, json.dumps(self.settings(endpoint), indent=2))
        return PreparedRun(
            endpoint=endpoint, home=home, env=self.environment(endpoint, home), files={"settings": settings}
        )

    def arguments(self, task: Task, endpoint: Endpoint, max_turns: int) -> list[str]:
        return [
            "--auth-type",
            "openai",
            "--model",
            endpoint.model,
            "--yolo",
            "--output-format",
            "json",
            "--max-session-turns",
            str(max_turns),
            "--prompt",
            task.problem_statement,
        ]

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        argv = [self.executable(), *self.arguments(task, prepared.endpoint, limits.max_turns)]
        res = self.launch(sandbox, prepared, argv, limits.timeout_s)
        return result_from_exec(res, extra_codes={TURN_LIMIT_EXIT: "max_turns"})
