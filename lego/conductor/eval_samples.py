"""The production sample function of ``lego eval``: one served policy per policy of the spec.

Named by ``lego.conductor.evaluate.DEFAULT_SAMPLE_FN``; ``lego bench learn`` calls it too, so eval
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

__all__ = ["ORACLE_MAX_TOKENS", "EvalPolicies", "eval_sample_fn", "oracle_config"]


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


class EvalPolicies:
    """The served policies of one or more evals, one per policy name and model, started on first use and
    closed together.

    Several evals that name the same policy (the temperatures of a sweep) share its :class:`ServedPolicy`,
    so all their samples batch in one engine. Every policy but the oracle is served with
    ``eval.max_tokens`` as the proxy's completion cap (the policy-side generation limit); the oracle
    gets :func:`oracle_config`'s budget."""

    def __init__(self, cfg: LegoConfig) -> None:
        self.cfg = cfg
        self._runners: dict[tuple[str, str, str], RolloutRunner] = {}
        self._lock = threading.Lock()

    def runner(self, name: str, model: str, engine_kind: str) -> RolloutRunner:
        """The runner of policy ``name`` (``model`` served by an engine of ``engine_kind``), started on first use."""
        kind = "oracle" if model == "oracle" else engine_kind
        with self._lock:
            if (name, model, kind) not in self._runners:
                cfg = self.cfg
                ecfg = cfg.engine.model_copy(update={"kind": kind, "model": "default" if model == "oracle" else model})
                proxy_cfg = cfg.proxy
                if kind != "oracle" and cfg.eval.max_tokens is not None:
                    cap = min(cfg.eval.max_tokens, cfg.proxy.max_tokens_cap or cfg.eval.max_tokens)
                    proxy_cfg = proxy_cfg.model_copy(update={"max_tokens_cap": cap})
                run_cfg = oracle_config(cfg) if kind == "oracle" else cfg
                self._runners[(name, model, kind)] = RolloutRunner(
                    run_cfg, ServedPolicy.start(ecfg, proxy_cfg, name=name)
                )
            return self._runners[(name, model, kind)]

    def close(self) -> None:
        """Stop every served policy (engines and proxies)."""
        with self._lock:
            runners, self._runners = list(self._runners.values()), {}
        for runner in runners:
            runner.policy.close()


def eval_sample_fn(
    spec: Any, tasks: Mapping[str, Task], out_dir: Path, cfg: LegoConfig, policies: EvalPolicies | None = None
) -> Callable[[Any], Any]:
    """The production ``run_sample`` of ``lego eval`` (an :class:`lego.eval.runner.SampleFnFactory`).

    One :class:`ServedPolicy` per policy of the spec (from ``policies``, shared with other evals, or
    this eval's own), with ``cfg``'s engine, proxy, sandbox, harness and guard settings (the policy's
    model and the spec's engine kind replace ``cfg.engine``'s, ``eval.max_tokens`` caps its completions);
    every sample runs with the sampling override at ``spec.temperature`` and seed ``key.seed``, and its
    full trajectory is saved next to the sample file.
    """
    from lego.eval.results import SampleResult
    from lego.io import atomic_write_text

    served = policies if policies is not None else EvalPolicies(cfg)

    def run_sample(key: Any) -> Any:
        runner = served.runner(key.policy, spec.policy(key.policy).model, spec.engine)
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
