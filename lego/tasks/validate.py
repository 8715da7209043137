"""Validating tasks with the grader that trains on them: the gold answer scores 1, the pristine repo does not.

Every check goes through the real grader (:func:`lego.sandboxes.grading.grade`, which hands a Harbor
task to its own verifier), on the backend the task needs (:func:`backend_for`:
docker for a task with an image or a Dockerfile and no local repo, else local bubblewrap): a fresh
sandbox, the diff filtered, the hidden tests applied, the verdict. A pytest task is valid when its
gold patch resolves it (every FAIL_TO_PASS and PASS_TO_PASS test passed, nothing read as
tampering) and the pristine repo fails every FAIL_TO_PASS test and passes every PASS_TO_PASS one; a
Harbor task (graded by its own verifier) when the gold solution is resolved and the pristine repo
is not. An invalid task carries the grader's log, so the reason (a conftest ImportError, a
tampering verdict, a verifier that wrote no reward) is in front of whoever reads the report.

``repeat`` grades gold and pristine that many times each: a task is *consistent* when the same
diff got the same reward every time; ``flaky_tests`` are the named tests whose status changed
between runs of the same diff. There is no other way to validate: a machine without bubblewrap
runs the same grader with ``SandboxConfig.unsafe_no_isolation`` (commands on the host, for trusted
tasks only), so validation cannot disagree with training.

An error in one task (missing repo, a grader that cannot run it) fails that task, never the run.

A suite takes hours, so verdicts can be kept in a *record* (:class:`ValidationRecord`): a JSON-lines
file with one line per finished task, appended and fsynced as each task ends. A line holds the task's
fingerprint (a hash of its instance record, so an edited task is graded again), the ``repeat`` it was
graded with, the verdict, the rewards, the flaky tests, the grading time and lego's version; the
per-test statuses and the grader's log only for an invalid task (that keeps a 331-task record small
enough to commit as evidence). A killed run leaves at most one torn last line, which is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from lego import __version__
from lego.config import SandboxConfig
from lego.errors import LegoError
from lego.sandboxes.grading import grade
from lego.sandboxes.verifier import is_harbor
from lego.types import GradeResult, Task

__all__ = [
    "Backend",
    "TaskValidation",
    "ValidationRecord",
    "backend_for",
    "fingerprint",
    "flaky_rate",
    "sandbox_for",
    "validate_task",
]

Backend = Literal["local", "docker"]

_LOG_TAIL = 4000


@dataclass
class TaskValidation:
    """One task's verdict. ``gold``/``base``: per-test statuses of the first gold and pristine grades;
    ``log``: the grader's log of the grade that made the task invalid (its tail); ``rewards``: the
    rewards of every grade, by diff (``gold``, ``base``)."""

    instance_id: str
    ok: bool
    reason: str = ""
    gold: dict[str, str] = field(default_factory=dict)
    base: dict[str, str] = field(default_factory=dict)
    log: str = ""
    backend: str = ""
    rewards: dict[str, list[float]] = field(default_factory=dict)
    flaky_tests: list[str] = field(default_factory=list)
    tests_checked: int = 0
    seconds: float = 0.0
    behavioural: int = 0  # FAIL_TO_PASS tests the gold grade judged on witnessed behaviour (lego.sandboxes.blind)
    bit_only: int = 0  # ... on a reported pass/fail bit alone

    @property
    def evidence(self) -> float | None:
        """The share of FAIL_TO_PASS tests that rest on behaviour (None: the gold grade judged none)."""
        judged = self.behavioural + self.bit_only
        return self.behavioural / judged if judged else None

    @property
    def consistent(self) -> bool:
        """The same diff got the same reward on every repeat."""
        return all(len(set(r)) <= 1 for r in self.rewards.values())


def backend_for(task: Task, sandbox: Backend | None = None) -> Backend:
    """``sandbox`` when given, else the backend the task needs: docker for a task that brings an image
    or a Dockerfile and has no local repo, local otherwise."""
    if sandbox is not None:
        return sandbox
    return "docker" if (task.image or task.dockerfile) and not task.repo_path else "local"


def sandbox_for(
    task: Task, sandbox: Backend | None = None, *, no_isolation: bool = False, docker_image: str | None = None
) -> SandboxConfig:
    """The sandbox settings ``task`` is validated with: :func:`backend_for`'s backend; ``no_isolation``:
    the local backend without bubblewrap (``unsafe_no_isolation``); ``docker_image``: the image for a
    docker task that names none."""
    kind = backend_for(task, sandbox)
    if no_isolation and kind != "local":
        raise ValueError(f"task {task.instance_id} runs on docker; unsafe_no_isolation is for the local backend only")
    return SandboxConfig(kind=kind, unsafe_no_isolation=no_isolation, docker_image=docker_image)


def flaky_rate(results: list[TaskValidation]) -> tuple[int, int]:
    """(tests whose status changed between repeats of the same diff, tests checked), over ``results``."""
    return sum(len(r.flaky_tests) for r in results), sum(r.tests_checked for r in results)


def _judge(task: Task, gold: GradeResult, base: GradeResult) -> list[str]:
    if is_harbor(task):
        problems = [] if gold.resolved else [f"gold: the solution scores {gold.reward}, not 1"]
        if base.resolved:
            problems.append(f"base: the pristine repo scores {base.reward} already")
        return problems
    problems = []
    names = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    bad_gold = sorted(t for t in names if gold.tests.get(t) != "passed")
    if bad_gold:
        problems.append(
            f"gold: {len(bad_gold)} test(s) not passing, e.g. {bad_gold[0]} ({gold.tests.get(bad_gold[0], 'missing')})"
        )
    elif not gold.resolved:
        problems.append(f"gold: every named test passed but the reward is {gold.reward}: {'; '.join(gold.tampered)}")
    passing_f2p = sorted(t for t in task.FAIL_TO_PASS if base.tests.get(t) == "passed")
    if passing_f2p:
        problems.append(f"base: FAIL_TO_PASS test {passing_f2p[0]} passes without the fix")
    bad_p2p = sorted(t for t in task.PASS_TO_PASS if base.tests.get(t) != "passed")
    if bad_p2p:
        problems.append(f"base: PASS_TO_PASS test {bad_p2p[0]} is {base.tests.get(bad_p2p[0], 'missing')}")
    return problems


def _flaky(grades: list[GradeResult]) -> set[str]:
    names = {n for g in grades for n in g.tests}
    return {n for n in names if len({g.tests.get(n, "missing") for g in grades}) > 1}


def validate_task(task: Task, cfg: SandboxConfig | None = None, repeat: int = 1) -> TaskValidation:
    """Check one (materialised) task with the real grader (see module doc). ``cfg``: the sandbox settings
    (default: the backend :func:`backend_for` picks, default limits); ``repeat``: grades per diff."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    cfg = cfg or SandboxConfig(kind=backend_for(task))
    out = TaskValidation(task.instance_id, False, backend=cfg.kind)
    started = time.monotonic()
    try:
        return _validate(task, cfg, repeat, out)
    finally:
        out.seconds = round(time.monotonic() - started, 1)


