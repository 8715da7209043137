"""Perturbed copies of the hidden tests: the evidence a cheat cannot produce without being correct.

The grader runs the hidden tests twice, each time in a fresh sandbox (:mod:`lego.sandboxes.grading`).
Both runs see the same files but for some expected values. This module finds, in the hidden test files
(after the task's ``test_patch``), the **sites**: assertions at the top level of a test function that
compare something with a literal, or assert a truth value:

* ``assert EXPR == LITERAL`` (either side), ``self.assertEqual(EXPR, LITERAL)`` and its unittest kin,
* ``assert EXPR`` / ``assert not EXPR``, ``self.assertTrue(EXPR)`` / ``self.assertFalse(EXPR)``.

"Top level" means not inside ``if``/``for``/``while``/``try``, nor in a ``with pytest.raises`` or
``warns`` block, nor after a ``return`` or ``pytest.skip``: a test that passes executes every such
statement, so correct code reaches every site. Each site's ``EXPR`` is wrapped as
``__lego_w__("<key>", (EXPR))`` in *both* runs (the bootstrap defines ``__lego_w__``: it records the
value it is given and returns it unchanged, the **witness**), with a random key per grade that says
nothing about the site.

For every test function that has sites, one site is drawn and perturbed in one of the two runs,
drawn per grade (:func:`plan_perturbations`): the literal becomes a different, plausible value of
the same type and shape (an int moved by a few, one character of a string changed, one element of
a tuple), or the truth assertion is negated. Correct code therefore *fails* exactly the perturbed
assertion, in the run that holds it, and its witness there equals the true literal, which appears
nowhere in that run. Code that forges its results, reads the expected value from the test's own
source or frames, or returns values that equal anything *passes* the perturbed assertion, or
witnesses the wrong value, and is zeroed as tampering (:mod:`lego.sandboxes.evidence`). About half
of the functions are perturbed in each run, so neither run is "the real one" from inside.

Host-side only (the host's Python parses the tests; nothing here runs in a sandbox).
"""

from __future__ import annotations

import ast
import re
import secrets
import string
from dataclasses import dataclass, field
from typing import Any

__all__ = ["WITNESS", "FilePlan", "Site", "find_sites", "perturb_token", "plan_perturbations", "render"]

WITNESS = "__lego_w__"
"""The builtin the grading bootstrap installs; the rewritten test files call it at every site."""

_EQUAL_METHODS = frozenset(
    {
        "assertEqual",
        "assertEquals",
        "assertListEqual",
        "assertTupleEqual",
        "assertDictEqual",
        "assertSetEqual",
        "assertSequenceEqual",
        "assertMultiLineEqual",
    }
)
_TRUTH_METHODS = {"assertTrue": "assertFalse", "assertFalse": "assertTrue"}
_RAISING_CONTEXTS = ("raises", "warns", "Raises", "Warns", "deprecated_call", "assertLogs", "fail")


@dataclass(frozen=True)
class Site:
    """One assertion of a test function whose value the grader witnesses.

    ``function``: the test's qualified name in its file (``TestCls.test_x`` or ``test_x``);
    ``expr``: the span of the witnessed expression; ``literal``: the span of the compared literal
    (None for a truth site); ``truth``: for a truth site, the truth value the original asserts."""

    path: str
    function: str
    expr: tuple[int, int, int, int]
    literal: tuple[int, int, int, int] | None
    value: Any = None
    leaves: tuple[tuple[int, int, int, int], ...] = ()  # the literal's constants, any of which may change
    truth: bool | None = None
    method: tuple[int, int, int, int] | None = None  # a truth method's name, negated when perturbed
    negate_span: tuple[int, int, int, int] | None = None  # `not EXPR`: the span of the whole operand


@dataclass
class FilePlan:
    """A test file's text and sites, and what each run puts at them."""

    path: str
    text: str
    sites: list[Site]
    keys: dict[int, str] = field(default_factory=dict)  # site index -> witness key
    perturbed: dict[int, tuple[int, tuple[int, int, int, int] | None, str]] = field(default_factory=dict)
    """site index -> (run, the span to replace (None: negate the truth site), its new text)"""


