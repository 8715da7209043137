"""A real project as the task factory sees it: its source distribution, its layout, its test needs.

- :func:`fetch_sdist` gets a project's source distribution through pip (``pip download --no-binary
  NAME --no-deps``: only the project itself must be source, its build backend may come as a wheel,
  which is four times faster than ``--no-binary :all:``) into ``cache_dir()/sdists/<name>/<version>/``
  and records its sha256; :func:`sdist_for` gets a recorded one back, checking the sha256.
- :func:`unpack_sdist` unpacks it once into ``cache_dir()/projects/`` (safely: no member escapes);
  :func:`checkout_tree` copies a local checkout's tracked files there instead.
- :func:`inspect_layout` finds the import roots (``src/`` layout or flat), the project's own modules
  and its test files (``test_*.py``, ``*_test.py``, ``tests.py``, anything under ``tests/``, ``test/``
  or ``testing/``, and every ``conftest.py``: test infrastructure is never mutated).

What the suite needs besides the runtime dependencies is read by :mod:`lego.tasks.testdeps`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict

from lego.errors import TaskError
from lego.paths import cache_dir
from lego.tasks.materialize import git_env

__all__ = [
    "ProjectLayout",
    "Sdist",
    "checkout_tree",
    "fetch_sdist",
    "inspect_layout",
    "is_test_file",
    "project_name",
    "read_pyproject",
    "sdist_for",
    "unpack_sdist",
]

_TEST_DIRS = {"tests", "test", "testing"}
_NOT_CODE = {"docs", "doc", "examples", "example", "benchmarks", "benchmark", "bench", "scripts", "tools", "build"}
_NOT_MODULES = {"setup", "conftest", "noxfile", "fabfile", "tasks", "versioneer", "conf", "bootstrap"}


class Sdist(BaseModel):
    """One source distribution: what the recipe records (name, version, file, sha256) and where it is."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    filename: str
    sha256: str
    path: str = ""

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pkg_info_from_archive(path: Path) -> dict[str, str]:
    """Name and Version from the archive's top-level PKG-INFO."""
    text = ""
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.count("/") == 1 and n.endswith("/PKG-INFO")]
            text = z.read(names[0]).decode() if names else ""
    else:
        with tarfile.open(path) as t:
            member = next((m for m in t.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")), None)
            handle = t.extractfile(member) if member is not None else None
            text = handle.read().decode() if handle is not None else ""
    if not text:
        raise TaskError(f"{path.name} has no PKG-INFO at its top level: not a Python source distribution")
    headers = HeaderParser().parsestr(text)
    return {"name": str(headers.get("Name", "")), "version": str(headers.get("Version", ""))}


def _sdist_dir(name: str, version: str) -> Path:
    return cache_dir() / "sdists" / canonicalize_name(name) / version


def _cached(name: str, version: str) -> Path | None:
    directory = _sdist_dir(name, version)
    found = sorted(p for p in directory.glob("*") if p.name.endswith((".tar.gz", ".zip", ".tar.bz2", ".tgz")))
    return found[0] if found else None


def _download(requirement: str) -> Path:
    """``pip download`` one sdist into a scratch dir under the cache; returns the file."""
    try:
        name = canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement as exc:
        raise TaskError(f"{requirement!r} is not a requirement (write it like toolz==1.2.0)") from exc
    root = cache_dir() / "sdists"
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".download-", dir=root))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name, "-d", str(scratch), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "PIP_NO_INPUT": "1"})
    files = [p for p in scratch.iterdir() if p.is_file()]
    if proc.returncode != 0 or len(files) != 1:
        shutil.rmtree(scratch, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise TaskError(
            f"could not download the source distribution of {requirement} (`{' '.join(cmd[2:])}`):\n{tail}\n"
            "check the name and version on the index, and that pip can reach it (pip config, proxy)"
        )
    return files[0]


def fetch_sdist(requirement: str) -> Sdist:
    """The sdist of ``requirement`` (``NAME==VERSION``; a bare name means the newest), cached."""
    pinned = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;,]+)\s*", requirement)
    if pinned:
        hit = _cached(pinned.group(1), pinned.group(2))
        if hit is not None:
            meta = _pkg_info_from_archive(hit)
            return Sdist(
                name=meta["name"], version=meta["version"], filename=hit.name, sha256=_sha256(hit), path=str(hit)
            )
    downloaded = _download(requirement)
    try:
        meta = _pkg_info_from_archive(downloaded)
        final_dir = _sdist_dir(meta["name"], meta["version"])
        final_dir.mkdir(parents=True, exist_ok=True)
        final = final_dir / downloaded.name
        os.replace(downloaded, final)
    finally:
        shutil.rmtree(downloaded.parent, ignore_errors=True)
    return Sdist(
        name=meta["name"], version=meta["version"], filename=final.name, sha256=_sha256(final), path=str(final)
    )


