"""The blind copy of the hidden tests: what the code under test runs against, holding no expected outcome.

The grader (:mod:`lego.sandboxes.grading`) runs the hidden tests twice per grade: once **as written**
(they must pass, as in any CI), and once as the **blind copy** this module writes, in a fresh sandbox
of its own. The blind copy runs the same test code on the same inputs, but every assertion is
replaced by a *witness* of what it looks at, and everything that says what the outcome should be is
gone from the process:

* ``assert A == B`` (any comparison chain, ``and``, ``not``, a truth value) becomes one
  ``__lego_w__(key, lambda: A)`` per operand that is not an expected value; literals, names bound
  only to expected literals (a local, a module constant, a ``parametrize`` column used nowhere but in
  assertions) and ``pytest.approx(literal)`` stay on the host. Such names are bound to ``None`` in
  the copy, and a table's rows lose their values in that column.
* ``self.assertEqual(A, B)`` and kin, ``assert_*(...)`` helpers of imported modules: the same, per
  positional argument.
* ``with pytest.raises(E, match=M): BODY`` (``warns``, ``assertRaises``...) and the call forms
  become ``__lego_w__(key, thunk, mode)``: the body runs in a nested function whose exception (or
  return) is witnessed; ``E`` and ``M`` stay on the host. Where the body cannot move into a function
  (it returns, or binds names used after the block), ``with __lego_x__(key):`` records the same.
* ``parametrize`` ids become ``p<decorator>r<row>``, ``pytest.param(id=...)`` is dropped, test
  functions and ``Test*`` classes get opaque names (``test_l3``), docstrings go: no node id, name or
  parameter of the graded process carries a value.

Each witness records the value's **structural** form (type, fields, items, recursively; see the
bootstrap) without calling the value's own ``__eq__``/``__repr__``/``__bool__``. The host then
judges each assertion (:mod:`lego.sandboxes.evidence`): on plain builtin values it evaluates the
assertion itself with the expected side it kept; on anything else it compares the witness with the
**reference**, the gold patch's witnesses on the same copy. Host-side only: nothing here runs in a
sandbox.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lego import pyast

__all__ = ["CAPTURE", "WITNESS", "BlindPlan", "Operand", "Site", "blind_copy", "test_function"]

WITNESS = "__lego_w__"
"""The builtin the grading bootstrap installs: ``__lego_w__(key, thunk, mode=0)`` records ``thunk()``'s
value, or the exception it raised (mode 1: ``raises``; 2: ``warns``, the warnings it issued too)."""
CAPTURE = "__lego_x__"
"""The bootstrap's context manager for a ``raises`` body that cannot move into a function."""

_RAISES = {"raises": 1, "assertRaises": 1, "assertRaisesRegex": 1, "assertRaisesRegexp": 1}
_WARNS = {"warns": 2, "assertWarns": 2, "assertWarnsRegex": 2, "deprecated_call": 2}
_BINARY = {
    "assertEqual": "==", "assertEquals": "==", "failUnlessEqual": "==", "assertListEqual": "==",
    "assertTupleEqual": "==", "assertDictEqual": "==", "assertSetEqual": "==", "assertSequenceEqual": "==",
    "assertMultiLineEqual": "==", "assert_equal": "==", "assert_array_equal": "==",
    "assertNotEqual": "!=", "assertNotEquals": "!=", "failIfEqual": "!=", "assert_not_equal": "!=",
    "assertIs": "is", "assertIsNot": "is not", "assertIn": "in", "assertNotIn": "not in",
    "assertGreater": ">", "assertGreaterEqual": ">=", "assertLess": "<", "assertLessEqual": "<=",
    "assertAlmostEqual": "~=", "assertAlmostEquals": "~=", "assert_almost_equal": "~=", "assert_allclose": "~=",
    "assertCountEqual": "count", "assertItemsEqual": "count", "assertRegex": "regex", "assertRegexpMatches": "regex",
    "assertNotRegex": "not regex", "assertDictContainsSubset": "subset",
}  # fmt: skip
_UNARY = {
    "assertTrue": "true", "assert_": "true", "failUnless": "true", "assertFalse": "false", "failIf": "false",
    "assertIsNone": "none", "assertIsNotNone": "not none",
}  # fmt: skip
_OPS = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
}  # fmt: skip


