"""Interpreters, venvs and pip: the tools :mod:`lego.tasks.environments` builds task environments with.

- :func:`find_interpreter`: ``""`` is the base interpreter under lego's own (``sys.base_prefix``),
  ``"3.X"`` a ``python3.X`` on PATH or in pyenv's versions, an absolute path itself; none found is a
  :class:`~lego.errors.TaskError` naming the version and how to install it.
- :func:`make_venv`: a venv with no pip of its own from Python 3.7 on (lego's pip installs into it
  with ``--python``: no ensurepip run, nothing of pip's to compile or to bind into sandboxes); older
  interpreters, which lego's pip cannot drive, get their bundled pip. :func:`pip_install` and
  :func:`pip_freeze` drive whichever pip that is.
- :func:`relocate` rewrites a build path to the final path in ``bin/`` and ``pyvenv.cfg`` (console-script
  shebangs, ``activate``); :func:`precompile` compiles every module with final-path file names.

Every tool that fails raises TaskError with its last lines (an environment that cannot be built is
infrastructure, and says why).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from lego.errors import TaskError

__all__ = [
    "find_interpreter",
    "interpreter_info",
    "make_venv",
    "pip_command",
    "pip_freeze",
    "pip_install",
    "precompile",
    "relocate",
    "run_tool",
]

TOOL_TIMEOUT = 1800.0
_TAIL_LINES = 25


@functools.cache
def interpreter_info(interpreter: str) -> tuple[str, str]:
    """(version, base prefix) of an interpreter, asked once per process. Works back to Python 3.6."""
    code = "import sys, json; print(json.dumps(['%d.%d.%d' % sys.version_info[:3], sys.base_prefix]))"
    try:
        proc = subprocess.run([interpreter, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TaskError(f"interpreter {interpreter} cannot be run ({exc}); fix or remove it") from exc
    if proc.returncode != 0:
        raise TaskError(f"interpreter {interpreter} cannot be run: {proc.stderr.strip()[-500:]}")
    version, prefix = json.loads(proc.stdout)
    return str(version), str(prefix)


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path.name)[:3])


def find_interpreter(python: str) -> Path:
    """The base interpreter for a record's ``python`` field (see the module docstring).

    Raises :class:`TaskError` naming the version and how to install it when none is found.
    """
    if not python:
        minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
        for candidate in (Path(sys.base_prefix) / "bin" / minor, Path(sys.base_prefix) / "bin" / "python3"):
            if candidate.exists():
                return candidate
        return Path(sys.executable)
    if os.path.isabs(python):
        if not os.access(python, os.X_OK):
            raise TaskError(f"the task environment's interpreter {python} does not exist on this host")
        return Path(python)
    if not re.fullmatch(r"\d+\.\d+", python):
        raise TaskError(f'environment.python must be "", a version like "3.11" or an absolute path; got {python!r}')
    found = shutil.which(f"python{python}")
    if found:
        return Path(found)
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    versions = sorted(
        (
            d
            for d in (pyenv_root / "versions").glob(f"{python}.*")
            if re.fullmatch(rf"{re.escape(python)}\.\d+", d.name)
        ),
        key=_version_key,
    )
    for version_dir in reversed(versions):
        candidate = version_dir / "bin" / f"python{python}"
        if candidate.exists():
            return candidate
    raise TaskError(
        f"no Python {python} on this host (looked for python{python} on PATH and in {pyenv_root}/versions); "
        f"install it (`pyenv install {python}` or your OS's python{python} package) or set the task's "
        'environment.python to "" to use the interpreter lego runs on'
    )


def run_tool(cmd: list[str], what: str, timeout: float = TOOL_TIMEOUT) -> str:
    """Run a build tool outside any venv lego itself runs in; its stdout, or a TaskError with its tail."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        raise TaskError(f"environment build: {what} took over {timeout:.0f}s and was stopped") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-_TAIL_LINES:])
        raise TaskError(f"environment build: {what} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def relocate(venv: Path, old: str, new: str) -> None:
    """Replace the build path by the final path in every text file of ``bin/`` and in ``pyvenv.cfg``."""
    files = [venv / "pyvenv.cfg", *(p for p in (venv / "bin").iterdir() if p.is_file() and not p.is_symlink())]
    for path in files:
        data = path.read_bytes()
        if old.encode() not in data or b"\0" in data[:1024]:
            continue
        mode = path.stat().st_mode
        path.write_bytes(data.replace(old.encode(), new.encode()))
        path.chmod(mode)


def precompile(venv: Path, final: Path) -> None:
    """Bytecode for every module in the venv, each naming its file at the final path."""
    python = str(venv / "bin" / "python")
    for lib in ("lib", "lib64"):
        tree = venv / lib
        if tree.is_dir() and not tree.is_symlink():
            # The venv's own interpreter compiles (its bytecode format); errors in files no import
            # will ever load (py2-only examples, templates) must not fail the build.
            command = [python, "-m", "compileall", "-q", "-f", "-j", "0", "-d", str(final / lib), str(tree)]
            subprocess.run(command, capture_output=True, timeout=TOOL_TIMEOUT)


def make_venv(python: str, dest: Path) -> Path:
    """A fresh venv at ``dest`` made by the interpreter for ``python``; returns its python.

    From Python 3.7 on the venv gets no pip of its own (lego's pip installs into it with ``--python``:
    no ensurepip run, nothing of pip's to compile or to bind into sandboxes); older interpreters,
    which lego's pip cannot drive, get their bundled pip.
    """
    interpreter = find_interpreter(python)
    version, _ = interpreter_info(str(interpreter))
    own_pip = [] if _version_tuple(version) < (3, 7) else ["--without-pip"]
    run_tool(
        [str(interpreter), "-m", "venv", *own_pip, str(dest)], f"creating a venv with {interpreter} (Python {version})"
    )
    return dest / "bin" / "python"


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2])


def pip_command(venv_python: Path) -> list[str]:
    """How to run pip for a venv made by :func:`make_venv`."""
    if (venv_python.parent / "pip").exists():
        return [str(venv_python), "-m", "pip"]
    return [sys.executable, "-m", "pip", "--python", str(venv_python)]


def pip_install(venv_python: Path, requirements: list[str]) -> None:
    """``pip install`` into a venv, no bytecode written; a TaskError with pip's tail when it fails."""
    flags = ["--no-compile", "--no-input", "--progress-bar", "off", "-q"]
    run_tool([*pip_command(venv_python), "install", *flags, *requirements], f"pip install {' '.join(requirements)}")


def pip_freeze(venv_python: Path) -> list[str]:
    """``pip freeze --all`` of a venv: what it holds, one ``name==version`` a line."""
    lines = run_tool([*pip_command(venv_python), "freeze", "--all"], "pip freeze").splitlines()
    return [line.strip() for line in lines if line.strip()]