def sdist_for(name: str, version: str, sha256: str) -> Sdist:
    """A recorded sdist (from the cache, else downloaded again); its sha256 must match the record."""
    sdist = fetch_sdist(f"{name}=={version}")
    if sdist.sha256 != sha256:
        raise TaskError(
            f"the source distribution of {name}=={version} ({sdist.filename}) has sha256 {sdist.sha256}, the recipe "
            f"records {sha256}: the index serves another file. Delete {sdist.path} to download it again; if it "
            "still differs, rebuild the tasks (`lego tasks make`)"
        )
    return sdist


def _safe_members(archive: tarfile.TarFile, dest: Path) -> list[tarfile.TarInfo]:
    out = []
    for member in archive.getmembers():
        target = (dest / member.name).resolve()
        if not str(target).startswith(str(dest.resolve()) + os.sep) or not (member.isfile() or member.isdir()):
            continue  # absolute paths, .., links and devices: never written
        out.append(member)
    return out


def unpack_sdist(sdist: Sdist) -> Path:
    """The sdist's top-level directory, unpacked once under ``cache_dir()/projects/`` (read it, never edit)."""
    root = cache_dir() / "projects"
    final = root / f"{canonicalize_name(sdist.name)}-{sdist.version}-{sdist.sha256[:12]}"
    if (final / ".lego-unpacked").exists():
        return _top(final)
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root))
    try:
        archive_path = Path(sdist.path)
        if archive_path.name.endswith(".zip"):
            with zipfile.ZipFile(archive_path) as z:
                for info in z.infolist():
                    target = (scratch / info.filename).resolve()
                    if str(target).startswith(str(scratch.resolve()) + os.sep):
                        z.extract(info, scratch)
        else:
            with tarfile.open(archive_path) as t:
                t.extractall(scratch, members=_safe_members(t, scratch))
        (scratch / ".lego-unpacked").write_text(sdist.sha256 + "\n")
        try:
            os.rename(scratch, final)
        except OSError:
            if not (final / ".lego-unpacked").exists():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _top(final)


def _top(unpacked: Path) -> Path:
    dirs = [p for p in unpacked.iterdir() if p.is_dir()]
    if len(dirs) != 1:
        raise TaskError(f"{unpacked} should hold one top-level directory (the sdist's), found {len(dirs)}")
    return dirs[0]


def checkout_tree(directory: Path) -> tuple[Path, dict[str, str]]:
    """A pristine copy of a local checkout (git-tracked files when it is a git repo) under the cache."""
    directory = directory.resolve()
    listing = subprocess.run(
        ["git", "-C", str(directory), "ls-files", "-z"], capture_output=True, env=git_env(), check=False
    )
    if listing.returncode == 0 and listing.stdout:
        files = sorted(f for f in listing.stdout.decode().split("\0") if f and (directory / f).is_file())
    else:
        skip = {".git", "__pycache__", ".venv", "venv", ".tox", ".nox", "build", "dist", "node_modules"}
        files = sorted(
            p.relative_to(directory).as_posix()
            for p in directory.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(directory).parts) and not p.name.endswith(".pyc")
        )
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.encode() + b"\0" + hashlib.sha256((directory / rel).read_bytes()).digest())
    tree_sha = digest.hexdigest()
    final = cache_dir() / "projects" / f"checkout-{directory.name}-{tree_sha[:12]}"
    if not final.is_dir():
        final.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".checkout-", dir=final.parent))
        try:
            for rel in files:
                target = scratch / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes((directory / rel).read_bytes())
            os.rename(scratch, final)
        except OSError:
            if not final.is_dir():
                raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return final, {"path": str(directory), "tree_sha256": tree_sha}


