"""Harbor task directories as a task source (the format the reference system trains on).

A Harbor task is a directory (harborframework.com/docs/tasks)::

    my-task/
    ├── task.toml          configuration: [task] name, [verifier] / [agent] timeout_sec, [verifier] env,
    │                      [environment] build_timeout_sec / docker_image, [solution] env, [metadata]
    ├── instruction.md     what the agent is asked (its problem statement)
    ├── environment/       the build context: Dockerfile (+ the files it COPYs)
    ├── tests/test.sh      the verifier: run after the agent, writes /logs/verifier/reward.txt (one
    │                      number) or reward.json ({"reward": number, ...})
    └── solution/solve.sh  the reference solution (optional): what Harbor's oracle agent runs

Both task.toml schemas are read: the current one (``schema_version``, a ``[task]`` table with the
name) and the first one (``version = "1.0"``, the name is the directory's). Only what lego uses is
interpreted; the rest of ``[metadata]`` is kept in ``Task.metadata`` (so ``tasks.where`` can select
on, e.g., ``difficulty``). A source spec names a directory of task directories (``DIR``; with one
level of split folders, ``DIR/train/<task>``, ``DIR:train`` picks a split), a single task
directory, or an index listing task directories: a ``.parquet`` file or a JSONL file whose rows
have ``path`` (or ``task_dir``) and optionally ``split``, relative to the index. A task's split is
the index's, else its folder's, else ``[metadata].split``.

How a task maps onto lego (:class:`lego.types.Task`): ``problem_statement`` is instruction.md;
``dockerfile`` is environment/Dockerfile (or ``FROM <docker_image>``) followed by lego's epilogue,
which makes the working directory (the Dockerfile's ``WORKDIR``) a one-commit git repo if it is not
one (lego diffs the agent's work against it, and grades that diff), and creates ``/tests``,
``/logs/verifier`` and ``/solution`` writable by the unprivileged uid lego runs every command as;
``metadata["repo_dir"]`` is that working directory; ``metadata["harbor"]`` holds the task
directory, the timeouts and the verifier's environment; ``patch`` is the solution directory as a
script answer (:mod:`lego.engines.script_answer`), which the oracle plays and the grader's gold
check runs. :meth:`HarborSource.materialize` builds the image from the whole ``environment/``
context (:mod:`lego.tasks.harbor_image`: cached by content as ``lego-harbor:<hash>``) and sets
``Task.image``; grading is :func:`lego.sandboxes.verifier.grade_verifier`.

What does not carry over: docker-compose environments, multi-step tasks, Windows tasks, and work the
verifier checks outside the working directory or in files the allow-list does not apply (lego grades
the repo's diff, through the same allow-list as every task: :func:`lego.sandboxes.guards.filter_diff`,
source edits only); ``[verifier]``/``[agent]`` ``user`` (the agent, solve.sh and test.sh all run as
lego's unprivileged uid), ``allow_internet`` (never: no network but the proxy) and resource requests
(lego's ``sandbox.*`` limits apply), so a test.sh that installs packages at verify time cannot run.
"""

from __future__ import annotations

import json
import logging
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lego.engines.script_answer import ScriptAnswer
from lego.errors import TaskError
from lego.tasks.harbor_image import build_image
from lego.types import Task

__all__ = [
    "EPILOGUE",
    "HarborSource",
    "HarborTaskConfig",
    "is_harbor_source",
    "read_task_dir",
    "workdir_of",
]

log = logging.getLogger(__name__)

_INDEX_KEYS = ("path", "task_dir", "task_path")

