"""`lego eval` below its flags: policies from ``NAME=MODEL`` options, the checks before any sample, the
tasks, the spec, and the run.

How the pieces meet: the CLI loads the config and parses ``--policy``/``--base``; :func:`plan_eval`
checks the policies, harnesses and sandbox before any compute, loads the tasks (the one loader,
:func:`lego.tasks.sources.load_tasks`: ``tasks.where``, then the first ``eval.limit``) and turns it all
into an :class:`EvalPlan`; :func:`run_plan` asks a *sample-function factory* for ``run_sample`` and hands
both to :func:`lego.eval.runner.run_eval`. The factory (``--sample-fn MODULE:ATTR``, default
:data:`DEFAULT_SAMPLE_FN`) has the signature :class:`lego.eval.runner.SampleFnFactory`:
``factory(spec, tasks, out_dir, cfg) -> run_sample``; it is where engines, proxy sessions, sandboxes
and harnesses are built, from ``cfg`` (:mod:`lego.conductor.eval_samples` in production). This lives
in the conductor, not in :mod:`lego.eval`, because it loads tasks and builds through the factory what
eval's contract keeps out of it (eval computes on results).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lego.config import LegoConfig
from lego.errors import ConfigError
from lego.eval.results import EvalResults, EvalSpec, PolicySpec, SampleResult, read_checkpoint_meta
from lego.eval.runner import SampleFnFactory, collect_samples, run_eval
from lego.tasks.sources import load_tasks
from lego.types import Task

__all__ = [
    "BUILT_IN_MODELS",
    "DEFAULT_SAMPLE_FN",
    "EvalPlan",
    "FromRun",
    "SampleProgress",
    "check_policy_paths",
    "merge_from_run",
    "parse_policies",
    "plan_eval",
    "run_defaults",
    "run_plan",
]

DEFAULT_SAMPLE_FN = "lego.conductor.eval_samples:eval_sample_fn"

BUILT_IN_MODELS = ("default", "tiny", "oracle")
"""Policy models that name no directory: the embedded default, the random tiny model, the oracle."""


def parse_policies(values: tuple[str, ...], bases: tuple[str, ...]) -> list[PolicySpec]:
    """``NAME=MODEL`` options (and ``TRAINED=BASE`` pairs) -> policy specs, metadata read from checkpoints."""
    specs: list[PolicySpec] = []
    for v in values:
        name, sep, model = v.partition("=")
        if not sep:
            name, model = (v, v) if v == "oracle" else (Path(v).name or v, v)
        if not name or not model:
            raise ConfigError(f"--policy {v!r}: expected NAME=MODEL_OR_CHECKPOINT, e.g. --policy base=Qwen/Qwen3-0.6B")
        if any(p.name == name for p in specs):
            raise ConfigError(f"--policy name {name!r} given twice; names must be unique")
        meta = read_checkpoint_meta(model) if model != "oracle" else None
        specs.append(PolicySpec(name=name, model=model, trained_harness=meta.trained_harness if meta else None))
    names = [p.name for p in specs]
    for b in bases:
        trained, sep, base = b.partition("=")
        if not sep or trained not in names or base not in names or trained == base:
            raise ConfigError(
                f"--base {b!r}: expected TRAINED=BASE naming two different --policy names ({', '.join(names)})"
            )
        specs[names.index(trained)].base = base
    return specs


def check_policy_paths(specs: list[PolicySpec], engine_kind: str) -> None:
    """Refuse, before any sample runs, a policy whose model the engine cannot load.

    The in-process engine loads only a model directory (or a built-in name; not a run directory);
    vLLM serves what its server was started with, so a hub id is left to it."""
    from lego.conductor.preflight import check_model

    for p in specs:
        if p.model in BUILT_IN_MODELS:
            continue
        if engine_kind == "vllm" and not p.model.startswith(("/", ".", "~")):
            continue
        if not Path(p.model).expanduser().is_dir():
            raise ConfigError(
                f"--policy {p.name}={p.model}: {p.model!r} is not a directory; give a model or checkpoint directory "
                f"(e.g. runs/default/checkpoints/step_000020), or one of {', '.join(BUILT_IN_MODELS)}"
            )
        check_model(p.model, f"--policy {p.name}")


def run_defaults(run_dir: str | Path) -> dict[str, Any]:
    """What ``--from-run RUN_DIR`` sets: the run's latest checkpoint (``trained``) against the model it
    started from (``start``), in every harness it trained in (``harness.weights``' for a mixed run, else
    ``harness.name``), and the eval options the run itself used, from ``RUN_DIR/config.toml``."""
    from lego.conductor.step_plan import training_harnesses
    from lego.config import load_config
    from lego.training.checkpoint import load_latest

    root = Path(run_dir)
    if not (root / "config.toml").exists():
        raise ConfigError(
            f"--from-run {run_dir}: no config.toml there; give the out_dir of a `lego train` run (e.g. runs/default)"
        )
    cfg = load_config(root / "config.toml")
    latest = load_latest(root)
    if latest is None:
        raise ConfigError(f"--from-run {run_dir}: the run has no complete checkpoint yet; train at least one step")
    return {
        "policies": ("start=" + cfg.engine.model, f"trained={latest}"),
        "bases": ("trained=start",),
        "harnesses": tuple(training_harnesses(cfg)),
        "tasks_arg": cfg.tasks.split_spec(cfg.tasks.eval_split),
        "engine": cfg.engine.kind if cfg.engine.kind in ("transformers", "vllm") else "transformers",
        "out_dir": str(root / "eval"),
        "temperature": cfg.algorithm.temperature,
        "max_turns": cfg.harness.max_turns,
        "timeout_s": cfg.harness.timeout_s,
        "concurrency": cfg.eval.concurrency,
    }


@dataclass(frozen=True)
class FromRun:
    """``--from-run RUN_DIR`` merged with the options given beside it."""

    config: str
    """The run's own ``config.toml``."""
    policies: tuple[str, ...]
    """The ``--policy`` values given, else the run's start and latest checkpoint."""
    bases: tuple[str, ...]
    """The ``--base`` values given, else ``trained=start`` (only when the run's policies are used)."""
    harnesses: tuple[str, ...]
    """The run's harnesses and then any ``--harness`` given; empty when none was (``fields`` sets them)."""
    fields: dict[str, Any]
    """Config fields the run sets, to be applied under ``-o`` and the flags."""


