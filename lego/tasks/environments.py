"""Task environments: the venv a task's tests run in, built once per distinct record and shared.

A :class:`~lego.types.TaskEnvironment` names an interpreter, pip requirements and pytest plugins.
:func:`build_environment` turns it into a virtualenv under ``lego.paths.cache_dir()/envs/<key>``,
where ``key`` (:func:`environment_key`) is a sha256 over the resolved interpreter version, the
sorted requirements and the plugins: the same record is the same directory on every call, and is
built only the first time. ``import_roots`` and ``path`` do not enter the key (they say how a repo
is used with the venv, not what is in it).

How a build goes, and why:

1. Find the interpreter (:func:`lego.tasks.venvs.find_interpreter`: ``""`` is the base interpreter
   under lego's own, ``"3.X"`` a ``python3.X`` on PATH or in pyenv, an absolute path itself).
2. ``python -m venv`` into a scratch directory beside the final one (same filesystem, and a name of
   the same length, so a script's shebang keeps its form when the path is rewritten), then
   ``pip install`` the requirements (pytest added when absent), without writing bytecode.
   :func:`resolve_environment_build` installs unpinned lines instead and keys the venv by the
   pinned record it recorded (``pip freeze``), so a resolution is also the build.
3. Rewrite the scratch path to the final path in ``bin/`` (console-script shebangs, ``activate``)
   and ``pyvenv.cfg``: sandboxes bind the venv read-only *at its final host path*, so every script
   must name that path.
4. Precompile all bytecode with the final path as each code object's file name (``compileall -d``):
   inside a read-only bind Python could not cache bytecode, and tracebacks must show real files.
5. Write ``lego_env.json`` (:class:`EnvironmentInfo`: the key, ``pip freeze``, the build time, the
   interpreter prefix a sandbox must also bind), then ``os.replace`` the scratch dir into place. A
   crash leaves no half-built environment; a file lock makes a concurrent builder of the same key
   wait and reuse the winner's directory instead of building it twice.

A failed build is infrastructure, not the task's or the policy's fault: it raises
:class:`~lego.errors.TaskError` with pip's last lines. A task without an environment costs nothing
here (nothing is built; it runs on lego's own task runtime).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, Field
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_incrementing

from lego.errors import TaskError
from lego.paths import cache_dir
from lego.sandboxes import suite_profile
from lego.sandboxes.project_meta import meta_folder, repo_metadata
from lego.tasks.testrun import SuiteResult, run_pytest
from lego.tasks.venvs import (
    find_interpreter,
    interpreter_info,
    make_venv,
    pip_command,
    pip_freeze,
    pip_install,
    precompile,
    relocate,
    run_tool,
)
from lego.types import TaskEnvironment

__all__ = [
    "ENV_INFO",
    "EnvironmentInfo",
    "build_environment",
    "effective_requirements",
    "environment_info",
    "environment_key",
    "environment_python",
    "resolve_environment_build",
    "run_suite",
    "suite_invocation",
]

ENV_INFO = "lego_env.json"
"""The record each built environment holds at its root."""

_FORMAT = "lego-env-1"  # bump when the build recipe changes what ends up in a venv
_KEY_CHARS = 20  # of the hex key in the directory name: shebangs stay short, 80 bits stay unique


class EnvironmentInfo(BaseModel):
    """``lego_env.json``: what a built environment is and how it came to be."""

    model_config = ConfigDict(extra="ignore")

    key: str = Field(description="environment_key of the record it was built from (full sha256).")
    python: str = Field(description="The record's python field, as given.")
    interpreter: str = Field(description="The base interpreter the venv was made from.")
    python_version: str = Field(description="That interpreter's version, e.g. 3.11.7.")
    base_prefix: str = Field(description="The interpreter's prefix: a sandbox binds it read-only beside the venv.")
    requirements: list[str] = Field(description="What pip was asked to install (pytest included).")
    plugins: list[str] = Field(default_factory=list)
    freeze: list[str] = Field(description="`pip freeze --all` after the install: what the venv holds.")
    built_at: str = Field(description="UTC time the build finished (ISO 8601).")
    build_seconds: float = 0.0


# -- the key ----------------------------------------------------------------------------------


def _requirement_name(line: str) -> str | None:
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        return None  # a path or URL: pip understands it, the name is not ours to guess


def effective_requirements(env: TaskEnvironment) -> list[str]:
    """The record's requirements, de-duplicated and sorted, with ``pytest`` added when absent."""
    lines = sorted({r.strip() for r in env.requirements if r.strip()})
    if "pytest" not in {_requirement_name(r) for r in lines}:
        lines.append("pytest")
    return lines


