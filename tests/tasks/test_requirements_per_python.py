"""Per-Python pinned requirement files (issue 44): a project that pins its test requirements once per
Python version gets the file for the environment's Python, never all of them merged (pip cannot
satisfy two pins of one package)."""

from __future__ import annotations

from pathlib import Path

from lego.tasks.testdeps import python_tag, suite_requirements


def _project(root: Path) -> Path:
    files = {
        "requirements-test.txt": "pytest-mock\n",
        "requirements-test-py38.txt": "coverage==6.5.0\nattrs==21.4.0\n",
        "requirements-test-py311.txt": "coverage==7.6.1\nattrs==24.2.0\n",
        "requirements/tests_py3.13.txt": "coverage==7.8.0\nattrs==25.1.0\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_file_for_the_environments_python_is_chosen_not_merged(tmp_path: Path) -> None:
    root = _project(tmp_path)
    picks = {
        (3, 11): "attrs==24.2.0",  # its own
        (3, 12): "attrs==24.2.0",  # the newest below it
        (3, 13): "attrs==25.1.0",
        (3, 7): "attrs==21.4.0",  # older than every file: the oldest
    }
    for python, attrs in picks.items():
        found = suite_requirements(root, "demo", python)
        assert [r for r in found.requirements if r.startswith("attrs")] == [attrs], python
        assert "pytest-mock" in found.requirements  # a file for every Python is kept
        assert len([s for s in found.sources if "requirements" in s]) == 2


def test_python_tags_in_file_names() -> None:
    assert python_tag("requirements-test-py311.txt") == (3, 11)
    assert python_tag("test-requirements-3.9.txt") == (3, 9)
    assert python_tag("requirements_test_cp310.txt") == (3, 10)
    for plain in ("requirements-test.txt", "requirements-test-django42.txt", "requirements-pytest8.txt"):
        assert python_tag(plain) is None