def _validate(task: Task, cfg: SandboxConfig, repeat: int, out: TaskValidation) -> TaskValidation:
    grades: dict[str, list[GradeResult]] = {"gold": [], "base": []}
    try:
        for _ in range(repeat):
            grades["gold"].append(grade(task, task.patch, cfg=cfg))
            grades["base"].append(grade(task, "", cfg=cfg))
    except LegoError as exc:
        out.reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        out.log = str(exc)[-_LOG_TAIL:]
        return out
    gold, base = grades["gold"][0], grades["base"][0]
    out.gold, out.base = gold.tests, base.tests
    out.behavioural, out.bit_only = gold.behavioural, gold.bit_only
    out.rewards = {k: [g.reward for g in v] for k, v in grades.items()}
    out.flaky_tests = sorted(_flaky(grades["gold"]) | _flaky(grades["base"]))
    out.tests_checked = len({*gold.tests, *base.tests})
    problems = _judge(task, gold, base)
    if not out.consistent:
        problems.append(f"inconsistent: rewards {out.rewards} over {repeat} repeats")
    out.ok = not problems
    out.reason = "; ".join(problems)
    logs = [
        f"--- {name} grade ---\n{g.log[-_LOG_TAIL:]}"
        for name, g in (("gold", gold), ("base", base))
        if any(p.startswith(name) for p in problems)
    ]
    out.log = "\n".join(logs)
    return out


_RECORD_FORMAT = 2
"""2: the blind-copy verdict (issue 43); a record of format 1 is graded again."""


def fingerprint(task: Task) -> str:
    """A hash of ``task``'s instance record as its source gives it, before materialisation: the same task
    on another machine (another cache directory) has the same fingerprint; an edited patch, test list,
    environment or test command does not. The bug report and hints are left out: they are what the
    agent reads, not what is graded, so rewording a report keeps a task's verdict."""
    text = task.model_dump_json(exclude={"repo_path", "problem_statement", "hints_text"})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ValidationRecord:
    """Verdicts kept in a JSON-lines file (see the module doc), so a suite validated over hours or
    several sittings resumes where it stopped and its totals cover every task.

    ``done(task, repeat)`` is the recorded verdict of ``task`` when the record holds one for the same
    fingerprint and ``repeat``, else None; ``add`` appends one line and fsyncs it before returning."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.torn = 0
        self._lines: dict[str, dict[str, Any]] = {}
        self._open_line = False  # a torn last line has no newline: the next line must not join it
        if self.path.exists():
            text = self.path.read_text(encoding="utf-8")
            self._open_line = bool(text) and not text.endswith("\n")
            for raw in text.splitlines():
                if not raw.strip():
                    continue
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError:
                    self.torn += 1  # a run killed mid-write: that task is graded again
                    continue
                if isinstance(line, dict) and line.get("format") == _RECORD_FORMAT and "instance_id" in line:
                    self._lines[line["instance_id"]] = line

    def __len__(self) -> int:
        return len(self._lines)

    def done(self, task: Task, repeat: int) -> TaskValidation | None:
        line = self._lines.get(task.instance_id)
        if line is None or line.get("fingerprint") != fingerprint(task) or line.get("repeat") != repeat:
            return None
        if line.get("format") != _RECORD_FORMAT:  # a verdict of an earlier grader is no verdict of this one
            return None
        fields = {k: line[k] for k in TaskValidation.__dataclass_fields__ if k in line}
        return TaskValidation(**fields)

    def add(self, task: Task, result: TaskValidation, repeat: int) -> None:
        line: dict[str, Any] = {"format": _RECORD_FORMAT, "fingerprint": fingerprint(task), "repeat": repeat}
        line.update(asdict(result))
        if result.ok:  # the statuses and the log only say something about an invalid task
            line.update(gold={}, base={}, log="")
        line.update(consistent=result.consistent, lego=__version__, finished=time.strftime("%Y-%m-%dT%H:%M:%SZ"))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(("\n" if self._open_line else "") + json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
            self._open_line = False
            fh.flush()
            os.fsync(fh.fileno())
        self._lines[task.instance_id] = line