EPILOGUE = """
# --- added by lego: the working directory as a one-commit git repo (lego diffs the agent's work
# against it) and the directories Harbor's verifier and oracle use, writable by the unprivileged uid
# lego runs every command as.
USER root
RUN command -v git >/dev/null || { echo "lego needs git in the task image: install it in environment/Dockerfile" >&2; exit 1; }; \\
    if [ ! -e .git ]; then git init -q && git add -A && \\
      git -c user.name=lego -c user.email=lego@localhost commit -q --allow-empty -m "harbor task environment"; fi; \\
    mkdir -p /tests /solution /logs/verifier /logs/agent && chmod 1777 /tests /solution /logs /logs/verifier /logs/agent
"""
"""Appended to every Harbor task's Dockerfile (see the module doc)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class HarborTaskSection(_Section):
    name: str = ""
    description: str = ""


class HarborVerifier(_Section):
    timeout_sec: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)


class HarborAgent(_Section):
    timeout_sec: float = Field(600.0, gt=0)


class HarborEnvironment(_Section):
    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None


class HarborSolution(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class HarborTaskConfig(_Section):
    """task.toml, as far as lego reads it (unknown keys are kept, never refused)."""

    version: str = "1.0"
    schema_version: str | None = None
    task: HarborTaskSection = Field(default_factory=HarborTaskSection)
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: HarborVerifier = Field(default_factory=HarborVerifier)
    agent: HarborAgent = Field(default_factory=HarborAgent)
    environment: HarborEnvironment = Field(default_factory=HarborEnvironment)
    solution: HarborSolution = Field(default_factory=HarborSolution)


def _logical_lines(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    out: list[str] = []
    buf = ""
    for line in dockerfile.splitlines():
        if not buf and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((buf + line).strip())
        buf = ""
    if buf:
        out.append(buf.strip())
    return [ln for ln in out if ln]


def workdir_of(dockerfile: str) -> str | None:
    """The working directory of the Dockerfile's final stage (its WORKDIRs resolved), or None."""
    current: str | None = None
    for line in _logical_lines(dockerfile):
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            current = None
        elif word.upper() == "WORKDIR" and rest.strip():
            target = rest.strip().strip("\"'")
            current = str(PurePosixPath(current or "/") / target) if not target.startswith("/") else target
    return current


def _safe_id(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name.replace("/", "__")).strip("-.") or "task"