def project_name(root: Path) -> tuple[str, str]:
    """(name, version) from the tree's PKG-INFO or pyproject.toml; the directory name otherwise."""
    pkg_info = root / "PKG-INFO"
    if pkg_info.is_file():
        headers = HeaderParser().parsestr(pkg_info.read_text(encoding="utf-8", errors="replace"))
        return str(headers.get("Name") or root.name), str(headers.get("Version") or "0")
    project = read_pyproject(root).get("project", {})
    return str(project.get("name") or root.name), str(project.get("version") or "0")


# -- layout -----------------------------------------------------------------------------------


def is_test_file(rel: str) -> bool:
    """A test module or test infrastructure (conftest.py), by the conventions pytest users follow."""
    parts = Path(rel).parts
    name = parts[-1]
    if name == "conftest.py" or name == "tests.py" or name.startswith("test_") or name.endswith("_test.py"):
        return True
    return any(p in _TEST_DIRS for p in parts[:-1])


@dataclass
class ProjectLayout:
    """Where a project's code is (``import_roots``, its modules) and where its tests are."""

    root: Path
    import_roots: list[str]
    source_files: list[str] = field(default_factory=list)
    test_files: list[str] = field(default_factory=list)


def _python_files(directory: Path, root: Path) -> list[str]:
    out = []
    for path in sorted(directory.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part == "__pycache__" or part.endswith(".egg-info") for part in rel.parts):
            continue
        out.append(rel.as_posix())
    return out


def _namespace_packages(entry: Path) -> list[Path]:
    """The regular packages in ``entry`` when it is a PEP 420 namespace package (a directory with no
    ``__init__.py`` whose name imports, holding packages: ``jaraco/functools/__init__.py``)."""
    if not entry.is_dir() or (entry / "__init__.py").exists() or not entry.name.isidentifier():
        return []
    return [p for p in sorted(entry.iterdir()) if p.is_dir() and (p / "__init__.py").exists()]


def inspect_layout(root: Path) -> ProjectLayout:
    """Import roots, the project's own modules (under them, tests excluded) and its test files.
    Packages are regular ones or inside PEP 420 namespace packages (``src/acme/widgets/``)."""
    src = root / "src"
    has_src = src.is_dir() and any(
        (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py" or _namespace_packages(p)
        for p in src.iterdir()
    )
    code_root = src if has_src else root
    candidates: list[str] = []
    for entry in sorted(code_root.iterdir()):
        if entry.name.startswith((".", "_")) and entry.name != "__init__.py":
            continue
        if entry.is_dir() and (entry.name in _NOT_CODE or entry.name in _TEST_DIRS):
            continue
        if entry.is_dir() and (entry / "__init__.py").exists():
            candidates += _python_files(entry, root)
        elif namespaced := _namespace_packages(entry):
            candidates += [f for package in namespaced for f in _python_files(package, root)]
        elif entry.suffix == ".py" and entry.stem not in _NOT_MODULES and not is_test_file(entry.name):
            candidates.append(entry.relative_to(root).as_posix())
    tests = [rel for rel in _python_files(root, root) if is_test_file(rel) and not rel.startswith(("docs/", "doc/"))]
    source = [rel for rel in candidates if not is_test_file(rel)]
    return ProjectLayout(root=root, import_roots=["src"] if has_src else ["."], source_files=source, test_files=tests)


def read_pyproject(root: Path) -> dict:  # type: ignore[type-arg]
    try:
        return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
