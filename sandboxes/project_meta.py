"""The project's own distribution metadata, as an editable install would make it visible.

A task's repo is the only copy of the project in its environment (the environment holds its
dependencies, never the project: the repo under test must be the code under test). Many projects
ask for their own metadata at import (``__version__ = importlib.metadata.version("name")``, entry
points of their own), which on a developer's machine an editable install answers. Without it such
a project cannot even be imported, and every task of it is ungradable.

:func:`project_metadata` reads the *pristine* repo's static metadata and returns the files of a
``NAME-VERSION.dist-info`` folder (``METADATA``, and ``entry_points.txt`` where the project declares
entry points), for the grader, the agent's sandbox and the factory's suite runs to put **last** on
``sys.path``: it shadows nothing, and a project that ships its own metadata at an import root (a
setuptools sdist's ``NAME.egg-info``) is found first, so it gets none. Where the metadata comes from,
first found: the sdist's ``PKG-INFO`` (core metadata, verbatim), ``pyproject.toml``'s ``[project]``
with a static version, ``setup.cfg``'s ``[metadata]`` with a literal version. A project whose version
only its build backend knows (setuptools-scm, ``attr:``) gets none: lego does not run build code to
find it. Nothing here is a defence: it is the code under test's own metadata.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import secrets
import shutil
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["meta_folder", "project_metadata", "repo_metadata"]

_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[A-Za-z0-9.+!_-]+$")


def _field(text: str, key: str) -> str:
    for line in text.splitlines():
        if not line.strip():
            break  # the body (description) starts after the first blank line
        k, sep, v = line.partition(":")
        if sep and k.strip().lower() == key.lower():
            return v.strip()
    return ""


def _pyproject(text: str) -> tuple[str, str, dict[str, dict[str, str]]]:
    try:
        project = tomllib.loads(text).get("project")
    except tomllib.TOMLDecodeError:
        return "", "", {}
    if not isinstance(project, dict):
        return "", "", {}
    dynamic = set(project.get("dynamic") or [])
    name = project.get("name") if isinstance(project.get("name"), str) else ""
    version = project.get("version") if isinstance(project.get("version"), str) and "version" not in dynamic else ""
    groups: dict[str, dict[str, str]] = {}
    for key, group in (("scripts", "console_scripts"), ("gui-scripts", "gui_scripts")):
        if isinstance(project.get(key), dict) and key not in dynamic:
            groups[group] = {str(k): str(v) for k, v in project[key].items()}
    if isinstance(project.get("entry-points"), dict) and "entry-points" not in dynamic:
        for group, points in project["entry-points"].items():
            if isinstance(points, dict):
                groups[str(group)] = {str(k): str(v) for k, v in points.items()}
    return str(name or ""), str(version or ""), groups


def _setup_cfg(text: str) -> tuple[str, str, dict[str, dict[str, str]]]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return "", "", {}
    name = parser.get("metadata", "name", fallback="").strip()
    version = parser.get("metadata", "version", fallback="").strip()
    if ":" in version:  # attr: / file: — only the build backend knows it
        version = ""
    groups: dict[str, dict[str, str]] = {}
    if parser.has_section("options.entry_points"):
        for group, body in parser.items("options.entry_points"):
            points = {}
            for line in body.splitlines():
                k, sep, v = line.partition("=")
                if sep and k.strip():
                    points[k.strip()] = v.strip()
            if points:
                groups[group] = points
    return name, version, groups


def _entry_points(groups: dict[str, dict[str, str]]) -> str:
    return "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()) + "\n"
        for group, points in sorted(groups.items())
        if points
    )


def _shipped(name: str, roots: Iterable[str], paths: Iterable[str]) -> bool:
    """Whether the repo already carries the project's metadata at one of its import roots."""
    canonical = re.sub(r"[-_.]+", "_", name).lower()
    folders = {os.path.normpath(r) for r in roots}
    for path in paths:
        parts = path.split("/")
        for i, part in enumerate(parts[:-1]):
            stem, dot, suffix = part.rpartition(".")
            if dot and suffix in ("egg-info", "dist-info"):
                base = stem.split("-")[0] if suffix == "dist-info" else stem
                parent = os.path.normpath("/".join(parts[:i]) or ".")
                if re.sub(r"[-_.]+", "_", base).lower() == canonical and parent in folders:
                    return True
    return False


def project_metadata(
    read: Callable[[str], str | None], paths: Iterable[str], roots: Iterable[str] = (".",)
) -> dict[str, str] | None:
    """``{"folder": "NAME-VERSION.dist-info", "METADATA": ..., ["entry_points.txt": ...]}`` for the
    repo whose root files ``read(path)`` returns (None: absent) and whose files are ``paths``; None
    when its name and version are not static, or the repo ships its metadata at an import root."""
    paths = list(paths)
    pkg_info = read("PKG-INFO") if "PKG-INFO" in paths else None
    name = version = ""
    groups: dict[str, dict[str, str]] = {}
    for file, parse in (("pyproject.toml", _pyproject), ("setup.cfg", _setup_cfg)):
        text = read(file) if file in paths else None
        if text:
            n, v, g = parse(text)
            name, version = name or n, version or v
            groups = groups or g
    if pkg_info and _field(pkg_info, "Name") and _field(pkg_info, "Version"):
        name, version = _field(pkg_info, "Name"), _field(pkg_info, "Version")
        metadata = pkg_info
    elif name and version:
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    else:
        return None
    if not _NAME.match(name) or not _VERSION.match(version) or _shipped(name, roots, paths):
        return None
    folder = f"{re.sub(r'[-_.]+', '_', name)}-{version.replace('-', '_')}.dist-info"
    files = {"folder": folder, "METADATA": metadata, "INSTALLER": "lego\n"}
    if groups:
        files["entry_points.txt"] = _entry_points(groups)
    return files


def repo_metadata(repo: Path, roots: Iterable[str] = (".",)) -> dict[str, str] | None:
    """:func:`project_metadata` of a repo on this host (its top-level files and its folders' names)."""
    if not repo.is_dir():
        return None
    paths = [p.relative_to(repo).as_posix() for p in repo.iterdir() if p.is_file()]
    for root in roots:  # a shipped NAME.egg-info at an import root
        base = repo / root
        if base.is_dir():
            paths += [
                f"{(p / 'PKG-INFO').relative_to(repo).as_posix()}" for p in base.iterdir() if p.suffix == ".egg-info"
            ]
            paths += [
                f"{(p / 'METADATA').relative_to(repo).as_posix()}" for p in base.iterdir() if p.suffix == ".dist-info"
            ]

    def read(name: str) -> str | None:
        try:
            return (repo / name).read_text(errors="replace")
        except OSError:
            return None

    return project_metadata(read, paths, roots)


def meta_folder(meta: dict[str, str], root: Path) -> Path:
    """A folder under ``root`` holding only ``meta``'s dist-info, content-addressed and written once
    (to a temporary name, then renamed): the path to put last on ``sys.path``."""
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:20]
    folder = root / digest
    target = folder / meta["folder"]
    if not target.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / f".staging-{secrets.token_hex(4)}"
        staging.mkdir()
        for name, text in meta.items():
            if name != "folder":
                (staging / name).write_text(text)
        try:
            os.replace(staging, target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not target.is_dir():
                raise
    return folder
