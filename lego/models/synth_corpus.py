"""Deterministic synthetic text that widens the tokenizer corpus.

The hand-written files in ``lego/models/corpus/`` show the *kinds* of text a coding agent sees;
this module multiplies the most repetitive kinds (pytest summaries, directory listings, JSON and
XML tool calls, unified diff hunks, tracebacks) with seeded variation, so frequent fragments such
as ``passed in``, ``"arguments": {`` or ``@@ -12,7 +12,7 @@`` become single tokens. Same seed,
same text: the tokenizer stays reproducible.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

__all__ = ["synthetic_corpus"]

_WORDS = (
    "parse config cache value key path file line token user item order record table column row "
    "index buffer stream request response client server session handler error result status count "
    "total limit offset page size name title text data field schema model event queue worker task "
    "job retry timeout delay start stop open close read write load save merge split join format "
    "account address amount archive attempt author batch branch build bytes callback channel commit "
    "config context cursor date default delta device digest entry encoding env export filter flag "
    "graph group hash header host image input issue label layout lock message method metric mode "
    "node number option output owner package parent payload pattern plugin policy port prefix "
    "price process profile prompt query range reason region report resource route rule sample "
    "scope score secret selector sequence setting shape signal source state step storage suffix "
    "summary tag target template tenant thread ticket timestamp topic total trace url user version "
    "view weight window"
).split()
_DESCRIPTIONS = (
    "Run a shell command in the repository and return its output.",
    "Read a file, optionally a range of lines.",
    "Replace an exact string in a file with another string.",
    "Create a new file or overwrite an existing one.",
    "Search the repository for a regular expression.",
    "List the files in a directory.",
    "Submit the final answer when the task is complete.",
    "Fetch a URL and return the response body as text.",
)
_ENGLISH = (
    "the test fails because the function returns early when the list is empty",
    "this change keeps the public interface the same and only fixes the edge case",
    "I could not reproduce the problem on the main branch, so I checked the release tag",
    "the error message should say which file and which line were wrong",
    "please add a regression test that fails without the fix",
    "the default timeout is too short for large uploads on slow networks",
    "we should not retry requests that are not idempotent",
    "after upgrading, the command prints a warning about a deprecated option",
    "the documentation describes the old behaviour and needs an update",
    "a missing value is treated as zero, which hides real errors",
    "the cache grows without bound because expired entries are never removed",
    "sorting is not stable when two records share the same key",
)
_MODULES = ("core", "utils", "io", "cli", "models", "parser", "cache", "client", "reader", "writer", "config")
_PACKAGES = ("textkit", "confparse", "lrucache", "tablekit", "httpmini", "dateutil2", "inventory", "sync")
_EXCEPTIONS = ("ValueError", "KeyError", "TypeError", "IndexError", "AttributeError", "AssertionError")
_COMMANDS: tuple[Callable[[random.Random], str], ...] = (
    lambda r: f"python -m pytest {_test_path(r)} -x -q",
    lambda r: f"cat {_path(r)}",
    lambda r: f"sed -n {r.randint(1, 80)},{r.randint(81, 200)}p {_path(r)}",
    lambda r: f'grep -rn "{r.choice(_WORDS)}" src/',
    lambda r: "git diff",
    lambda r: "git status",
    lambda r: f"ls {r.choice(['', '-la ', '-R '])}src/{r.choice(_PACKAGES)}",
    lambda r: f'python -c "import {r.choice(_PACKAGES)}; print({r.choice(_PACKAGES)}.__version__)"',
)
_TOOLS: dict[str, Callable[[random.Random], dict[str, str]]] = {
    "bash": lambda r: {"command": r.choice(_COMMANDS)(r)},
    "read_file": lambda r: {"path": _path(r)},
    "write_file": lambda r: {"path": _path(r), "content": _code_line(r)},
    "str_replace": lambda r: {"path": _path(r), "old_str": _code_line(r), "new_str": _code_line(r)},
    "search": lambda r: {"pattern": r.choice(_WORDS), "path": "src/"},
    "submit": lambda r: {},
}


def _ident(r: random.Random) -> str:
    return "_".join(r.sample(_WORDS, r.randint(1, 3)))


def _path(r: random.Random) -> str:
    return f"src/{r.choice(_PACKAGES)}/{r.choice(_MODULES)}.py"


def _test_path(r: random.Random) -> str:
    return f"tests/test_{r.choice(_MODULES)}.py"


def _code_line(r: random.Random) -> str:
    a, b = _ident(r), _ident(r)
    return r.choice(
        (
            f"{a} = {b}({r.choice(_WORDS)}, {r.randint(0, 100)})",
            f"return {a}.get({b!r}, None)",
            f'if {a} is None:\n    raise ValueError(f"missing {b}: {{{a}!r}}")',
            f"for {r.choice(_WORDS)} in {a}:\n    {b}.append({r.choice(_WORDS)})",
            f"self.{a} = {b}",
            f"assert {a}({r.randint(0, 9)}) == {r.randint(0, 99)}",
        )
    )


def _pytest_run(r: random.Random) -> str:
    n = r.randint(1, 40)
    failed = r.choice((0, 0, 1, 2))
    dots = "".join(r.choice(".....F") if failed else "." for _ in range(n))
    lines = [f"$ python -m pytest {_test_path(r)} -q", f"{dots:<73}[100%]"]
    if failed:
        name = f"test_{_ident(r)}"
        exc = r.choice(_EXCEPTIONS)
        lines += [
            "=" * 35 + " FAILURES " + "=" * 35,
            f"{'_' * 20} {name} {'_' * 20}",
            "",
            f"    def {name}():",
            f">       {_code_line(r).splitlines()[0]}",
            f"E       {exc}: {r.choice(_WORDS)} {r.choice(_WORDS)}",
            "",
            f"{_test_path(r)}:{r.randint(5, 300)}: {exc}",
            "=" * 29 + " short test summary info " + "=" * 28,
            f"FAILED {_test_path(r)}::{name} - {exc}",
            f"{failed} failed, {n - failed} passed in {r.random():.2f}s",
        ]
    else:
        lines.append(f"{n} passed in {r.random():.2f}s")
    return "\n".join(lines)


def _traceback(r: random.Random) -> str:
    frames = [
        f'  File "/repo/{_path(r)}", line {r.randint(1, 400)}, in {_ident(r)}\n    {_code_line(r).splitlines()[0]}'
        for _ in range(r.randint(1, 4))
    ]
    exc = r.choice(_EXCEPTIONS)
    return "Traceback (most recent call last):\n" + "\n".join(frames) + f"\n{exc}: {r.choice(_WORDS)} {_ident(r)!r}"


def _diff(r: random.Random) -> str:
    path = _path(r)
    start = r.randint(1, 300)
    old, new = _code_line(r), _code_line(r)
    ctx = [f"     {_code_line(r).splitlines()[0]}" for _ in range(3)]
    body = "\n".join(
        [*ctx, *(f"-    {x}" for x in old.splitlines()), *(f"+    {x}" for x in new.splitlines()), *ctx[:1]]
    )
    return (
        f"diff --git a/{path} b/{path}\nindex {r.getrandbits(28):07x}..{r.getrandbits(28):07x} 100644\n"
        f"--- a/{path}\n+++ b/{path}\n@@ -{start},7 +{start},7 @@ def {_ident(r)}(\n{body}"
    )


def _tool_call(r: random.Random) -> str:
    name = r.choice(list(_TOOLS))
    args = _TOOLS[name](r)
    if r.random() < 0.6:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def _prose(r: random.Random) -> str:
    subject = f"`{_ident(r)}()` in `{_path(r)}`"
    return r.choice(
        (
            f"The bug is in {subject}: it returns the wrong {r.choice(_WORDS)} when the {r.choice(_WORDS)} is empty.",
            f"I will read {subject} first, then run the failing test to confirm the fix.",
            f"Running the tests again: all {r.randint(2, 60)} pass now.",
            f"{subject} raises {r.choice(_EXCEPTIONS)} for a missing {r.choice(_WORDS)}; it should return None instead.",
            f"Let me check how {subject} handles the {r.choice(_WORDS)} before changing it.",
            f"The fix is a one-line change: compare with `<=` instead of `<` in {subject}.",
        )
    )


def _tool_schema(r: random.Random) -> str:
    props = {
        w: {"type": r.choice(("string", "integer", "boolean")), "description": f"The {w} to use."}
        for w in r.sample(_WORDS, r.randint(1, 3))
    }
    tool = {
        "type": "function",
        "function": {
            "name": _ident(r),
            "description": r.choice(_DESCRIPTIONS),
            "parameters": {"type": "object", "properties": props, "required": sorted(props)[:1]},
        },
    }
    return json.dumps(tool, ensure_ascii=False)


def _english(r: random.Random) -> str:
    first = r.choice(_ENGLISH)
    return f"{first[0].upper()}{first[1:]}; {r.choice(_ENGLISH)}. {r.choice(_ENGLISH).capitalize()}."


def _chatml(r: random.Random) -> str:
    """A short conversation in the ChatML layout the chat template produces."""
    turns = [f"<|im_start|>user\n{_prose(r)}<|im_end|>"]
    for _ in range(r.randint(1, 3)):
        turns.append(f"<|im_start|>assistant\n{_prose(r)}\n{_tool_call(r)}<|im_end|>")
        turns.append(f"<|im_start|>user\n<tool_response>\n{_pytest_run(r)}\n</tool_response><|im_end|>")
    turns.append(f"<|im_start|>assistant\n<think>\n{_english(r)}\n</think>\n\n{_prose(r)}<|im_end|>")
    return "\n".join(turns)


_KINDS = (_pytest_run, _traceback, _diff, _tool_call, _tool_call, _prose, _prose, _tool_schema, _english, _chatml)


def synthetic_corpus(seed: int = 0, target_chars: int = 240_000) -> str:
    """About ``target_chars`` characters of varied agent-like text, fixed by ``seed``."""
    r = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < target_chars:
        text = r.choice(_KINDS)(r)
        parts.append(text)
        size += len(text) + 2
    return "\n\n".join(parts)
