"""``ast.parse`` that is safe to call from several threads at once.

CPython keeps the AST constructor's recursion depth in per-interpreter state rather than per call
(gh-106905; Python 3.11 here): when two threads convert trees at once — a garbage collection that runs a
finalizer mid-conversion hands the GIL to the other — each corrupts the other's count and one of them
raises ``SystemError: AST constructor recursion depth mismatch``. The host parses test files while
concurrent rollouts are graded in threads (the blind copy, the task factory), and such an error
there once zeroed a correct rollout as the policy's failure, so every parse in the house goes through
:func:`parse`, which holds one process-wide lock around ``ast.parse``. ``ast.literal_eval`` of a string
parses it the same way (the grader reads the hidden tests' expected literals with it while other
grades parse test files): :func:`literal_eval` parses under the same lock. It zeroed the oracle's
correct patch of one real held-out task in all four harnesses of one eval, as the policy's failure.
"""

from __future__ import annotations

import ast
import threading
from typing import Any, Literal, overload

__all__ = ["literal_eval", "parse"]

_LOCK = threading.Lock()


@overload
def parse(source: str | bytes, filename: str = ..., mode: Literal["exec"] = ...) -> ast.Module: ...
@overload
def parse(source: str | bytes, filename: str = ..., *, mode: Literal["eval"]) -> ast.Expression: ...
def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.Module | ast.Expression:
    """``ast.parse(source, filename, mode)`` under the process-wide lock (same result, same exceptions)."""
    with _LOCK:
        return ast.parse(source, filename, mode)  # type: ignore[return-value]


def literal_eval(node_or_string: str | ast.AST) -> Any:
    """``ast.literal_eval``, a string parsed under the process-wide lock (same result, same exceptions)."""
    if isinstance(node_or_string, str):
        with _LOCK:
            node_or_string = ast.parse(node_or_string.lstrip(" \t"), mode="eval")
    return ast.literal_eval(node_or_string)
