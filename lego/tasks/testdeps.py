"""What a real project's test suite needs besides the project's runtime dependencies.

:func:`suite_requirements` reads it from the project's own files, the way its developers declare it:

- extras named test / tests / testing (``dev`` only when none of those exists), from PKG-INFO,
  ``*.egg-info/requires.txt``, ``[project.optional-dependencies]`` or setup.cfg;
- PEP 735 ``[dependency-groups]`` of the same names (``include-group`` followed), Poetry's dev
  dependencies and groups, PDM's dev-dependencies and Hatch's default/test environments (names only
  where the syntax is not PEP 508);
- requirements-test*.txt, test-requirements*.txt, requirements/test*.txt, tests/requirements*.txt
  (``-r`` includes followed);
- the ``deps`` of tox.ini's ``[testenv]`` where they are plain requirement lines;
- the plugin behind each option of the project's own pytest ``addopts`` (``--cov`` needs pytest-cov).

Release and lint tooling (tox, pre-commit, sphinx, twine, black, mypy, ...) is left out: the suite
does not run it, and it is the likeliest part to fail to install.
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from lego.tasks.realrepo import read_pyproject

__all__ = [
    "SuiteRequirements",
    "declared_requirements",
    "for_python",
    "pytest_addopts",
    "python_tag",
    "suite_requirements",
]

_TEST_EXTRAS = ("test", "tests", "testing")
_TOOLING = {
    "tox", "tox-uv", "nox", "pre-commit", "twine", "build", "check-manifest", "codecov", "coveralls", "towncrier",
    "bump2version", "bumpversion", "bump-my-version", "wheel", "flit", "hatch", "pip", "setuptools-scm",
    "black", "ruff", "flake8", "pylint", "isort", "mypy", "pyright", "pytype", "doc8", "readme-renderer",
}  # fmt: skip
_TOOLING_PREFIXES = ("sphinx", "mkdocs", "types-", "flake8-")
_OPTION_PLUGINS = {
    "--cov": "pytest-cov", "--no-cov": "pytest-cov", "--benchmark": "pytest-benchmark", "-n": "pytest-xdist",
    "--numprocesses": "pytest-xdist", "--dist": "pytest-xdist", "--reruns": "pytest-rerunfailures",
    "--hypothesis": "hypothesis", "--asyncio-mode": "pytest-asyncio", "--timeout": "pytest-timeout",
    "--mypy": "pytest-mypy", "--doctest-plus": "pytest-doctestplus", "--randomly": "pytest-randomly",
    "--codspeed": "pytest-codspeed", "--snapshot": "syrupy", "--mpl": "pytest-mpl", "--env": "pytest-env",
}  # fmt: skip
"""Options a project's own ``addopts`` may use, and the plugin that defines each."""


@dataclass
class SuiteRequirements:
    """What a suite needs besides the runtime dependencies, and where each part was read."""

    extras: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def _parses(line: str) -> bool:
    try:
        Requirement(line)
    except InvalidRequirement:
        return False
    return True


def _is_tooling(line: str) -> bool:
    try:
        name = canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        return True
    return name in _TOOLING or name.startswith(_TOOLING_PREFIXES)


def _requirement_lines(path: Path, seen: set[Path] | None = None) -> list[str]:
    """Plain requirement lines of a requirements file, following ``-r`` includes."""
    seen = seen or set()
    if path in seen or not path.is_file():
        return []
    seen.add(path)
    out = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = re.match(r"^(?:-r|--requirement)\s*=?\s*(\S+)", line)
        if include:
            out += _requirement_lines(path.parent / include.group(1), seen)
            continue
        if line.startswith("-") or "{" in line:
            continue
        try:
            Requirement(line)
        except InvalidRequirement:
            continue
        out.append(line)
    return out


def _extras(root: Path) -> list[str]:
    """Every extra the project declares (PKG-INFO, egg-info, pyproject, setup.cfg)."""
    names: set[str] = set()
    pkg_info = root / "PKG-INFO"
    if pkg_info.is_file():
        headers = HeaderParser().parsestr(pkg_info.read_text(encoding="utf-8", errors="replace"))
        names.update(str(v) for v in headers.get_all("Provides-Extra") or [])
    for requires in root.glob("*.egg-info/requires.txt"):
        names.update(re.findall(r"^\[([\w.-]+)(?::[^\]]*)?\]", requires.read_text(errors="replace"), re.M))
    pyproject = read_pyproject(root)
    names.update(pyproject.get("project", {}).get("optional-dependencies", {}))
    cfg = configparser.ConfigParser(interpolation=None)
    if (root / "setup.cfg").is_file():
        try:
            cfg.read(root / "setup.cfg", encoding="utf-8")
        except configparser.Error:
            pass
        if cfg.has_section("options.extras_require"):
            names.update(cfg.options("options.extras_require"))
    return sorted(names)