@dataclass(frozen=True)
class Operand:
    """One operand of a judged assertion: witnessed in the copy (``key``), or an expected value the
    host kept (``value``; ``approx``: pytest.approx's tolerance applies), or a stripped table column
    (``column``: the decorator's index and, per row, the value (``Unknown`` where not a literal))."""

    key: str = ""
    value: Any = None
    approx: bool = False
    column: tuple[int, tuple[Any, ...]] | None = None

    @property
    def witnessed(self) -> bool:
        return bool(self.key)


class Unknown:
    """A kept value the host cannot know (a table row that is no literal)."""


@dataclass(frozen=True)
class Site:
    """One judged assertion of the hidden tests.

    ``kind``: ``compare`` (``ops`` between ``operands``), ``truth`` (one operand), ``raises`` /
    ``warns`` (the witness of a thunk; ``expect``: the expected classes' names, ``match``: the
    pattern), or ``gold`` (only the reference can say: an assertion method the host does not know)."""

    key: str
    path: str
    line: int
    kind: str
    ops: tuple[str, ...] = ()
    operands: tuple[Operand, ...] = ()
    negated: bool = False
    expect: tuple[str, ...] = ()
    match: str | None = None


@dataclass
class BlindPlan:
    """The blind copies of the hidden test files, the sites they witness and the names they renamed."""

    texts: dict[str, str] = field(default_factory=dict)
    sites: dict[str, Site] = field(default_factory=dict)
    renames: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # files that do not parse here: copied as written

    def blind_node(self, test_id: str) -> str:
        """A node id's function as the blind copy names it (parameters dropped)."""
        base = test_id.split(" ", 1)[0].split("[", 1)[0]
        path, *parts = base.split("::")
        return "::".join([path, *(self.renames.get(p, p) for p in parts)])


def test_function(test_id: str) -> tuple[str, str]:
    """``(file, qualified function)`` as a pytest node id spells it: ``a/t.py::C::test_x[p 1]`` ->
    ``(a/t.py, C.test_x)``."""
    path, _, rest = test_id.split("[", 1)[0].partition("::")  # parameters may hold "::" ("[https://[::1]]")
    return path, ".".join(rest.split("::"))


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, pyast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _name(node: ast.AST) -> str:
    """The last name of a callee: ``pytest.raises`` -> ``raises``, ``self.assertEqual`` -> ``assertEqual``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _root(node: ast.AST) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _exc_names(node: ast.AST | None) -> tuple[str, ...]:
    """The expected exception classes' names (``(A, mod.B)`` -> ``("A", "B")``); () when not static."""
    if node is None:
        return ()
    if isinstance(node, ast.Tuple):
        names = [_name(e) for e in node.elts]
        return tuple(names) if all(names) else ()
    found = _name(node)
    return (found,) if found else ()


def _split(test: ast.expr, negated: bool = False) -> list[tuple[ast.expr, bool]]:
    """``a and not b`` -> [(a, False), (b, True)]: the conjuncts an assert checks, with their sense."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not negated:
        return [part for value in test.values for part in _split(value)]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _split(test.operand, not negated)
    return [(test, negated)]


def _compared_positions(tree: ast.AST, imported: set[str]) -> set[int]:
    """ids of the Name nodes that are a whole operand of an assertion (those a copy can drop)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        operands: list[ast.expr] = []
        if isinstance(node, ast.Assert):
            for part, _ in _split(node.test):
                operands += [part.left, *part.comparators] if isinstance(part, ast.Compare) else []
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            if _assertion_call(node.value, imported) in _BINARY:
                operands = list(node.value.args[:2])
        out.update(id(o) for o in operands if isinstance(o, ast.Name))
    return out


def _assertion_call(call: ast.Call, imported: set[str]) -> str:
    """The assertion method's name when ``call`` is one the copy judges (``self.assertX``, ``assert_x``
    of the file's imports, ``mod.assert_x``), else ""."""
    name = _name(call.func)
    if not (name in _BINARY or name in _UNARY):
        return ""
    if isinstance(call.func, ast.Name):
        return name if name in imported else ""
    root = _root(call.func)
    return name if root == "self" or root in imported else ""


def _loads(nodes: Iterable[ast.AST]) -> dict[str, list[ast.Name]]:
    out: dict[str, list[ast.Name]] = {}
    for stmt in nodes:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                out.setdefault(n.id, []).append(n)
    return out


