"""Making a suite of real-project tasks: recipes, splits, resumable runs and what they write.

``lego tasks make`` composes these: :func:`load_recipe` reads a suite recipe (TOML: run settings and
``[[projects]]``, each a :class:`~lego.tasks.factory.ProjectSpec`), :func:`lock_environments` gives
each project the pinned environment a previous manifest recorded (the manifest is the lock file),
:func:`assign_splits` splits by project, :func:`make_tasks` runs the factory over every project,
saving each finished one so a killed run resumes, and :func:`write_outputs` writes ``tasks.jsonl``,
``manifest.jsonl`` and ``summary.json``.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from pydantic import ValidationError

from lego.errors import TaskError
from lego.io import atomic_write_text
from lego.tasks.factory import MakeOptions, Project, ProjectResult, ProjectSpec, make_project
from lego.tasks.realrepo import ProjectLayout
from lego.tasks.realsuite import RECIPE_PATH, manifest_lines, read_manifest, write_manifest
from lego.types import Task, TaskEnvironment

__all__ = [
    "assign_splits",
    "load_recipe",
    "lock_environments",
    "make_tasks",
    "select_projects",
    "summary",
    "write_outputs",
]


def load_recipe(path: Path = RECIPE_PATH) -> tuple[list[ProjectSpec], dict[str, Any]]:
    """A suite recipe (TOML): its ``[[projects]]`` and its run settings (seed, max_per_project, ...)."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        specs = [ProjectSpec.model_validate(p) for p in raw.pop("projects", [])]
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise TaskError(f"suite recipe {path} cannot be read: {exc}") from exc
    return specs, raw


def select_projects(specs: list[ProjectSpec], names: list[str]) -> list[ProjectSpec]:
    """The recipe's projects named in ``names`` (as in the recipe, or by project name); an unknown name
    is an error listing the ones there are."""

    def name(spec: ProjectSpec) -> str:
        return canonicalize_name(spec.source.split("==")[0])

    wanted = {canonicalize_name(n.split("==")[0]) for n in names}
    unknown = wanted - {name(s) for s in specs}
    if unknown:
        raise TaskError(f"no project {sorted(unknown)} in the recipe; it has {sorted(name(s) for s in specs)}")
    return [s for s in specs if name(s) in wanted]


def lock_environments(specs: list[ProjectSpec], manifest: Path) -> list[ProjectSpec]:
    """Specs given the pinned environment a previous manifest recorded for the same project version,
    so a rebuild installs exactly what the shipped tasks were made with (the manifest is the lock)."""
    if not manifest.exists():
        return specs
    projects, _ = read_manifest(manifest)
    by_requirement = {f"{p['origin'].get('name')}=={p['origin'].get('version')}": p for p in projects.values()}
    out = []
    for spec in specs:
        hit = by_requirement.get(spec.source.replace(" ", ""))
        if spec.environment is None and hit is not None:
            spec = spec.model_copy(update={"environment": TaskEnvironment.model_validate(hit["environment"])})
        out.append(spec)
    return out


def assign_splits(specs: list[ProjectSpec], heldout: list[str], seed: int) -> list[ProjectSpec]:
    """Split by project: the named ones held out; with none named and two or more projects, a quarter
    of them (at least one), picked by a seeded hash of their sources."""
    if not heldout and len(specs) >= 2:
        ranked = sorted(specs, key=lambda s: hashlib.sha256(f"{seed}:{s.source}".encode()).hexdigest())
        heldout = [s.source for s in ranked[: max(1, round(len(specs) / 4))]]
    names = set(heldout)
    return [
        s.model_copy(update={"split": "heldout" if s.source in names or s.source.split("==")[0] in names else "train"})
        for s in specs
    ]


def make_tasks(
    specs: list[ProjectSpec],
    options: MakeOptions,
    progress: Callable[[str, str], None] | None = None,
    checkpoints: Path | None = None,
) -> list[ProjectResult]:
    """Every project in turn (each one's mutants on ``options.jobs`` workers).

    With ``checkpoints``, each finished project is saved there, and a project saved by an earlier run
    with the same spec and options is taken from it: a run killed after hours resumes where it was
    (``--jobs`` does not change a result, so it is not part of the match)."""
    results = []
    for spec in specs:
        saved = checkpoints / f"{_checkpoint_key(spec, options)}.json" if checkpoints else None
        result = _load_checkpoint(saved, spec) if saved and saved.exists() else None
        if result is not None:
            if progress:
                progress(spec.source, f"done in an earlier run: {len(result.tasks)} tasks (from {saved})")
        else:
            result = make_project(spec, options, progress)
            if saved is not None and not result.error:
                _save_checkpoint(saved, result)
        results.append(result)
    return results


