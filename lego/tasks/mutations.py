"""Finding bug-injection sites in Python source: small, single-purpose AST mutations.

Every mutation edits an exact span of the original text (located from AST node positions), so
the fix is a minimal diff, usually one line, and the rest of the file keeps its formatting. A
mutation is kept only if the mutated file still compiles.

Kinds (``Mutation.kind``):

    boundary            ``<`` <-> ``<=``, ``>`` <-> ``>=``
    flipped_comparison  ``<`` <-> ``>``, ``==`` <-> ``!=``, ``in`` <-> ``not in``, ``is`` <-> ``is not``
    wrong_operator      ``+`` <-> ``-``, ``*`` -> ``+``, ``//`` <-> ``/``, ``%`` -> ``//`` (also ``+=`` ...)
    wrong_logic         ``and`` <-> ``or``
    off_by_one          an integer literal inside a function moved by one
    wrong_constant      a module-level integer moved by one, or ``True`` <-> ``False``
    wrong_default       an integer default argument moved by one
    negated_condition   ``if x`` -> ``if not x`` (and ``if not x`` -> ``if x``)
    dropped_branch      a one-statement guard (``if ...: raise/return``) or an ``elif`` deleted
    dropped_statement   an augmented assignment (``count += 1``) deleted
    swapped_arguments   the first two positional arguments of a call exchanged
    wrong_function      ``min`` <-> ``max``
    dropped_negation    unary minus removed

``extended=True`` (the real-project factory) adds the kinds SWE-smith's procedural recipe has beyond
these, and skips ``if __name__ == "__main__"`` / ``if TYPE_CHECKING`` blocks, which no test runs.
The built-in suites keep the set above, so their shipped instances still equal a rebuild:

    swapped_operands    ``a - b`` -> ``b - a`` (``-``, ``/``, ``//``, ``%``, ``**``, ``<<``, ``>>``)
    dropped_return      a ``return`` statement deleted (the function falls through)
    dropped_loop        a ``for`` / ``while`` loop deleted
    dropped_statement   also a call statement (``items.append(x)``) or an assignment to an
                        attribute or to a name assigned elsewhere in the function
    dropped_branch      also an ``if`` block (no ``else``) of several statements
    early_return        a bare ``return`` inserted before a statement of a function's body
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass

from lego import pyast

__all__ = ["Mutation", "find_mutations", "interleave_kinds"]

_COMPARE_SWAPS: dict[type[ast.cmpop], list[tuple[str, str, str]]] = {
    # op class -> [(original text, replacement text, kind)]
    ast.Lt: [("<", "<=", "boundary"), ("<", ">", "flipped_comparison")],
    ast.LtE: [("<=", "<", "boundary"), ("<=", ">=", "flipped_comparison")],
    ast.Gt: [(">", ">=", "boundary"), (">", "<", "flipped_comparison")],
    ast.GtE: [(">=", ">", "boundary"), (">=", "<=", "flipped_comparison")],
    ast.Eq: [("==", "!=", "flipped_comparison")],
    ast.NotEq: [("!=", "==", "flipped_comparison")],
    ast.In: [("in", "not in", "flipped_comparison")],
    ast.NotIn: [("not in", "in", "flipped_comparison")],
    ast.Is: [("is", "is not", "flipped_comparison")],
    ast.IsNot: [("is not", "is", "flipped_comparison")],
}

_BINOP_SWAPS: dict[type[ast.operator], list[tuple[str, str]]] = {
    ast.Add: [("+", "-")],
    ast.Sub: [("-", "+")],
    ast.Mult: [("*", "+")],
    ast.FloorDiv: [("//", "/")],
    ast.Div: [("/", "//")],
    ast.Mod: [("%", "//")],
}

_SEPARATORS = set(" \t\n\\()")
_NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift)
_ATOMS = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Call, ast.List, ast.Tuple, ast.Dict, ast.Set)


@dataclass(frozen=True)
class Mutation:
    """Replace ``source[start:end]`` with ``replacement``. ``line`` is the 1-based line edited."""

    file: str
    line: int
    start: int
    end: int
    replacement: str
    kind: str
    scope: str = ""  # qualified name of the enclosing function or class ("" at module level)

    def apply(self, source: str) -> str:
        return source[: self.start] + self.replacement + source[self.end :]


class _Finder(ast.NodeVisitor):
    def __init__(self, source: str, file: str, extended: bool = False) -> None:
        self.extended = extended
        self.source = source
        self.file = file
        self.lines = source.splitlines(keepends=True)
        self.line_starts = [0]
        for line in self.lines:
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.found: list[Mutation] = []
        self.function_depth = 0
        self.default_nodes: set[int] = set()
        self.docstrings: set[int] = set()
        self.scope: list[str] = []
        self._assigned = []

    # -- positions -------------------------------------------------------------------------
    def offset(self, lineno: int, col: int) -> int:
        """Character offset of an AST (line, UTF-8 byte column) position."""
        line = self.lines[lineno - 1]
        return self.line_starts[lineno - 1] + len(line.encode()[:col].decode(errors="ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def add(self, start: int, end: int, replacement: str, kind: str) -> None:
        line = self.source.count("\n", 0, start) + 1
        self.found.append(Mutation(self.file, line, start, end, replacement, kind, ".".join(self.scope)))

    def find_operator(self, left: ast.AST, right: ast.AST, text: str) -> int | None:
        """Offset of operator ``text`` standing alone between two operands, or None."""
        lo = self.span(left)[1]
        hi = self.span(right)[0]
        segment = self.source[lo:hi]
        hits = []
        index = segment.find(text)
        while index != -1:
            before = segment[index - 1] if index > 0 else " "
            after = segment[index + len(text)] if index + len(text) < len(segment) else " "
            if before in _SEPARATORS and after in _SEPARATORS:
                hits.append(index)
            index = segment.find(text, index + 1)
        return lo + hits[0] if len(hits) == 1 else None

    def whole_lines(self, first: int, last: int) -> tuple[int, int]:
        return self.line_starts[first - 1], self.line_starts[last]

    # -- visitors --------------------------------------------------------------------------
    def visit_Module(self, node: ast.Module) -> None:
        self._note_docstring(node.body)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._note_docstring(node.body)
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._note_docstring(node.body)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.default_nodes.add(id(default))
        self.function_depth += 1
        self.scope.append(node.name)
        if self.extended:
            self._early_returns(node)
            self._assigned.append(self._assignment_counts(node))
        self.generic_visit(node)
        if self.extended:
            self._assigned.pop()
        self.scope.pop()
        self.function_depth -= 1

    _assigned: list[dict[str, int]]

    @staticmethod
    def _assignment_counts(func: ast.FunctionDef) -> dict[str, int]:
        counts: dict[str, int] = {}
        for sub in ast.walk(func):
            targets = (
                sub.targets
                if isinstance(sub, ast.Assign)
                else [sub.target]
                if isinstance(sub, ast.AugAssign | ast.AnnAssign | ast.For)
                else []
            )
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        counts[name.id] = counts.get(name.id, 0) + 1
        return counts

    def _early_returns(self, func: ast.FunctionDef) -> None:
        body = func.body[1:] if id(getattr(func.body[0], "value", None)) in self.docstrings else func.body
        for stmt in body[1:]:
            line = self.lines[stmt.lineno - 1]
            indent = line[: len(line) - len(line.lstrip())]
            if self._alone_on_line(stmt) or stmt.lineno != stmt.end_lineno:
                at = self.line_starts[stmt.lineno - 1]
                self.add(at, at, f"{indent}return\n", "early_return")

    def _drop_whole(self, node: ast.stmt, kind: str) -> None:
        """Delete a statement that owns its lines (nothing else on its first or last line)."""
        first, last = node.lineno, node.end_lineno or node.lineno
        head = self.lines[first - 1][: self.offset(first, node.col_offset) - self.line_starts[first - 1]]
        tail = self.lines[last - 1][self.offset(last, node.end_col_offset or 0) - self.line_starts[last - 1] :]
        if not head.strip() and not tail.strip().startswith(tuple(";\\")) and not tail.split("#")[0].strip():
            self.add(*self.whole_lines(first, last), "", kind)

    def visit_Return(self, node: ast.Return) -> None:
        if self.extended and self.function_depth:
            self._drop_whole(node, "dropped_return")
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        if self.extended and self.function_depth:
            self._drop_whole(node, "dropped_loop")
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if self.extended and self.function_depth and isinstance(node.value, ast.Call):
            self._drop_whole(node, "dropped_statement")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if self.extended and self.function_depth and len(node.targets) == 1:
            target = node.targets[0]
            reassigned = isinstance(target, ast.Name) and self._assigned and self._assigned[-1].get(target.id, 0) > 1
            if isinstance(target, ast.Attribute) or reassigned:
                self._drop_whole(node, "dropped_statement")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _note_docstring(self, body: list[ast.stmt]) -> None:
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            self.docstrings.add(id(body[0].value))

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            for original, replacement, kind in _COMPARE_SWAPS.get(type(op), []):
                at = self.find_operator(operands[i], operands[i + 1], original)
                if at is not None:
                    self.add(at, at + len(original), replacement, kind)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        strings = (ast.JoinedStr, ast.Constant)
        is_text = any(
            isinstance(side, strings) and not isinstance(getattr(side, "value", 0), int | float)
            for side in (node.left, node.right)
        )
        if not is_text:
            for original, replacement in _BINOP_SWAPS.get(type(node.op), []):
                at = self.find_operator(node.left, node.right, original)
                if at is not None:
                    self.add(at, at + len(original), replacement, "wrong_operator")
            if self.extended and isinstance(node.op, _NON_COMMUTATIVE) and node.lineno == node.end_lineno:
                self._swap_operands(node)
        self.generic_visit(node)

    def _swap_operands(self, node: ast.BinOp) -> None:
        left_start, left_end = self.span(node.left)
        right_start, right_end = self.span(node.right)
        if self.source[left_start:left_end] == self.source[right_start:right_end]:
            return

        def operand(side: ast.expr, text: str) -> str:
            return text if isinstance(side, _ATOMS) else f"({text})"

        left = operand(node.left, self.source[left_start:left_end])
        right = operand(node.right, self.source[right_start:right_end])
        start, end = self.span(node)
        between = self.source[left_end:right_start]
        if start == left_start and end == right_end:  # no parentheses of the operands' own inside the span
            self.add(start, end, right + between + left, "swapped_operands")

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        for original, replacement in _BINOP_SWAPS.get(type(node.op), []):
            at = self.find_operator(node.target, node.value, original + "=")
            if at is not None:
                self.add(at, at + len(original) + 1, replacement + "=", "wrong_operator")
        if node.lineno == node.end_lineno and self._alone_on_line(node):
            self.add(*self.whole_lines(node.lineno, node.end_lineno), "", "dropped_statement")  # type: ignore[arg-type]
        self.generic_visit(node)

    def _alone_on_line(self, node: ast.stmt) -> bool:
        line = self.lines[node.lineno - 1]
        start, end = self.span(node)
        line_start = self.line_starts[node.lineno - 1]
        return not line[: start - line_start].strip() and not line[end - line_start :].strip()

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        original, replacement = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        for left, right in zip(node.values, node.values[1:], strict=False):
            at = self.find_operator(left, right, original)
            if at is not None:
                self.add(at, at + len(original), replacement, "wrong_logic")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if id(node) in self.docstrings:
            return
        start, end = self.span(node)
        if isinstance(node.value, bool):
            self.add(start, end, str(not node.value), "wrong_constant")
        elif isinstance(node.value, int) and self.source[start:end].isdigit():
            if id(node) in self.default_nodes:
                kind = "wrong_default"
            elif self.function_depth:
                kind = "off_by_one"
            else:
                kind = "wrong_constant"
            self.add(start, end, str(node.value + 1), kind)
            if node.value > 0:
                self.add(start, end, str(node.value - 1), kind)

    def _negate(self, test: ast.expr) -> None:
        if test.lineno != test.end_lineno:
            return
        start, end = self.span(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self.add(start, self.span(test.operand)[0], "", "negated_condition")
        elif isinstance(test, ast.BoolOp | ast.IfExp | ast.NamedExpr | ast.Lambda):
            self.add(start, end, f"not ({self.source[start:end]})", "negated_condition")
        else:
            self.add(start, start, "not ", "negated_condition")

    @staticmethod
    def _never_tested(test: ast.expr) -> bool:
        text = ast.dump(test)
        return "TYPE_CHECKING" in text or ("'__name__'" in text and "'__main__'" in text)

    def visit_If(self, node: ast.If) -> None:
        if self.extended and self._never_tested(node.test):
            return
        if self.extended and self.function_depth and not node.orelse and len(node.body) > 1:
            self._drop_whole(node, "dropped_branch")
        self._negate(node.test)
        line = self.lines[node.lineno - 1].lstrip()
        is_elif = line.startswith("elif")
        body_end = node.body[-1].end_lineno or node.body[-1].lineno
        if is_elif:
            self.add(*self.whole_lines(node.lineno, body_end), "", "dropped_branch")
        elif (
            not node.orelse
            and len(node.body) == 1
            and isinstance(node.body[0], ast.Raise | ast.Return | ast.Continue | ast.Break)
        ):
            self.add(*self.whole_lines(node.lineno, body_end), "", "dropped_branch")
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._negate(node.test)
        if self.extended and self.function_depth:
            self._drop_whole(node, "dropped_loop")
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(positional) >= 2 and positional[:2] == node.args[:2]:
            a, b = node.args[0], node.args[1]
            if a.lineno == b.end_lineno:
                a_start, a_end = self.span(a)
                b_start, b_end = self.span(b)
                a_text, b_text = self.source[a_start:a_end], self.source[b_start:b_end]
                if a_text != b_text:
                    between = self.source[a_end:b_start]
                    self.add(a_start, b_end, b_text + between + a_text, "swapped_arguments")
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            start, end = self.span(node.func)
            self.add(start, end, "max" if node.func.id == "min" else "min", "wrong_function")
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.USub) and not isinstance(node.operand, ast.Constant):
            start, _ = self.span(node)
            self.add(start, self.span(node.operand)[0], "", "dropped_negation")
        self.generic_visit(node)


def find_mutations(source: str, file: str, extended: bool = False) -> list[Mutation]:
    """Every mutation of ``source`` that still compiles, in source order, without duplicates
    (``extended``: the further kinds of the module docstring)."""
    tree = pyast.parse(source)
    finder = _Finder(source, file, extended)
    finder.visit(tree)
    seen: set[str] = set()
    out: list[Mutation] = []
    for mutation in sorted(finder.found, key=lambda m: (m.start, m.end, m.replacement)):
        mutated = mutation.apply(source)
        if mutated == source or mutated in seen:
            continue
        try:
            compile(mutated, file, "exec")
        except SyntaxError:
            continue
        seen.add(mutated)
        out.append(mutation)
    return out


def interleave_kinds(mutations: list[Mutation], rng: random.Random) -> list[Mutation]:
    """``mutations`` in an order that cycles through their kinds (each kind's own order shuffled, the
    kinds' order shuffled), so that the first mutations tried cover every kind."""
    by_kind: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_kind.setdefault(m.kind, []).append(m)
    queues = []
    for kind in sorted(by_kind):
        items = list(by_kind[kind])
        rng.shuffle(items)
        queues.append(items)
    rng.shuffle(queues)
    ordered: list[Mutation] = []
    while any(queues):
        for queue in queues:
            if queue:
                ordered.append(queue.pop(0))
    return ordered
