"""The factory's readers on project trees laid out the ways real projects are (no network, no pip):
layout and test files, test dependencies from each place projects declare them, the extended
mutation kinds, and bug reports that say what broke without quoting the fix or the tests."""

from __future__ import annotations

import random
import re
import textwrap
from pathlib import Path

from lego.tasks.bugreport import bug_report, entry_points, expected_literals, leaked_literals
from lego.tasks.diffs import file_diff
from lego.tasks.mutations import find_mutations, interleave_kinds
from lego.tasks.realrepo import inspect_layout, is_test_file
from lego.tasks.statements import fixed_lines
from lego.tasks.testdeps import declared_requirements, pytest_addopts, suite_requirements


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def test_layouts_src_and_flat_and_tests_inside_the_package(tmp_path: Path) -> None:
    src = inspect_layout(
        _tree(
            tmp_path / "a",
            {
                "src/pkg/__init__.py": "",
                "src/pkg/core.py": "",
                "tests/conftest.py": "",
                "tests/test_core.py": "",
                "docs/conf.py": "",
                "setup.py": "",
            },
        )
    )
    assert src.import_roots == ["src"]
    assert src.source_files == ["src/pkg/__init__.py", "src/pkg/core.py"]
    assert src.test_files == ["tests/conftest.py", "tests/test_core.py"]
    flat = inspect_layout(
        _tree(
            tmp_path / "b",
            {"toolz/__init__.py": "", "toolz/itertoolz.py": "", "toolz/tests/test_it.py": "", "six.py": ""},
        )
    )
    assert flat.import_roots == ["."]
    assert flat.source_files == ["six.py", "toolz/__init__.py", "toolz/itertoolz.py"]
    assert flat.test_files == ["toolz/tests/test_it.py"]
    assert is_test_file("pkg/testing/helpers.py") and is_test_file("x_test.py") and not is_test_file("pkg/testdata.py")


def test_namespace_packages_are_the_project_s_code(tmp_path: Path) -> None:
    """PEP 420 namespace packages (jaraco.functools, backports.tarfile, sphinxcontrib-*: ``jaraco/``
    without an ``__init__.py``): their packages are the project's code, flat or under src/ (before: no
    source file was found, so the factory had nothing to mutate, and a src/ one got the import root
    ``.``, from which nothing imports)."""
    flat = inspect_layout(
        _tree(
            tmp_path / "flat",
            {
                "jaraco/functools/__init__.py": "",
                "jaraco/functools/util.py": "",
                "tests/test_functools.py": "",
                "docs/conf.py": "",
                "conftest.py": "",
            },
        )
    )
    assert flat.import_roots == ["."]
    assert flat.source_files == ["jaraco/functools/__init__.py", "jaraco/functools/util.py"]
    src = inspect_layout(
        _tree(
            tmp_path / "src",
            {"src/acme/widgets/__init__.py": "", "src/acme/widgets/size.py": "", "test/test_size.py": ""},
        )
    )
    assert src.import_roots == ["src"]
    assert src.source_files == ["src/acme/widgets/__init__.py", "src/acme/widgets/size.py"]
    assert src.test_files == ["test/test_size.py"]
    scripts = inspect_layout(_tree(tmp_path / "scripts", {"pkg.py": "", "tools/gen.py": "", "ci/run.py": ""}))
    assert scripts.source_files == ["pkg.py"], "a folder of scripts is no namespace package"


