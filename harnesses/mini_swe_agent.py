"""Adapter for mini-swe-agent (SWE-agent/mini-swe-agent), run as its own `mini` CLI.

mini-swe-agent v2 talks to models through litellm and, with its default ``mini.yaml``, offers the
model one ``bash`` tool (OpenAI function calling). The agent ends the episode when a command's
output starts with ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``).

Pointed at the proxy by config only: model ``openai/<name>`` with ``model_kwargs.api_base`` set to
the session URL, ``MSWEA_CONFIGURED`` so no first-run wizard, ``LITELLM_LOCAL_MODEL_COST_MAP`` so
litellm fetches nothing, cost tracking off (a local model has no price).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from lego.errors import LegoError
from lego.harnesses.base import InstalledHarness, result_from_exec, sandbox_home
from lego.harnesses.install import InstallSpec
from lego.seams import PreparedRun, Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, Task

__all__ = ["MiniSweAgentHarness"]


class MiniSweAgentHarness(InstalledHarness):
    name: ClassVar[str] = "mini-swe-agent"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        kind="pip", package="mini-swe-agent", version="2.4.6", executable="venv/bin/mini", check_args=("--help",)
    )

    def config(self, endpoint: Endpoint, limits: HarnessLimits) -> dict[str, Any]:
        """Overrides merged on top of mini-swe-agent's own ``mini.yaml``."""
        return {
            "agent": {"step_limit": limits.max_turns, "cost_limit": 0, "mode": "yolo", "confirm_exit": False},
            "model": {
                "model_name": f"openai/{endpoint.model}",
                "cost_tracking": "ignore_errors",
                "model_kwargs": {"api_base": endpoint.base_url, "api_key": endpoint.api_key},
            },
            "environment": {"timeout": 60},
        }

    def environment(self, endpoint: Endpoint, home: str) -> dict[str, str]:
        return {
            "HOME": home,
            "MSWEA_CONFIGURED": "true",
            "MSWEA_GLOBAL_CONFIG_DIR": f"{home}/.config/mini-swe-agent",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OPENAI_API_KEY": endpoint.api_key,
            "OPENAI_API_BASE": endpoint.base_url,
            "NO_COLOR": "1",
        }

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        home = sandbox_home(sandbox)
        files = {"config": f"{home}/.lego/mini-swe-agent.yaml", "trajectory": f"{home}/.lego/mini.traj.json"}
        return PreparedRun(endpoint=endpoint, home=home, env=self.environment(endpoint, home), files=files)

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        # the config holds the step limit, which only run() knows, so it is written here
        config_path, traj_path = prepared.files["config"], prepared.files["trajectory"]
        self.write_file(sandbox, config_path, json.dumps(self.config(prepared.endpoint, limits), indent=2))
        argv = [self.executable(), "--yolo", "--exit-immediately", "-c", "mini.yaml", "-c", config_path]
        argv += ["-t", task.problem_statement, "-o", traj_path]
        res = self.launch(sandbox, prepared, argv, limits.timeout_s)
        result = result_from_exec(res)
        status = self.exit_status(sandbox, traj_path)
        turns = status.get("api_calls", 0)
        result.turns = int(turns) if isinstance(turns, int | float) else 0
        # Other exit statuses (Submitted, a policy that kept breaking the format) end normally.
        if result.reason == "completed" and status.get("exit_status") == "LimitsExceeded":
            result.reason = "max_turns"
        return result

    def exit_status(self, sandbox: Sandbox, traj_path: str) -> dict[str, Any]:
        """``info.exit_status`` and ``info.model_stats.api_calls`` from mini's trajectory file."""
        try:
            info = json.loads(sandbox.read(traj_path)).get("info", {})
        except (OSError, ValueError, LegoError):
            return {}
        return {"exit_status": info.get("exit_status"), "api_calls": info.get("model_stats", {}).get("api_calls", 0)}
