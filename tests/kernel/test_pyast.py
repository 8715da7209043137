"""lego.pyast.parse under the load that makes CPython's own ast.parse raise (gh-106905).

The race: the AST constructor keeps its recursion depth in per-interpreter state; a garbage
collection that runs a finalizer mid-conversion hands the GIL to another thread, which converts a
tree of its own and leaves the shared count off. The test first shows the race on this interpreter
with plain ``ast.parse`` (skipping where it does not show within the bound), then runs the same load
through ``lego.pyast.parse`` and requires that no parse fails.
"""

from __future__ import annotations

import ast
import gc
import threading
import time

import pytest

from lego import pyast

# Nested literals and comprehensions: deep trees, many nodes, so a collection lands mid-conversion.
SOURCE = "def f(x):\n" + "".join(
    f"    y{i} = [[(x + {i}) * 2 for _ in range(3)] for _ in range(2)]\n"
    f"    assert f(y{i}) == {{'a': (1, [2, {{3: {i}}}])}}\n"
    for i in range(300)
)
THREADS = 6


class _Cycle:
    def __del__(self) -> None:  # a finalizer: the collector runs Python code, so the GIL can switch
        pass


def _parse_source(parse):  # type: ignore[no-untyped-def]
    tree = parse(SOURCE)
    assert isinstance(tree, ast.Module) and len(tree.body[0].body) == 600  # type: ignore[attr-defined]


def _load(parse, seconds: float, other=None) -> tuple[int, list[str]]:  # type: ignore[no-untyped-def]
    """Parse SOURCE from THREADS threads for ``seconds`` while a thread makes garbage cycles with
    finalizers; returns (parses done, SystemError messages). ``other``: a call that every second
    worker makes instead (the same SystemError counts)."""
    stop = threading.Event()
    errors: list[str] = []
    done = [0] * THREADS

    def churn() -> None:
        while not stop.is_set():
            c = _Cycle()
            c.self = c  # type: ignore[attr-defined]

    def worker(k: int) -> None:
        while not stop.is_set():
            try:
                other() if other is not None and k % 2 else _parse_source(parse)
            except SystemError as e:
                errors.append(str(e))
                stop.set()
                return
            done[k] += 1

    old = gc.get_threshold()
    gc.set_threshold(50, 1, 1)
    threads = [threading.Thread(target=churn, daemon=True)] + [
        threading.Thread(target=worker, args=(k,), daemon=True) for k in range(THREADS)
    ]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not stop.is_set():
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(timeout=60)
    finally:
        gc.set_threshold(*old)
    return sum(done), errors


def test_parse_from_many_threads_never_raises_the_recursion_mismatch() -> None:
    start = time.monotonic()
    raced, errors = _load(ast.parse, seconds=60)  # the unlocked call, on purpose
    if not errors:
        pytest.skip(f"plain ast.parse did not race in {raced} parses on this interpreter")
    assert "recursion depth mismatch" in errors[0]
    took = time.monotonic() - start
    # Twice the parses (and the time) the plain call needed to fail, through the lock.
    parses, locked_errors = _load(pyast.parse, seconds=max(2 * took, 5))
    assert locked_errors == [], locked_errors
    assert parses >= 1


def test_parse_is_ast_parse() -> None:
    assert ast.dump(pyast.parse("x = [1, (2, 3)]\n")) == ast.dump(ast.parse("x = [1, (2, 3)]\n"))
    with pytest.raises(SyntaxError):
        pyast.parse("def (:\n", "broken.py")


# A witnessed value as the grader reads it back: a deep literal, parsed by literal_eval.
LITERAL = repr([{"k": (i, [i, {"v": [i] * 3}], "s" * 5)} for i in range(400)])


def test_literal_eval_of_a_string_beside_locked_parses_never_raises_the_recursion_mismatch() -> None:
    """literal_eval parses its string: the unlocked call races with the locked parses beside it, so the
    grader's literal_eval goes through the same lock (an oracle's correct patch was zeroed by it)."""
    start = time.monotonic()
    expected = ast.literal_eval(LITERAL)
    raced, errors = _load(pyast.parse, seconds=60, other=lambda: ast.literal_eval(LITERAL))
    if not errors:
        pytest.skip(f"ast.literal_eval did not race in {raced} calls on this interpreter")
    assert "recursion depth mismatch" in errors[0]
    took = time.monotonic() - start

    def locked() -> None:
        assert pyast.literal_eval(LITERAL) == expected

    calls, locked_errors = _load(pyast.parse, seconds=max(2 * took, 5), other=locked)
    assert locked_errors == [], locked_errors
    assert calls >= 1


def test_literal_eval_is_ast_literal_eval() -> None:
    for text in ("  (1, [2.5, {'a': b'x'}], None)", "-3", "{1, 2}"):
        assert pyast.literal_eval(text) == ast.literal_eval(text)
    node = ast.parse("[1, 2]", mode="eval").body
    assert pyast.literal_eval(node) == [1, 2]
    for bad in ("f(x)", "1 +", "x"):
        with pytest.raises((ValueError, SyntaxError)) as mine:
            pyast.literal_eval(bad)
        with pytest.raises(type(mine.value)):
            ast.literal_eval(bad)
