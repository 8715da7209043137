"""A harness adapter that cannot be set up (a ``module:Class`` harness for tests): every rollout that
uses it fails on infrastructure before the policy acts, which is how a misconfigured harness looks."""

from __future__ import annotations

from pathlib import Path

from lego.errors import HarnessError
from lego.seams import PreparedRun, Sandbox
from lego.types import Endpoint, HarnessLimits, HarnessResult, MainThreadSpec, Task


class BrokenHarness:
    name = "broken"
    min_memory_mb = 0
    main_thread: MainThreadSpec | None = None

    def ro_binds(self) -> list[Path]:
        return []

    def version(self) -> str:
        return "0"

    def prepare(self, sandbox: Sandbox, endpoint: Endpoint) -> PreparedRun:
        raise HarnessError("its config file cannot be written (a test double that always fails here)")

    def run(self, task: Task, sandbox: Sandbox, prepared: PreparedRun, limits: HarnessLimits) -> HarnessResult:
        raise AssertionError("never reached: prepare fails")