def _checkpoint_key(spec: ProjectSpec, options: MakeOptions) -> str:
    settings = {"spec": spec.model_dump(mode="json"), "options": options.model_dump(mode="json", exclude={"jobs"})}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]


def _save_checkpoint(path: Path, result: ProjectResult) -> None:
    project = result.project
    assert project is not None
    record = {
        "project": {
            "name": project.name,
            "version": project.version,
            "root": str(project.root),
            "import_roots": project.layout.import_roots,
            "environment": project.environment.model_dump(mode="json"),
            "origin": project.origin,
            "packages": project.packages,
            "env_sources": project.env_sources,
        },
        "tasks": [t.model_dump(mode="json") for t in result.tasks],
        "stable": result.stable,
        "unused_tests": dict(result.unused_tests),
        "dropped": dict(result.dropped),
        "evaluated": result.evaluated,
        "seconds": result.seconds,
    }
    atomic_write_text(path, json.dumps(record) + "\n")


def _load_checkpoint(path: Path, spec: ProjectSpec) -> ProjectResult | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        info = record["project"]
        root = Path(info["root"])
        project = Project(
            name=info["name"],
            version=info["version"],
            root=root,
            layout=ProjectLayout(root=root, import_roots=info["import_roots"]),
            environment=TaskEnvironment.model_validate(info["environment"]),
            origin=info["origin"],
            packages=info["packages"],
            env_sources=info["env_sources"],
        )
        return ProjectResult(
            spec=spec,
            project=project,
            tasks=[Task.model_validate(t) for t in record["tasks"]],
            stable=record["stable"],
            unused_tests=Counter(record["unused_tests"]),
            dropped=Counter(record["dropped"]),
            evaluated=record["evaluated"],
            seconds=record["seconds"],
        )
    except (OSError, KeyError, TypeError, ValueError, ValidationError):
        return None  # unreadable (an older format, a torn write): made again


def write_outputs(results: list[ProjectResult], out_dir: Path | None, manifest: Path | None = None) -> dict[str, Path]:
    """``tasks.jsonl`` (SWE-bench records), ``manifest.jsonl`` and ``summary.json`` into ``out_dir``;
    the manifest (only) to ``manifest`` too when given. Returns what was written."""
    from lego.tasks.builtin import write_instances

    tasks = [t for r in results for t in r.tasks]
    projects = [
        {
            "project": r.project.name,
            "version": r.project.version,
            "split": r.spec.split,
            "origin": r.project.origin,
            "environment": r.project.environment,
            "packages": r.project.packages,
            "stable": r.stable,
        }
        for r in results
        if r.project is not None and r.tasks
    ]
    lines = manifest_lines(tasks, projects)
    written: dict[str, Path] = {}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_instances(tasks, out_dir / "tasks.jsonl")
        write_manifest(out_dir / "manifest.jsonl", lines)
        atomic_write_text(out_dir / "summary.json", json.dumps(summary(results), indent=2) + "\n")
        (out_dir / "summary.json").chmod(0o644)
        written.update(tasks=out_dir / "tasks.jsonl", manifest=out_dir / "manifest.jsonl")
        written["summary"] = out_dir / "summary.json"
    if manifest is not None:
        write_manifest(manifest, lines)
        written["manifest"] = manifest
    return written


def summary(results: list[ProjectResult]) -> list[dict[str, Any]]:
    """Per project: what was kept, what was dropped and why, how long it took."""
    return [
        {
            "source": r.spec.source,
            "project": r.project.name if r.project else None,
            "version": r.project.version if r.project else None,
            "split": r.spec.split,
            "layout": r.project.layout.import_roots if r.project else None,
            "environment_from": r.project.env_sources if r.project else [],
            "stable_tests": len(r.stable),
            "unused_tests": dict(sorted(r.unused_tests.items())),
            "kept": len(r.tasks),
            "evaluated": r.evaluated,
            "dropped": dict(sorted(r.dropped.items())),
            "kinds": dict(sorted(_count(t.metadata["mutation_kind"] for t in r.tasks).items())),
            "seconds": round(r.seconds, 1),
            "error": r.error,
        }
        for r in results
    ]


def _count(items: Iterator[str] | list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out
