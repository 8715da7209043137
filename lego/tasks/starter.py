"""The starter suite: small generated repos with one precisely reported bug, sized for a 4 M-param policy.

Why a second suite: the built-in suite (``builtin``) is eight hand-written libraries with mutation
bugs and issues that describe only the symptom. That is the right difficulty for a real policy and
far beyond a few-million-parameter model trained for minutes on a CPU, which solves none of them,
so RL on it has no reward spread and learns nothing. The embedded default needs tasks it solves
*sometimes*: this suite keeps the full agent loop (find the code, read it, edit it with an exact
``str_replace``, submit; graded by hidden tests in a sandbox) and makes the diagnosis part of the
report, the way a precise bug report does: it names the file, the function and the wrong operator
("uses ``-`` where it should use ``+``"). What is left for the policy is reading the file, picking
the right line inside the right function and copying it exactly with the one change.

Each instance is its own repo: a package with one module holding one small function (arithmetic,
a comparison, a fold, a counter or boolean logic, with fixed variable names) and a hidden test file
(``test_patch``). One operator is swapped for its partner (the swaps are involutions); the failing
assertion and its actual value are quoted in the statement, computed by running both versions.
Every argument a fix needs can be read from the tool output just before it (``grep -rl`` prints the
path, the view prints the line): a few-million-parameter model learns to copy across that distance,
and measurably not from the report across the agent's ~700-token prompt (docs/ARCHITECTURE.md).

Two families share the generator (:data:`FAMILIES`): ``starter`` swaps an operator for its partner;
``boundary`` writes an inclusive bound strictly (``>=`` as ``>``), the off-by-one bug, in the
comparison templates. Its buggy lines look like ``starter``'s, whose fix for the same ``>`` is ``<=``:
which fix applies is said only by the report, so a policy that learnt ``starter`` must learn the
boundary fix (the embedded default's training suite; README "Does it learn?").

Packages and modules come from short shared lists; function names are two words from a ~200-word
pool, and no held-out function name occurs in the train split. Generation is deterministic from the seed; ``lego/tasks/data/starter.jsonl`` is the
shipped output of :func:`build_starter` (``lego tasks build --suite starter``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lego.errors import TaskError
from lego.paths import cache_dir
from lego.tasks.diffs import file_diff, new_file_diff
from lego.tasks.materialize import materialize_repo
from lego.types import Task

__all__ = ["BOUNDARY_PATH", "FAMILIES", "SPLIT_SIZES", "STARTER_PATH", "build_starter", "render_repo", "source_dir"]

STARTER_PATH = Path(__file__).resolve().parent / "data" / "starter.jsonl"
BOUNDARY_PATH = STARTER_PATH.with_name("boundary.jsonl")
SPLIT_SIZES = {"train": 600, "heldout": 120}

# Function names are two words from this pool; no held-out function name occurs in the train split.
_POOL = """
apple river stone cloud maple cedar pine ocean field light dark north south east west spring winter
summer autumn bright quick slow heavy sharp round square green amber coral ivory olive pearl ruby
silver golden copper iron steel paper glass metal wood brick sand clay water fire earth wind storm
rain snow frost mist dust smoke flame spark table chair door window floor wall roof garden forest
valley mountain island desert lake pond creek bridge tower castle market street road path trail
track line point curve angle edge corner center middle border limit range count total value price
score level width height depth speed weight stock rate step size length area volume add merge scale
pick check blend shift clip sum join fold grow tally choose probe mix move trim gather cost grade
pace mass supply ratio load span split sort find keep drop push pull turn lift send read write
open close mark note tag link hold fill pour mend bend wrap pack ship sell lend rent save spend
""".split()
_PACKAGES = ["meadow", "harbor", "orbit", "quarry", "lantern", "summit"]
_MODULES = ["core", "calc", "ops", "util"]

# Operator -> the operator a bug puts in its place. The swaps are involutions (each operator has one
# partner), so a policy can fix a line it has read without parsing the report; the report says it too.
_SWAPS = {"+": ["-"], "-": ["+"], "<": [">="], ">=": ["<"], ">": ["<="], "<=": [">"], "==": ["!="], "!=": ["=="],
          "and": ["or"], "or": ["and"]}  # fmt: skip
# Boundary bugs: an inclusive bound written strictly (``>=`` as ``>``, ``<=`` as ``<``), the off-by-one
# error. The buggy lines look exactly like the swap family's (``a > b``), whose fix is the negation
# (``<=``): which fix a line needs is said only by the report.
_BOUNDARY = {">=": [">"], "<=": ["<"]}


@dataclass(frozen=True)
class Family:
    """A kind of bug the generator plants: which operator may be replaced by which, in which templates."""

    name: str  # instance ids are lego-<name>__<split>-NNNN
    swaps: dict[str, list[str]]
    kinds: tuple[str, ...]  # the function templates (:func:`_make_func`) it uses
    sizes: dict[str, int]
    path: Path


FAMILIES = {
    "starter": Family(
        "starter",
        _SWAPS,
        ("arith", "scaled", "predicate", "choose", "fold", "count", "both"),
        SPLIT_SIZES,
        STARTER_PATH,
    ),
    # ``choose`` is left out: ``a if a > b else b`` returns the same as ``>=`` for every input.
    "boundary": Family("boundary", _BOUNDARY, ("predicate", "count"), {"train": 240, "heldout": 60}, BOUNDARY_PATH),
}


@dataclass(frozen=True)
class _Func:
    name: str
    source: str  # with the placeholder {OP} for the operator a bug may swap
    op: str
    params: tuple[str, ...]
    kind: str  # "pair" (two numbers) or "seq" (a list and maybe a number)


_PAIR, _TRIPLE = ("a", "b"), ("a", "b", "c")  # fixed per template: the buggy line is one of a few dozen shapes


def _fresh(rng: random.Random, joiner: str, taken: set[str]) -> str:
    """A two-word identifier not in ``taken`` (which it is then added to)."""
    while True:
        first, second = rng.sample(_POOL, 2)
        name = f"{first}{joiner}{second}"
        if name not in taken:
            taken.add(name)
            return name


def _make_func(rng: random.Random, name: str, family: Family) -> _Func:
    kind = rng.choice(list(family.kinds))
    comparisons = [op for op in ["<", "<=", ">", ">=", "==", "!="] if op in family.swaps]
    if kind == "arith":
        a, b = _PAIR
        op = rng.choice(["+", "-"])
        src = f"def {name}({a}, {b}):\n    return {a} {{OP}} {b}\n"
        return _Func(name, src, op, (a, b), "pair")
    if kind == "scaled":
        a, b, c = _TRIPLE
        op = rng.choice(["+", "-"])
        k = rng.randint(2, 5)
        src = f"def {name}({a}, {b}):\n    {c} = {a} {{OP}} {b}\n    return {c} * {k}\n"
        return _Func(name, src, op, (a, b), "pair")
    if kind == "predicate":
        a, b = _PAIR
        op = rng.choice(comparisons)
        src = f"def {name}({a}, {b}):\n    return {a} {{OP}} {b}\n"
        return _Func(name, src, op, (a, b), "pair")
    if kind == "choose":
        a, b = _PAIR
        op = rng.choice(["<", "<=", ">", ">="])
        src = f"def {name}({a}, {b}):\n    if {a} {{OP}} {b}:\n        return {a}\n    return {b}\n"
        return _Func(name, src, op, (a, b), "pair")
    if kind == "fold":
        seq, acc, elem = "items", "total", "item"
        op = rng.choice(["+", "-"])
        init = 0
        src = (
            f"def {name}({seq}):\n    {acc} = {init}\n    for {elem} in {seq}:\n"
            f"        {acc} = {acc} {{OP}} {elem}\n    return {acc}\n"
        )
        return _Func(name, src, op, (seq,), "seq")
    if kind == "count":
        seq, elem, limit, acc = "items", "item", "limit", "count"
        op = rng.choice(comparisons)
        src = (
            f"def {name}({seq}, {limit}):\n    {acc} = 0\n    for {elem} in {seq}:\n"
            f"        if {elem} {{OP}} {limit}:\n            {acc} += 1\n    return {acc}\n"
        )
        return _Func(name, src, op, (seq, limit), "seq")
    a, b = _PAIR
    op = rng.choice(["and", "or"])
    src = f"def {name}({a}, {b}):\n    return {a} > 0 {{OP}} {b} > 0\n"
    return _Func(name, src, op, (a, b), "pair")


def _args(rng: random.Random, fn: _Func) -> tuple[Any, ...]:
    if fn.kind == "seq":
        seq = [rng.randint(-3, 9) for _ in range(rng.randint(2, 5))]
        return (seq,) if len(fn.params) == 1 else (seq, rng.randint(0, 6))
    return (rng.randint(-4, 12), rng.randint(-4, 12))


def _call(fn: _Func, args: tuple[Any, ...]) -> str:
    return f"{fn.name}({', '.join(repr(a) for a in args)})"


def _run(source: str, fn: str, args: tuple[Any, ...]) -> Any:
    scope: dict[str, Any] = {}
    exec(compile(source, "<starter>", "exec"), scope)  # generated code, never user input
    return scope[fn](*args)


def render_repo(files: dict[str, str], dest: Path) -> None:
    """Write an instance's fixed source tree (``metadata["files"]``) under ``dest``."""
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _instance(rng: random.Random, split: str, number: int, seed: int, taken: set[str], family: Family) -> Task:
    """One instance; its package and function names are new to ``taken`` (and are added to it)."""
    pkg, mod = rng.choice(_PACKAGES), rng.choice(_MODULES)
    names = [_fresh(rng, "_", taken)]
    funcs = [_make_func(rng, n, family) for n in names]
    swaps = family.swaps
    target = rng.randrange(len(funcs))
    header = f'"""{pkg.replace("_", " ").capitalize()}: small helpers."""\n\n\n'
    fixed = header + "\n\n".join(f.source.replace("{OP}", f.op) for f in funcs)
    # Tests: two assertions per function; the target's first must fail under the bug. A swap that
    # no input can detect (``a if a < b else b`` vs ``<=``) is skipped for the next candidate.
    failing: tuple[Any, Any] | None = None
    cases_of: dict[int, list[tuple[Any, ...]]] = {}
    for bad in rng.sample(swaps[funcs[target].op], len(swaps[funcs[target].op])):
        buggy = header + "\n\n".join(
            f.source.replace("{OP}", bad if i == target else f.op) for i, f in enumerate(funcs)
        )
        for _attempt in range(200):
            cases = [_args(rng, funcs[target]) for _ in range(2)]
            got = _run(buggy, funcs[target].name, cases[0])
            want = _run(fixed, funcs[target].name, cases[0])
            if got != want:
                failing, cases_of[target] = (got, want), cases
                break
        if failing:
            break
    if failing is None:
        raise TaskError(f"starter {split} #{number}: no detectable bug in {funcs[target].name}")
    tests: list[str] = []
    for i, fn in enumerate(funcs):
        cases = cases_of.get(i) or [_args(rng, fn) for _ in range(2)]
        body = "".join(f"    assert {_call(fn, c)} == {_run(fixed, fn.name, c)!r}\n" for c in cases)
        tests.append(f"def test_{fn.name}():\n{body}")
    assert failing is not None
    module_path, test_path = f"{pkg}/{mod}.py", f"tests/test_{mod}.py"
    test_src = f"from {pkg}.{mod} import {', '.join(f.name for f in funcs)}\n\n\n" + "\n\n".join(tests)
    fn = funcs[target]
    got, want = failing
    first_test = tests[target].splitlines()
    statement = (
        f"`{fn.name}` returns a wrong result\n\n"
        f"In `{module_path}`, `{fn.name}` uses `{bad}` where it should use `{fn.op}`.\n"
        "This check from the test suite fails:\n\n"
        f"```python\n{first_test[0]}\n{first_test[1]}\n```\n\n"
        f"Running `{test_path}::test_{fn.name}` gives:\n\n"
        f"```\nAssertionError: assert {got!r} == {want!r}\n```\n\n"
        "Expected: the check passes.\n"
    )
    pyproject = (
        f'[project]\nname = "{pkg}"\nversion = "1.0.0"\nrequires-python = ">=3.10"\n\n'
        '[tool.pytest.ini_options]\npythonpath = ["."]\ntestpaths = ["tests"]\naddopts = "-p no:cacheprovider"\n'
    )
    files = {"pyproject.toml": pyproject, f"{pkg}/__init__.py": "", module_path: fixed, test_path: test_src}
    instance_id = f"lego-{family.name}__{split}-{number:04d}"
    return Task(
        instance_id=instance_id,
        repo=f"lego-starter/{pkg}",
        problem_statement=statement,
        patch=file_diff(module_path, buggy, fixed),
        test_patch=new_file_diff(test_path, test_src),
        FAIL_TO_PASS=[f"{test_path}::test_{fn.name}"],
        PASS_TO_PASS=[f"{test_path}::test_{f.name}" for i, f in enumerate(funcs) if i != target],
        version="1.0.0",
        created_at="2026-01-01T00:00:00+00:00",
        test_cmd="python -m pytest",
        split=split,
        metadata={
            "family": "starter",
            "library": pkg,
            "file": module_path,
            "function": fn.name,
            "mutation_kind": f"{fn.op} -> {bad}",
            "seed": seed,
            "files": files,
        },
    )