def _solution(task_dir: Path, env: dict[str, str]) -> str:
    """The solution directory as a script answer, or "" when the task has no solution/solve.sh."""
    sol = task_dir / "solution"
    if not (sol / "solve.sh").is_file():
        return ""
    files = {
        p.relative_to(sol).as_posix(): (p.read_bytes(), p.stat().st_mode)
        for p in sorted(sol.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }
    return ScriptAnswer.from_files(files, env=env).encode()


def read_task_dir(task_dir: str | Path, split: str = "") -> Task:
    """One Harbor task directory as a :class:`Task` (see the module doc); a :class:`TaskError` names
    what is missing or malformed."""
    d = Path(task_dir).resolve()
    toml_path = d / "task.toml"
    if not toml_path.is_file():
        raise TaskError(f"{d} is not a Harbor task directory: it has no task.toml")
    try:
        cfg = HarborTaskConfig.model_validate(tomllib.loads(toml_path.read_text(encoding="utf-8")))
    except (tomllib.TOMLDecodeError, ValidationError, UnicodeDecodeError) as exc:
        raise TaskError(f"{toml_path}: not a valid Harbor task.toml ({exc})") from exc
    instruction = d / "instruction.md"
    if not instruction.is_file():
        raise TaskError(f"Harbor task {d}: instruction.md is missing (the agent's instruction)")
    if not (d / "tests" / "test.sh").is_file():
        raise TaskError(f"Harbor task {d}: tests/test.sh is missing (the verifier that writes the reward)")
    dockerfile_path = d / "environment" / "Dockerfile"
    if cfg.environment.docker_image:
        base = f"FROM {cfg.environment.docker_image}\n"
    elif dockerfile_path.is_file():
        base = dockerfile_path.read_text(encoding="utf-8")
    else:
        raise TaskError(
            f"Harbor task {d}: environment/Dockerfile is missing and task.toml names no [environment] docker_image "
            "(docker-compose environments are not supported)"
        )
    name = cfg.task.name or d.name
    repo = name if "/" in name else f"harbor/{name}"
    extra = {k: v for k, v in cfg.metadata.items() if isinstance(v, str | int | float | bool)}
    harbor = {
        "task_dir": str(d),
        "name": name,
        "verifier_timeout_sec": cfg.verifier.timeout_sec,
        "verifier_env": cfg.verifier.env,
        "agent_timeout_sec": cfg.agent.timeout_sec,
        "build_timeout_sec": cfg.environment.build_timeout_sec,
    }
    metadata: dict[str, Any] = {**extra, "harbor": harbor}
    workdir = workdir_of(base)
    if workdir:
        metadata["repo_dir"] = workdir
    return Task(
        instance_id=_safe_id(name),
        repo=repo,
        problem_statement=instruction.read_text(encoding="utf-8"),
        patch=_solution(d, cfg.solution.env),
        dockerfile=base.rstrip("\n") + "\n" + EPILOGUE,
        test_cmd="bash /tests/test.sh",
        split=split or str(cfg.metadata.get("split", "")),
        metadata=metadata,
    )


def _index_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise TaskError(f"reading {path} needs pyarrow: pip install pyarrow (or use a JSONL index)") from exc
        return list(pq.read_table(path).to_pylist())
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
        rows.append(row if isinstance(row, dict) else {"path": row})
    return rows


def _row_dir(row: dict[str, Any]) -> str | None:
    return next((str(row[k]) for k in _INDEX_KEYS if isinstance(row.get(k), str)), None)


def is_harbor_source(path: Path) -> bool:
    """Whether ``path`` is a Harbor task directory, a directory of them, or an index of them."""
    if path.is_dir():
        return (path / "task.toml").is_file() or any(
            (c / "task.toml").is_file() or any((g / "task.toml").is_file() for g in c.iterdir() if g.is_dir())
            for c in path.iterdir()
            if c.is_dir()
        )
    if path.suffix == ".parquet":
        return True
    if path.suffix == ".jsonl" and path.is_file():
        with open(path, encoding="utf-8") as f:
            first = next((ln for ln in f if ln.strip()), "")
        try:
            row = json.loads(first)
        except json.JSONDecodeError:
            return False
        return isinstance(row, dict) and "instance_id" not in row and _row_dir(row) is not None
    return False


class HarborSource:
    """Harbor task directories as a :class:`lego.seams.TaskSource` (see the module doc).

    A malformed task directory is reported in ``errors`` and skipped (``strict=True``: raised)."""

    def __init__(self, path: str | Path, split: str | None = None, strict: bool = False) -> None:
        self.path = Path(path).expanduser().resolve()
        self.name = self.path.stem
        self.default_split = split
        self.strict = strict
        self.errors: list[TaskError] = []
        self._records: list[Task] | None = None

    def _dirs(self) -> list[tuple[Path, str]]:
        """(task dir, split) for every task the source names."""
        p = self.path
        if not p.exists():
            raise TaskError(f"Harbor task source {p} does not exist")
        if p.is_file():
            out = []
            for row in _index_rows(p):
                where = _row_dir(row)
                if where is None:
                    self._fail(TaskError(f"{p}: a row names no task directory ({', '.join(_INDEX_KEYS)}): {row}"))
                    continue
                out.append(((p.parent / where).resolve(), str(row.get("split") or "")))
            return out
        if (p / "task.toml").is_file():
            return [(p, "")]
        out = []
        for child in sorted(c for c in p.iterdir() if c.is_dir() and not c.name.startswith(".")):
            if (child / "task.toml").is_file():
                out.append((child, ""))
            else:
                out += [(g, child.name) for g in sorted(child.iterdir()) if (g / "task.toml").is_file()]
        return out

    def _fail(self, error: TaskError) -> None:
        if self.strict:
            raise error
        log.warning("skipping Harbor task: %s", error)
        self.errors.append(error)

    def _all(self) -> list[Task]:
        if self._records is None:
            self.errors = []
            seen: dict[str, Path] = {}
            out = []
            for d, split in self._dirs():
                try:
                    task = read_task_dir(d, split)
                except TaskError as exc:
                    self._fail(exc)
                    continue
                if task.instance_id in seen:
                    self._fail(
                        TaskError(f"{d}: task name {task.instance_id!r} is also the name of {seen[task.instance_id]}")
                    )
                    continue
                seen[task.instance_id] = d
                out.append(task)
            self._records = out
        return self._records

    def splits(self) -> list[str]:
        return sorted({t.split for t in self._all() if t.split})

    def records(self, split: str | None = None) -> list[Task]:
        split = split or self.default_split
        if split is not None and split not in self.splits():
            raise TaskError(
                f"{self.path} has no split {split!r} (splits: {', '.join(self.splits()) or 'none'}); a task's split "
                "is its index row's `split`, its folder's name (DIR/train/<task>) or its task.toml [metadata] split"
            )
        return [t for t in self._all() if split is None or t.split == split]

    def materialize(self, task: Task) -> Task:
        """The task with ``image`` built from its environment (cached) and ``repo_dir`` read from it."""
        image, workdir = build_image(task)
        return task.model_copy(update={"image": image, "metadata": {**task.metadata, "repo_dir": workdir}})

    def tasks(self, split: str | None = None) -> Iterator[Task]:
        for task in self.records(split):
            yield self.materialize(task)

    def get(self, instance_id: str) -> Task:
        for task in self._all():
            if task.instance_id == instance_id:
                return self.materialize(task)
        raise TaskError(f"no Harbor task {instance_id!r} in {self.path}; list them with `lego tasks list {self.path}`")
