"""Problem statements for injected bugs, written like a user's bug report.

A statement is derived from what actually happened when the hidden tests ran against the buggy
code: the failing check's source, the test id, and pytest's own failure message (expected vs
actual). It names the public functions involved but never the mutated line or the fix; a
statement that would quote a line of the gold fix is rebuilt without the offending snippet.
"""

from __future__ import annotations

import ast
import re

from lego import pyast

__all__ = ["fixed_lines", "problem_statement"]

_MAX_MESSAGE_LINES = 8
_MAX_SNIPPET_CHARS = 900


def fixed_lines(patch: str) -> list[str]:
    """The stripped lines a gold patch adds (what must never appear in a statement)."""
    out = []
    for line in patch.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            text = line[1:].strip()
            if len(text) >= 6:
                out.append(text)
    return out


def _test_function(test_source: str, test_id: str) -> ast.FunctionDef | None:
    name = test_id.split("::")[-1].split("[", 1)[0]
    class_name = test_id.split("::")[-2] if test_id.count("::") >= 2 else None
    tree = pyast.parse(test_source)
    scopes: list[ast.AST] = [tree]
    if class_name:
        scopes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    for scope in scopes:
        for node in ast.iter_child_nodes(scope):
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
    return None


def _snippet(test_source: str, func: ast.FunctionDef) -> str:
    lines = test_source.splitlines()
    first = func.lineno
    if func.decorator_list:
        decorator_start = func.decorator_list[0].lineno
        decorator_text = "\n".join(lines[decorator_start - 1 : func.lineno - 1])
        if len(decorator_text) < 300:
            first = decorator_start
    text = "\n".join(lines[first - 1 : func.end_lineno])
    return text if len(text) <= _MAX_SNIPPET_CHARS else ""


