"""Adapter for Codex CLI (npm ``@openai/codex``), run as ``codex exec --json`` non-interactive.

Codex speaks the OpenAI Responses API (streaming) with its own tools (``shell`` /
``exec_command``, ``apply_patch``, ...) as function calls. It is pointed at the proxy by a custom
model provider in ``$CODEX_HOME/config.toml`` with ``wire_api = "responses"`` and ``base_url`` =
the session URL (Codex appends ``/responses``); the key comes from the variable named by
``env_key``. Its own sandbox and approvals are bypassed (it runs inside ours). ``CODEX_HOME`` is
in the sandbox's private home, not /tmp (Codex refuses helper binaries under a temp dir).
"""

from __future__ import annotations

import json
from typing import ClassVar

from harnesses.base import InstalledHarness, result_from_exec, sandbox_home
from harnesses.install import InstallSpec
from lego.seams import Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, Task

__all__ = ["CodexHarness"]

PROVIDER_ID = "lego"
KEY_VAR = "LEGO_API_KEY"


def toml_str(value: str) -> str:
    """A TOML basic string (JSON string escapes are valid TOML escapes)."""
    return json.dumps(value)


class CodexHarness(InstalledHarness):
    name: ClassVar[str] = "codex"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        kind="npm", package="@openai/codex", version="0.171.0", executable="npm/node_modules/.bin/codex"
    )

    def __init__(self, context_window: int = 32768) -> None:
        super().__init__()
        self.context_window = context_window

    def config_toml(self, endpoint: Endpoint) -> str:
        """``$CODEX_HOME/config.toml``: the proxy as the only model provider."""
        return "\n".join(
            [
                f"model = {toml_str(endpoint.model)}",
                f"model_provider = {toml_str(PROVIDER_ID)}",
                'approval_policy = "never"',
                'sandbox_mode = "danger-full-access"',
                "check_for_update_on_startup = false",
                f"model_context_window = {self.context_window}",
                "",
                "[analytics]",
                "enabled = false",
                "",
                f"[model_providers.{PROVIDER_ID}]",
                'name = "lego proxy"',
                f"base_url = {toml_str(endpoint.base_url)}",
                f"env_key = {toml_str(KEY_VAR)}",
                'wire_api = "responses"',
                "request_max_retries = 2",
                "stream_max_retries = 2",
                "",
            ]
        )

    def environment(self, endpoint: Endpoint, home: str) -> dict[str, str]:
        return {"HOME": home, "CODEX_HOME": f"{home}/.codex", KEY_VAR: endpoint.api_key, "NO_COLOR": "1"}

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> None:
        self.home = sandbox_home(sandbox)
        self.env = self.environment(endpoint, self.home)
        self.write_file(sandbox, f"{self.home}/.codex/config.toml", self.config_toml(endpoint))

    def run(self, task: Task, sandbox: Sandbox, endpoint: Endpoint, limits: HarnessLimits) -> HarnessResult:
        if not self.home:
            self.prepare(sandbox, endpoint)
        argv = [self.executable(), "exec", "--json", "--skip-git-repo-check"]
        argv += ["--dangerously-bypass-approvals-and-sandbox", "--color", "never", "-C", sandbox.repo_dir]
        argv += [task.problem_statement]
        return result_from_exec(self.launch(sandbox, argv, limits.timeout_s))
