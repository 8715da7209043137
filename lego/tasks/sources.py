"""Task sources: the built-in suite and SWE-bench-format JSONL files (SWE-bench, SWE-Gym, SWE-smith,
your own). Local files only; nothing is fetched from a hub.

All implement :class:`lego.seams.TaskSource` (``name``, ``errors``, ``splits()``, ``records(split)``,
``materialize(task)``, ``tasks(split)``, ``get(instance_id)``): ``records`` lists a split fast, and
``materialize`` makes one record ready to run (the shipped suites build its repo then; a JSONL record
is ready as read, or pinned at its ``base_commit``), so a caller never needs to know which kind of
source it holds. Pick one by spec with :func:`load_source`: ``builtin``, ``builtin:heldout``,
``/path/tasks.jsonl``, ``/path/tasks.jsonl:test`` or a directory of Harbor task directories
(:mod:`lego.tasks.harbor`).

The tasks a run uses: :func:`pick_tasks` (records, materialised later) and :func:`load_tasks` (ready
to run) are the one loader behind `lego train`, its validation, `lego eval` and the benches, so
``tasks.where`` and a limit select the same tasks in all of them.

Bad input: a malformed JSONL line is a :class:`TaskError` naming ``file:line`` and the reason, before
anything runs (a task file with a broken line is usually a broken export, and training on the rest
hides it). ``skip_bad_lines=True`` (`--skip-bad-lines`, ``tasks.skip_bad_lines``) skips such lines on
purpose instead, each reported in ``JsonlSource.errors``. A task
whose repo is missing is still listed; :func:`require_repo` fails that one task with a clear error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lego.errors import ConfigError, TaskError
from lego.seams import TaskSource
from lego.tasks import builtin, starter
from lego.tasks.checkout import at_base_commit, own_environment
from lego.tasks.harbor import HarborSource, is_harbor_source
from lego.tasks.materialize import cached_repo
from lego.tasks.realsuite import RealSource, materialize_real
from lego.tasks.swebench_compat import REQUIRED_FIELDS
from lego.types import Task

__all__ = [
    "BuiltinSource",
    "JsonlSource",
    "StarterSource",
    "load_source",
    "load_tasks",
    "pick_tasks",
    "require_repo",
    "select_tasks",
]

log = logging.getLogger(__name__)

_TASK_FIELDS = set(Task.model_fields)
_ALIASES = {"image_name": "image"}  # SWE-smith / SWE-Gym spell some fields differently


def require_repo(task: Task) -> Path:
    """The task's local repo directory, or a :class:`TaskError` naming the task and the fix."""
    if not task.repo_path:
        raise TaskError(
            f"task {task.instance_id}: no local repo (repo_path is unset); pass --repos-dir with a checkout "
            f"of {task.repo} at {task.base_commit or 'its base commit'}, or use the docker backend with an image"
        )
    path = Path(task.repo_path)
    if not (path / ".git").exists():
        raise TaskError(
            f"task {task.instance_id}: repo {path} does not exist or is not a git checkout; "
            "check the path in the task file (or --repos-dir)"
        )
    return path


class BuiltinSource:
    """The built-in suite (``lego/tasks/data/instances.jsonl``); repos are materialised on demand."""

    name = "builtin"

    def __init__(self, split: str | None = None, path: Path | None = None) -> None:
        self.path = path or builtin.INSTANCES_PATH
        if split is not None and split not in self.splits():
            raise TaskError(f"{self.name} has no split {split!r}; valid splits: {', '.join(self.splits())}")
        self.default_split = split
        self.errors: list[TaskError] = []  # a shipped file is read strictly: a bad line raises, none is skipped
        self._records: list[Task] | None = None

    def splits(self) -> list[str]:
        return sorted(set(builtin.LIBRARIES.values()), key=lambda s: (s != "train", s))

    def _all(self) -> list[Task]:
        if self._records is None:
            if not self.path.exists():
                raise TaskError(f"built-in instances file {self.path} is missing; run `lego tasks build`")
            self._records = JsonlSource(self.path, strict=True).records()
        return self._records

    def records(self, split: str | None = None) -> list[Task]:
        """The instances without materialising their repos (``repo_path`` unset): fast listing."""
        split = split or self.default_split
        return [t for t in self._all() if split is None or t.split == split]

    def materialize(self, task: Task) -> Task:
        """The task with ``repo_path`` pointing at its materialised (cached) repo."""
        library = str(task.metadata.get("library", ""))
        path = cached_repo(
            task.instance_id, builtin.library_dir(library), task.patch, task.test_patch, task.base_commit
        )
        return task.model_copy(update={"repo_path": str(path)})

    def tasks(self, split: str | None = None) -> Iterator[Task]:
        for task in self.records(split):
            yield self.materialize(task)

    def get(self, instance_id: str) -> Task:
        for task in self._all():
            if task.instance_id == instance_id:
                return self.materialize(task)
        raise TaskError(f"no built-in task {instance_id!r}; list them with `lego tasks list builtin`")