def source_dir(task: Task) -> Path:
    """The instance's fixed source tree, written once under the cache (atomically: temp dir + rename)."""
    files = task.metadata.get("files")
    if not isinstance(files, dict):
        raise TaskError(f"task {task.instance_id}: a starter instance needs metadata.files; rebuild the suite")
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:12]
    final = cache_dir() / "starter-src" / f"{task.instance_id}-{digest}"  # a rebuilt suite never reuses stale files
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{task.instance_id}.", dir=final.parent))
    try:
        render_repo(files, scratch / "src")
        try:
            os.rename(scratch / "src", final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return final


def build_starter(seed: int = 0, sizes: dict[str, int] | None = None, family: str = "starter") -> list[Task]:
    """All instances of a family (train then held-out; :data:`FAMILIES`), deterministic in ``seed``,
    with ``base_commit`` set (each repo is materialised once in a scratch dir to compute it;
    materialising is deterministic). Instances are drawn in order (held-out names depend on every
    train name before them); their repos, six short git runs each, are built side by side."""
    fam = FAMILIES[family]
    tasks: list[Task] = []
    taken: set[str] = set()  # package and function names used so far: held-out ones are all new
    for split, size in {**fam.sizes, **(sizes or {})}.items():
        rng = random.Random(f"{fam.name}:{seed}:{split}")
        tasks += [_instance(rng, split, n, seed, taken, fam) for n in range(1, size + 1)]

    def with_commit(task: Task) -> Task:
        with tempfile.TemporaryDirectory(prefix="lego-starter-") as tmp:
            render_repo(task.metadata["files"], Path(tmp) / "src")
            commit = materialize_repo(Path(tmp) / "src", task.patch, task.test_patch, Path(tmp) / "repo")
        return task.model_copy(update={"base_commit": commit})

    with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1)) as pool:
        return list(pool.map(with_commit, tasks))