def _library_names(test_source: str, package: str) -> set[str]:
    """Names the test module imports from the library."""
    names: set[str] = set()
    for node in ast.walk(pyast.parse(test_source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _called_api(func: ast.FunctionDef, library_names: set[str]) -> list[str]:
    """Library functions and classes a test calls (exceptions left out), in order of first call;
    then the first methods it calls on library objects."""
    usable = {n for n in library_names if not n.endswith(("Error", "Exception", "Warning"))}
    calls = sorted((n for n in ast.walk(func) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
    used: list[str] = []
    methods: list[str] = []
    for call in calls:
        target = call.func
        if isinstance(target, ast.Name) and target.id in usable and target.id not in used:
            used.append(target.id)
        elif isinstance(target, ast.Attribute) and not target.attr.startswith("_"):
            owner = target.value
            if isinstance(owner, ast.Name) and owner.id not in usable and owner.id in ("pytest", "self"):
                continue
            label = f".{target.attr}()"
            if label not in methods and target.attr not in ("append", "items", "keys", "read_text", "write_text"):
                methods.append(label)
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id in usable and node.id not in used:
            used.append(node.id)
    return used + methods[:2]


def _observed(func: ast.FunctionDef, test_source: str, message: str) -> str:
    """``call(...)`` gives X, expected Y — when the test has one ``assert CALL == EXPECTED`` and
    pytest's message shows the value the call produced."""
    checks = [
        n.test
        for n in ast.walk(func)
        if isinstance(n, ast.Assert)
        and isinstance(n.test, ast.Compare)
        and len(n.test.ops) == 1
        and isinstance(n.test.ops[0], ast.Eq)
    ]
    first = message.strip().splitlines()[0] if message.strip() else ""
    match = re.fullmatch(r"(?:AssertionError: )?assert (.+) == (.+)", first)
    if len(checks) != 1 or match is None or first.count(" == ") != 1:
        return ""
    check = checks[0]
    if not isinstance(check.left, ast.Call):
        return ""
    call = ast.get_source_segment(test_source, check.left) or ""
    expected = ast.get_source_segment(test_source, check.comparators[0]) or ""
    if not call or not expected or "\n" in call or len(call) > 120:
        return ""
    return f"`{call}` gives `{match.group(1)}`, expected `{expected}`."


def _clean_message(message: str) -> str:
    lines = [
        line.rstrip()[:200]
        for line in message.strip().splitlines()
        if line.strip() and not line.strip().startswith("Use -v to get")
    ]
    kept = lines[:_MAX_MESSAGE_LINES]
    if len(lines) > len(kept):
        kept.append("...")
    return "\n".join(kept)


def _symptom(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    if first.startswith("Failed: DID NOT RAISE"):
        raised = re.sub(r"^Failed: DID NOT RAISE\s*", "", first)
        return f"does not raise {raised.strip()} for invalid input"
    if "Regex pattern did not match" in message:
        return "raises an error with the wrong message"
    if first.startswith("AssertionError") or first.startswith("assert "):
        return "returns a wrong result"
    match = re.match(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt))\b", first)
    if match:
        return f"raises {match.group(1).split('.')[-1]} unexpectedly"
    return "misbehaves"


def _order(test_ids: list[str], test_sources: dict[str, str], focus: list[str]) -> list[str]:
    """The clearest example first: tests that use a focus name (the function holding the bug or its
    class), then tests whose file mentions one, plain tests before parametrized ones, then by id."""
    words = [f for f in focus if f and not f.startswith("_")]

    def key(test_id: str) -> tuple[bool, bool, bool, str]:
        source = test_sources.get(test_id.split("::")[0], "")
        func = _test_function(source, test_id) if source else None
        body = ast.get_source_segment(source, func) or "" if func is not None else ""
        uses = any(re.search(rf"\b{re.escape(w)}\b", body) for w in words)
        in_file = any(re.search(rf"\b{re.escape(w)}\b", source) for w in words)
        return (not uses, not in_file, "[" in test_id, test_id)

    return sorted(test_ids, key=key)


def problem_statement(
    package: str,
    fail_to_pass: list[str],
    messages: dict[str, str],
    test_sources: dict[str, str],
    gold_patch: str,
    focus: list[str] | None = None,
) -> str:
    """A bug report for one injected bug (see the module docstring).

    ``focus`` names the function and class holding the bug; a failing test that calls them is
    preferred as the example, since that is what a user who hit the bug would most likely show.
    """
    forbidden = fixed_lines(gold_patch)
    ordered = _order(fail_to_pass, test_sources, focus or [])
    primary = ordered[0]
    file = primary.split("::")[0]
    source = test_sources[file]
    func = _test_function(source, primary)
    snippet = _snippet(source, func) if func is not None else ""
    api = _called_api(func, _library_names(source, package)) if func is not None else []
    message = _clean_message(messages.get(primary, ""))
    observed = _observed(func, source, message) if func is not None else ""
    subject = f"`{api[0]}`" if api else f"`{package}`"

    def compose(include_snippet: bool) -> str:
        parts = [f"{subject} {_symptom(message)}", ""]
        parts.append(
            f"Something is off in the `{package}` package"
            + (f" around {', '.join(f'`{a}`' for a in api)}." if api else ".")
        )
        if include_snippet and snippet:
            parts += ["This check from the test suite fails:", "", "```python", snippet, "```", ""]
        parts += [f"Running `{primary}` gives:", "", "```", message or "(no message)", "```", ""]
        if observed:
            parts += [observed, ""]
        parts.append("Expected: the check passes, as it did in earlier releases.")
        others = [t for t in ordered[1:] if t in messages][:3]
        if others:
            parts += ["", "Other checks that fail the same way:"]
            for other in others:
                first = _clean_message(messages[other]).splitlines()[0] if messages[other].strip() else ""
                parts.append(f"- `{other}`: {first}")
            extra = len(ordered) - 1 - len(others)
            if extra > 0:
                parts.append(f"- ... and {extra} more")
        return "\n".join(parts) + "\n"

    for include in (True, False):
        text = compose(include)
        if not any(line in text for line in forbidden):
            return text
    return (
        f"{subject} {_symptom(message)}\n\nThe `{package}` package misbehaves: `{primary}` fails "
        "with the current code and passed in earlier releases.\n"
    )
