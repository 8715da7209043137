"""`lego bench verdict`: what the blind-copy verdict costs a grade, against the verdict it replaced.

Issue 43's budget: a grade may cost at most 2x the perturbed-run grader's. That grader ran the hidden
tests twice per grade, side by side in two fresh sandboxes, with the same supervisor and bootstrap.
Its cost is measured here in the same run as the **baseline**: the same two runs as written, side by
side, with nothing else (``lego.sandboxes.grading`` supervises each exactly as a grade does). Against it:

* ``grade_s``: ``grade(task, gold)`` with the task's reference cached: the run as written and the blind
  copy, side by side;
* ``first_grade_s``: the first grade of a task, which also builds its reference (the gold patch as
  written and twice on the blind copy, side by side), once per task and cached on disk after.

On a generated task (``--task``, default the first boundary task) and on a real-repo task with a
~500-test suite (``--real-task``, default one of semver 3.1.2's: its whole suite is the hidden tests).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import click

from lego.config import SandboxConfig
from lego.io import atomic_write_json
from lego.types import Task

__all__ = ["command", "run_bench"]

_REAL_DEFAULT = "semver-3.1.2-78930de853"


def _load(spec: str, task_id: str) -> Task:
    from lego.errors import TaskError
    from lego.tasks.sources import load_source

    try:
        return load_source(spec).get(task_id)
    except TaskError as exc:
        raise click.BadParameter(str(exc), param_hint="--task/--real-task") from exc


def _baseline(task: Task, cfg: SandboxConfig) -> float:
    """The replaced grader's work for one grade: the hidden tests, twice, side by side (its two runs)."""
    from lego.sandboxes import grading

    names = list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]))

    def work(_: int, sb: Any) -> dict[str, Any]:
        meta = grading._project_meta(task, sb, grading.tracked_files(sb))
        return grading._run(sb, task, task.patch, {}, names, cfg.command_timeout_s, meta)

    t0 = time.perf_counter()
    reports = grading._in_sandboxes(cfg, task, 2, work)
    took = time.perf_counter() - t0
    if any(r.get("status") != "ran" for r in reports):
        raise click.ClickException(f"{task.instance_id}: a baseline run did not run: {reports[0].get('error')}")
    return took


def _stats(xs: list[float]) -> dict[str, float]:
    return {"p50": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def _one(task: Task, n: int) -> dict[str, Any]:
    from lego.sandboxes.grading import forget_reference, grade

    cfg = SandboxConfig()
    base, first, cached = [], [], []
    evidence = None
    for _ in range(n):
        base.append(_baseline(task, cfg))
        forget_reference(task)
        t0 = time.perf_counter()
        result = grade(task, task.patch, cfg=cfg)
        first.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = grade(task, task.patch, cfg=cfg)
        cached.append(time.perf_counter() - t0)
        if result.reward != 1.0:
            raise click.ClickException(f"the gold patch of {task.instance_id} did not grade 1:\n{result.log[-1500:]}")
        evidence = {"behavioural": result.behavioural, "bit_only": result.bit_only, "unstable": result.unstable}
    b = statistics.median(base)
    return {
        "task": task.instance_id,
        "tests": len(task.FAIL_TO_PASS) + len(task.PASS_TO_PASS),
        "baseline_s": _stats(base),
        "grade_s": _stats(cached),
        "first_grade_s": _stats(first),
        "ratios": {
            "grade_p50_vs_baseline": statistics.median(cached) / b,
            "first_grade_p50_vs_baseline": statistics.median(first) / b,
        },
        "within_2x": statistics.median(cached) / b <= 2.0,
        "evidence": evidence,
    }


def run_bench(n: int, task_spec: str, task_id: str | None, real_spec: str, real_id: str) -> dict[str, Any]:
    """Both tasks, ``n`` rounds each (see the module doc); the JSON-able report."""
    from lego.tasks.sources import load_source

    if task_id is None:
        source = load_source(task_spec)
        generated = next(iter(source.tasks()))
    else:
        generated = _load(task_spec, task_id)
    real = _load(real_spec, real_id)
    return {
        "bench": "verdict",
        "baseline": "the perturbed-run grader's work: the hidden tests as written, twice, side by side",
        "generated": _one(generated, n),
        "real": _one(real, n),
    }


@click.command("verdict")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="JSON report path.")
@click.option("-n", "--iterations", "n", default=5, show_default=True, type=click.IntRange(1, 100))
@click.option(
    "--tasks", "task_spec", default="boundary:train", show_default=True, help="Where the generated task comes from."
)
@click.option("--task", "task_id", default=None, help="The generated task's id (default: the first of --tasks).")
@click.option(
    "--real-tasks", "real_spec", default="real:heldout", show_default=True, help="Where the real-repo task comes from."
)
@click.option("--real-task", "real_id", default=_REAL_DEFAULT, show_default=True, help="The real-repo task's id.")
def command(out: Path, n: int, task_spec: str, task_id: str | None, real_spec: str, real_id: str) -> None:
    """Grade time of the blind-copy verdict vs the perturbed-run grader's two runs, same run (JSON)."""
    report = run_bench(n, task_spec, task_id, real_spec, real_id)
    atomic_write_json(out, report, indent=2)
    click.echo(json.dumps(report, indent=2))
