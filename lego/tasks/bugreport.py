"""Bug reports for real-project tasks, written from what was observed when the suite ran.

A report says what a user of the project would see: which public entry point misbehaves (the
project API the first failing test calls, as that test imports it), how (wrong result, an
exception, no exception where one was due) and pytest's own failure message; then the other entry
points that break the same way. It never quotes the fix (no line the gold patch adds), never the
test source (no line of a hidden test file, not the test's name) and never the mutated function
unless a failing test calls it.
"""

from __future__ import annotations

import ast
import re

from lego import pyast
from lego.tasks.statements import fixed_lines

__all__ = ["bug_report", "entry_points"]

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


def _clean(message: str, banned: list[str]) -> str:
    """The message's first lines, without any line that quotes the fix or the hidden tests."""
    kept = []
    for line in message.strip().splitlines():
        text = line.rstrip()[:_MAX_LINE_CHARS]
        if not text.strip() or text.strip().startswith("Use -v to get"):
            continue
        if any(b in text for b in banned):
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
    message = _clean(raw, banned)
    parts = [f"`{subject}` {_symptom(raw)}", ""]
    parts.append(
        f"In {project}, `{subject}` does not behave as documented any more. Running the project's test suite, "
        f"{len(fail_to_pass)} check(s) fail; the first one reports:"
    )
    parts += ["", "```", message or "(pytest gave no message)", "```", ""]
    others: list[str] = []
    for test_id in ordered[1:]:
        for api in entry_points(test_sources.get(test_id.split("::")[0], ""), test_id, packages):
            label = f"`{api}` ({_symptom(messages.get(test_id, ''))})"
            if api != subject and label not in others:
                others.append(label)
    if others:
        parts += ["Other entry points that misbehave as well: " + ", ".join(others[:4]) + ".", ""]
    parts.append(f"Expected: `{subject}` and the rest of {project} work as documented, and the test suite passes.")
    text = "\n".join(parts) + "\n"
    if any(b in text for b in fixed_lines(gold_patch)):  # a fix line inside a name: say less
        return f"`{subject}` {_symptom(raw)}\n\nIn {project}, `{subject}` does not behave as documented any more.\n"
    return text
