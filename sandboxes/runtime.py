"""The Python runtime made visible inside sandboxes.

Tasks run ``python -m pytest`` inside the sandbox, and harnesses need an interpreter, but the host's
interpreter may live under the host's home (pyenv: ``/root/.pyenv``), which sandboxes must not see.
So lego builds a *task runtime*: a virtualenv of the host interpreter holding pytest and its
dependencies, under ``lego.paths.data_dir()/runtimes/python-<version>``. It is built once (offline:
the distributions are copied from the environment lego itself runs in, so no network is needed),
atomically, and bound read-only into every sandbox at the same path with its ``bin`` first on PATH.

Only two host directories are exposed for it, both read-only and at their own paths: the
interpreter's prefix (``sys.base_prefix``, skipped when it is under /usr, which is visible anyway)
and the runtime venv. The rest of the host home stays invisible.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from lego.errors import SandboxError
from lego.paths import cache_dir, data_dir
from lego.sandboxes.project_meta import meta_folder, repo_metadata
from lego.types import Task

__all__ = ["RUNTIME_DISTS", "PythonRuntime", "TaskRuntime", "python_runtime", "task_runtime"]

RUNTIME_DISTS = ("pytest",)
"""Distributions installed (with their dependencies) into the task runtime."""


@dataclass(frozen=True)
class PythonRuntime:
    """Where the task runtime lives; ``binds`` are host dirs to mount read-only at the same path."""

    venv: Path
    bin_dir: Path
    python: Path
    binds: tuple[Path, ...]


def _closure(names: tuple[str, ...]) -> list[md.Distribution]:
    """The named distributions plus their (marker-filtered, extra-free) requirements."""
    seen: dict[str, md.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError as exc:
            raise SandboxError(
                f"{name} is not installed in lego's environment, so the sandbox runtime cannot include it; "
                f"run `pip install {name}`"
            ) from exc
        seen[key] = dist
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            todo.append(req.name)
    return list(seen.values())


def _build(dest: Path, final: Path) -> None:
    """Build the venv at ``dest``; scripts name ``final`` (where it is renamed to) in their shebang."""
    base_python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if not base_python.exists():
        base_python = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(dest)], check=True, capture_output=True)
    site = dest / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for dist in _closure(RUNTIME_DISTS):
        for rel in dist.files or []:
            src = Path(str(dist.locate_file(rel)))
            if not src.is_file() or "__pycache__" in rel.parts or rel.parts[0] == "..":
                continue
            target = site / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    # Precompiled bytecode: the venv is read-only inside sandboxes, so nothing could cache it there.
    subprocess.run([str(base_python), "-m", "compileall", "-q", "-j", "0", str(site)], check=True, capture_output=True)
    # Console scripts (pytest, py.test) with this venv's interpreter in the shebang.
    for entry in md.distribution("pytest").entry_points:
        if entry.group != "console_scripts":
            continue
        module, _, attr = entry.value.partition(":")
        script = dest / "bin" / entry.name
        script.write_text(f"#!{final}/bin/python\nimport sys\nfrom {module} import {attr}\nsys.exit({attr}())\n")
        script.chmod(0o755)


@functools.cache
def python_runtime() -> PythonRuntime:
    """The task runtime for the running interpreter, building it on first use."""
    ver = ".".join(map(str, sys.version_info[:3]))
    pytest_ver = md.version("pytest")
    root = data_dir() / "runtimes"
    venv = root / f"python-{ver}-pytest-{pytest_ver}"
    if not (venv / "bin" / "python").exists():
        root.mkdir(parents=True, exist_ok=True)
        # one build at a time, across threads and processes: the first `lego train` starts every sandbox
        # of its first step at once, and each built its own copy (15 at once, load 29 on two cores)
        with open(root / f".{venv.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait here, then find it built
            if not (venv / "bin" / "python").exists():
                tmp = Path(tempfile.mkdtemp(dir=root, prefix=".build-"))
                try:
                    staging = tmp / "venv"
                    _build(staging, venv)
                    os.replace(staging, venv)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    binds = [venv]
    base = Path(sys.base_prefix).resolve()
    if not str(base).startswith("/usr/"):
        binds.insert(0, base)
    return PythonRuntime(venv=venv, bin_dir=venv / "bin", python=venv / "bin" / "python", binds=tuple(binds))


@dataclass(frozen=True)
class TaskRuntime:
    """What a task's own environment adds to a sandbox: host dirs to bind read-only at the same path,
    the directory to put first on PATH, and the repo-relative import roots (for PYTHONPATH)."""

    bin_dir: Path | None
    binds: tuple[Path, ...]
    import_roots: tuple[str, ...]
    meta: Path | None = None

    def pythonpath(self, repo_dir: str) -> str:
        """The agent's PYTHONPATH: the repo's import roots, so ``python -m pytest`` in the repo sees
        the repo's code as a developer's checkout does (``.`` alone adds nothing a cwd does not),
        then the folder of the project's own dist-info (:mod:`lego.sandboxes.project_meta`), if any."""
        roots = [os.path.normpath(f"{repo_dir}/{root}") for root in self.import_roots if root != "."]
        return ":".join([*roots, *([str(self.meta)] if self.meta else [])])


def task_runtime(task: Task) -> TaskRuntime:
    """The task's environment as the sandbox backends use it (nothing for a task without one). A venv
    built on this host is bound with the interpreter it was made from (``home`` in ``pyvenv.cfg``)."""
    env = task.environment
    roots = tuple(env.import_roots) if env is not None else (".",)
    info = repo_metadata(Path(task.repo_path), roots) if task.repo_path and not task.image else None
    meta = meta_folder(info, cache_dir() / "projectmeta") if info else None
    if env is None:
        return TaskRuntime(None, (meta,) if meta else (), (), meta)
    if not env.path:
        python = Path(env.python) if env.python.startswith("/") else None
        return TaskRuntime(python.parent if python else None, (meta,) if meta else (), roots, meta)
    venv = Path(env.path)
    if not (venv / "bin" / "python").exists():
        raise SandboxError(f"task {task.instance_id}: its environment {venv} is missing or incomplete; rebuild it")
    binds = [venv]
    cfg = venv / "pyvenv.cfg"
    if cfg.exists():
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                base = Path(value.strip()).resolve().parent
                if not str(base).startswith("/usr"):
                    binds.insert(0, base)
    return TaskRuntime(venv / "bin", tuple([*binds, *([meta] if meta else [])]), roots, meta)
