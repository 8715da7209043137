"""Task environments: real venvs from real requirements (pip and the package index), content-addressed,
usable read-only inside bubblewrap at their host path."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lego.errors import TaskError
from lego.tasks.environments import build_environment, environment_info, environment_key
from lego.tasks.venvs import find_interpreter
from lego.types import TaskEnvironment

RECORD = TaskEnvironment(requirements=["iniconfig==2.0.0"])


def _listing(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime for p in root.rglob("*") if not p.is_symlink()}


def test_same_record_same_venv_built_once(real_cache: Path) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:  # two builders of one key: one builds, one waits
        first, second = pool.map(build_environment, [RECORD, RECORD])
    assert first.path == second.path
    venv = Path(first.path or "")
    assert venv.parent == real_cache / "envs"
    info = environment_info(venv)
    assert info is not None and info.key == environment_key(RECORD)
    assert "iniconfig==2.0.0" in info.freeze and any(line.startswith("pytest==") for line in info.freeze)
    assert info.built_at and info.base_prefix
    assert not [p for p in venv.parent.iterdir() if p.is_dir() and p.name.startswith(".")], "a scratch dir leaked"

    listing = _listing(venv)
    same = TaskEnvironment(requirements=["pytest", "iniconfig==2.0.0", "iniconfig==2.0.0"], import_roots=["src"])
    assert environment_key(same) == environment_key(RECORD)  # pytest is added anyway; roots are not content
    assert build_environment(same).path == first.path
    assert _listing(venv) == listing, "a built environment was touched again"
    assert environment_key(TaskEnvironment(requirements=["iniconfig==1.1.1"])) != info.key
    assert environment_key(RECORD.model_copy(update={"plugins": ["pytest_timeout"]})) != info.key


def _bwrap(venv: Path, base_prefix: str, *argv: str, writable: bool = False) -> subprocess.CompletedProcess[str]:
    args = ["bwrap", "--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for top in ("/bin", "/sbin", "/lib", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    if not base_prefix.startswith("/usr/"):
        args += ["--ro-bind", base_prefix, base_prefix]
    args += ["--bind" if writable else "--ro-bind", str(venv), str(venv)]
    args += ["--unshare-all", "--die-with-parent", "--clearenv", "--setenv", "PATH", f"{venv}/bin:/usr/bin:/bin"]
    return subprocess.run([*args, *argv], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_venv_runs_read_only_at_its_host_path_in_bubblewrap(real_cache: Path) -> None:
    env = build_environment(RECORD)
    venv = Path(env.path or "")
    info = environment_info(venv)
    assert info is not None
    probe = _bwrap(venv, info.base_prefix, "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true")
    if probe.returncode != 0:
        pytest.skip(f"bubblewrap cannot make a sandbox here: {probe.stderr.strip()[-200:]}")

    version = _bwrap(venv, info.base_prefix, "pytest", "--version")  # a console script, found on PATH
    assert version.returncode == 0, version.stderr
    assert "pytest" in version.stdout + version.stderr
    code = "import sys, iniconfig; print(sys.prefix); print(iniconfig.IniConfig.__init__.__code__.co_filename)"
    where = _bwrap(venv, info.base_prefix, f"{venv}/bin/python", "-c", code)
    assert where.returncode == 0, where.stderr
    prefix, filename = where.stdout.split()
    assert prefix == str(venv) and filename.startswith(f"{venv}/lib/"), "code objects name the final path"

    # Writable this once: importing pytest must find every module compiled already (nothing written).
    before = _listing(venv)
    imported = _bwrap(venv, info.base_prefix, "python", "-c", "import pytest, _pytest.python, iniconfig", writable=True)
    assert imported.returncode == 0, imported.stderr
    assert _listing(venv) == before


def test_a_missing_interpreter_names_the_version_and_the_fix() -> None:
    with pytest.raises(TaskError, match=r"no Python 3\.99 .*pyenv install 3\.99"):
        find_interpreter("3.99")
    with pytest.raises(TaskError, match=r"3\.99"):
        environment_key(TaskEnvironment(python="3.99"))


def test_a_failed_install_is_a_task_error_with_pips_words(real_cache: Path) -> None:
    with pytest.raises(TaskError, match=r"(?s)environment build: pip install .*(No matching distribution|not find)"):
        build_environment(TaskEnvironment(requirements=["lego-no-such-distribution-anywhere==0.0.1"]))
    assert not [p for p in (real_cache / "envs").iterdir() if p.is_dir() and p.name.startswith(".")]


def test_a_doctest_of_a_text_file_keeps_its_node_id(tmp_path: Path) -> None:
    """A project's ``--doctest-glob=*.md`` (voluptuous): junit's classname is the path dotted with its
    ``.md``, so ``guide.md`` beside ``guide.py`` read as ``guide.py::md::guide.md``, an id pytest cannot
    select, and every task of the project failed validation as ungradable."""
    from lego.tasks.testrun import run_pytest

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "guide.md").write_text(">>> 1 + 1\n2\n")
    (tmp_path / "pkg" / "guide.py").write_text("VALUE = 2\n")
    (tmp_path / "pkg" / "test_guide.py").write_text(
        "from pkg.guide import VALUE\n\n\ndef test_v():\n    assert VALUE == 2\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --doctest-glob=*.md\n")
    result = run_pytest(tmp_path, timeout=120)
    assert result.statuses == {"pkg/guide.md::guide.md": "passed", "pkg/test_guide.py::test_v": "passed"}, result.output
    again = run_pytest(tmp_path, ["pkg/guide.md::guide.md"], timeout=120)  # and pytest selects it by that id
    assert again.statuses == {"pkg/guide.md::guide.md": "passed"}, again.output


def test_a_method_inherited_from_a_mixin_in_another_file_keeps_its_node_id(tmp_path: Path) -> None:
    """junit's ``file`` is where a test *function* is defined: for cachetools' mixin in tests/__init__.py
    it named every LRUCacheTest test ``tests/__init__.py::test_x``, an id pytest cannot select."""
    from lego.tasks.testrun import run_pytest

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("class Checks:\n    def test_one(self):\n        assert True\n")
    (tmp_path / "tests" / "test_lru.py").write_text(
        "import unittest\n\nfrom tests import Checks\n\n\nclass LRUTest(unittest.TestCase, Checks):\n    pass\n"
    )
    result = run_pytest(tmp_path, timeout=120)
    assert result.statuses == {"tests/test_lru.py::LRUTest::test_one": "passed"}, result.output
    again = run_pytest(tmp_path, list(result.statuses), timeout=120)  # and pytest selects it by that id
    assert again.statuses == result.statuses