def _starter_repo(task: Task) -> Task:
    """A generated (starter-family) instance with ``repo_path`` at its materialised (cached) repo."""
    path = cached_repo(task.instance_id, starter.source_dir(task), task.patch, task.test_patch, task.base_commit)
    return task.model_copy(update={"repo_path": str(path)})


class StarterSource(BuiltinSource):
    """A generated suite (``lego/tasks/data/<family>.jsonl``): one-module repos with precise bug
    reports, sized for the embedded default policy (see :mod:`lego.tasks.starter`). ``starter``
    plants operator swaps; ``boundary`` plants off-by-one bounds (``>=`` written ``>``)."""

    def __init__(self, split: str | None = None, path: Path | None = None, family: str = "starter") -> None:
        self.name, self.family = family, starter.FAMILIES[family]
        super().__init__(split=split, path=path or self.family.path)

    def splits(self) -> list[str]:
        return list(self.family.sizes)

    def _all(self) -> list[Task]:
        if self._records is None and not self.path.exists():
            raise TaskError(
                f"{self.name} instances file {self.path} is missing; run `lego tasks build --suite {self.name}`"
            )
        return super()._all()

    def materialize(self, task: Task) -> Task:
        return _starter_repo(task)

    def get(self, instance_id: str) -> Task:
        for task in self._all():
            if task.instance_id == instance_id:
                return self.materialize(task)
        raise TaskError(f"no {self.name} task {instance_id!r}; list them with `lego tasks list {self.name}`")


