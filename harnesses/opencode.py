"""Adapter for OpenCode (sst/opencode, npm ``opencode-ai``), run as ``opencode run`` non-interactive.

OpenCode speaks OpenAI chat completions (streaming) through the AI SDK and offers the model its
own tools (bash, read, edit, write, grep, glob, ...) as function calls. It is pointed at the proxy
by ``OPENCODE_CONFIG_CONTENT``: a custom provider using the bundled ``@ai-sdk/openai-compatible``
package with ``baseURL`` = the session URL, selected as both the main and the small (title) model.
Permissions are all allowed (our sandbox isolates it); update checks, the models.dev fetch, LSP
downloads, sharing, default plugins and project configs are off so it reaches nothing but the proxy.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from lego.harnesses.base import InstalledHarness, result_from_exec, sandbox_home
from lego.harnesses.install import InstallSpec
from lego.seams import PreparedRun, Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, Task

__all__ = ["OpenCodeHarness"]

PROVIDER_ID = "lego"


class OpenCodeHarness(InstalledHarness):
    name: ClassVar[str] = "opencode"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        kind="npm", package="opencode-ai", version="1.18.33", executable="npm/node_modules/.bin/opencode"
    )
    min_memory_mb: int = 16384  # a Bun binary: under a 4 GB RLIMIT_AS it dies at random (SIGILL)

    def __init__(self, context_window: int = 32768, max_output_tokens: int = 4096) -> None:
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens

    def config(self, endpoint: Endpoint, max_turns: int) -> dict[str, Any]:
        """The ``OPENCODE_CONFIG_CONTENT`` document (``steps``: the build agent's iteration limit)."""
        model_ref = f"{PROVIDER_ID}/{endpoint.model}"
        return {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                PROVIDER_ID: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "lego proxy",
                    "options": {"baseURL": endpoint.base_url, "apiKey": endpoint.api_key},
                    "models": {
                        endpoint.model: {
                            "name": endpoint.model,
                            "tool_call": True,
                            "limit": {"context": self.context_window, "output": self.max_output_tokens},
                        }
                    },
                }
            },
            "model": model_ref,
            "small_model": model_ref,
            "enabled_providers": [PROVIDER_ID],
            "autoupdate": False,
            "share": "disabled",
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
            "agent": {"build": {"steps": max_turns}},
        }

    def environment(self, endpoint: Endpoint, home: str, max_turns: int) -> dict[str, str]:
        return {
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_DATA_HOME": f"{home}/.local/share",
            "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_STATE_HOME": f"{home}/.local/state",
            "OPENCODE_CONFIG_CONTENT": json.dumps(self.config(endpoint, max_turns)),
            "OPENCODE_DISABLE_AUTOUPDATE": "true",
            "OPENCODE_DISABLE_MODELS_FETCH": "true",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "true",
            "OPENCODE_DISABLE_SHARE": "true",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true",
            "OPENCODE_DISABLE_PROJECT_CONFIG": "true",
            "OPENCODE_DISABLE_CLAUDE_CODE": "true",
            "NO_COLOR": "1",
        }

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        return PreparedRun(endpoint=endpoint, home=sandbox_home(sandbox))

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        endpoint = prepared.endpoint
        # the config document holds the step limit, which only run() knows
        env = self.environment(endpoint, prepared.home, limits.max_turns)
        argv = [self.executable(), "run", "--format", "json", "--model", f"{PROVIDER_ID}/{endpoint.model}"]
        argv += ["--auto", task.problem_statement]
        return result_from_exec(self.launch(sandbox, prepared, argv, limits.timeout_s, extra_env=env))
