"""One rollout of a harness against the test proxy, as the rollout code will do it."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from lego.config import SandboxConfig
from lego.seams import Harness
from lego.types import HarnessLimits, SessionSpec, Task

__all__ = ["run_one"]


def run_one(harness: Harness, task: Task, proxy: Any, limits: HarnessLimits) -> dict[str, Any]:
    """One rollout of ``harness`` on ``task``; returns its result, grade and trajectory."""
    from lego.sandboxes.grading import grade
    from lego.sandboxes.local import LocalSandbox

    sid = f"{harness.name}-{uuid.uuid4().hex[:8]}"
    answer = task.patch if proxy.takes_answer else None  # the gold patch reaches the oracle engine only
    proxy.open_session(sid, SessionSpec(metadata={"task_id": task.instance_id}, answer=answer))
    default = SandboxConfig()
    memory_mb = max(default.memory_mb, getattr(harness, "min_memory_mb", 0))
    cfg = SandboxConfig(memory_mb=memory_mb, command_timeout_s=limits.timeout_s)
    binds = harness.ro_binds() if hasattr(harness, "ro_binds") else []
    sandbox = LocalSandbox(task, cfg, proxy_uds=Path(proxy.model_uds), ro_binds=binds)  # the model face only
    try:
        endpoint = proxy.endpoint(sid, root_url=f"http://127.0.0.1:{sandbox.proxy_port}")
        result = harness.run(task, sandbox, harness.prepare(sandbox, endpoint), limits)
        diff = sandbox.diff()
    finally:
        sandbox.close()
    graded = grade(task, diff, cfg=SandboxConfig())
    return {"result": result, "grade": graded, "trajectory": proxy.trajectory(sid), "version": harness.version()}