def test_test_dependencies_from_where_projects_declare_them(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "PKG-INFO": "Metadata-Version: 2.4\nName: demo\nVersion: 1.0\nProvides-Extra: tests\nProvides-Extra: docs\n"
            "Requires-Dist: attrs>=22\nRequires-Dist: freezegun; extra == 'tests'\nRequires-Dist: sphinx; extra == 'docs'\n",
            "pyproject.toml": """
                [dependency-groups]
                test = ["hypothesis", {include-group = "cov"}]
                cov = ["coverage"]
                [tool.pytest.ini_options]
                addopts = "--cov=demo -ra"
                [tool.poetry.group.dev.dependencies]
                pytz = "^2024.1"
                black = "*"
            """,
            "requirements/testing.txt": "-r base.txt\nsortedcontainers  # used by one test\n-e .\n",
            "requirements/base.txt": "toml\n",
            "tox.ini": "[testenv]\ndeps =\n    pytest-mock\n    py38: backports.zoneinfo\n    {[base]deps}\n",
        },
    )
    found = suite_requirements(root, "demo")
    assert found.extras == ["tests"]
    assert found.requirements == [
        "hypothesis",
        "coverage",
        "pytz",
        "toml",
        "sortedcontainers",
        "pytest-mock",
        "pytest-cov",
    ]
    assert "addopts need pytest-cov" in found.sources and "poetry group dev" in found.sources
    assert pytest_addopts(root) == ["--cov=demo", "-ra"]
    assert declared_requirements(root, ["tests"]) == ["attrs>=22", "freezegun"]
    (root / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    assert declared_requirements(root, []) is None  # not authoritative before 2.2: build the project instead


def test_extended_mutation_kinds() -> None:
    source = textwrap.dedent(
        '''
        def total(items, start, scale):
            """Sum, scaled."""
            result = start
            for item in items:
                result += item
            if scale:
                result = result * scale
                log(result)
            return result - start

        if __name__ == "__main__":
            total([1], 0, 2)
        '''
    )
    plain = {m.kind for m in find_mutations(source, "m.py")}
    extended = find_mutations(source, "m.py", extended=True)
    kinds = {m.kind for m in extended}
    assert {"swapped_operands", "dropped_return", "dropped_loop", "early_return", "dropped_statement"} <= kinds
    assert "dropped_branch" in kinds - plain or any(m.kind == "dropped_branch" for m in extended)
    assert not [m for m in extended if m.line >= 12], "nothing runs __main__ blocks: never mutated"
    swapped = next(m for m in extended if m.kind == "swapped_operands")
    assert swapped.apply(source).count("start - result") == 1
    for m in extended:
        compile(m.apply(source), "m.py", "exec")
    ordered = interleave_kinds(extended, random.Random(0))
    assert {m.kind for m in ordered[: len(kinds)]} == kinds  # the first tries cover every kind


def test_a_bug_report_names_the_entry_point_and_quotes_neither_fix_nor_tests() -> None:
    gold = "def keep(pred, seq):\n    return [x for x in seq if pred(x)]\n"
    buggy = gold.replace("if pred(x)", "if not pred(x)")
    patch = file_diff("pkg/core.py", buggy, gold)
    tests = {
        "tests/test_core.py": textwrap.dedent(
            """
            import pkg
            from pkg.core import keep

            def test_keep_evens():
                assert keep(lambda n: n % 2 == 0, [1, 2, 3, 4]) == [2, 4]

            class TestModule:
                def test_via_module(self):
                    self.assertEqual(pkg.keep(bool, [0, 1]), [1])
            """
        )
    }
    f2p = ["tests/test_core.py::test_keep_evens", "tests/test_core.py::TestModule::test_via_module"]
    assert entry_points(tests["tests/test_core.py"], f2p[0], ["pkg"]) == ["pkg.core.keep"]
    assert entry_points(tests["tests/test_core.py"], f2p[1], ["pkg"]) == ["pkg.keep"]
    messages = {
        f2p[0]: "assert [1, 3] == [2, 4]\n  At index 0 diff: 1 != 2",
        f2p[1]: "AssertionError: [0] != [1]",
    }
    report = bug_report("demo", ["pkg"], f2p, messages, tests, patch, focus="keep")
    assert report.startswith("`pkg.keep` returns a wrong result")  # a test calling the broken function
    assert "several of its checks fail" in report
    # pytest's messages show the expected sides ([2, 4], [1]): never quoted, as they hand out the answer
    assert "[2, 4]" not in report and "[1]" not in report and "!=" not in report
    assert leaked_literals(report, expected_literals(tests, f2p)) == []
    titles = {bug_report(f"demo{i}", ["pkg"], f2p, messages, tests, patch).splitlines()[0] for i in range(12)}
    assert len({re.sub(r"demo\d+", "P", t) for t in titles}) >= 2  # not one template for every task
    assert "`pkg.core.keep` (returns a wrong result)" in report  # the other way in that breaks
    assert not any(line in report for line in fixed_lines(patch))
    assert "test_keep_evens" not in report and "test_via_module" not in report
    assert "lambda n: n % 2 == 0" not in report