def _leaves(node: ast.AST) -> list[ast.AST]:
    """The constants of a literal that can be perturbed in place (numbers, strings, bytes, booleans;
    a negated number counts as one), in source order: a container's elements and dict values."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return [node] if isinstance(node.operand.value, int | float) else []
    if isinstance(node, ast.Constant):
        return [] if node.value is None or node.value is Ellipsis else [node]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [leaf for elt in node.elts for leaf in _leaves(elt)]
    if isinstance(node, ast.Dict):
        return [leaf for v in node.values for leaf in _leaves(v)]
    return []


def _literal(node: ast.AST) -> tuple[bool, Any, list[ast.AST]]:
    """``(True, value, leaves)`` when ``node`` is a literal with something to perturb, else ``(False, ...)``."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None, []
    leaves = _leaves(node)
    return bool(leaves), value, leaves


def _span(node: ast.AST) -> tuple[int, int, int, int]:
    return (node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]


def _raising(item: ast.withitem) -> bool:
    text = ast.dump(item.context_expr)
    return any(f"'{word}'" in text or f"attr='{word}" in text for word in _RAISING_CONTEXTS) or "raises" in text


def _top_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements every passing run of a test function executes, in order."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.Return | ast.Raise):
            break
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            name = ast.unparse(stmt.value.func)
            if name.endswith(("skip", "xfail", "fail", "importorskip")):
                break
        if isinstance(stmt, ast.With | ast.AsyncWith):
            if any(_raising(item) for item in stmt.items):
                continue
            out.extend(_top_statements(stmt.body))
            continue
        out.append(stmt)
    return out


def _sites_in(stmt: ast.stmt, path: str, function: str) -> list[Site]:
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            left, right = test.left, test.comparators[0]
            for expr, lit in ((left, right), (right, left)):
                ok, value, leaves = _literal(lit)
                if ok and not _literal(expr)[0]:
                    return [Site(path, function, _span(expr), _span(lit), value, tuple(map(_span, leaves)))]
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return [Site(path, function, _span(test.operand), None, truth=False, negate_span=_span(test))]
        if not isinstance(test, ast.Constant):
            return [Site(path, function, _span(test), None, truth=True, negate_span=_span(test))]
        return []
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return []
    call = stmt.value
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"):
        return []
    if func.attr in _EQUAL_METHODS and len(call.args) >= 2:
        first, second = call.args[0], call.args[1]
        for expr, lit in ((first, second), (second, first)):
            ok, value, leaves = _literal(lit)
            if ok and not _literal(expr)[0]:
                return [Site(path, function, _span(expr), _span(lit), value, tuple(map(_span, leaves)))]
    if func.attr in _TRUTH_METHODS and call.args:
        end_col = func.end_col_offset or 0
        method = (func.end_lineno or func.lineno, end_col - len(func.attr), func.end_lineno or func.lineno, end_col)
        return [Site(path, function, _span(call.args[0]), None, truth=func.attr == "assertTrue", method=method)]
    return []


