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
the same type and shape (an int moved by a few, a character of each class in a string changed, every
element of a container or value of a dict changed), or the truth assertion is negated. Correct code
therefore *fails* exactly the perturbed assertion, in the run that holds it (also when the compared
object's equality ignores part of the value: every part changes), and its witness there equals the
true literal, which appears nowhere in that run. Code that forges its results, reads the expected value from the test's own
source or frames, or returns values that equal anything *passes* the perturbed assertion, or
witnesses the wrong value, and is zeroed as tampering (:mod:`lego.sandboxes.evidence`). About half
of the functions are perturbed in each run, so neither run is "the real one" from inside.

Host-side only (the host's Python parses the tests; nothing here runs in a sandbox).
"""

from __future__ import annotations

import ast
import io
import re
import secrets
import string
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lego import pyast

__all__ = [
    "WITNESS",
    "Definitions",
    "FilePlan",
    "Site",
    "find_sites",
    "perturb_token",
    "plan_perturbations",
    "render",
    "test_function",
]

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
_RAISING_CONTEXTS = ("raises", "warns", "Raises", "Warns", "deprecated_call", "assertLogs", "fail", "suppress")


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
    rows: tuple[tuple[Any, tuple[tuple[int, int, int, int], ...]] | None, ...] | None = None
    """For ``assert EXPR == ARG`` with ARG a parametrize argument: per row of the table, ARG's value
    and its constants (None for a row whose ARG is no literal). One row is perturbed; the instances
    are matched to rows by position (``stable_ids``: the table names its ids, so they do not change)."""
    stable_ids: bool = False
    via: str = ""
    """The name the literal is bound to (a local ``NAME = LITERAL`` or a parametrize argument), if any."""


def _expected_only(fn: ast.FunctionDef | ast.AsyncFunctionDef, found: list[Site]) -> list[Site]:
    """``found`` without the sites whose literal reaches them through a name the test also uses
    otherwise: in ``txt = 'a b'; assert slugify(txt) == txt`` the name is the input as well, so
    changing its literal changes what the code is given, and correct code may still pass."""
    loads: dict[str, int] = {}
    for stmt in fn.body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                loads[n.id] = loads.get(n.id, 0) + 1
    compared: dict[str, int] = {}
    for site in found:
        if site.via:
            compared[site.via] = compared.get(site.via, 0) + 1
    return [s for s in found if not s.via or loads.get(s.via, 0) == compared[s.via]]


@dataclass
class FilePlan:
    """A test file's text and sites, and what each run puts at them."""

    path: str
    text: str
    sites: list[Site]
    keys: dict[int, str] = field(default_factory=dict)  # site index -> witness key
    perturbed: dict[int, tuple[int, tuple[int, int, int, int] | None, str, int | None]] = field(default_factory=dict)
    """site index -> (run, the span to replace (None: negate the truth site), its new text, the table row)"""


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
        value = pyast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None, []
    leaves = _leaves(node)
    return bool(leaves), value, leaves


def _span(node: ast.AST) -> tuple[int, int, int, int]:
    return (node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]


def _raising(item: ast.withitem) -> bool:
    text = ast.dump(item.context_expr)
    return any(f"'{word}'" in text or f"attr='{word}" in text for word in _RAISING_CONTEXTS) or "raises" in text


def _returns(node: ast.AST) -> bool:
    """Whether ``node`` holds a ``return`` of the function it is in (nested functions and classes aside)."""
    if isinstance(node, ast.Return):
        return True
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
        return False
    return any(_returns(child) for child in ast.iter_child_nodes(node))


def _top_statements(body: list[ast.stmt]) -> tuple[list[ast.stmt], bool]:
    """The statements every passing run of a test function executes, in order, and whether they run to
    the end of ``body``. A compound statement that may ``return`` ends them: after ``if not ready:
    return`` a passing test need not reach the next assertion (a real suite's early return)."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.Return | ast.Raise):
            return out, False
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            name = ast.unparse(stmt.value.func)
            if name.endswith(("skip", "xfail", "fail", "importorskip")):
                return out, False
        if isinstance(stmt, ast.With | ast.AsyncWith):
            # a context that may swallow an exception ends its body early in a passing run: pytest.raises
            # and kin, and a context manager held in a variable (semver: `with expectation as expected`,
            # a table of pytest.raises(...) and does_not_raise(...))
            if any(_raising(item) or not isinstance(item.context_expr, ast.Call) for item in stmt.items):
                if _returns(stmt):
                    return out, False
                continue
            inner, complete = _top_statements(stmt.body)
            out.extend(inner)
            if not complete:
                return out, False
            continue
        if _returns(stmt):
            return out, False
        out.append(stmt)
    return out, True


Binding = dict[str, "tuple[Any, ...]"]
"""Names a test function's asserts may compare with: ``("local", literal node)`` for a top-level
``NAME = LITERAL`` before the assert, ``("table", rows, stable_ids)`` for a parametrize argument."""


def _compared(expr: ast.AST, other: ast.AST, path: str, function: str, binds: Binding) -> Site | None:
    """A site for ``expr == other`` when ``other`` is a literal, or a name bound to one."""
    ok, value, leaves = _literal(other)
    if ok and not _literal(expr)[0]:
        return Site(path, function, _span(expr), _span(other), value, tuple(map(_span, leaves)))
    if not isinstance(other, ast.Name) or other.id not in binds or _literal(expr)[0]:
        return None
    bound = binds[other.id]
    if bound[0] == "local":
        ok, value, leaves = _literal(bound[1])
        if not ok:
            return None
        return Site(path, function, _span(expr), _span(bound[1]), value, tuple(map(_span, leaves)), via=other.id)
    rows, stable = bound[1], bound[2]
    return Site(path, function, _span(expr), None, rows=rows, stable_ids=stable, via=other.id) if any(rows) else None


def _sites_in(stmt: ast.stmt, path: str, function: str, binds: Binding) -> list[Site]:
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            left, right = test.left, test.comparators[0]
            for expr, other in ((left, right), (right, left)):
                site = _compared(expr, other, path, function, binds)
                if site is not None:
                    return [site]
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
        for expr, other in ((first, second), (second, first)):
            site = _compared(expr, other, path, function, binds)
            if site is not None:
                return [site]
    if func.attr in _TRUTH_METHODS and call.args:
        end_col = func.end_col_offset or 0
        method = (func.end_lineno or func.lineno, end_col - len(func.attr), func.end_lineno or func.lineno, end_col)
        return [Site(path, function, _span(call.args[0]), None, truth=func.attr == "assertTrue", method=method)]
    return []


def _table(fn: ast.FunctionDef | ast.AsyncFunctionDef, constants: Mapping[str, ast.AST]) -> Binding:
    """The parametrize arguments of ``fn`` as table bindings, when it has exactly one parametrize
    decorator whose table is a literal list (inline, or a module constant used only there)."""
    decorators = [
        d for d in fn.decorator_list if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("parametrize")
    ]
    if len(decorators) != 1 or len(decorators[0].args) < 2:
        return {}
    call = decorators[0]
    if any(k.arg == "indirect" for k in call.keywords):
        return {}
    try:
        names = pyast.literal_eval(call.args[0])
    except (ValueError, SyntaxError):
        return {}
    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    table = call.args[1]
    if isinstance(table, ast.Name):
        table = constants.get(table.id)  # type: ignore[assignment]
    if not isinstance(table, ast.List | ast.Tuple):
        return {}
    # ids a table names stay when a value changes; ids a function makes from the values (ids=str,
    # humanize) change with them, like the ids pytest makes, and the renamed row is matched by position
    named = [k.value for k in call.keywords if k.arg == "ids"]
    stable = bool(named) and isinstance(named[0], ast.List | ast.Tuple)
    rows_named = bool(table.elts)
    columns: list[list[tuple[Any, tuple[tuple[int, int, int, int], ...]] | None]] = [[] for _ in names]
    for row in table.elts:
        values: list[ast.AST] = [row]
        param = row if isinstance(row, ast.Call) and ast.unparse(row.func).endswith("param") else None
        rows_named = rows_named and param is not None and any(k.arg == "id" for k in param.keywords)
        if param is not None:
            values = list(param.args)
        elif len(names) > 1:
            values = list(row.elts) if isinstance(row, ast.Tuple | ast.List) else []
        if len(values) != len(names):
            return {}
        for j, node in enumerate(values):
            ok, value, leaves = _literal(node)
            columns[j].append((value, tuple(map(_span, leaves))) if ok else None)
    stable = stable or rows_named
    return {name: ("table", tuple(col), stable) for name, col in zip(names, columns, strict=True)}


def _bindings(stmt: ast.stmt, binds: Binding) -> None:
    """Track top-level ``NAME = LITERAL`` (and forget a name assigned anything else)."""
    if isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                binds.pop(name, None)
        if len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) and _literal(stmt.value)[0]:
            binds[stmt.targets[0].id] = ("local", stmt.value)
    elif isinstance(stmt, ast.AugAssign | ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        binds.pop(stmt.target.id, None)


def find_sites(text: str, path: str) -> list[Site]:
    """Every site of the test functions in ``text`` (module-level ``test*`` functions and methods of
    ``Test*`` / ``*Test`` classes, nested classes included); [] when the file does not parse."""
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        return []
    sites: list[Site] = []
    uses: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            uses[node.id] = uses.get(node.id, 0) + 1
    constants = {  # module-level literal tables that only one parametrize decorator uses
        stmt.targets[0].id: stmt.value
        for stmt in tree.body
        if isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and uses.get(stmt.targets[0].id) == 2
    }

    def marked(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, *names: str) -> bool:
        return any(ast.unparse(d).split("(", 1)[0].endswith(names) for d in node.decorator_list)

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and node.name.startswith("test")
                and not marked(node, "fixture", "xfail")  # an xfail's failure is reported skipped
            ):
                binds = _table(node, constants)
                found: list[Site] = []
                for stmt in _top_statements(node.body)[0]:
                    found.extend(_sites_in(stmt, path, prefix + node.name, binds))
                    _bindings(stmt, binds)
                sites.extend(_expected_only(node, found))
            elif isinstance(node, ast.ClassDef) and not marked(node, "xfail"):
                visit(node.body, f"{prefix}{node.name}.")

    module_marks = [s for s in tree.body if isinstance(s, ast.Assign) and "pytestmark" in map(ast.unparse, s.targets)]
    if not any("xfail" in ast.unparse(s.value) for s in module_marks):
        visit(tree.body, "")
    return sites


def test_function(test_id: str) -> tuple[str, str]:
    """``(file, qualified function)`` as a pytest node id spells it: ``a/t.py::C::test_x[p 1]`` ->
    ``(a/t.py, C.test_x)``. The id's class may inherit the function: :class:`Definitions` finds it."""
    path, _, rest = test_id.split("[", 1)[0].partition("::")  # parameters may hold "::" ("[https://[::1]]")
    return path, ".".join(rest.split("::"))


class Definitions:
    """Which function of the hidden test files a node id runs.

    ``a/t.py::TestCustom::test_x`` runs ``TestDict.test_x`` when ``TestCustom(TestDict)`` inherits it,
    and a suite's mixin may live in another file (``tests/test_lru.py::LRUCacheTest::test_copy`` runs
    ``CacheTestMixin.test_copy`` of ``tests/__init__.py``). A perturbed function changes every test
    that runs it, so the grader perturbs and judges by definition. Resolved statically from the
    pristine files (the test process's own word on it would be a claim): base classes named in the
    file, imported from another of the files (``from . import M``, ``from pkg.mod import M``,
    ``import pkg.mod as m``) or nested, in C3 order; a base found nowhere among them (``TestCase``)
    contributes nothing, and an id whose class is not found keeps its own spelling. The id's own class
    may be imported too: ``from test_serializer import TestSerializer`` in test_timed.py collects
    ``test_timed.py::TestSerializer::test_x``, which runs test_serializer.py's function."""

    def __init__(self, plans: list[FilePlan]) -> None:
        self._paths = {plan.path for plan in plans}
        self._classes: dict[tuple[str, str], tuple[list[ast.expr], set[str]]] = {}
        self._imports: dict[str, dict[str, tuple[str | None, str]]] = {}  # local name -> (module file, attr)
        self._cache: dict[str, tuple[str, str]] = {}
        self._referenced: set[str] = set()
        for plan in plans:
            try:
                tree = pyast.parse(plan.text)
            except (SyntaxError, ValueError):
                continue
            self._index(plan.path, tree.body, "")
            for node in ast.walk(tree):
                if isinstance(node, ast.Name):
                    self._referenced.add(node.id)
                elif isinstance(node, ast.Attribute):
                    self._referenced.add(node.attr)
            imports = self._imports.setdefault(plan.path, {})
            for node in tree.body:
                if isinstance(node, ast.ImportFrom):
                    module = self._module(plan.path, node.module or "", node.level)
                    for alias in node.names:
                        imports[alias.asname or alias.name] = (module, alias.name)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            imports[alias.asname] = (self._module(plan.path, alias.name, 0), "")

    def _index(self, path: str, body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                names = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)} | {
                    t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
                }
                self._classes[(path, prefix + node.name)] = (node.bases, names)
                self._index(path, node.body, f"{prefix}{node.name}.")

    def _module(self, path: str, dotted: str, level: int) -> str | None:
        """The hidden test file a module name means, seen from ``path`` (None: none of them)."""
        if level:
            base = path.rsplit("/", 1)[0] if "/" in path else ""
            for _ in range(level - 1):
                base = base.rsplit("/", 1)[0] if "/" in base else ""
            rel = "/".join(p for p in (base, dotted.replace(".", "/")) if p)
            for candidate in (f"{rel}.py" if dotted else None, f"{rel}/__init__.py" if rel else "__init__.py"):
                if candidate in self._paths:
                    return candidate
            return None
        rel = dotted.replace(".", "/")
        found = [
            p
            for p in self._paths
            for tail in (f"{rel}.py", f"{rel}/__init__.py")
            if p == tail or p.endswith("/" + tail)
        ]
        return found[0] if len(found) == 1 else None

    def _base(self, path: str, expr: ast.expr, depth: int = 0) -> tuple[str, str] | None:
        if depth > 8:
            return None
        dotted = ast.unparse(expr)
        if (path, dotted) in self._classes:
            return path, dotted
        head, _, rest = dotted.partition(".")
        module, attr = self._imports.get(path, {}).get(head, (None, ""))
        if module is None:
            return None
        name = ".".join(p for p in (attr, rest) if p)
        if (module, name) in self._classes:
            return module, name
        if attr and not rest:  # re-exported by the module it came from
            return self._base(module, ast.Name(id=attr), depth + 1)
        return None

    def _mro(self, cls: tuple[str, str], seen: frozenset[tuple[str, str]] = frozenset()) -> list[tuple[str, str]]:
        if cls in seen:
            return [cls]
        bases = [b for b in (self._base(cls[0], e) for e in self._classes[cls][0]) if b is not None]
        seqs = [self._mro(b, seen | {cls}) for b in bases] + [list(bases)]
        out = [cls]
        while any(seqs):
            for seq in (s for s in seqs if s):
                head = seq[0]
                if not any(head in s[1:] for s in seqs):
                    break
            else:  # no C3 order: the bases depth first, each once
                return out + [c for s in seqs for c in s if c not in out]
            out.append(head)
            seqs = [s[1:] if s and s[0] == head else s for s in seqs]
        return out

    def shared(self, function: tuple[str, str]) -> bool:
        """Whether code of the files names the test function (``test_partial`` calling
        ``test_valid(check=...)``, ``self.test_x()``, an alias): then other tests run it too, and a
        change to it would fail them in a run that does not perturb them, so it is not perturbed."""
        return function[1].rsplit(".", 1)[-1] in self._referenced

    def __call__(self, test_id: str) -> tuple[str, str]:
        base = test_id.split(" ", 1)[0]
        if base not in self._cache:
            path, qualified = test_function(base)
            owner, _, name = qualified.rpartition(".")
            found = (path, qualified)
            # the class as the file names it: its own, or one it imports (a test class imported into
            # another test module is collected there too, and runs its own file's definitions)
            start = self._base(path, _dotted(owner)) if owner else None
            if start is not None:
                for cls in self._mro(start):
                    if name in self._classes[cls][1]:
                        found = (cls[0], f"{cls[1]}.{name}")
                        break
            self._cache[base] = found
        return self._cache[base]


def _dotted(name: str) -> ast.expr:
    """``A.B`` as the expression that names it (a class path of a node id)."""
    head, *rest = name.split(".")
    expr: ast.expr = ast.Name(id=head)
    for attr in rest:
        expr = ast.Attribute(value=expr, attr=attr)
    return expr


_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|[0-7]{1,3}|.)", re.S)
_STRING_TOKEN = re.compile(r"^([rRbBuU]{0,2})('''|\"\"\"|'|\")(.*)\2$", re.S)


