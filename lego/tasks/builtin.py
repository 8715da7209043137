"""The built-in task suite: eight small libraries, bugs injected into them, shipped as JSONL.

Train / held-out is split by library, so held-out tasks are unseen code. ``build_suite`` regenerates
``lego/tasks/data/instances.jsonl`` deterministically from a seed (``lego tasks build``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from lego.errors import TaskError
from lego.io import atomic_write_text
from lego.tasks.injector import Library, build_library
from lego.types import Task

__all__ = [
    "BUILTIN_DIR",
    "DEFAULT_CAPS",
    "INSTANCES_PATH",
    "LIBRARIES",
    "LIBS_DIR",
    "build_suite",
    "library",
    "library_dir",
    "write_instances",
]

BUILTIN_DIR = Path(__file__).resolve().parent / "data"
LIBS_DIR = BUILTIN_DIR / "libs"
INSTANCES_PATH = BUILTIN_DIR / "instances.jsonl"

LIBRARIES: dict[str, str] = {
    "intervalset": "train",
    "jsonpointer": "train",
    "lrucache": "train",
    "matrix": "train",
    "roman": "train",
    "wrap": "train",
    "dateparse": "heldout",
    "template": "heldout",
}
"""Library -> split. Held-out libraries are never trained on."""

DEFAULT_CAPS = {"train": 40, "heldout": 60}
"""Instances per library, by split (held-out is larger: evaluation wants >= 100 held-out tasks)."""


def library_dir(name: str) -> Path:
    path = LIBS_DIR / name
    if not path.is_dir():
        raise TaskError(f"built-in library {name!r} is missing at {path}; valid names: {', '.join(sorted(LIBRARIES))}")
    return path


def library(name: str) -> Library:
    if name not in LIBRARIES:
        raise TaskError(f"unknown built-in library {name!r}; valid names: {', '.join(sorted(LIBRARIES))}")
    return Library(name=name, root=library_dir(name), split=LIBRARIES[name])


def build_suite(
    seed: int = 0,
    workers: int = 2,
    caps: dict[str, int] | None = None,
    libraries: list[str] | None = None,
    on_progress: Callable[[str, int, int, int], None] | None = None,
) -> tuple[list[Task], dict[str, dict[str, int]]]:
    """Inject, run and validate bugs in each library; return the tasks and per-library drop counts.

    ``on_progress(library, accepted, evaluated, cap)`` is called after each mutant.
    """
    caps = {**DEFAULT_CAPS, **(caps or {})}
    tasks: list[Task] = []
    report: dict[str, dict[str, int]] = {}
    for name in libraries or sorted(LIBRARIES):
        lib = library(name)
        cap = caps[lib.split]

        def progress(accepted: int, evaluated: int, name: str = name, cap: int = cap) -> None:
            if on_progress:
                on_progress(name, accepted, evaluated, cap)

        lib_tasks, dropped = build_library(lib, seed=seed, cap=cap, workers=workers, on_progress=progress)
        tasks.extend(lib_tasks)
        report[name] = {**dropped, "instances": len(lib_tasks)}
    return tasks, report


def write_instances(tasks: list[Task], path: Path = INSTANCES_PATH) -> None:
    """One JSON object per line, in a stable key order (``repo_path`` is machine-local: never written)."""
    # A task without an environment is written without the key, so files built before environments
    # existed (the shipped suites) equal a rebuild byte for byte.
    lines = [
        json.dumps(
            t.model_dump(exclude={"repo_path"} | ({"environment"} if t.environment is None else set())), sort_keys=True
        )
        for t in tasks
    ]
    atomic_write_text(path, "\n".join(lines) + "\n")
    path.chmod(0o644)  # a shipped data file: world-readable like the rest of the package
