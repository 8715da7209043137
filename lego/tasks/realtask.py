"""A kept mutant as a SWE-bench task record: the gold patch, the hidden tests, the report, the recipe.

The instance id is ``<project>-<version>-<hash of the mutation>``, so the same bug has the same id on
every machine and in every run. ``test_patch`` re-adds the test files that hold FAIL_TO_PASS tests
(the agent's repo lacks them); PASS_TO_PASS are the stable tests that passed on the mutant too. The
recipe in ``metadata`` (the sdist or checkout, the mutation with its original text) is all it takes
to rebuild the repo (:func:`lego.tasks.realsuite.materialize_real`). Before a task is returned, its
repo is materialised once: that fixes ``base_commit``, and the repo plus the gold patch and the hidden
tests must be byte for byte the pristine project, so grading the gold answer is grading the project.
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from lego.errors import TaskError
from lego.tasks.bugreport import bug_report
from lego.tasks.diffs import file_diff, new_file_diff
from lego.tasks.materialize import git_env, materialize_repo
from lego.tasks.mutations import Mutation
from lego.types import Task

if TYPE_CHECKING:
    from lego.tasks.factory import Project

__all__ = ["FAMILY", "TEST_CMD", "mutation_id", "task_record"]

FAMILY = "real"
TEST_CMD = "python -m pytest"


def mutation_id(mutation: Mutation) -> str:
    """A mutation's stable id (its file, span and replacement): the same bug has the same instance id."""
    key = f"{mutation.file}\0{mutation.start}\0{mutation.end}\0{mutation.replacement}"
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts and "__pycache__" not in p.parts
    }


def task_record(
    project: Project,
    split: str,
    mutation: Mutation,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    messages: dict[str, str],
    seed: int,
) -> Task:
    """The task for one kept mutant (see the module docstring); raises TaskError when its repo plus
    the gold and test patches is not byte for byte the pristine project."""
    gold = (project.root / mutation.file).read_bytes().decode("utf-8")
    patch = file_diff(mutation.file, mutation.apply(gold), gold)
    hidden = sorted({t.split("::")[0] for t in fail_to_pass})
    sources = {f: (project.root / f).read_bytes().decode("utf-8", errors="replace") for f in hidden}
    test_patch = "".join(new_file_diff(f, sources[f]) for f in hidden)
    focus = mutation.scope.split(".")[-1] if mutation.scope else ""
    statement = bug_report(f"{project.name}", project.packages, fail_to_pass, messages, sources, patch, focus=focus)
    name = canonicalize_name(project.name)
    recipe = {
        "origin": project.origin,
        "mutation": {
            "file": mutation.file,
            "line": mutation.line,
            "start": mutation.start,
            "end": mutation.end,
            "original": gold[mutation.start : mutation.end],
            "replacement": mutation.replacement,
            "kind": mutation.kind,
            "scope": mutation.scope,
        },
    }
    task = Task(
        instance_id=f"{name}-{project.version}-{mutation_id(mutation)}",
        repo=f"pypi/{name}",
        problem_statement=statement,
        patch=patch,
        test_patch=test_patch,
        FAIL_TO_PASS=fail_to_pass,
        PASS_TO_PASS=[t for t in pass_to_pass if t not in fail_to_pass],
        version=project.version,
        test_cmd=TEST_CMD,
        environment=project.environment,
        split=split,
        metadata={
            "family": FAMILY,
            "project": project.name,
            "mutation_kind": mutation.kind,
            "file": mutation.file,
            "line": mutation.line,
            "function": mutation.scope,
            "hidden_tests": hidden,
            "seed": seed,
            "recipe": recipe,
        },
    )
    with tempfile.TemporaryDirectory(prefix="lego-base-") as tmp:
        repo = Path(tmp) / "repo"
        task.base_commit = materialize_repo(project.root, patch, test_patch, repo, every_file=True)
        for diff in (patch, test_patch):
            applied = subprocess.run(
                ["git", "apply", "-"], cwd=repo, input=diff, text=True, env=git_env(), capture_output=True, check=False
            )
            if applied.returncode != 0:
                raise TaskError(f"{task.instance_id}: a patch does not apply to its own repo: {applied.stderr[-500:]}")
        if _tree_digest(repo) != _tree_digest(project.root):
            raise TaskError(f"{task.instance_id}: the repo plus the gold and test patches is not the pristine project")
    return task
