"""Adapter for the OpenHands Software Agent SDK (pip ``openhands-sdk`` + ``openhands-tools``).

The SDK has no CLI of its own, so its entry point is a small driver script
(:mod:`lego.harnesses.openhands_driver`) that builds the SDK's stock ``Agent`` with its terminal and
file-editor tools and runs one ``Conversation``. It speaks OpenAI chat completions through litellm
with native function calling (tools ``terminal``, ``file_editor``, ``finish``). Pointed at the
proxy by the ``LLM``'s ``base_url`` and model ``openai/<name>``; the SDK needs Python >= 3.12, so
its venv is built on the pyenv 3.12 interpreter.
"""

from __future__ import annotations

from typing import ClassVar

from lego.harnesses.base import InstalledHarness, result_from_exec, sandbox_home
from lego.harnesses.install import InstallSpec
from lego.harnesses.openhands_driver import DRIVER_FILE
from lego.seams import PreparedRun, Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, Task

__all__ = ["OpenHandsHarness"]


class OpenHandsHarness(InstalledHarness):
    name: ClassVar[str] = "openhands"
    install_spec: ClassVar[InstallSpec] = InstallSpec(
        kind="pip",
        package="openhands-sdk",
        version="1.58.2",
        extra_packages=("openhands-tools==1.58.2",),
        python="/root/.pyenv/versions/3.12.1/bin/python3.12",
        executable="venv/bin/python",
        check_args=("-c", "import openhands.sdk, openhands.tools; print('openhands-sdk and openhands-tools import')"),
    )

    def environment(self, endpoint: Endpoint, home: str) -> dict[str, str]:
        return {
            "HOME": home,
            "LLM_API_KEY": endpoint.api_key,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OPENHANDS_SUPPRESS_BANNER": "1",
            "NO_COLOR": "1",
        }

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        home = sandbox_home(sandbox)
        driver = f"{home}/.lego/openhands_driver.py"
        self.write_file(sandbox, driver, DRIVER_FILE.read_text())
        return PreparedRun(endpoint=endpoint, home=home, env=self.environment(endpoint, home), files={"driver": driver})

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        endpoint = prepared.endpoint
        argv = [self.executable(), prepared.files["driver"], "--base-url", endpoint.base_url]
        argv += ["--model", endpoint.model, "--problem", task.problem_statement, "--repo", sandbox.repo_dir]
        argv += ["--max-iterations", str(limits.max_turns), "--persistence-dir", f"{prepared.home}/.lego/openhands"]
        res = self.launch(sandbox, prepared, argv, limits.timeout_s)
        return result_from_exec(res, {10: "max_turns"})