_CLASSES = (string.ascii_letters, string.digits, " ", "-_.,:;/+*=!?#@&|~^%()[]{}<>")


def _char_class(ch: str) -> int | None:
    for k, members in enumerate(_CLASSES):
        if ch in members:
            return k
    return None


def _new_char(ch: str, k: int, quote: str, rng: secrets.SystemRandom) -> str:
    """Another character of ``ch``'s class (a letter keeps its case), never the string's quote."""
    if k == 0:
        pool = string.ascii_uppercase if ch.isupper() else string.ascii_lowercase
    else:
        pool = _CLASSES[k] if len(_CLASSES[k]) > 1 else _CLASSES[3]
    return rng.choice([c for c in pool if c != ch and c not in quote and c.lower() != ch.lower()])


def _perturb_body(body: str, quote: str, rng: secrets.SystemRandom) -> str | None:
    """One character changed in *each* class of character the string holds (letters, digits, spaces,
    punctuation), outside escape sequences: code whose output is wrong in one class only (its
    separators, say) cannot repair a changed literal by taking that class from it and the rest from its
    own output, since every class carries a change."""
    if not body:
        return rng.choice(string.ascii_lowercase)
    escaped = {i for e in _ESCAPE.finditer(body) for i in range(e.start(), e.end())}
    by_class: dict[int, list[int]] = {}
    for i, ch in enumerate(body):
        k = _char_class(ch)
        if i not in escaped and k is not None:
            by_class.setdefault(k, []).append(i)
    if not by_class:
        return None
    chars = list(body)
    for k, spots in by_class.items():
        i = rng.choice(spots)
        chars[i] = _new_char(body[i], k, quote, rng)
    return "".join(chars)


