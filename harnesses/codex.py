"""Adapter for Codex CLI (npm ``@openai/codex``), run as ``codex exec --json`` non-interactive.

Codex speaks the OpenAI Responses API (streaming) with its own tools (``shell`` /
``exec_command``, ``apply_patch``, ...) as function calls. It is pointed at the proxy by a custom
model provider in ``$CODEX_HOME/config.toml`` with ``wire_api = "responses"`` and ``base_url`` =
the session URL (Codex appends ``/responses``); the key comes from the variable named by
``env_key``. Its own sandbox and approvals are bypassed (it runs inside ours). ``CODEX_HOME`` is
in the sandbox's private home, not /tmp.

With ``intercept=True`` the provider table is left out: Codex uses its built-in ``openai``
provider (api.openai.com, key from ``CODEX_API_KEY``) as shipped, and
:class:`lego.harnesses.intercept.Interceptor` routes that host to the session; Codex trusts the
interception CA through its own ``CODEX_CA_CERTIFICATE``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import tomli_w

from lego.harnesses.base import InstalledHarness, result_from_exec, sandbox_home
from lego.harnesses.install import InstallSpec
from lego.harnesses.intercept import Interceptor
from lego.seams import PreparedRun, Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, Task

__all__ = ["CodexHarness"]

PROVIDER_ID = "lego"
KEY_VAR = "LEGO_API_KEY"


class CodexHarness(InstalledHarness):
    name: ClassVar[str] = "codex"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        kind="npm", package="@openai/codex", version="0.171.0", executable="npm/node_modules/.bin/codex"
    )

    def __init__(self, context_window: int = 32768, intercept: bool = False) -> None:
        self.context_window = context_window
        self.interceptor = Interceptor() if intercept else None

    def ro_binds(self) -> list[Path]:
        return super().ro_binds() + (self.interceptor.ro_binds() if self.interceptor else [])

    def config_toml(self, endpoint: Endpoint) -> str:
        """``$CODEX_HOME/config.toml``: the proxy as the only model provider (none when intercepting)."""
        config: dict[str, Any] = {"model": endpoint.model}
        if self.interceptor is None:
            config["model_provider"] = PROVIDER_ID
        config |= {
            "approval_policy": "never",
            "sandbox_mode": "danger-full-access",
            "check_for_update_on_startup": False,
            # Hosted web search runs on OpenAI's servers: no proxy can serve it, and a sandboxed agent
            # has no network anyway. Off, so Codex does not declare a tool the policy could never use.
            "web_search": "disabled",
            "model_context_window": self.context_window,
            "analytics": {"enabled": False},
        }
        if self.interceptor is None:
            config["model_providers"] = {
                PROVIDER_ID: {
                    "name": "lego proxy",
                    "base_url": endpoint.base_url,
                    "env_key": KEY_VAR,
                    "wire_api": "responses",
                    "request_max_retries": 2,
                    "stream_max_retries": 2,
                }
            }
        return tomli_w.dumps(config)

    def environment(self, endpoint: Endpoint, home: str) -> dict[str, str]:
        env = {"HOME": home, "CODEX_HOME": f"{home}/.codex", KEY_VAR: endpoint.api_key, "NO_COLOR": "1"}
        if self.interceptor is not None:
            env["CODEX_API_KEY"] = endpoint.api_key
        return env

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        home = sandbox_home(sandbox)
        env = self.environment(endpoint, home)
        config = f"{home}/.codex/config.toml"
        self.write_file(sandbox, config, self.config_toml(endpoint))
        if self.interceptor is not None:
            env.update(self.interceptor.start(sandbox, endpoint))
            env["CODEX_CA_CERTIFICATE"] = env["SSL_CERT_FILE"]
        return PreparedRun(endpoint=endpoint, home=home, env=env, files={"config": config})

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        argv = [self.executable(), "exec", "--json", "--skip-git-repo-check"]
        argv += ["--dangerously-bypass-approvals-and-sandbox", "--color", "never", "-C", sandbox.repo_dir]
        argv += [task.problem_statement]
        return result_from_exec(self.launch(sandbox, prepared, argv, limits.timeout_s))
