"""The environment a real project's suite needs, resolved once and recorded pinned.

:func:`resolve_environment` installs the project's runtime and test dependencies (the extras and
requirement files :func:`lego.tasks.testdeps.suite_requirements` found, the recipe's additions, pytest
and pytest-timeout) into a fresh venv, then records what pip chose (``pip freeze``) and the pytest
plugins those distributions register (entry point group ``pytest11``). The runtime dependencies
come from the sdist's core metadata when it is authoritative (2.2+, not dynamic); otherwise the
project itself is installed with its extras and uninstalled again, which tells the same. Plugins:
the grader runs with plugin autoload off, so every plugin a developer's machine would autoload is
named and loaded with ``-p``. The project is *not* in the task environment: the repo under test,
first on ``sys.path`` through ``import_roots``, is the only copy of it. The record (pinned
requirements, plugins, import roots) is what tasks carry and what rebuilds the same venv anywhere
(:func:`lego.tasks.environments.build_environment`); the venv the resolution installed is already
stored under that record's key (:func:`lego.tasks.environments.resolve_environment_build`), so a
project's environment is installed once.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from lego.errors import TaskError
from lego.paths import cache_dir
from lego.tasks.environments import resolve_environment_build
from lego.tasks.realrepo import ProjectLayout
from lego.tasks.testdeps import declared_requirements, suite_requirements
from lego.tasks.testrun import copy_tree
from lego.tasks.venvs import find_interpreter, interpreter_info
from lego.types import TaskEnvironment

__all__ = ["ALWAYS", "ResolvedEnvironment", "pytest_plugins", "resolve_environment"]

ALWAYS = ("pytest", "pytest-timeout")
"""Installed into every factory environment: the runner, and the per-test timeout that stops a
mutant's infinite loop (lego's test runner passes ``--timeout``)."""

# Lists pytest11 entry points as [distribution, module]; importlib.metadata from 3.8, pkg_resources before.
_PLUGINS = """
import json
try:
    import importlib.metadata as md
    found = [[d.metadata["Name"], ep.value] for d in md.distributions() for ep in d.entry_points if ep.group == "pytest11"]
except ImportError:
    import pkg_resources
    found = [[ep.dist.project_name, ep.module_name] for ep in pkg_resources.iter_entry_points("pytest11")]
print(json.dumps(found))
"""


@dataclass
class ResolvedEnvironment:
    """The pinned environment record and how it was arrived at (for the factory's summary)."""

    environment: TaskEnvironment
    extras: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def _name(line: str) -> str:
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        return ""


def pytest_plugins(venv_python: Path, exclude: str = "") -> list[str]:
    """Module names of the pytest plugins (``pytest11`` entry points) installed in a venv."""
    out = subprocess.run([str(venv_python), "-c", _PLUGINS], capture_output=True, text=True, check=False).stdout
    try:
        rows = json.loads(out or "[]")
    except json.JSONDecodeError:
        return []
    own = canonicalize_name(exclude) if exclude else ""
    return sorted({module.split(":")[0].strip() for dist, module in rows if canonicalize_name(dist) != own})


def resolve_environment(
    layout: ProjectLayout,
    project: str,
    *,
    python: str = "",
    extras: list[str] | None = None,
    add: list[str] | tuple[str, ...] = (),
    drop: list[str] | tuple[str, ...] = (),
) -> ResolvedEnvironment:
    """Resolve and build ``project``'s test environment (see the module docstring); the returned
    record is pinned and already built (``path`` set).

    ``extras`` replaces the detected test extras when given; ``add`` are more requirement lines;
    ``drop`` names requirements never installed (tooling the suite does not need, or cannot build).
    """
    version, _ = interpreter_info(str(find_interpreter(python)))
    major, minor = (int(x) for x in version.split(".")[:2])
    found = suite_requirements(layout.root, project, (major, minor))
    chosen_extras = found.extras if extras is None else list(extras)
    dropped = {canonicalize_name(d) for d in drop}
    lines = [r for r in [*found.requirements, *add] if _name(r) not in dropped]
    lines += [r for r in ALWAYS if r not in {_name(x) for x in lines}]
    declared = declared_requirements(layout.root, chosen_extras)
    if declared is not None:  # the sdist's metadata is authoritative: no need to build the project
        env = resolve_environment_build(
            python,
            [r for r in [*declared, *lines] if _name(r) not in dropped and _name(r) != canonicalize_name(project)],
            import_roots=layout.import_roots,
            plugins=lambda venv_python: pytest_plugins(venv_python, exclude=project),
        )
    else:
        with tempfile.TemporaryDirectory(prefix="lego-resolve-", dir=cache_dir()) as tmp:
            # pip builds a local project in place (build/, *.egg-info): a copy keeps the pristine tree so
            copy_tree(layout.root, Path(tmp) / "project")
            target = str(Path(tmp) / "project") + (f"[{','.join(chosen_extras)}]" if chosen_extras else "")
            env = resolve_environment_build(
                python,
                [target, *lines],
                remove=[project],
                import_roots=layout.import_roots,
                plugins=lambda venv_python: pytest_plugins(venv_python, exclude=project),
            )
    if not any(_name(p) == "pytest" for p in env.requirements):
        raise TaskError(f"resolving {project}'s test environment: pytest is missing after the install")
    return ResolvedEnvironment(environment=env, extras=chosen_extras, sources=found.sources)