def perturb_token(token: str, rng: secrets.SystemRandom) -> str | None:
    """``token`` (the source text of one constant) changed to a different value of the same type,
    written in the same style (quotes, prefix, base), so nothing about its look marks it; None when
    it cannot be changed that way."""
    try:
        old = pyast.literal_eval(token)
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
        m = _STRING_TOKEN.match(token) if _one_string_token(token) else None
        if m is None:
            return None  # implicit concatenation of several strings: left alone
        prefix, quote, body = m.groups()
        body = _perturb_body(body, quote, rng)
        if body is None:
            return None
        new_text = f"{prefix}{quote}{body}{quote}"
    else:
        return None
    if isinstance(old, str | bytes) and not _one_string_token(new_text):
        return None
    try:
        new = pyast.literal_eval(new_text)
    except (ValueError, SyntaxError):
        return None
    return new_text if type(new) is type(old) and new != old else None


def _one_string_token(text: str) -> bool:
    """Whether ``text`` is exactly one string token: ``"A" "B"`` (implicit concatenation) matches
    :data:`_STRING_TOKEN` as one string whose body is ``A" "B``, and a change between its tokens (a
    ``#``) could turn the rest of the assert's line into a comment."""
    try:
        kinds = [t.type for t in tokenize.generate_tokens(io.StringIO(text).readline)]
    except (tokenize.TokenError, SyntaxError):
        return False
    ends = (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER)
    return bool(kinds) and kinds[0] == tokenize.STRING and all(k in ends for k in kinds[1:])


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
                # Several asserts may compare with one binding: the first of them meets the change first.
                first = min(
                    (
                        j
                        for p2, j in by_function[key]
                        if p2 is plan and (j == i or _same_value(plan.sites[j], plan.sites[i]))
                    )
                )
                plan.perturbed[first] = (rng.randrange(runs), *change)
                break