class JsonlSource:
    """SWE-bench-format JSONL: one instance per line; extra fields go to ``metadata``.

    ``repo_path`` may be relative (to the file's directory). Without one, ``repos_dir`` is searched
    for ``<instance_id>/`` then ``<owner>__<name>/``.
    """

    def __init__(
        self, path: str | Path, split: str | None = None, repos_dir: str | Path | None = None, strict: bool = True
    ) -> None:
        self.path = Path(path)
        self.name = self.path.stem
        self.default_split = split
        self.repos_dir = Path(repos_dir) if repos_dir else None
        self.strict = strict
        self.errors: list[TaskError] = []
        self._records: list[Task] | None = None

    def _fail(self, lineno: int, reason: str) -> None:
        error = TaskError(f"{self.path}:{lineno}: {reason}")
        if self.strict:
            raise error
        log.warning("skipping malformed task line: %s", error)
        self.errors.append(error)

    def _parse(self, lineno: int, line: str) -> Task | None:
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            self._fail(lineno, f"invalid JSON ({exc.msg} at column {exc.colno})")
            return None
        if not isinstance(raw, dict):
            self._fail(lineno, f"expected a JSON object, got {type(raw).__name__}")
            return None
        missing = [f for f in REQUIRED_FIELDS if f not in raw]
        if missing:
            self._fail(lineno, f"missing required field(s): {', '.join(missing)}")
            return None
        fields: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for raw_key, value in raw.items():
            key = _ALIASES.get(str(raw_key), str(raw_key))
            (fields if key in _TASK_FIELDS else extra)[key] = value
        if extra:
            fields["metadata"] = {**extra, **(fields.get("metadata") or {})}
        try:
            task = Task.model_validate(fields)
        except ValidationError as exc:
            reasons = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            self._fail(lineno, f"invalid task record ({reasons})")
            return None
        return self._locate_repo(task)

    def _locate_repo(self, task: Task) -> Task:
        if task.repo_path:
            path = Path(task.repo_path)
            if not path.is_absolute():
                path = (self.path.parent / path).resolve()
            return task.model_copy(update={"repo_path": str(path)})
        if self.repos_dir is not None:
            for candidate in (self.repos_dir / task.instance_id, self.repos_dir / task.repo.replace("/", "__")):
                if candidate.is_dir():
                    return task.model_copy(update={"repo_path": str(candidate)})
        return task

    def _all(self) -> list[Task]:
        """Every well-formed instance in file order (malformed lines are reported in ``errors``)."""
        if self._records is None:
            if not self.path.exists():
                raise TaskError(f"task file {self.path} does not exist")
            self.errors = []
            seen: dict[str, int] = {}
            out = []
            with open(self.path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    task = self._parse(lineno, line)
                    if task is None:
                        continue
                    if task.instance_id in seen:
                        self._fail(
                            lineno,
                            f"duplicate instance_id {task.instance_id!r} (first on line {seen[task.instance_id]})",
                        )
                        continue
                    seen[task.instance_id] = lineno
                    out.append(task)
            self._records = out
        return self._records

    def splits(self) -> list[str]:
        return sorted({t.split for t in self._all() if t.split})

    def records(self, split: str | None = None) -> list[Task]:
        """The well-formed instances of ``split`` (default: the source's own; None: all) in file order."""
        split = split or self.default_split
        if split is not None and split not in self.splits():
            raise TaskError(
                f"{self.path} has no split {split!r}; splits in the file: {', '.join(self.splits()) or '(none)'}"
            )
        return [t for t in self._all() if split is None or t.split == split]

    def materialize(self, task: Task) -> Task:
        """A JSONL record names its local checkout (or none), pinned at its ``base_commit`` when HEAD is
        another commit (:func:`lego.tasks.checkout.at_base_commit`: your own repo with its history); a
        generated instance without one (what ``lego tasks build --suite starter --output FILE`` writes)
        carries its files and is built here."""
        if not task.repo_path and task.metadata.get("family") == "starter" and "files" in task.metadata:
            return _starter_repo(task)
        if not task.repo_path and task.metadata.get("family") == "real" and "recipe" in task.metadata:
            return materialize_real(task)  # what `lego tasks make --out DIR` writes: rebuilt from its sdist
        return own_environment(at_base_commit(task))

    def tasks(self, split: str | None = None) -> Iterator[Task]:
        for task in self.records(split):
            yield self.materialize(task)

    def get(self, instance_id: str) -> Task:
        for task in self._all():
            if task.instance_id == instance_id:
                return self.materialize(task)  # as every command gets it: import roots, environment
        raise TaskError(f"no task {instance_id!r} in {self.path}")


def load_source(spec: str, repos_dir: str | Path | None = None, skip_bad_lines: bool = False) -> TaskSource:
    """``builtin``, ``starter``, ``boundary``, ``real`` (each optionally ``:SPLIT``), ``PATH.jsonl`` or
    ``PATH.jsonl:SPLIT``, or Harbor tasks (a directory of task directories, one task directory, or a
    ``.parquet``/JSONL index of them; ``:SPLIT`` too, see :mod:`lego.tasks.harbor`) -> a task source."""
    head, sep, tail = spec.rpartition(":")
    if not sep or "/" in tail or tail.endswith((".jsonl", ".json")):
        head, tail = spec, ""
    if head == "builtin":
        return BuiltinSource(split=tail or None)
    if head in starter.FAMILIES:
        return StarterSource(split=tail or None, family=head)
    if head == "real":  # the shipped real-project suite (lego/tasks/data/real/manifest.jsonl)
        return RealSource(split=tail or None)
    path = Path(head).expanduser()
    if is_harbor_source(path):
        return HarborSource(path, split=tail or None)
    if path.suffix not in (".jsonl", ".json") and not path.exists():
        raise TaskError(
            f"unknown task source {spec!r}; use builtin, starter, boundary or real (each optionally :train or "
            ":heldout), a .jsonl file or a directory of Harbor task directories"
        )
    return JsonlSource(path, split=tail or None, repos_dir=repos_dir, strict=not skip_bad_lines)


def select_tasks(tasks: list[Task], where: dict[str, list[str]]) -> list[Task]:
    """The tasks whose ``metadata[key]`` (as text) is one of ``where[key]``, for every key; all when
    ``where`` is empty. A key no task has is an error naming the keys there are (a typo would
    otherwise select nothing, or everything)."""
    if not where:
        return tasks
    known = {k for t in tasks for k in t.metadata}
    missing = [k for k in where if k not in known]
    if missing:
        raise TaskError(f"tasks.where: no task has metadata {missing}; the tasks have {sorted(known)}")
    allowed = {k: {str(v) for v in vals} for k, vals in where.items()}
    return [t for t in tasks if all(str(t.metadata.get(k)) in vals for k, vals in allowed.items())]


def pick_tasks(
    spec: str, where: dict[str, list[str]] | None = None, limit: int | None = None, skip_bad_lines: bool = False
) -> tuple[list[Task], TaskSource]:
    """The records of ``spec`` (a :func:`load_source` spec) that ``where`` keeps, then the first ``limit``
    of them in the source's own order, and the source whose ``materialize`` makes one ready to run.

    First N, not a sample: ``limit=N`` is a prefix of ``limit=M`` for M > N and of the whole split, so
    a run's validation, `lego eval --limit N` on the same split and a bench see the same tasks, and a
    suite that grows at its end keeps its first N. The shipped ``builtin`` and ``real`` suites list one
    library's (project's) tasks together, so a small limit there covers few of them; the starter
    suites interleave their mutation kinds. Problems with the spec or ``where`` are a ConfigError."""
    try:
        source = load_source(spec, skip_bad_lines=skip_bad_lines)
        records = select_tasks(source.records(), where or {})
    except TaskError as exc:
        raise ConfigError(f"tasks {spec!r}: {exc}") from exc
    if not records:
        raise ConfigError(f"tasks {spec!r} holds no tasks" + (f" with tasks.where={where}" if where else ""))
    return (records[:limit] if limit else records), source


def load_tasks(
    spec: str, where: dict[str, list[str]] | None = None, limit: int | None = None, skip_bad_lines: bool = False
) -> list[Task]:
    """:func:`pick_tasks`, each task materialised (its repo or environment ready)."""
    records, source = pick_tasks(spec, where, limit, skip_bad_lines)
    return [source.materialize(t) for t in records]
