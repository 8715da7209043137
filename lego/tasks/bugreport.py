"""Bug reports for real-project tasks, written from what was observed when the suite ran.

A report says what a user of the project would see: which public entry point misbehaves (the
project API the first failing test calls, as that test imports it), how (wrong result, an
exception, no exception where one was due) and pytest's own failure message; then the other entry
points that break the same way. It never quotes the fix (no line the gold patch adds), never the
test source (no line of a hidden test file, not the test's name), never a value the failing tests'
assertions compare against (:func:`expected_literals`: a line of pytest's message that shows one is
left out, and the report itself names no count), and never the mutated function unless a failing
test calls it. The wording varies between tasks (a few forms, picked by the task's own tests), as
reports written by different people do.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
from collections.abc import Iterator, Sequence

from lego import pyast
from lego.tasks.statements import fixed_lines

__all__ = ["bug_report", "entry_points", "expected_literals", "leaked_literals"]

_MAX_LINES = 10
_MAX_LINE_CHARS = 200


def _test_node(source: str, test_id: str) -> ast.AST | None:
    """The test function (or method) a pytest id names."""
    parts = test_id.split("::")[1:]
    if not parts:
        return None
    names = [p.split("[", 1)[0] for p in parts]
    try:
        scope: ast.AST = pyast.parse(source)
    except SyntaxError:
        return None
    for name in names:
        found = next(
            (
                n
                for n in ast.iter_child_nodes(scope)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == name
            ),
            None,
        )
        if found is None:
            return None
        scope = found
    return scope


def _imports(tree: ast.Module, packages: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(names bound to project objects -> dotted path, names bound to project modules -> dotted path)."""
    objects: dict[str, str] = {}
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in packages:
                for alias in node.names:
                    objects[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in packages:
                    bound = alias.asname or alias.name.split(".")[0]
                    modules[bound] = alias.name if alias.asname else alias.name.split(".")[0]
    return objects, modules


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def entry_points(test_source: str, test_id: str, packages: list[str]) -> list[str]:
    """Project callables the test calls, as dotted public paths, in order of first call."""
    node = _test_node(test_source, test_id)
    if node is None:
        return []
    objects, modules = _imports(pyast.parse(test_source), set(packages))
    calls = sorted(
        (n for n in ast.walk(node) if isinstance(n, ast.Call)),
        key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)),
    )
    found: list[str] = []
    for call in calls:
        chain = _dotted(call.func)
        if not chain:
            continue
        head, rest = chain[0], chain[1:]
        if head in objects:
            path = ".".join([objects[head], *rest])
        elif head in modules and rest:
            path = ".".join([modules[head], *rest])
        else:
            continue
        if not any(part.startswith("_") for part in path.split(".")) and path not in found:
            found.append(path)
    return found


def _literal_leaves(node: ast.AST) -> Iterator[object]:
    """The literal values in ``node``: every constant inside it, and each literal container whole."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant):
            yield sub.value
        elif isinstance(sub, ast.List | ast.Tuple | ast.Set | ast.Dict):
            try:
                yield pyast.literal_eval(sub)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue


_ASSERT_CALL = re.compile(r"^(assert|fail)[A-Z_]|^assert_")


def _compared(fn: ast.AST) -> Iterator[ast.AST]:
    """The operands ``fn``'s assertions compare: both sides of an ``assert`` comparison (or its whole
    test), the arguments of ``self.assertX``/``assert_x`` calls, and ``pytest.raises``' and
    ``pytest.approx``' arguments. A call's own inputs elsewhere in the test are not compared."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            test = node.test
            yield from [test.left, *test.comparators] if isinstance(test, ast.Compare) else [test]
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if _ASSERT_CALL.match(name) or name in ("approx", "raises", "warns"):
                yield from node.args
                yield from (kw.value for kw in node.keywords)


def _texts(value: object) -> set[str]:
    """How a value shows in pytest's messages: a string itself (and stripped) and its repr, a number or
    a literal container its repr; strings under two characters and empty containers are left out."""
    if isinstance(value, str | bytes):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        return {text, text.strip(), repr(value)} if len(text.strip()) >= 2 else set()
    if isinstance(value, bool | int | float | complex) or value is None:
        return {repr(value)}
    if isinstance(value, list | tuple | set | frozenset | dict) and value:
        return {repr(value)}
    return set()


