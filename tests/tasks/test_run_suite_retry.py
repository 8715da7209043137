"""run_suite reruns a launch the kernel refused with ETXTBSY (its launcher still open for writing
somewhere: another thread's fork) and nothing else; the refusal is real here, not simulated."""

from __future__ import annotations

import errno
import importlib.util
import sys
import threading
from pathlib import Path

import pytest

from lego.tasks.environments import run_suite
from lego.types import TaskEnvironment


def _env_with_open_launcher(tmp_path: Path) -> tuple[TaskEnvironment, object]:
    """An environment whose ``bin/python`` is a launcher this process still holds open for writing."""
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    launcher = bin_dir / "python"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    launcher.chmod(0o755)
    # run_pytest passes pytest-timeout's options where it is installed; autoload is off in a task environment
    plugins = ["pytest_timeout"] if importlib.util.find_spec("pytest_timeout") else []
    return TaskEnvironment(path=str(tmp_path / "env"), plugins=plugins), open(launcher, "a")


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_one.py").write_text("def test_one():\n    assert True\n")
    return repo


def test_a_launcher_busy_for_a_moment_is_waited_for(tmp_path: Path) -> None:
    env, held = _env_with_open_launcher(tmp_path)
    threading.Timer(0.1, held.close).start()  # type: ignore[attr-defined]
    result = run_suite(_repo(tmp_path), env, timeout=120)
    assert result.statuses == {"test_one.py::test_one": "passed"}, result.output


def test_a_launcher_that_stays_busy_is_the_kernels_error(tmp_path: Path) -> None:
    env, held = _env_with_open_launcher(tmp_path)
    try:
        with pytest.raises(OSError) as info:
            run_suite(_repo(tmp_path), env, timeout=120)
        assert info.value.errno == errno.ETXTBSY
    finally:
        held.close()  # type: ignore[attr-defined]
