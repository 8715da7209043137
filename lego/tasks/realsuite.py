"""Real-project tasks on disk: the compact manifest, the ``real`` task source and materialisation.

``lego tasks make`` writes, per run, ``tasks.jsonl`` (full SWE-bench records) and ``manifest.jsonl``,
the compact form the shipped suite (``lego/tasks/data/real/manifest.jsonl``) is committed in. A
manifest holds two kinds of line:

- ``{"kind": "project", ...}``: a project's sdist (name, version, filename, sha256) or checkout,
  its pinned environment (the lock: :class:`~lego.types.TaskEnvironment` without a path), its
  packages and its stable tests grouped by file (the PASS_TO_PASS pool);
- ``{"kind": "task", ...}``: one task: the mutation (file, offsets, original and replacement text,
  kind), the gold patch, ``base_commit``, FAIL_TO_PASS, the stable tests that did not pass on the
  mutant without failing (``not_passing``; PASS_TO_PASS is the pool minus both), the hidden test
  files, the bug report and the split.

No repo, sdist or venv is committed: :func:`materialize_real` rebuilds a task's repo from the sdist
(downloaded through pip when not cached, its sha256 checked) and its environment from the lock, both
cached, the first time the task is used. Records listed by :class:`RealSource` carry no repo,
no environment path and no test_patch until then.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lego.errors import TaskError
from lego.io import atomic_write_text
from lego.tasks.diffs import file_diff, new_file_diff
from lego.tasks.environments import build_environment
from lego.tasks.materialize import cached_repo
from lego.tasks.realrepo import checkout_tree, sdist_for, unpack_sdist
from lego.types import Task, TaskEnvironment

__all__ = [
    "MANIFEST_PATH",
    "RECIPE_PATH",
    "RealSource",
    "manifest_lines",
    "materialize_real",
    "read_manifest",
    "write_manifest",
]

DATA_DIR = Path(__file__).resolve().parent / "data" / "real"
MANIFEST_PATH = DATA_DIR / "manifest.jsonl"
RECIPE_PATH = DATA_DIR / "recipe.toml"


def _pristine(origin: dict[str, str]) -> Path:
    """The pristine project tree a recipe's origin names, fetched and unpacked on first use."""
    if "sha256" in origin:
        return unpack_sdist(sdist_for(origin["name"], origin["version"], origin["sha256"]))
    root, found = checkout_tree(Path(origin["path"]))
    if found["tree_sha256"] != origin.get("tree_sha256"):
        raise TaskError(
            f"the checkout {origin['path']} changed since its tasks were made (tree sha256 {found['tree_sha256'][:12]}, "
            f"recorded {str(origin.get('tree_sha256'))[:12]}); make the tasks again with `lego tasks make {origin['path']}`"
        )
    return root


def materialize_real(task: Task) -> Task:
    """A real-project task ready to run: its repo (cached, one commit at ``base_commit``), its hidden
    tests as ``test_patch`` and its environment built (``environment.path`` set)."""
    recipe = task.metadata.get("recipe") or {}
    mutation = recipe.get("mutation") or {}
    if "origin" not in recipe or "file" not in mutation:
        raise TaskError(f"task {task.instance_id}: no real-project recipe in its metadata; it cannot be rebuilt")
    root = _pristine(recipe["origin"])
    gold = (root / mutation["file"]).read_bytes().decode("utf-8")
    start, end = int(mutation["start"]), int(mutation["end"])
    if gold[start:end] != mutation["original"]:
        raise TaskError(f"task {task.instance_id}: {mutation['file']} does not hold the recorded text at the mutation")
    patch = file_diff(mutation["file"], gold[:start] + mutation["replacement"] + gold[end:], gold)
    if patch != task.patch:
        raise TaskError(f"task {task.instance_id}: the recipe's mutation does not give the recorded gold patch")
    hidden = list(task.metadata.get("hidden_tests") or [])
    test_patch = task.test_patch or "".join(
        new_file_diff(f, (root / f).read_bytes().decode("utf-8", errors="replace")) for f in hidden
    )
    repo = cached_repo(task.instance_id, root, patch, test_patch, task.base_commit, every_file=True)
    environment = build_environment(task.environment) if task.environment else None
    return task.model_copy(update={"repo_path": str(repo), "test_patch": test_patch, "environment": environment})


# -- the manifest -----------------------------------------------------------------------------