def merge_from_run(
    run_dir: str, policies: tuple[str, ...], bases: tuple[str, ...], harnesses: tuple[str, ...]
) -> FromRun:
    """What ``lego eval --from-run RUN_DIR`` evaluates: :func:`run_defaults`, where no option overrides it."""
    run = run_defaults(run_dir)
    if not policies:
        policies, bases = run["policies"], bases or run["bases"]
    return FromRun(
        config=str(Path(run_dir) / "config.toml"),
        policies=policies,
        bases=bases,
        harnesses=tuple(dict.fromkeys([*run["harnesses"], *harnesses])) if harnesses else (),
        fields={
            "eval.harnesses": list(run["harnesses"]),
            "eval.tasks": run["tasks_arg"],
            "engine.kind": run["engine"],
            "eval.out_dir": run["out_dir"],
            "eval.temperature": run["temperature"],
        },
    )


@dataclass(frozen=True)
class EvalPlan:
    """An eval checked and ready to run: its config, its spec (policies x harnesses x tasks x samples), the
    tasks by id (materialised) and the sample-function factory that will run them."""

    cfg: LegoConfig
    spec: EvalSpec
    tasks: dict[str, Task]
    sample_fn: str = DEFAULT_SAMPLE_FN

    @property
    def out_dir(self) -> Path:
        return Path(self.cfg.eval.out_dir)

    def samples_done(self) -> int:
        """Samples a killed run of the same eval left finished in ``out_dir`` (kept on resume)."""
        return len(collect_samples(self.out_dir, self.spec)) if (self.out_dir / "spec.json").exists() else 0