def _same_value(a: Site, b: Site) -> bool:
    """Whether two sites compare with the same literal (one local binding, or one table column)."""
    if a.rows is not None or b.rows is not None:
        return a.rows is b.rows
    return a.literal is not None and a.literal == b.literal


def _draw_change(
    plan: FilePlan, site: Site, rng: secrets.SystemRandom
) -> tuple[tuple[int, int, int, int] | None, str, int | None] | None:
    """(span, new text, table row) for the site's literal (or one drawn row of its table) with *every*
    constant changed (:func:`_change_leaves`); (None, "", None) for a truth site; None when nothing
    can be changed."""
    if site.truth is not None:
        return None, "", None
    starts = _offsets(plan.text)
    groups: list[tuple[tuple[tuple[int, int, int, int], ...], Any, int | None]] = [(site.leaves, site.value, None)]
    if site.rows is not None:
        groups = [(row[1], row[0], r) for r, row in enumerate(site.rows) if row is not None]
    rng.shuffle(groups)
    for leaves, value, row in groups:
        change = _change_leaves(plan.text, starts, leaves, value, rng)
        if change is not None:
            return (*change, row)
    return None


def _has_set(value: Any) -> bool:
    if isinstance(value, set | frozenset):
        return True
    if isinstance(value, dict):
        return any(_has_set(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_set(v) for v in value)
    return False


def _change_leaves(
    text: str,
    starts: list[int],
    leaves: tuple[tuple[int, int, int, int], ...],
    value: Any,
    rng: secrets.SystemRandom,
) -> tuple[tuple[int, int, int, int], str] | None:
    """The span from a literal's first constant to its last, and its text with every constant changed
    (:func:`perturb_token`; one that cannot change is kept). As :func:`_perturb_body` changes every
    class of character of a string: a compared object whose equality ignores part of the value is
    correct code, not a cheat (semver's ``Version == {"major": 1, ..., "build": "b1"}`` ignores the
    build, as the SemVer spec says), and it still fails the perturbed assertion; code that copies the
    fields it gets wrong from the test's literal witnesses a wrong value in every one of them. A
    literal holding a set changes one constant only: changing every element may permute the set."""
    order = list(range(len(leaves)))
    rng.shuffle(order)
    if _has_set(value):
        order = order[:1]
    chosen: dict[int, str] = {}
    for k in order:
        leaf = leaves[k]
        a, b = _pos(text, starts, leaf[0], leaf[1]), _pos(text, starts, leaf[2], leaf[3])
        new_text = perturb_token(text[a:b], rng)
        if new_text is not None:
            chosen[k] = new_text
            if _has_set(value):
                break
    if not chosen:
        return None
    first, last = leaves[0], leaves[-1]
    begin, end = _pos(text, starts, first[0], first[1]), _pos(text, starts, last[2], last[3])
    out, at = [], begin
    for k, leaf in enumerate(leaves):
        a, b = _pos(text, starts, leaf[0], leaf[1]), _pos(text, starts, leaf[2], leaf[3])
        out += [text[at:a], chosen.get(k, text[a:b])]
        at = b
    out.append(text[at:end])
    return (first[0], first[1], last[2], last[3]), "".join(out)


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
        run_of, leaf, new_text, _row = plan.perturbed.get(i, (None, None, "", None))
        here = run_of == run
        a, b = span(site.expr)
        witnessed = f'{WITNESS}("{plan.keys[i]}", ({text[a:b]}))'
        if site.literal is not None or site.rows is not None:
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