def find_sites(text: str, path: str) -> list[Site]:
    """Every site of the test functions in ``text`` (module-level ``test*`` functions and methods of
    ``Test*`` / ``*Test`` classes, nested classes included); [] when the file does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    sites: list[Site] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                for stmt in _top_statements(node.body):
                    sites.extend(_sites_in(stmt, path, prefix + node.name))
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return sites


_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|[0-7]{1,3}|.)", re.S)
_STRING_TOKEN = re.compile(r"^([rRbBuU]{0,2})('''|\"\"\"|'|\")(.*)\2$", re.S)


def _new_char(ch: str, rng: secrets.SystemRandom) -> str:
    pool = string.digits if ch.isdigit() else string.ascii_lowercase
    new = rng.choice([c for c in pool if c != ch.lower()])
    return new.upper() if ch.isupper() else new


def perturb_token(token: str, rng: secrets.SystemRandom) -> str | None:
    """``token`` (the source text of one constant) changed to a different value of the same type,
    written in the same style (quotes, prefix, base), so nothing about its look marks it; None when
    it cannot be changed that way."""
    try:
        old = ast.literal_eval(token)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if isinstance(old, bool):
        new_text = "False" if old else "True"
    elif isinstance(old, int):
        new_value = old + rng.choice((-3, -2, -1, 1, 2, 3))
        base = token.lstrip("-")[:2].lower()
        new_text = hex(new_value) if base == "0x" and new_value >= 0 else str(new_value)
    elif isinstance(old, float):
        if old != old or old in (float("inf"), float("-inf")):
            return None
        new_text = repr(old + rng.choice((-1.0, 1.0)) * max(1.0, abs(old) / 2))
    elif isinstance(old, str | bytes):
        m = _STRING_TOKEN.match(token)
        if m is None:
            return None  # implicit concatenation of several strings: left alone
        prefix, quote, body = m.groups()
        escaped = {i for e in _ESCAPE.finditer(body) for i in range(e.start(), e.end())}
        spots = [i for i, ch in enumerate(body) if i not in escaped and ch.isascii() and ch.isalnum()]
        if spots:
            i = rng.choice(spots)
            body = body[:i] + _new_char(body[i], rng) + body[i + 1 :]
        elif not body:
            body = rng.choice(string.ascii_lowercase)
        else:
            return None
        new_text = f"{prefix}{quote}{body}{quote}"
    else:
        return None
    try:
        new = ast.literal_eval(new_text)
    except (ValueError, SyntaxError):
        return None
    return new_text if type(new) is type(old) and new != old else None


def plan_perturbations(plans: list[FilePlan], functions: set[tuple[str, str]], runs: int = 2) -> None:
    """Give every site a fresh witness key, and for each test function in ``functions`` (``(path,
    qualified name)``) that has sites, perturb one drawn site in one drawn run (in place)."""
    rng = secrets.SystemRandom()
    by_function: dict[tuple[str, str], list[tuple[FilePlan, int]]] = {}
    for plan in plans:
        plan.keys = {i: secrets.token_hex(4) for i in range(len(plan.sites))}
        plan.perturbed = {}
        for i, site in enumerate(plan.sites):
            by_function.setdefault((plan.path, site.function), []).append((plan, i))
    for key, entries in by_function.items():
        if key not in functions:
            continue
        rng.shuffle(entries)
        for plan, i in entries:  # the first drawn site that can be perturbed
            change = _draw_change(plan, plan.sites[i], rng)
            if change is not None:
                plan.perturbed[i] = (rng.randrange(runs), *change)
                break


def _draw_change(
    plan: FilePlan, site: Site, rng: secrets.SystemRandom
) -> tuple[tuple[int, int, int, int] | None, str] | None:
    """(span, new text) for one drawn leaf of the site's literal; (None, "") for a truth site."""
    if site.truth is not None:
        return None, ""
    starts = _offsets(plan.text)
    leaves = list(site.leaves)
    rng.shuffle(leaves)
    for leaf in leaves:
        a, b = _pos(plan.text, starts, leaf[0], leaf[1]), _pos(plan.text, starts, leaf[2], leaf[3])
        new_text = perturb_token(plan.text[a:b], rng)
        if new_text is not None:
            return leaf, new_text
    return None


def _offsets(text: str) -> list[int]:
    """Character offset of the start of each line (1-based line numbers: index 0 unused)."""
    starts = [0, 0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _pos(text: str, starts: list[int], line: int, col_bytes: int) -> int:
    """The character offset of (line, UTF-8 byte column) in ``text``."""
    begin = starts[line]
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    return begin + len(text[begin:end].encode()[:col_bytes].decode(errors="ignore"))


def render(plan: FilePlan, run: int) -> str:
    """The file as run ``run`` sees it: every site's expression witnessed, the run's perturbations in."""
    text = plan.text
    starts = _offsets(text)
    edits: list[tuple[int, int, str]] = []

    def span(s: tuple[int, int, int, int]) -> tuple[int, int]:
        return _pos(text, starts, s[0], s[1]), _pos(text, starts, s[2], s[3])

    for i, site in enumerate(plan.sites):
        run_of, leaf, new_text = plan.perturbed.get(i, (None, None, ""))
        here = run_of == run
        a, b = span(site.expr)
        witnessed = f'{WITNESS}("{plan.keys[i]}", ({text[a:b]}))'
        if site.literal is not None:
            edits.append((a, b, witnessed))
            if here and leaf is not None:
                la, lb = span(leaf)
                edits.append((la, lb, new_text))
        elif site.method is not None:
            edits.append((a, b, witnessed))
            if here:
                ma, mb = span(site.method)
                edits.append((ma, mb, _TRUTH_METHODS[text[ma:mb]]))
        else:
            assert site.negate_span is not None
            na, nb = span(site.negate_span)
            if here:  # `assert E` <-> `assert not E`: the whole operand is rewritten around the witness
                edits.append((na, nb, f"not {witnessed}" if site.truth else witnessed))
            elif site.truth:
                edits.append((na, nb, witnessed))
            else:
                edits.append((na, nb, f"not {witnessed}"))
    for a, b, new_text in sorted(edits, reverse=True):
        text = text[:a] + new_text + text[b:]
    return text