def _stores(nodes: Iterable[ast.AST]) -> dict[str, int]:
    out: dict[str, int] = {}
    for stmt in nodes:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
                out[n.id] = out.get(n.id, 0) + 1
            elif isinstance(n, ast.arg):
                out[n.arg] = out.get(n.arg, 0) + 1
    return out


def _parametrize(dec: ast.expr) -> ast.Call | None:
    if isinstance(dec, ast.Call) and _name(dec.func) == "parametrize" and len(dec.args) >= 2:
        return dec
    return None


def _argnames(call: ast.Call) -> list[str]:
    ok, names = _literal(call.args[0])
    if not ok:
        return []
    if isinstance(names, str):
        return [n.strip() for n in names.split(",") if n.strip()]
    return [str(n) for n in names] if isinstance(names, list | tuple) else []


def _rows(table: ast.expr, width: int) -> list[tuple[list[ast.expr], ast.Call | None]] | None:
    """The table's rows as (values, the pytest.param call or None); None when not an inline table."""
    if not isinstance(table, ast.List | ast.Tuple):
        return None
    rows: list[tuple[list[ast.expr], ast.Call | None]] = []
    for row in table.elts:
        param = row if isinstance(row, ast.Call) and _name(row.func) == "param" else None
        if param is not None:
            values = list(param.args)
        elif width == 1:
            values = [row]
        elif isinstance(row, ast.Tuple | ast.List):
            values = list(row.elts)
        else:
            return None
        if len(values) != width or any(isinstance(v, ast.Starred) for v in values):
            return None
        rows.append((values, param))
    return rows