def expected_literals(
    test_sources: dict[str, str], test_ids: list[str], packages: Sequence[str] = ()
) -> frozenset[str]:
    """What a report must never show, as it would hand the agent the hidden tests' answers: the literal
    values the tests ``test_ids`` compare (:func:`_compared`: a call's inputs outside an assertion are
    not), their decorators' (parametrize rows) and the module-level or class-level tables they read by
    name (a loop's rows), and the source text of every compared operand that does not call the project
    (the expected side of ``assert f(x) == timedelta(days=1)``)."""
    out: set[str] = set()
    by_file: dict[str, list[str]] = {}
    for test_id in test_ids:
        by_file.setdefault(test_id.split("::")[0], []).append(test_id)
    for path, ids in by_file.items():
        source = test_sources.get(path, "")
        try:
            tree = pyast.parse(source)
        except (SyntaxError, ValueError):
            continue
        objects, modules = _imports(tree, set(packages))
        project = set(objects) | set(modules)
        bound = [
            (node, {t.id for t in ast.walk(node) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)})
            for scope in (tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)))
            for node in ast.iter_child_nodes(scope)
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
        ]
        seen: set[int] = set()
        for test_id in ids:
            fn = _test_node(source, test_id)
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
            tables = [node for node, names in bound if names & read]  # what a loop or parametrize row reads
            decorators = getattr(fn, "decorator_list", [])
            for node in (*_compared(fn), *decorators, *tables):
                for value in _literal_leaves(node):
                    out |= _texts(value)
            for cmp in (n for n in ast.walk(fn) if isinstance(n, ast.Compare)):
                for side in (cmp.left, *cmp.comparators):
                    names = {n.id for n in ast.walk(side) if isinstance(n, ast.Name)}
                    text = ast.get_source_segment(source, side)
                    calls = any(isinstance(n, ast.Call) for n in ast.walk(side))
                    if text and len(text) >= 4 and calls and not names & project:
                        out.add(text)
    return frozenset(out)


_QUOTED = re.compile(r"'([^'\n]*\.\.\.[^'\n]*)'|\"([^\"\n]*\.\.\.[^\"\n]*)\"")


@functools.lru_cache(maxsize=16)
def _matcher(literals: frozenset[str]) -> tuple[re.Pattern[str] | None, tuple[str, ...], tuple[str, ...]]:
    """(one regex for the word-like literals, matched as whole tokens; the other literals; the quoted
    string literals, for pytest's elided 'abc...xyz')."""
    words = sorted((lit for lit in literals if re.fullmatch(r"[-+]?[\w.]+", lit)), key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.])(?:" + "|".join(map(re.escape, words)) + r")(?![\w])") if words else None
    quoted = tuple(lit for lit in literals if len(lit) >= 2 and lit[0] == lit[-1] and lit[0] in "'\"")
    return pattern, tuple(literals - set(words)), quoted


def leaked_literals(text: str, literals: frozenset[str]) -> list[str]:
    """The ``literals`` that appear in ``text``: a string anywhere, a number or name as a whole token."""
    pattern, others, quoted = _matcher(literals)
    found = set(pattern.findall(text)) if pattern is not None else set()
    found.update(lit for lit in others if lit in text)
    for match in _QUOTED.finditer(text):  # pytest elides the middle of a long string: 'abc...xyz'
        head, _, tail = (match.group(1) or match.group(2) or "").partition("...")
        if len(head) + len(tail) >= 4:
            found.update(lit for lit in quoted if lit[1:].startswith(head) and lit[:-1].endswith(tail))
    return sorted(found)


def _symptom(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    raised = re.match(r"^(?:Failed: )?DID NOT RAISE\s*(.*)$", first) or re.match(
        r"^AssertionError: (\w+) not raised", first
    )
    if raised:
        return f"no longer raises {raised.group(1).strip(' <>') or 'an error'} where it should"
    if "Regex pattern did not match" in message or "does not match" in first:
        return "raises an error with the wrong message"
    if first.startswith(("AssertionError", "assert ")):
        return "returns a wrong result"
    match = re.match(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))\b", first)
    if match:
        return f"raises {match.group(1).split('.')[-1]}"
    if first.startswith("Failed: Timeout"):
        return "hangs"
    return "misbehaves"


def _clean(message: str, banned: list[str], expected: frozenset[str]) -> str:
    """The message's first lines, without any line that quotes the fix, the hidden tests or a value
    they compare against."""
    kept = []
    dropped = False  # pytest's "+  where ..." lines explain the line above: they go with it
    for line in message.strip().splitlines():
        text = line.rstrip()[:_MAX_LINE_CHARS]
        if not text.strip() or text.strip().startswith("Use -v to get"):
            continue
        if text.lstrip().startswith("+") and dropped:
            continue
        dropped = any(b in text for b in banned) or bool(leaked_literals(text, expected))
        if dropped:
            continue
        kept.append(text)
    if len(kept) > _MAX_LINES:
        kept = [*kept[:_MAX_LINES], "..."]
    return "\n".join(kept)


