"""The blind copy of the hidden tests (lego.sandboxes.blind) and the host's judgement of its witnesses
(lego.sandboxes.evidence): what the graded process may not hold, and how an assertion is decided
without calling the code under test. End to end through real sandboxes: tests/sandboxes/test_grading.py
and tests/redteam/test_verdict_blind.py."""

from __future__ import annotations

import ast

import pytest

from lego.sandboxes.blind import blind_copy
from lego.sandboxes.evidence import decode, evaluate, same

SUITE = '''
import pytest
from calc import add, parse

EXPECTED = {"answer": 42}


@pytest.mark.parametrize("a,b,expected", [(1, 2, 3), pytest.param(20, 22, 4242, id="twenty-two")])
def test_add_returns_the_sum(a, b, expected):
    """add(20, 22) is 4242"""
    assert add(a, b) == expected
    assert not add(a, b) < 0 and add(a, b) is not None


def test_parse_rejects_junk():
    with pytest.raises(ZeroDivisionError, match="junk-message"):
        parse("x")
    pytest.raises(OverflowError, parse, None)


def test_constants():
    want = [777, 778]
    assert parse("1,2") == want
    assert parse("1") == pytest.approx(31.5)
    assert parse("a") == EXPECTED


class TestThing:
    def test_loop(self):
        self.assertEqual(add(1, 1), 9191)
        for i in range(3):
            assert add(i, 0) == i
'''


@pytest.fixture(scope="module")
def plan():  # type: ignore[no-untyped-def]
    return blind_copy({"tests/test_a.py": SUITE})


def test_the_copy_holds_no_expected_outcome(plan) -> None:  # type: ignore[no-untyped-def]
    text = plan.texts["tests/test_a.py"]
    ast.parse(text)
    for secret in ("4242", "42", "777", "31.5", "9191", "ZeroDivisionError", "OverflowError", "junk-message"):
        assert secret not in text, secret
    for name in ("twenty-two", "test_add_returns_the_sum", "rejects_junk", "TestThing", '"""', "assert "):
        assert name not in text, name
    assert "ids=['p0r0', 'p0r1']" in text and "(20, 22, None)" in text  # the inputs stay, the answers go


def test_the_copy_is_deterministic_so_the_reference_can_be_cached(plan) -> None:  # type: ignore[no-untyped-def]
    again = blind_copy({"tests/test_a.py": SUITE})
    assert again.texts == plan.texts and again.sites == plan.sites
    assert plan.blind_node("tests/test_a.py::TestThing::test_loop") == "tests/test_a.py::Testl4::test_l5"


def _site(plan, line: int):  # type: ignore[no-untyped-def]
    return next(s for s in plan.sites.values() if s.line == line and s.kind == "compare")


def test_the_host_evaluates_an_assertion_on_plain_values_with_the_kept_expectation(plan) -> None:  # type: ignore[no-untyped-def]
    site = next(s for s in plan.sites.values() if any(o.column for o in s.operands))
    assert evaluate(site, [{"r": ["i", "4242"]}, None], {0: 1}) is True
    assert evaluate(site, [{"r": ["i", "4243"]}, None], {0: 1}) is False
    assert evaluate(site, [{"r": ["i", "3"]}, None], {0: 0}) is True
    # an int subclass is judged by the int it holds (its own __eq__ never runs): honest namedtuples and
    # IntEnums pass, an always-equal int holding the wrong number does not
    assert evaluate(site, [{"r": ["sub", "calc.Same", ["i", "-2"], []]}, None], {0: 0}) is False
    # anything else is for the reference to judge
    assert evaluate(site, [{"r": ["obj", "unittest.mock._ANY", []]}, None], {0: 0}) is None
    approx = next(s for s in plan.sites.values() if any(o.approx for o in s.operands))
    assert evaluate(approx, [{"r": ["f", "31.50000001"]}, None], {}) is True


def test_raises_is_judged_by_the_exception_type_and_pattern(plan) -> None:  # type: ignore[no-untyped-def]
    site = next(s for s in plan.sites.values() if s.kind == "raises" and s.match)
    raised = ["exc", ["builtins.ZeroDivisionError", "builtins.ArithmeticError"], ["t", []], "junk-message here", []]
    assert evaluate(site, [{"e": raised}], {}) is True
    assert evaluate(site, [{"e": [*raised[:3], "other", []]}], {}) is False
    assert evaluate(site, [{"r": ["N"]}], {}) is False  # DID NOT RAISE, swallowed in the copy, is still a fail


def test_structural_sameness_ignores_extra_fields_but_not_types() -> None:
    gold = ["obj", "semver.Version", [["major", ["i", "1"]]]]
    assert same(["obj", "semver.Version", [["_cache", ["N"]], ["major", ["i", "1"]]]], gold)
    assert not same(["obj", "cheat.Version", [["major", ["i", "1"]]]], gold)
    assert not same(["obj", "semver.Version", [["major", ["i", "2"]]]], gold)
    assert same(["sub", "shapes.Point", ["t", [["i", "1"]]], []], ["t", [["i", "1"]]])
    assert decode(["d", [[["s", "a"], ["S", [["i", "1"]]]]]]) == {"a": {1}}