def environment_key(env: TaskEnvironment) -> str:
    """sha256 over what goes into the venv: interpreter version, requirements, plugins."""
    interpreter = find_interpreter(env.python)
    version, _ = interpreter_info(str(interpreter))
    content = {
        "format": _FORMAT,
        "python": version,
        "requirements": effective_requirements(env),
        "plugins": sorted(set(env.plugins)),
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


# -- reading a built one ----------------------------------------------------------------------


def environment_info(path: str | Path) -> EnvironmentInfo | None:
    """The ``lego_env.json`` of a built environment, or None when ``path`` holds none."""
    info = Path(path) / ENV_INFO
    try:
        return EnvironmentInfo.model_validate_json(info.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def environment_python(env: TaskEnvironment) -> Path:
    """The built environment's interpreter, or a TaskError when the record was never built."""
    if not env.path:
        raise TaskError("the task environment is not built (environment.path is unset); materialise the task first")
    return Path(env.path) / "bin" / "python"


# -- building ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _key_lock(root: Path, key: str) -> Iterator[None]:
    """Exclusive per key, across threads and processes: a concurrent builder waits, then reuses."""
    with open(root / f".{key[:_KEY_CHARS]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _finish(scratch: Path, env: TaskEnvironment, freeze: list[str], started: float) -> Path:
    """Relocate, compile, describe and move a populated scratch venv to ``env``'s key (the caller
    holds that key's lock); returns the final path. A built one under the key wins: scratch dropped."""
    key = environment_key(env)
    final = scratch.parent / key[:_KEY_CHARS]
    if _ready(final, key):
        return final
    interpreter = find_interpreter(env.python)
    version, prefix = interpreter_info(str(interpreter))
    relocate(scratch, str(scratch), str(final))
    precompile(scratch, final)
    info = EnvironmentInfo(
        key=key,
        python=env.python,
        interpreter=str(interpreter),
        python_version=version,
        base_prefix=str(Path(prefix).resolve()),
        requirements=effective_requirements(env),
        plugins=sorted(set(env.plugins)),
        freeze=freeze,
        built_at=datetime.now(UTC).isoformat(timespec="seconds"),
        build_seconds=round(time.monotonic() - started, 1),
    )
    (scratch / ENV_INFO).write_text(info.model_dump_json(indent=2) + "\n", encoding="utf-8")
    if final.exists():  # a stale or foreign directory under our key: never reused
        shutil.rmtree(final)
    os.replace(scratch, final)
    return final


def _ready(final: Path, key: str) -> bool:
    info = environment_info(final)
    return info is not None and info.key == key and (final / "bin" / "python").exists()


def _scratch(root: Path) -> Path:
    # The final directory's name is _KEY_CHARS long; a scratch name of the same length means that
    # rewriting its path never changes a script's shebang form (pip picks one by length).
    return root / ("." + secrets.token_hex(_KEY_CHARS)[: _KEY_CHARS - 1])


def build_environment(env: TaskEnvironment) -> TaskEnvironment:
    """``env`` with ``path`` set to its built venv, building it on first use (see the module docstring)."""
    key = environment_key(env)
    root = cache_dir() / "envs"
    final = root / key[:_KEY_CHARS]
    if _ready(final, key):
        return env.model_copy(update={"path": str(final)})
    root.mkdir(parents=True, exist_ok=True)
    with _key_lock(root, key):
        if _ready(final, key):
            return env.model_copy(update={"path": str(final)})
        started = time.monotonic()
        scratch = _scratch(root)
        try:
            python = make_venv(env.python, scratch)
            pip_install(python, effective_requirements(env))
            final = _finish(scratch, env, pip_freeze(python), started)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return env.model_copy(update={"path": str(final)})


def resolve_environment_build(
    python: str,
    requirements: list[str],
    *,
    remove: Sequence[str] = (),
    import_roots: Sequence[str] = (".",),
    plugins: Callable[[Path], list[str]] | None = None,
) -> TaskEnvironment:
    """Install requirement lines as given (ranges, a local project with extras) and record what pip
    chose: the returned record's ``requirements`` are ``pip freeze`` (without pip and without the
    ``remove`` distributions, which are uninstalled first), its ``plugins`` what ``plugins(python)``
    finds in the venv. The venv is stored under *that* record's key, so it is built exactly once:
    :func:`build_environment` on the record finds it, and on another machine installs the same pins."""
    started = time.monotonic()
    root = cache_dir() / "envs"
    root.mkdir(parents=True, exist_ok=True)
    scratch = _scratch(root)
    try:
        venv_python = make_venv(python, scratch)
        pip_install(venv_python, list(requirements))
        if remove:
            run_tool([*pip_command(venv_python), "uninstall", "-y", "-q", *remove], f"pip uninstall {' '.join(remove)}")
        freeze = pip_freeze(venv_python)
        dropped = {canonicalize_name(r) for r in (*remove, "pip")}
        pins = sorted(
            (line for line in freeze if "==" in line and _requirement_name(line) not in dropped), key=str.lower
        )
        found = plugins(venv_python) if plugins else []
        env = TaskEnvironment(python=python, requirements=pins, import_roots=list(import_roots), plugins=found)
        with _key_lock(root, environment_key(env)):
            final = _finish(scratch, env, freeze, started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return env.model_copy(update={"path": str(final)})


# -- running a suite in one -------------------------------------------------------------------


def suite_invocation(env: TaskEnvironment, repo: Path) -> tuple[list[str], dict[str, str]]:
    """pytest arguments and environment variables that run ``repo``'s suite in ``env`` the way the
    grader does: the import roots first on ``sys.path`` (the project's own metadata last,
    :mod:`lego.sandboxes.project_meta`), plugin autoload off, the grader's Hypothesis
    settings (:mod:`lego.sandboxes.suite_profile`, as the plugin ``lego_suite_profile``, loaded before
    any conftest), each declared plugin loaded with ``-p``."""
    args = ["-p", "lego_suite_profile", *(arg for plugin in env.plugins for arg in ("-p", plugin))]
    paths = [*(str((repo / root).resolve()) for root in env.import_roots), str(_suite_plugins())]
    meta = repo_metadata(repo, env.import_roots)
    if meta:  # the project's own dist-info, as the grader gives it: last, it shadows nothing
        paths.append(str(meta_folder(meta, cache_dir() / "projectmeta")))
    return args, {"PYTHONPATH": os.pathsep.join(paths), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONNOUSERSITE": "1"}


@functools.cache
def _suite_plugins() -> Path:
    """A folder holding only ``lego_suite_profile.py`` (the text of :mod:`lego.sandboxes.suite_profile`),
    content-addressed under ``cache_dir()/plugins``: last on a suite run's ``PYTHONPATH``, after the
    repo's own roots, so it shadows nothing of the project. Written to a temporary name and renamed."""
    text = (Path(suite_profile.__file__)).read_text()
    folder = cache_dir() / "plugins" / hashlib.sha256(text.encode()).hexdigest()[:20]
    target = folder / "lego_suite_profile.py"
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / f".lego_suite_profile.{secrets.token_hex(4)}"
        staging.write_text(text)
        os.replace(staging, target)
    return folder


@functools.cache
def _capped(python: Path, memory_mb: int) -> Path:
    """A launcher that runs ``python`` under an address-space cap (``cache_dir()/launchers``).

    Written to a temporary name and renamed into place, once: a file still open for writing cannot
    be executed (ETXTBSY), and with concurrent test runs another thread's fork may hold one open."""
    script = f'#!/bin/sh\nulimit -v {memory_mb * 1024} 2>/dev/null\nexec "{python}" "$@"\n'
    launcher = cache_dir() / "launchers" / hashlib.sha256(script.encode()).hexdigest()[:20]
    if not launcher.exists():
        launcher.parent.mkdir(parents=True, exist_ok=True)
        staging = launcher.with_name(f".{launcher.name}.{secrets.token_hex(4)}")
        staging.write_text(script)
        staging.chmod(0o755)
        os.replace(staging, launcher)
    return launcher


def run_suite(
    repo: Path,
    env: TaskEnvironment,
    test_ids: list[str] | None = None,
    *,
    timeout: float = 300.0,
    args: Sequence[str] = (),
    memory_mb: int | None = None,
    hash_seed: int = 0,
) -> SuiteResult:
    """Run ``repo``'s pytest suite (or ``test_ids``) from its root with ``env``'s interpreter, honouring
    the project's own pytest configuration; per-test results from junit XML. ``memory_mb`` caps the
    run's address space (a mutant's runaway allocation fails its run, not the machine). ``hash_seed``
    is the run's PYTHONHASHSEED (the grader's runs have random ones: set orders differ between them)."""
    plugin_args, variables = suite_invocation(env, repo)
    variables = {**variables, "PYTHONHASHSEED": str(hash_seed)}
    python = environment_python(env)
    if memory_mb:
        python = _capped(python, memory_mb)
    # ETXTBSY: a concurrent fork still holds the launcher open; it closes it at its exec, so wait and rerun.
    busy = Retrying(
        retry=retry_if_exception(lambda exc: isinstance(exc, OSError) and exc.errno == errno.ETXTBSY),
        stop=stop_after_attempt(5),
        wait=wait_incrementing(start=0.05, increment=0.05),
        reraise=True,
    )
    return busy(run_pytest, repo, test_ids, timeout, python=str(python), args=[*plugin_args, *args], env=variables)