def _banned(gold_patch: str, test_sources: dict[str, str], test_ids: list[str]) -> list[str]:
    lines = set(fixed_lines(gold_patch))
    for source in test_sources.values():
        lines.update(line.strip() for line in source.splitlines() if len(line.strip()) >= 12)
    for test_id in test_ids:
        lines.update(part.split("[", 1)[0] for part in test_id.split("::")[1:] if len(part) >= 8)
    return sorted(lines, key=len, reverse=True)


def _order(test_ids: list[str], test_sources: dict[str, str], packages: list[str], focus: str) -> list[str]:
    """The clearest example first: a test that calls the function holding the bug, then one that calls
    any project API, plain tests before parametrised ones."""

    def key(test_id: str) -> tuple[bool, bool, bool, str]:
        apis = entry_points(test_sources.get(test_id.split("::")[0], ""), test_id, packages)
        direct = bool(focus) and any(api.split(".")[-1] == focus for api in apis)
        return (not direct, not apis, "[" in test_id, test_id)

    return sorted(test_ids, key=key)


def bug_report(
    project: str,
    packages: list[str],
    fail_to_pass: list[str],
    messages: dict[str, str],
    test_sources: dict[str, str],
    gold_patch: str,
    focus: str = "",
) -> str:
    """The issue text for one task (see the module docstring). ``focus`` is the bare name of the
    function holding the bug: it is named only when a failing test calls it."""
    banned = _banned(gold_patch, test_sources, fail_to_pass)
    ordered = _order(fail_to_pass, test_sources, packages, focus)
    primary = ordered[0]
    apis = entry_points(test_sources.get(primary.split("::")[0], ""), primary, packages)
    subject = next(
        (a for a in apis if a.split(".")[-1] == focus), apis[0] if apis else packages[0] if packages else project
    )
    raw = messages.get(primary, "")
    expected = expected_literals(test_sources, fail_to_pass, packages)
    message = _clean(raw, banned, expected)
    form = int(hashlib.sha256(f"{project}|{primary}".encode()).hexdigest(), 16) % len(_FORMS)
    how = "one of its checks fails" if len(fail_to_pass) == 1 else "several of its checks fail"
    title, opening, bare, closing = _FORMS[form]
    words = {"project": project, "api": subject, "symptom": _symptom(raw), "how": how}
    parts = [title.format(**words), ""]
    if message:
        parts += [opening.format(**words), "", "```", message, "```", ""]
    else:  # every line of pytest's message shows a value the tests compare against: none is quoted
        parts += [bare.format(**words), ""]
    others: list[str] = []
    for test_id in ordered[1:]:
        for api in entry_points(test_sources.get(test_id.split("::")[0], ""), test_id, packages):
            label = f"`{api}` ({_symptom(messages.get(test_id, ''))})"
            if api != subject and label not in others:
                others.append(label)
    if others:
        parts += ["Other entry points that misbehave as well: " + ", ".join(others[:4]) + ".", ""]
    parts.append(closing.format(**words))
    text = "\n".join(parts) + "\n"
    if any(b in text for b in fixed_lines(gold_patch)):  # a fix line inside a name: say less
        return f"`{subject}` {_symptom(raw)}\n\nIn {project}, `{subject}` does not behave as documented any more.\n"
    return text


_FORMS = (  # (title, opening before pytest's message, opening when none can be quoted, closing)
    (
        "`{api}` {symptom}",
        "In {project}, `{api}` does not behave as documented any more: running the project's test suite, "
        "{how}. The first failure reads:",
        "In {project}, `{api}` does not behave as documented any more: running the project's test suite, {how}.",
        "Expected: `{api}` and the rest of {project} work as documented, and the test suite passes.",
    ),
    (
        "{project}: `{api}` {symptom}",
        "Since the latest change, `{api}` gives results that disagree with its documentation. When I run "
        "{project}'s tests, {how}; pytest reports:",
        "Since the latest change, `{api}` gives results that disagree with its documentation: when I run "
        "{project}'s tests, {how}.",
        "`{api}` should behave as it did before, so that the whole suite passes again.",
    ),
    (
        "Regression in `{api}`: it {symptom}",
        "Something broke `{api}` in {project}. Its own test suite shows it ({how}), starting with:",
        "Something broke `{api}` in {project}: its own test suite shows it ({how}).",
        "Please restore the documented behaviour of `{api}`; the project's tests should all pass.",
    ),
)
