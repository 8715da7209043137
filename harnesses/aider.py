"""Adapter for aider (Aider-AI/aider), run as its own `aider` CLI in one-shot mode (``--message``).

aider speaks OpenAI chat completions through litellm and uses no tool calls: the model answers in
text and aider applies the SEARCH/REPLACE blocks (its ``diff`` edit format) to the files. Shell
commands the model suggests are never run unattended (aider requires an explicit yes for them), so
edits are the only action.

Pointed at the proxy with ``--openai-api-base`` and model ``openai/<name>``; every prompt answered
(``--yes-always``), no update check, analytics, git commits, lint pass, URL scraping, release notes
or browser; litellm's local cost map so nothing is fetched.
"""

from __future__ import annotations

from typing import ClassVar

from lego.harnesses.base import InstalledHarness, result_from_exec, sandbox_home
from lego.harnesses.install import InstallSpec
from lego.seams import PreparedRun, Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, MainThreadSpec, Task

__all__ = ["AiderHarness"]


class AiderHarness(InstalledHarness):
    name: ClassVar[str] = "aider"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        kind="pip", package="aider-chat", version="0.86.2", executable="venv/bin/aider"
    )
    main_thread: MainThreadSpec | None = MainThreadSpec(system_contains="Act as an expert software developer.")
    """aider's main request carries no tools, so any request with tools would outrank it by default;
    the opening line of its edit-format system prompt names it (see :mod:`lego.proxies.recorder`)."""

    def environment(self, endpoint: Endpoint, home: str) -> dict[str, str]:
        return {
            "HOME": home,
            "OPENAI_API_KEY": endpoint.api_key,
            "OPENAI_API_BASE": endpoint.base_url,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "AIDER_ANALYTICS": "false",
            "AIDER_CHECK_UPDATE": "false",
            "NO_COLOR": "1",
            "TERM": "dumb",
        }

    def arguments(self, task: Task, endpoint: Endpoint) -> list[str]:
        return [
            "--model",
            f"openai/{endpoint.model}",
            "--openai-api-base",
            endpoint.base_url,
            "--openai-api-key",
            endpoint.api_key,
            "--edit-format",
            "diff",
            "--yes-always",
            "--no-check-update",
            "--no-analytics",
            "--no-auto-commits",
            "--no-dirty-commits",
            "--no-auto-lint",
            "--no-show-model-warnings",
            "--no-show-release-notes",
            "--no-detect-urls",
            "--no-browser",
            "--no-pretty",
            "--no-fancy-input",
            "--no-restore-chat-history",
            "--no-gitignore",
            "--message",
            task.problem_statement,
        ]

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        home = sandbox_home(sandbox)
        return PreparedRun(endpoint=endpoint, home=home, env=self.environment(endpoint, home))

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        argv = [self.executable(), *self.arguments(task, prepared.endpoint)]
        return result_from_exec(self.launch(sandbox, prepared, argv, limits.timeout_s))
