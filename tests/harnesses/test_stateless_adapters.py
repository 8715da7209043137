"""Adapters hold configuration only: ``prepare`` leaves the adapter as it was and returns everything
per rollout in a PreparedRun, so two rollouts prepared on one adapter each keep their own session.

Real sandboxes (bubblewrap), every registered adapter (and the interception variants, which start a
real mitmdump when mitmproxy is installed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lego.config import SandboxConfig
from lego.harnesses.base import HARNESSES, get_harness
from lego.harnesses.install import installed
from lego.seams import Harness
from lego.types import Endpoint, Task

pytestmark = pytest.mark.harness

VARIANTS = [(name, {}) for name in HARNESSES.names()] + [
    ("claude-code", {"intercept": True}),
    ("codex", {"intercept": True}),
]


def _state(obj: Any) -> Any:
    """An object's attributes, recursively (what a rollout could have left on the adapter)."""
    if hasattr(obj, "__dict__"):
        return {k: _state(v) for k, v in vars(obj).items()}
    return obj


def _endpoint(sandbox: Any, sid: str) -> Endpoint:
    root = f"http://127.0.0.1:{sandbox.proxy_port}/s/{sid}"
    return Endpoint(base_url=f"{root}/v1", anthropic_base_url=root, api_key=f"token-{sid}", session_id=sid)


@pytest.mark.parametrize(("name", "options"), VARIANTS, ids=[f"{n}{'-intercept' if o else ''}" for n, o in VARIANTS])
def test_prepare_leaves_the_adapter_unchanged(name: str, options: dict[str, Any], task: Task, proxy: Any) -> None:
    from lego.sandboxes.local import LocalSandbox

    if name != "lego-agent" and installed(name) is None:
        pytest.skip(f"{name} is not installed; run `lego harness install {name}`")
    if options.get("intercept") and installed("mitmproxy") is None:
        pytest.skip("interception needs mitmproxy; run `lego harness install mitmproxy`")
    harness: Harness = get_harness(name, **options)
    before = _state(harness)
    binds = harness.ro_binds() if hasattr(harness, "ro_binds") else []
    boxes = [LocalSandbox(task, SandboxConfig(), proxy_uds=Path(proxy.model_uds), ro_binds=binds) for _ in range(2)]
    try:
        first, second = (
            harness.prepare(sb, _endpoint(sb, sid)) for sb, sid in zip(boxes, ("s-one", "s-two"), strict=True)
        )
    finally:
        for sb in boxes:
            sb.close()
    assert _state(harness) == before, f"{name}.prepare changed the adapter"
    assert (first.endpoint.session_id, second.endpoint.session_id) == ("s-one", "s-two")
    for prepared, sid in ((first, "s-one"), (second, "s-two")):
        other = "s-two" if sid == "s-one" else "s-one"
        assert other not in repr(prepared.env) and other not in repr(prepared.files), f"{name}: {sid} carries {other}"
