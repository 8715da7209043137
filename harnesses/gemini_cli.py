"""Adapter for Gemini CLI (npm ``@google/gemini-cli``), run as ``gemini --prompt ... --yolo`` headless.

Gemini CLI speaks the Gemini API (``/v1beta/models/{model}:streamGenerateContent?alt=sse``) with its
own tools (``run_shell_command``, ``read_file``, ``replace``, ``write_file``, ...) as
``functionCall`` parts. It is pointed at the proxy by its own settings: ``GOOGLE_GEMINI_BASE_URL`` =
the session's root URL (the client appends ``/v1beta/...``; an http URL is accepted for a local
host) and ``GEMINI_API_KEY`` = the session token, sent as ``x-goog-api-key``, under the
``gemini-api-key`` auth type (headless runs refuse the ``gateway`` type the base URL alone would
pick). ``GEMINI_CLI_HOME`` is the sandbox's private home, where ``.gemini/settings.json`` turns off
usage statistics, telemetry, auto-update, checkpointing and folder trust and carries the turn limit
(``model.maxSessionTurns``; Gemini CLI exits 53 when it is reached). ``--yolo`` approves every tool
call, which is right because our sandbox isolates it.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from lego.harnesses.base import InstalledHarness, result_from_exec, sandbox_home
from lego.harnesses.install import InstallSpec
from lego.seams import PreparedRun, Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, Task

__all__ = ["GeminiCliHarness"]

TURN_LIMIT_EXIT = 53  # Gemini CLI's exit code when model.maxSessionTurns is reached


class GeminiCliHarness(InstalledHarness):
    name: ClassVar[str] = "gemini-cli"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        kind="npm", package="@google/gemini-cli", version="0.61.0", executable="npm/node_modules/.bin/gemini"
    )

    def settings(self, endpoint: Endpoint, max_turns: int) -> dict[str, Any]:
        """``$GEMINI_CLI_HOME/.gemini/settings.json``: the proxy's model, nothing reported or updated."""
        return {
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "model": {"name": endpoint.model, "maxSessionTurns": max_turns},
            "general": {
                "enableAutoUpdate": False,
                "enableAutoUpdateNotification": False,
                "checkpointing": {"enabled": False},
            },
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        }

    def environment(self, endpoint: Endpoint, home: str) -> dict[str, str]:
        return {
            "HOME": home,
            "GEMINI_CLI_HOME": home,
            "GOOGLE_GEMINI_BASE_URL": endpoint.anthropic_base_url,
            "GEMINI_API_KEY": endpoint.api_key,
            "GEMINI_MODEL": endpoint.model,
            "GEMINI_TELEMETRY_ENABLED": "false",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            # Node compiles WebAssembly (its fetch's HTTP parser, tree-sitter) with ~10 GB address-space
            # reservations, which fail under the sandbox's RLIMIT_AS; inline bounds checks need none
            "NODE_OPTIONS": "--disable-wasm-trap-handler",
            "NO_COLOR": "1",
        }

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        home = sandbox_home(sandbox)
        settings = f"{home}/.gemini/settings.json"
        return PreparedRun(
            endpoint=endpoint, home=home, env=self.environment(endpoint, home), files={"settings": settings}
        )

    def arguments(self, task: Task, endpoint: Endpoint) -> list[str]:
        return ["--model", endpoint.model, "--yolo", "--output-format", "json", "--prompt", task.problem_statement]

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        # the settings hold the turn limit, which only run() knows
        settings = self.settings(prepared.endpoint, limits.max_turns)
        self.write_file(sandbox, prepared.files["settings"], json.dumps(settings, indent=2))
        argv = [self.executable(), *self.arguments(task, prepared.endpoint)]
        res = self.launch(sandbox, prepared, argv, limits.timeout_s)
        return result_from_exec(res, extra_codes={TURN_LIMIT_EXIT: "max_turns"})
