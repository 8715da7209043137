"""The production sample function of ``lego eval``: one served policy per policy of the spec.

Named by ``lego.conductor.cli.eval.DEFAULT_SAMPLE_FN``; ``lego bench learn`` calls it too, so eval
numbers and the learn bench come from the same rollout code as training.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lego.conductor.rollout import RolloutOptions, RolloutRunner, ServedPolicy, slug
from lego.config import LegoConfig, validate_config
from lego.types import Task

__all__ = ["ORACLE_MAX_TOKENS", "eval_sample_fn", "oracle_config"]


ORACLE_MAX_TOKENS = 8192
"""lego-agent's completion budget when the oracle plays: it writes a whole gold patch in one tool call
(533 tokens on builtin roman-0001), which the budget that bounds a policy's runaway samples would cut."""


def oracle_config(cfg: LegoConfig) -> LegoConfig:
    """``cfg`` with room for the oracle's completions (lego-agent's budget raised to
    :data:`ORACLE_MAX_TOKENS` unless it is larger already)."""
    data = cfg.model_dump()
    options = data["harness"]["options"].setdefault("lego-agent", {})
    options["max_tokens"] = max(int(options.get("max_tokens") or 0), ORACLE_MAX_TOKENS)
    return validate_config(data)


def eval_sample_fn(spec: Any, tasks: Mapping[str, Task], out_dir: Path, cfg: LegoConfig) -> Callable[[Any], Any]:
    """The production ``run_sample`` of ``lego eval`` (an :class:`lego.eval.runner.SampleFnFactory`).

    One :class:`ServedPolicy` per policy of the spec, started on first use and shared by its samples, with
    ``cfg``'s engine, proxy, sandbox, harness and guard settings (the policy's model and the spec's
    engine kind replace ``cfg.engine``'s); every sample runs with the sampling override at
    ``spec.temperature`` and seed ``key.seed``, and its full trajectory is saved next to the sample file.
    """
    from lego.eval.results import SampleResult
    from lego.io import atomic_write_text

    policies: dict[str, RolloutRunner] = {}
    engine_kind = spec.engine

    def runner_for(name: str) -> RolloutRunner:
        if name not in policies:
            model = spec.policy(name).model
            kind = "oracle" if model == "oracle" else engine_kind
            ecfg = cfg.engine.model_copy(update={"kind": kind, "model": "default" if model == "oracle" else model})
            run_cfg = oracle_config(cfg) if kind == "oracle" else cfg
            policies[name] = RolloutRunner(run_cfg, ServedPolicy.start(ecfg, cfg.proxy, name=name))
        return policies[name]

    lock = threading.Lock()

    def run_sample(key: Any) -> Any:
        with lock:
            runner = runner_for(key.policy)
        opts = RolloutOptions(
            override_sampling=True,
            temperature=spec.temperature,
            seed=key.seed,
            max_turns=spec.max_turns,
            timeout_s=spec.timeout_s,
        )
        traj = runner.run(tasks[key.task_id], key.harness, opts)
        path = (
            out_dir / "trajectories" / slug(key.policy) / slug(key.harness) / f"{slug(key.task_id)}-{key.sample}.json"
        )
        atomic_write_text(path, traj.model_dump_json())
        return SampleResult.from_trajectory(key, traj, trajectory_path=str(path))

    return run_sample
