"""Property-based tests give the same verdict on every run: Hypothesis under lego's suite profile
(lego.sandboxes.suite_profile) in the grader's runs and in the factory's, with a real Hypothesis
installed in a real task environment, graded in real sandboxes.

Without it, an example slower than Hypothesis' 200 ms deadline (a loaded grading machine) fails an
honest test, and fresh random examples on every run let a property pass one grade and fail the next.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lego.sandboxes.grading import grade
from lego.tasks.environments import build_environment, environment_python, run_suite, suite_invocation
from lego.types import Task, TaskEnvironment
from tests.sandboxes.sbx_fixtures import _patch, commit_tree

# as the factory resolves a project's environment: its test dependencies and pytest-timeout, loaded with -p
HYPOTHESIS = TaskEnvironment(requirements=["hypothesis==6.170.17", "pytest-timeout==2.4.0"], plugins=["pytest_timeout"])
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
# Every example takes longer than Hypothesis' default deadline (200 ms), as on a loaded grader.
SLOW = (
    "import time\nfrom hypothesis import given, settings, strategies as st\nfrom calc import add\n\n\n"
    "@settings(max_examples=3)\n@given(st.integers())\ndef test_add_zero(x):\n    time.sleep(0.3)\n"
    "    assert add(x, 0) == x\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
)


@pytest.fixture()
def env(real_cache: Path) -> TaskEnvironment:
    return build_environment(HYPOTHESIS)


def _plain_pytest(repo: Path, env: TaskEnvironment) -> subprocess.CompletedProcess[str]:
    """The suite without lego's profile: the same environment and plugins, no lego_suite_profile."""
    args, variables = suite_invocation(env, repo)
    args = args[2:] if args[:2] == ["-p", "lego_suite_profile"] else args
    variables["PYTHONPATH"] = str(repo)
    return subprocess.run(
        [str(environment_python(env)), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=repo,
        env={"PATH": "/usr/bin:/bin", **variables, **{k: v for k, v in os.environ.items() if k == "DRAWS_LOG"}},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_slow_property_test_is_graded_on_the_code_not_on_the_machines_speed(
    tmp_path: Path, env: TaskEnvironment
) -> None:
    repo = commit_tree(tmp_path / "slowprop", {"calc.py": BUGGY, "tests/__init__.py": ""})
    task = Task(
        instance_id="slowprop",
        repo="real/slowprop",
        problem_statement="add returns the difference",
        patch=_patch(repo, "calc.py", FIXED),
        test_patch=_patch(repo, "tests/test_calc.py", SLOW),
        repo_path=str(repo),
        FAIL_TO_PASS=["tests/test_calc.py::test_add"],
        PASS_TO_PASS=["tests/test_calc.py::test_add_zero"],
        environment=env,
    )
    # the control: with Hypothesis' own defaults the honest code fails on time alone
    fixed = commit_tree(tmp_path / "control", {"calc.py": FIXED, "tests/__init__.py": "", "tests/test_calc.py": SLOW})
    control = _plain_pytest(fixed, env)
    assert control.returncode == 1 and "DeadlineExceeded" in control.stdout, control.stdout[-2000:]

    gold = grade(task, task.patch)
    assert gold.reward == 1.0, gold.log
    assert gold.tests == {"tests/test_calc.py::test_add": "passed", "tests/test_calc.py::test_add_zero": "passed"}
    assert grade(task, "").reward == 0.0
    assert run_suite(fixed, env).statuses == {
        "tests/test_calc.py::test_add_zero": "passed",
        "tests/test_calc.py::test_add": "passed",
    }


DRAWS = (
    "import os\nfrom hypothesis import given, settings, strategies as st\n\n\n"
    "@settings(max_examples=20)\n@given(st.integers(), st.lists(st.integers()))\ndef test_draws(n, s):\n"
    "    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'draws.log')\n"
    "    with open(os.environ.get('DRAWS_LOG') or here, 'a') as fh:\n        fh.write(repr((n, s)) + '\\n')\n"
)


def test_the_factory_draws_the_same_examples_every_run_and_the_projects_own_profile_wins(
    tmp_path: Path, env: TaskEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = commit_tree(tmp_path / "draws", {"test_draws.py": DRAWS})
    logs = []
    log = repo / "draws.log"  # beside the test: a suite run gets none of the host's variables (made = graded)
    for run in range(2):
        assert run_suite(repo, env, hash_seed=run + 1).statuses == {"test_draws.py::test_draws": "passed"}
        logs.append(log.read_text())
        log.unlink()
    assert logs[0] == logs[1] and len(logs[0].splitlines()) >= 10

    # without the profile the draws are fresh each run: the difference the profile removes
    plain = []
    for run in range(2):
        log = tmp_path / f"plain-{run}.log"
        monkeypatch.setenv("DRAWS_LOG", str(log))
        assert _plain_pytest(repo, env).returncode == 0
        plain.append(log.read_text())
    assert plain[0] != plain[1]

    # a project that loads a profile of its own in its conftest keeps it: a 100 ms deadline fails
    own = commit_tree(
        tmp_path / "own",
        {
            "calc.py": FIXED,
            "conftest.py": "from hypothesis import Phase, settings\n\n"
            "settings.register_profile('mine', deadline=100, phases=[Phase.explicit, Phase.generate])\n"
            "settings.load_profile('mine')\n",
            "tests/__init__.py": "",
            "tests/test_calc.py": SLOW,
        },
    )
    result = run_suite(own, env)
    assert result.statuses["tests/test_calc.py::test_add_zero"] == "failed"
    assert "DeadlineExceeded" in result.messages["tests/test_calc.py::test_add_zero"]