def plan_eval(cfg: LegoConfig, policies: list[PolicySpec], sample_fn: str = DEFAULT_SAMPLE_FN) -> EvalPlan:
    """Check what can be checked before any compute, load the tasks and build the spec.

    With the default sample function the policies' models, the harnesses and the sandbox backend are
    checked here (a custom one decides itself what a policy's model names)."""
    ev = cfg.eval
    if len(set(ev.harnesses)) != len(ev.harnesses):
        raise ConfigError(f"eval.harnesses names a harness twice: {ev.harnesses}")
    if cfg.engine.kind == "oracle":
        raise ConfigError("engine.kind='oracle' is a policy here: pass --policy oracle and engine.kind=transformers")
    if sample_fn == DEFAULT_SAMPLE_FN:
        from lego.conductor.preflight import check_harness, check_sandbox

        check_policy_paths(policies, cfg.engine.kind)
        for name in ev.harnesses:
            check_harness(name, "--harness")
        check_sandbox(cfg.sandbox.kind, cfg.sandbox.unsafe_no_isolation)
    source = ev.tasks or cfg.tasks.split_spec(cfg.tasks.eval_split)
    tasks = load_tasks(source, cfg.tasks.where, ev.limit, cfg.tasks.skip_bad_lines)
    canaries = eval_canaries(cfg, tasks)
    spec = EvalSpec(
        policies=policies,
        harnesses=list(ev.harnesses),
        task_ids=[t.instance_id for t in tasks],
        samples=ev.samples,
        seed=ev.seed,
        tasks_source=source,
        engine=cfg.engine.kind,
        bootstrap=ev.bootstrap,
        temperature=ev.temperature,
        max_turns=cfg.harness.max_turns,
        timeout_s=cfg.harness.timeout_s,
        canary_ids=[c.instance_id for c in canaries],
    )
    return EvalPlan(cfg=cfg, spec=spec, tasks={t.instance_id: t for t in [*tasks, *canaries]}, sample_fn=sample_fn)


def eval_canaries(cfg: LegoConfig, tasks: list[Task]) -> list[Task]:
    """The eval's impossible canaries: ``tasks.canary_rate`` of its tasks (at least one when > 0), made
    from the eval's own tasks by a draw of ``eval.seed`` (the same on resume), one sample each per
    cell. A suite without a gold patch or a contradictable assertion yields none."""
    from lego.conductor.step_plan import sample_seed
    from lego.tasks.canary import pick_canaries

    if cfg.tasks.canary_rate <= 0 or not tasks:
        return []
    count = max(1, round(cfg.tasks.canary_rate * len(tasks)))
    return pick_canaries(tasks, count, sample_seed(cfg.eval.seed, "eval-canary"), lambda t: t)


def run_plan(plan: EvalPlan, on_sample: Callable[[SampleResult], None] | None = None) -> EvalResults:
    """Build ``run_sample`` with the plan's factory and run every sample not yet finished."""
    run_sample = _load_factory(plan.sample_fn)(plan.spec, plan.tasks, plan.out_dir, plan.cfg)
    ev = plan.cfg.eval
    return run_eval(
        plan.spec,
        run_sample,
        plan.out_dir,
        concurrency=ev.concurrency,
        infra_retries=ev.infra_retries,
        on_sample=on_sample,
    )


def _load_factory(target: str) -> SampleFnFactory:
    module_name, sep, attr = target.partition(":")
    if not sep:
        raise ConfigError(f"--sample-fn {target!r}: expected MODULE:ATTR")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"--sample-fn {target!r} cannot be loaded ({exc}); the rollout that runs eval samples lives there"
        ) from exc
    return factory  # type: ignore[no-any-return]


class SampleProgress:
    """A plain line per tenth of a stage's samples (and its last), on stderr: an eval (or a stage of a
    bench) is many minutes of sampling, and a log file shows no progress bar."""

    def __init__(self, total: int, label: str = "samples") -> None:
        from rich.console import Console

        self.total, self.label = total, label
        self.done = self.passed = self.infra = 0
        self.t0 = time.monotonic()
        self._every = max(1, total // 10)
        self._console = Console(stderr=True)

    def __call__(self, result: SampleResult) -> None:
        self.done += 1
        self.passed += result.passed
        self.infra += result.infra
        if self.done % self._every and self.done != self.total:
            return
        minutes = (time.monotonic() - self.t0) / 60
        left = minutes / self.done * (self.total - self.done)
        self._console.print(
            f"      {self.done}/{self.total} {self.label}: {self.passed} passed, {self.infra} infra, "
            f"{minutes:.1f} min, ~{left:.1f} min left",
            highlight=False,
        )