def _group(groups: dict, name: str, depth: int = 0) -> list[str]:  # type: ignore[type-arg]
    out: list[str] = []
    for item in groups.get(name, []) if depth < 8 else []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and "include-group" in item:
            out += _group(groups, str(item["include-group"]), depth + 1)
    return out


def _tox_deps(root: Path) -> list[str]:
    cfg = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        cfg.read(root / "tox.ini", encoding="utf-8")
    except configparser.Error:
        return []
    if not cfg.has_option("testenv", "deps"):
        return []
    out = []
    for raw in cfg.get("testenv", "deps").splitlines():
        line = raw.split(" #", 1)[0].strip()
        include = re.match(r"^-r\s*(\S+)", line)
        if include and "{" not in include.group(1):
            out += _requirement_lines(root / include.group(1))
            continue
        if not line or line.startswith(("-", "#")) or "{" in line or ":" in line.split(";")[0]:
            continue  # factor-conditional (py38: x), substitutions, options: not simple
        try:
            Requirement(line)
        except InvalidRequirement:
            continue
        out.append(line)
    return out


def pytest_addopts(root: Path) -> list[str]:
    """The ``addopts`` of the project's pytest configuration, wherever pytest would read them."""
    found: list[str] = []
    ini = pyproject_options = read_pyproject(root).get("tool", {}).get("pytest", {}).get("ini_options", {})
    opts = pyproject_options.get("addopts", []) if isinstance(ini, dict) else []
    found += opts.split() if isinstance(opts, str) else [str(o) for o in opts]
    for name, section in (("pytest.ini", "pytest"), ("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        cfg = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            cfg.read(root / name, encoding="utf-8")
        except configparser.Error:
            continue
        if cfg.has_option(section, "addopts"):
            found += cfg.get(section, "addopts").split()
    return found


def _option_plugins(root: Path) -> list[str]:
    needed = []
    for opt in pytest_addopts(root):
        plugin = _OPTION_PLUGINS.get(opt.split("=", 1)[0]) or next(
            (p for o, p in _OPTION_PLUGINS.items() if o.startswith("--") and opt.startswith(o + "-")), None
        )
        if plugin and plugin not in needed:
            needed.append(plugin)
    return needed


def _pick(names: list[str]) -> list[str]:
    """The test-named ones among ``names``, else ``dev``."""
    return [n for n in names if n.lower() in _TEST_EXTRAS] or [n for n in names if n.lower() == "dev"]


def _tool_groups(pyproject: dict) -> dict[str, list[str]]:  # type: ignore[type-arg]
    """Poetry, PDM and Hatch dependency groups as requirement lines (Poetry's constraints dropped:
    its ``^1.2`` is not PEP 508, and the newest release that installs is what a developer would get)."""
    tool = pyproject.get("tool", {})
    found: dict[str, list[str]] = {}
    poetry = tool.get("poetry", {})
    if isinstance(poetry.get("dev-dependencies"), dict):
        found["poetry dev-dependencies"] = list(poetry["dev-dependencies"])
    for name, group in (poetry.get("group") or {}).items():
        if name.lower() in (*_TEST_EXTRAS, "dev") and isinstance(group.get("dependencies"), dict):
            found[f"poetry group {name}"] = list(group["dependencies"])
    for name, lines in (tool.get("pdm", {}).get("dev-dependencies") or {}).items():
        if name.lower() in (*_TEST_EXTRAS, "dev"):
            found[f"pdm dev-dependencies {name}"] = [str(x) for x in lines]
    for name, env in (tool.get("hatch", {}).get("envs") or {}).items():
        if name.lower() in ("default", *_TEST_EXTRAS) and isinstance(env, dict):
            found[f"hatch env {name}"] = [
                str(x) for x in env.get("dependencies", []) + env.get("extra-dependencies", [])
            ]
    return {k: [line for line in v if line.lower() != "python"] for k, v in found.items() if v}


def declared_requirements(root: Path, extras: list[str]) -> list[str] | None:
    """The runtime requirements (and those of ``extras``) from the sdist's PKG-INFO when that is
    authoritative (core metadata 2.2 or later, ``Requires-Dist`` not dynamic), else None: then only
    building the project tells, and the caller installs it."""
    pkg_info = root / "PKG-INFO"
    if not pkg_info.is_file():
        return None
    headers = HeaderParser().parsestr(pkg_info.read_text(encoding="utf-8", errors="replace"))
    try:
        version = tuple(int(x) for x in str(headers.get("Metadata-Version", "0")).split(".")[:2])
    except ValueError:
        return None
    dynamic = {str(d).lower() for d in headers.get_all("Dynamic") or []}
    if version < (2, 2) or "requires-dist" in dynamic:
        return None
    out = []
    for raw in headers.get_all("Requires-Dist") or []:
        try:
            req = Requirement(str(raw))
        except InvalidRequirement:
            return None
        marker = req.marker
        if marker is not None and "extra" in str(marker):
            # an extra's requirement: decided here (a requirement line cannot name the extra)
            if not any(marker.evaluate({"extra": e}) for e in extras):
                continue
            req.marker = None
        out.append(str(req))
    return out


_PY_TAG = re.compile(r"(?:^|[-_.])(?:py|python|cp)?-?(\d)[._]?(\d{1,2})(?=[-_.]|$)")


def python_tag(name: str) -> tuple[int, int] | None:
    """The Python version a requirements file's name pins it to (``requirements-test-py311.txt``,
    ``test-requirements-3.9.txt``, ``requirements/tests_py3.12.txt``), or None."""
    stem = name.rsplit("/", 1)[-1].removesuffix(".txt").removesuffix(".in")
    found = _PY_TAG.findall(stem)
    if not found:
        return None
    major, minor = found[-1]
    return (int(major), int(minor)) if major == "3" else None


def for_python(files: list[Path], python: tuple[int, int] | None) -> list[Path]:
    """The requirement files to install for ``python`` (major, minor): every file without a version in
    its name, and of the per-Python ones the one for ``python``, else the newest below it, else the
    oldest (never several: each pins the same packages for its own Python, so merging them gives pip
    an unsatisfiable set)."""
    tagged = {f: python_tag(f.name) for f in files}
    plain = [f for f in files if tagged[f] is None]
    versions = sorted({t for t in tagged.values() if t is not None})
    if not versions:
        return plain
    target = python or versions[-1]
    below = [v for v in versions if v <= target]
    chosen = below[-1] if below else versions[0]
    return plain + [f for f in files if tagged[f] == chosen]


def suite_requirements(root: Path, project: str, python: tuple[int, int] | None = None) -> SuiteRequirements:
    """The suite's own dependencies, read from the project's files (see the module docstring);
    ``python`` (major, minor) picks among per-Python pinned requirement files (:func:`for_python`)."""
    found = SuiteRequirements()
    declared = _extras(root)
    test_extras = _pick(declared)
    if test_extras:
        found.extras = test_extras
        found.sources.append(f"extras [{','.join(test_extras)}]")
    pyproject = read_pyproject(root)
    groups = pyproject.get("dependency-groups", {})
    for group in _pick(list(groups)):
        found.requirements += _group(groups, group)
        found.sources.append(f"dependency-group {group}")
    for where, lines in _tool_groups(pyproject).items():
        found.requirements += [line for line in lines if _parses(line)]
        found.sources.append(where)
    files = for_python(
        sorted(
            {
                *root.glob("requirements-test*.txt"),
                *root.glob("requirements_test*.txt"),
                *root.glob("test-requirements*.txt"),
                *root.glob("suite_requirements*.txt"),
                *root.glob("requirements/test*.txt"),
                *root.glob("tests/requirements*.txt"),
            }
        ),
        python,
    )
    for path in files:
        found.requirements += _requirement_lines(path)
        found.sources.append(path.relative_to(root).as_posix())
    tox = _tox_deps(root) if (root / "tox.ini").is_file() else []
    if tox:
        found.requirements += tox
        found.sources.append("tox.ini [testenv] deps")
    needed = [
        p for p in _option_plugins(root) if p not in {canonicalize_name(r.split("[")[0]) for r in found.requirements}
    ]
    if needed:
        found.requirements += needed
        found.sources.append(f"addopts need {', '.join(needed)}")
    own = canonicalize_name(project)
    kept: list[str] = []
    for line in found.requirements:
        if _is_tooling(line) or canonicalize_name(Requirement(line).name) == own or line in kept:
            continue
        kept.append(line)
    found.requirements = kept
    return found
