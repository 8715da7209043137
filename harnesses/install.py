"""Installing third-party harnesses into their own directories, never into lego's environment.

Each harness gets ``lego.paths.data_dir()/harnesses/<name>/``: a virtualenv (``venv/``) for the
Python harnesses, an npm prefix (``npm/``) for the Node ones. The version is pinned to the one the
adapter was tested with; ``install`` records what it installed, with how long it took, in
``installed.json`` next to it, and ``version()`` reads that record. The sandbox binds the whole
``lego/harnesses/`` directory read-only at the same path, so a harness runs inside exactly as installed.

Virtualenvs point at their base interpreter by absolute path, so the base interpreter must be one
the sandbox also exposes (``/usr/bin/python3.11`` is; the pyenv 3.12 build OpenHands needs lives
under ``/root/.pyenv`` and must be bound too).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from lego.errors import HarnessError
from lego.io import atomic_write_json
from lego.paths import data_dir

__all__ = ["InstallRecord", "InstallSpec", "harnesses_root", "install", "installed", "installed_version"]

RECORD = "installed.json"


def harnesses_root() -> Path:
    return data_dir() / "harnesses"


class InstallSpec(BaseModel):
    """How to install one harness at a pinned, tested version."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["pip", "npm", "builtin"]
    package: str = Field(description="The harness's own package (its version is the harness version).")
    version: str = Field(description="The pinned, tested version of `package`.")
    extra_packages: tuple[str, ...] = Field((), description="Further pinned requirements installed alongside.")
    python: str = Field("/usr/bin/python3.11", description="Base interpreter of the venv (pip kind).")
    executable: str = Field(description="Entry point relative to the install dir, e.g. venv/bin/mini.")
    check_args: tuple[str, ...] = Field(
        ("--version",), description="Arguments that make the entry point prove it starts."
    )

    def install_dir(self, name: str) -> Path:
        return harnesses_root() / name

    def executable_path(self, name: str) -> Path:
        return self.install_dir(name) / self.executable


class InstallRecord(BaseModel):
    """What ``install`` put on disk (``installed.json``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    package: str
    version: str
    kind: str
    install_s: float
    installed_at: float
    python: str | None = None


def installed(name: str) -> InstallRecord | None:
    """The install record of ``name``, or None when it is not installed."""
    path = harnesses_root() / name / RECORD
    if not path.exists():
        return None
    return InstallRecord.model_validate(json.loads(path.read_text()))


def installed_version(name: str) -> str:
    """The recorded version of an installed harness ("" when not installed)."""
    record = installed(name)
    return record.version if record else ""


def _run(argv: list[str], what: str, timeout: float) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise HarnessError(f"{what} took over {timeout:.0f} s; check the network to the package registry") from exc
    except FileNotFoundError as exc:
        raise HarnessError(f"{what} needs {argv[0]!r}, which is not on PATH; install it first") from exc
    if proc.returncode != 0:
        raise HarnessError(f"{what} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")


def install(name: str, spec: InstallSpec, force: bool = False, timeout: float = 1800.0) -> InstallRecord:
    """Install ``spec`` for harness ``name`` (idempotent: a matching record is returned as is)."""
    record = installed(name)
    if record is not None and record.version == spec.version and not force and spec.executable_path(name).exists():
        return record
    target = spec.install_dir(name)
    t0 = time.monotonic()
    if spec.kind == "pip":
        if not Path(spec.python).exists():
            raise HarnessError(f"{name} needs the interpreter {spec.python}, which does not exist on this machine")
        venv = target / "venv"
        shutil.rmtree(venv, ignore_errors=True)
        _run([spec.python, "-m", "venv", str(venv)], f"creating the {name} venv", timeout)
        reqs = [f"{spec.package}=={spec.version}", *spec.extra_packages]
        _run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *reqs],
            f"pip install {' '.join(reqs)}",
            timeout,
        )
    elif spec.kind == "npm":
        prefix = target / "npm"
        shutil.rmtree(prefix, ignore_errors=True)
        prefix.mkdir(parents=True)
        _run(
            ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", f"{spec.package}@{spec.version}"],
            f"npm install {spec.package}@{spec.version}",
            timeout,
        )
    else:
        target.mkdir(parents=True, exist_ok=True)
    if not spec.executable_path(name).exists():
        raise HarnessError(f"{name} installed but its entry point {spec.executable_path(name)} is missing")
    record = InstallRecord(
        name=name,
        package=spec.package,
        version=spec.version,
        kind=spec.kind,
        install_s=round(time.monotonic() - t0, 1),
        installed_at=time.time(),
        python=spec.python if spec.kind == "pip" else None,
    )
    atomic_write_json(target / RECORD, record.model_dump(), indent=2)
    return record