def _group(tests: list[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for test in sorted(tests):
        file, _, rest = test.partition("::")
        grouped.setdefault(file, []).append(rest)
    return grouped


def _ungroup(grouped: dict[str, list[str]]) -> list[str]:
    return [f"{file}::{rest}" for file, rests in grouped.items() for rest in rests]


def manifest_lines(tasks: list[Task], projects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compact manifest lines for made tasks. ``projects``: one dict per project with ``project``,
    ``version``, ``split``, ``origin``, ``environment`` (TaskEnvironment), ``packages``, ``stable``."""
    lines: list[dict[str, Any]] = []
    for info in projects:
        env: TaskEnvironment = info["environment"]
        lines.append(
            {
                "kind": "project",
                "project": info["project"],
                "version": info["version"],
                "split": info["split"],
                "origin": info["origin"],
                "environment": env.model_dump(exclude={"path"}),
                "packages": info["packages"],
                "tests": _group(info["stable"]),
            }
        )
    for task in tasks:
        meta = task.metadata
        stable = set(next(p["stable"] for p in projects if p["project"] == meta["project"]))
        passing = set(task.PASS_TO_PASS) | set(task.FAIL_TO_PASS)
        lines.append(
            {
                "kind": "task",
                "instance_id": task.instance_id,
                "project": meta["project"],
                "split": task.split,
                "base_commit": task.base_commit,
                "mutation": meta["recipe"]["mutation"],
                "patch": task.patch,
                "hidden_tests": meta["hidden_tests"],
                "FAIL_TO_PASS": task.FAIL_TO_PASS,
                "not_passing": sorted(stable - passing),
                "problem_statement": task.problem_statement,
                "seed": meta.get("seed", 0),
            }
        )
    return lines


def write_manifest(path: Path, lines: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines))
    path.chmod(0o644)  # shipped data: world-readable like the rest of the package


def read_manifest(path: Path) -> tuple[dict[str, dict[str, Any]], list[Task]]:
    """(project lines by name, tasks) of a manifest; a malformed line is a TaskError naming it."""
    if not path.exists():
        raise TaskError(f"real-project manifest {path} is missing; rebuild it with `lego tasks make --suite real`")
    projects: dict[str, dict[str, Any]] = {}
    tasks: list[Task] = []
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            if line["kind"] == "project":
                projects[line["project"]] = line
                continue
            project = projects[line["project"]]
            tasks.append(_task(line, project))
        except (KeyError, ValueError, TypeError) as exc:
            raise TaskError(f"{path}:{lineno}: malformed manifest line ({type(exc).__name__}: {exc})") from exc
    return projects, tasks


def _task(line: dict[str, Any], project: dict[str, Any]) -> Task:
    from packaging.utils import canonicalize_name

    f2p = list(line["FAIL_TO_PASS"])
    excluded = set(f2p) | set(line.get("not_passing", []))
    mutation = line["mutation"]
    return Task(
        instance_id=line["instance_id"],
        repo=f"pypi/{canonicalize_name(project['project'])}",
        base_commit=line["base_commit"],
        problem_statement=line["problem_statement"],
        patch=line["patch"],
        FAIL_TO_PASS=f2p,
        PASS_TO_PASS=[t for t in _ungroup(project["tests"]) if t not in excluded],
        version=project["version"],
        test_cmd="python -m pytest",
        environment=TaskEnvironment.model_validate(project["environment"]),
        split=line["split"],
        metadata={
            "family": "real",
            "project": project["project"],
            "mutation_kind": mutation["kind"],
            "file": mutation["file"],
            "line": mutation["line"],
            "function": mutation["scope"],
            "hidden_tests": line["hidden_tests"],
            "seed": line.get("seed", 0),
            "recipe": {"origin": project["origin"], "mutation": mutation},
        },
    )


class RealSource:
    """The shipped real-project suite (or any manifest ``lego tasks make`` wrote); repos and
    environments are built on demand by :meth:`materialize` (see the module docstring)."""

    def __init__(self, split: str | None = None, path: Path | None = None, name: str = "real") -> None:
        self.path = path or MANIFEST_PATH
        self.name = name
        self.errors: list[TaskError] = []
        self._projects, self._tasks = read_manifest(self.path)
        if split is not None and split not in self.splits():
            raise TaskError(f"{self.name} has no split {split!r}; valid splits: {', '.join(self.splits())}")
        self.default_split = split

    def splits(self) -> list[str]:
        return sorted({t.split for t in self._tasks}, key=lambda s: (s != "train", s))

    def records(self, split: str | None = None) -> list[Task]:
        split = split or self.default_split
        return [t for t in self._tasks if split is None or t.split == split]

    def materialize(self, task: Task) -> Task:
        return materialize_real(task)

    def tasks(self, split: str | None = None) -> Iterator[Task]:
        for task in self.records(split):
            yield self.materialize(task)

    def get(self, instance_id: str) -> Task:
        for task in self._tasks:
            if task.instance_id == instance_id:
                return self.materialize(task)
        raise TaskError(f"no task {instance_id!r} in {self.path}; list them with `lego tasks list {self.name}`")