class _Blinder(ast.NodeTransformer):
    def __init__(self, plan: BlindPlan, path: str, prefix: str, imported: set[str], module_hidden: dict[str, Operand]):
        self.plan, self.path, self.prefix, self.imported = plan, path, prefix, imported
        self.scopes = [module_hidden]
        self.count = 0
        self.thunks = 0
        self.tables: dict[str, ast.Assign] = {}
        self.positions: set[int] = set()
        self.function_body: list[ast.stmt] = []

    # -- sites ---------------------------------------------------------------------------------
    def _key(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"

    def _hidden(self, node: ast.expr) -> Operand | None:
        """The host's operand for an expected value, or None when the copy must witness it."""
        ok, value = _literal(node)
        if ok:
            return Operand(value=value)
        if isinstance(node, ast.Call) and _name(node.func) == "approx" and len(node.args) == 1 and not node.keywords:
            ok, value = _literal(node.args[0])
            if ok:
                return Operand(value=value, approx=True)
        if isinstance(node, ast.Name) and id(node) in self.positions:
            for scope in reversed(self.scopes):
                if node.id in scope:
                    return scope[node.id]
        return None

    def _witness(self, key: str, expr: ast.expr, mode: int = 0) -> ast.expr:
        """``__lego_w__(key, lambda: EXPR, mode)``; an EXPR that cannot move into a lambda (await,
        yield, :=) is passed as a value: ``__lego_w__(key, None, mode, EXPR)``, its exception not caught."""
        head: list[ast.expr] = [ast.Constant(key)]
        if any(isinstance(n, ast.Await | ast.Yield | ast.YieldFrom | ast.NamedExpr) for n in ast.walk(expr)):
            return ast.Call(
                ast.Name(id=WITNESS, ctx=ast.Load()), [*head, ast.Constant(None), ast.Constant(mode), expr], []
            )
        thunk = ast.Lambda(args=_no_args(), body=expr)
        return ast.Call(ast.Name(id=WITNESS, ctx=ast.Load()), [*head, thunk, ast.Constant(mode)], [])

    def _judged(self, node: ast.stmt, kind: str, exprs: list[ast.expr], **site: Any) -> list[ast.stmt]:
        key = self._key()
        operands: list[Operand] = []
        out: list[ast.stmt] = []
        for j, expr in enumerate(exprs):
            hidden = self._hidden(expr)
            if hidden is not None:
                operands.append(hidden)
                continue
            operands.append(Operand(key=f"{key}.{j}"))
            out.append(ast.Expr(self._witness(f"{key}.{j}", self.visit(expr))))
        self.plan.sites[key] = Site(key, self.path, getattr(node, "lineno", 0), kind, operands=tuple(operands), **site)
        return out

    def visit_Assert(self, node: ast.Assert) -> Any:
        out: list[ast.stmt] = []
        for part, negated in _split(node.test):
            if isinstance(part, ast.Compare):
                ops = tuple(_OPS[type(op)] for op in part.ops)
                out += self._judged(node, "compare", [part.left, *part.comparators], ops=ops, negated=negated)
            elif not _literal(part)[0]:
                out += self._judged(node, "truth", [part], negated=negated)
        return _located(out or [ast.Pass()], node)

    def visit_Expr(self, node: ast.Expr) -> Any:
        call = node.value
        if not isinstance(call, ast.Call):
            return self.generic_visit(node)
        name = _assertion_call(call, self.imported)
        if name in _BINARY and len(call.args) >= 2:
            return _located(self._judged(node, "compare", list(call.args[:2]), ops=(_BINARY[name],)), node)
        if name in _UNARY and call.args:
            return _located(self._judged(node, "truth", list(call.args[:1]), ops=(_UNARY[name],)), node)
        converted = self._raising_call(call)
        if converted is not None:
            return _located([ast.Expr(converted)], node)
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> Any:
        if isinstance(node.value, ast.Call):
            converted = self._raising_call(node.value)
            if converted is not None:
                node.value = converted
                return node
        return self.generic_visit(node)

    def _raising_call(self, call: ast.Call) -> ast.expr | None:
        """``pytest.raises(E, f, *a)`` / ``self.assertRaises(E, f, *a)``: the call of ``f`` witnessed."""
        name = _name(call.func)
        mode = _RAISES.get(name) or _WARNS.get(name)
        if not mode or name == "deprecated_call":
            return None
        regex = name.endswith(("Regex", "Regexp"))
        first = 2 if regex else 1
        if len(call.args) <= first or any(isinstance(a, ast.Starred) for a in call.args[:first]):
            return None
        pattern = _literal(call.args[1])[1] if regex else None
        key = self._key()
        target = ast.Call(self.visit(call.args[first]), [self.visit(a) for a in call.args[first + 1 :]], call.keywords)
        self.plan.sites[key] = Site(
            key, self.path, call.lineno, "raises" if mode == 1 else "warns", expect=_exc_names(call.args[0]),
            match=pattern if isinstance(pattern, str) else None,
        )  # fmt: skip
        return self._witness(key, target, mode)

    def visit_With(self, node: ast.With) -> Any:
        if len(node.items) != 1 or not isinstance(node.items[0].context_expr, ast.Call):
            return self.generic_visit(node)
        item = node.items[0]
        call = item.context_expr
        assert isinstance(call, ast.Call)
        name = _name(call.func)
        mode = _RAISES.get(name) or _WARNS.get(name)
        if not mode or (name != "deprecated_call" and not call.args):
            return self.generic_visit(node)
        regex = name.endswith(("Regex", "Regexp"))
        match = next((k.value for k in call.keywords if k.arg in ("match", "expected_regex")), None)
        if regex and len(call.args) > 1:
            match = call.args[1]
        pattern = _literal(match)[1] if match is not None else None
        expect = (
            ("DeprecationWarning", "PendingDeprecationWarning")
            if name == "deprecated_call"
            else _exc_names(call.args[0])
        )
        key = self._key()
        kind = "raises" if mode == 1 else "warns"
        self.plan.sites[key] = Site(
            key, self.path, node.lineno, kind, expect=expect, match=pattern if isinstance(pattern, str) else None
        )
        body = [self.visit(s) for s in node.body]
        body = [s for b in body for s in (b if isinstance(b, list) else [b])]
        if self._movable(node):
            self.thunks += 1
            fn = f"__lego_b{self.prefix}{self.thunks}"
            define = ast.FunctionDef(
                name=fn, args=_no_args(), body=body or [ast.Pass()], decorator_list=[], returns=None, type_comment=None
            )
            if hasattr(ast.FunctionDef, "type_params"):
                define.type_params = []  # type: ignore[attr-defined]
            call_thunk = ast.Call(
                ast.Name(id=WITNESS, ctx=ast.Load()), [ast.Constant(key), ast.Name(id=fn, ctx=ast.Load()), ast.Constant(mode)], []
            )  # fmt: skip
            last: ast.stmt = ast.Expr(call_thunk)
            if item.optional_vars is not None:
                last = ast.Assign(targets=[item.optional_vars], value=call_thunk)
            return _located([define, last], node)
        item.context_expr = ast.Call(ast.Name(id=CAPTURE, ctx=ast.Load()), [ast.Constant(key), ast.Constant(mode)], [])
        node.body = body
        return node

    def _movable(self, node: ast.With) -> bool:
        """Whether a with-body can run as a nested function: no return/yield/await/break/continue/
        global/nonlocal of its own, and no name it binds is read outside it."""
        for n in ast.walk(ast.Module(body=node.body, type_ignores=[])):
            if isinstance(n, ast.Return | ast.Yield | ast.YieldFrom | ast.Await | ast.Global | ast.Nonlocal):
                return False
            if isinstance(n, ast.Break | ast.Continue):
                return False
        bound = set(_stores(node.body))
        if not bound:
            return True
        inside = {id(n) for s in node.body for n in ast.walk(s)}
        outside = [n for name, ns in _loads(self.function_body).items() if name in bound for n in ns]
        return all(id(n) in inside for n in outside)

    # -- scopes --------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Any:
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            if isinstance(node.body[0].value.value, str):  # a docstring may say what the outcome is
                node.body = node.body[1:] or [ast.Pass()]
        hidden: dict[str, Operand] = {}
        loads = _loads(node.body)
        stores = _stores([*node.body])
        for d, dec in enumerate(node.decorator_list):
            call = _parametrize(dec)
            if call is not None:
                hidden.update(self._table(call, d, node.name, loads))
        for stmt in node.body:  # NAME = LITERAL, read only as an assertion's operand
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                ok, value = _literal(stmt.value)
                uses = loads.get(name, [])
                if ok and stores.get(name) == 1 and uses and all(id(u) in self.positions for u in uses):
                    hidden[name] = Operand(value=value)
                    stmt.value = ast.Constant(None)
        saved = self.function_body
        self.function_body = node.body
        self.scopes.append(hidden)
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        body = [self.visit(s) for s in node.body]
        node.body = [s for b in body for s in (b if isinstance(b, list) else [b])] or [ast.Pass()]
        self.scopes.pop()
        self.function_body = saved
        if node.name in self.plan.renames:
            node.name = self.plan.renames[node.name]
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            node.body = node.body[1:] or [ast.Pass()]
        self.generic_visit(node)
        node.name = self.plan.renames.get(node.name, node.name)
        return node

    def _table(self, call: ast.Call, d: int, function: str, loads: dict[str, list[ast.Name]]) -> dict[str, Operand]:
        """A parametrize table's columns read only as assertion operands, stripped (their values
        become None in the copy, kept on the host); its ids become ``p<d>r<row>``. A module constant
        that serves only as parametrize tables is copied into each decorator (one table may be two
        tests' answers: inflection's singular/plural pairs) and bound to None."""
        if isinstance(call.args[1], ast.Name) and call.args[1].id in self.tables:
            call.args[1] = copy.deepcopy(self.tables[call.args[1].id].value)
        names = _argnames(call)
        indirect = any(k.arg == "indirect" for k in call.keywords)
        rows = _rows(call.args[1], len(names)) if names else None
        if rows is None:
            return {}
        call.keywords = [k for k in call.keywords if k.arg != "ids"]
        call.keywords.append(
            ast.keyword(arg="ids", value=ast.List([ast.Constant(f"p{d}r{r}") for r in range(len(rows))], ast.Load()))
        )
        for _, param in rows:
            if param is not None:
                param.keywords = [k for k in param.keywords if k.arg != "id"]
        out: dict[str, Operand] = {}
        for j, name in enumerate(names):
            uses = loads.get(name, [])
            if indirect or not uses or not all(id(u) in self.positions for u in uses):
                continue
            values = []
            for row, _ in rows:
                ok, value = _literal(row[j])
                values.append(value if ok else Unknown())
                row[j] = ast.Constant(None)
            out[name] = Operand(column=(d, tuple(values)))
        self._rewrite_rows(call, rows, len(names))
        return out

    @staticmethod
    def _rewrite_rows(call: ast.Call, rows: list[tuple[list[ast.expr], ast.Call | None]], width: int) -> None:
        table = call.args[1]
        assert isinstance(table, ast.List | ast.Tuple)
        elts: list[ast.expr] = []
        for values, param in rows:
            if param is not None:
                param.args = values
                elts.append(param)
            elif width == 1:
                elts.append(values[0])
            else:
                elts.append(ast.Tuple(values, ast.Load()))
        table.elts = elts


def _no_args() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def _located(stmts: list[ast.stmt], node: ast.AST) -> list[ast.stmt]:
    for s in stmts:
        ast.copy_location(s, node)
        ast.fix_missing_locations(s)
    return stmts


def _imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _module_hidden(tree: ast.Module, positions: set[int], imported_elsewhere: set[str]) -> dict[str, Operand]:
    """Module constants bound to a literal and read only as assertion operands: stripped to None."""
    loads = _loads(tree.body)
    stores = _stores(tree.body)
    hidden: dict[str, Operand] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            ok, value = _literal(stmt.value)
            uses = loads.get(name, [])
            if ok and stores.get(name) == 1 and uses and name not in imported_elsewhere:
                if all(id(u) in positions for u in uses):
                    hidden[name] = Operand(value=value)
                    stmt.value = ast.Constant(None)
    return hidden


def _table_constants(tree: ast.Module) -> dict[str, ast.Assign]:
    """Module constants bound once to a list or tuple and read only as a parametrize decorator's table."""
    tables: dict[str, ast.Assign] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            if isinstance(stmt.value, ast.List | ast.Tuple):
                tables[stmt.targets[0].id] = stmt
    stores = _stores(tree.body)
    calls = [
        call
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for call in map(_parametrize, node.decorator_list)
        if call is not None
    ]
    in_tables = {id(call.args[1]) for call in calls if isinstance(call.args[1], ast.Name)}
    uses = _loads(tree.body)
    return {
        name: stmt
        for name, stmt in tables.items()
        if stores.get(name) == 1 and uses.get(name) and all(id(u) in in_tables for u in uses[name])
    }


def blind_copy(files: dict[str, str]) -> BlindPlan:
    """The blind copies of the hidden test files ``files`` (path -> text after the ``test_patch``).
    Deterministic: the same files give the same copy and keys (the reference is cached per task)."""
    plan = BlindPlan()
    trees: dict[str, ast.Module] = {}
    for path, text in sorted(files.items()):
        try:
            trees[path] = pyast.parse(text)
        except (SyntaxError, ValueError):
            plan.skipped.append(path)
            plan.texts[path] = text
    defined: list[str] = []
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                if not any("fixture" in ast.unparse(d) for d in node.decorator_list):  # fixtures go by name
                    defined.append(node.name)
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                defined.append(node.name)
    for name in dict.fromkeys(defined):
        plan.renames[name] = f"{'Test' if name.startswith('Test') else 'test_'}l{len(plan.renames) + 1}"
    from_imports = {
        a.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ImportFrom) for a in n.names
    }
    for f, (path, tree) in enumerate(trees.items()):
        imported = _imported(tree)
        positions = _compared_positions(tree, imported)
        blinder = _Blinder(plan, path, f"{f}_", imported, _module_hidden(tree, positions, from_imports))
        blinder.positions = positions
        blinder.tables = _table_constants(tree)
        new = blinder.visit(tree)
        for assign in blinder.tables.values():
            assign.value = ast.Constant(None)
        for node in ast.walk(new):  # references to renamed tests and classes follow them
            if isinstance(node, ast.Name) and node.id in plan.renames:
                node.id = plan.renames[node.id]
            elif isinstance(node, ast.Attribute) and node.attr in plan.renames:
                node.attr = plan.renames[node.attr]
            elif isinstance(node, ast.alias) and node.name in plan.renames:
                node.name = plan.renames[node.name]
        ast.fix_missing_locations(new)
        plan.texts[path] = ast.unparse(new) + "\n"
    return plan


_ROW = re.compile(r"p(\d+)r(\d+)")


def rows_of(blind_id: str) -> dict[int, int]:
    """The table rows a blind node id's instance runs: ``test_l1[p0r3-p1r0]`` -> {0: 3, 1: 0}."""
    _, _, params = blind_id.partition("[")
    return {int(d): int(r) for d, r in _ROW.findall(params)}
