"""A perturbed container literal changes in every constant, so correct code whose equality is coarser
than the literal still fails the perturbed assertion (the grader read it as tampering otherwise).

Seen on the shipped real suite: semver's ``Version == {"major": 0, ..., "build": "build.1"}`` ignores
the build (as the SemVer spec says); when the one changed constant was the build, the gold patch
passed the perturbed assertion and was zeroed as ``grade/tampering`` in about one grade in five.
Host-side only: the rendered test file is executed here with an identity witness.
"""

from __future__ import annotations

import ast
from typing import Any

import pytest

from lego.sandboxes.perturb import WITNESS, FilePlan, find_sites, plan_perturbations, render

PARAMETRIZED = """
import pytest
from version import Version


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1.2.3+b1", {"major": 1, "minor": 2, "patch": 3, "build": "b1"}),
        ("0.1.0+x", {"major": 0, "minor": 1, "patch": 0, "build": "x"}),
    ],
)
def test_parse(text, expected):
    assert Version.parse(text) == expected


def test_tuple():
    assert Version.parse("4.5.6+z").to_tuple() == (4, 5, 6, "z")


def test_set():
    assert Version.parse("7.8.9+q").parts() == {7, 8, 9}
"""


class Version:
    """Equality as semver's: a dict or tuple compares on major, minor and patch; the build is ignored."""

    def __init__(self, major: int, minor: int, patch: int, build: str) -> None:
        self.fields = (major, minor, patch, build)

    @classmethod
    def parse(cls, text: str) -> Version:
        core, _, build = text.partition("+")
        major, minor, patch = map(int, core.split("."))
        return cls(major, minor, patch, build)

    def to_tuple(self) -> _Coarse:
        return _Coarse(self.fields)

    def parts(self) -> set[int]:
        return set(self.fields[:3])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, dict):
            other = (other["major"], other["minor"], other["patch"], other.get("build"))
        return isinstance(other, tuple) and other[:3] == self.fields[:3]

    __hash__ = None  # type: ignore[assignment]


class _Coarse(tuple):  # type: ignore[type-arg]
    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple) and tuple(other[:3]) == tuple(self[:3])

    __hash__ = tuple.__hash__


def _outcomes(text: str) -> dict[str, str]:
    """Run every test function of the rendered file here (each parametrize row, by hand)."""
    import builtins
    import sys
    import types

    module = types.ModuleType("version")
    module.Version = Version  # type: ignore[attr-defined]
    sys.modules["version"] = module
    setattr(builtins, WITNESS, lambda _key, value: value)
    try:
        namespace: dict[str, Any] = {}
        exec(compile(text, "tests/test_v.py", "exec"), namespace)
        out: dict[str, str] = {}
        tree = ast.parse(text)
        rows = _table(tree)  # the (possibly perturbed) table
        for k, (source, expected) in enumerate(rows):
            out[f"test_parse[{k}]"] = _call(namespace["test_parse"], source, expected)
        out["test_tuple"] = _call(namespace["test_tuple"])
        out["test_set"] = _call(namespace["test_set"])
        return out
    finally:
        delattr(builtins, WITNESS)
        sys.modules.pop("version", None)


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _table(tree: ast.Module) -> list[Any]:
    decorator = _function(tree, "test_parse").decorator_list[0]
    assert isinstance(decorator, ast.Call)
    return list(ast.literal_eval(decorator.args[1]))


def _compared(tree: ast.Module, name: str) -> Any:
    statement = _function(tree, name).body[0]
    assert isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Compare)
    return ast.literal_eval(statement.test.comparators[0])


def _call(fn: Any, *args: Any) -> str:
    try:
        fn(*args)
    except AssertionError:
        return "failed"
    return "passed"


@pytest.mark.parametrize("draw", range(40))
def test_coarse_equality_fails_every_perturbed_container(draw: int) -> None:
    plan = FilePlan("tests/test_v.py", PARAMETRIZED, find_sites(PARAMETRIZED, "tests/test_v.py"))
    functions = {("tests/test_v.py", name) for name in ("test_parse", "test_tuple", "test_set")}
    plan_perturbations([plan], functions, 2)
    assert len(plan.perturbed) == 3
    for run in (0, 1):
        outcomes = _outcomes(render(plan, run))
        for i, (run_of, _span, _text, row) in plan.perturbed.items():
            if run_of != run:
                continue
            name = plan.sites[i].function
            test = f"test_parse[{row}]" if name == "test_parse" else name
            assert outcomes[test] == "failed", (test, render(plan, run))
        perturbed_here = {
            f"test_parse[{row}]" if plan.sites[i].function == "test_parse" else plan.sites[i].function
            for i, (run_of, _s, _t, row) in plan.perturbed.items()
            if run_of == run
        }
        assert all(v == "passed" for t, v in outcomes.items() if t not in perturbed_here)


def test_every_constant_of_a_dict_or_tuple_changes_a_set_one() -> None:
    for _ in range(40):
        plan = FilePlan("tests/test_v.py", PARAMETRIZED, find_sites(PARAMETRIZED, "tests/test_v.py"))
        plan_perturbations([plan], {("tests/test_v.py", n) for n in ("test_parse", "test_tuple", "test_set")}, 1)
        tree = ast.parse(render(plan, 0))
        old = ast.parse(PARAMETRIZED)
        [changed] = [(a, b) for a, b in zip(_table(old), _table(tree), strict=True) if a != b]
        assert all(changed[0][1][k] != changed[1][1][k] for k in ("major", "minor", "patch", "build"))
        assert changed[0][0] == changed[1][0]  # the input column is never perturbed
        new_tuple = _compared(tree, "test_tuple")
        assert all(a != b for a, b in zip((4, 5, 6, "z"), new_tuple, strict=True))
        new_set = _compared(tree, "test_set")
        assert new_set != {7, 8, 9} and len({7, 8, 9} - new_set) == 1


@pytest.mark.parametrize(
    "token",
    [
        '"isodate.duration.Duration(10, 10, 0," " years=10, months=10)"',  # isodate 0.7.2's test_repr
        "'a b' 'c d'",
        "b'x, y' b' z'",
    ],
)
def test_an_implicit_concatenation_is_left_alone_never_rewritten_across_its_tokens(token: str) -> None:
    """Seen once in 241 oracle samples: the regex read `"A" "B"` as one string whose body is `A" "B`, so
    the space between the two tokens could become `#`, which turned the rest of the assert's line into
    a comment (`assert "A"#...` passes, its witness never runs): the gold patch was zeroed as tampering."""
    import secrets

    from lego.sandboxes.perturb import perturb_token

    rng = secrets.SystemRandom()
    assert {perturb_token(token, rng) for _ in range(300)} == {None}


def test_a_perturbed_string_is_one_string_token_of_the_same_kind() -> None:
    import io
    import secrets
    import tokenize

    from lego.sandboxes.perturb import perturb_token

    rng = secrets.SystemRandom()
    for token in ('"1 month, 0:00:00"', "'a#b c'", 'r"x\\d+ y"', "b'k=v; w'", '"""two\nlines"""'):
        for _ in range(200):
            new = perturb_token(token, rng)
            assert new is not None
            kinds = [t.type for t in tokenize.generate_tokens(io.StringIO(new).readline)]
            assert kinds[0] == tokenize.STRING and all(
                k in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER) for k in kinds[1:]
            ), new
