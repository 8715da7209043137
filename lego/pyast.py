"""``ast.parse`` that is safe to call from several threads at once.

CPython keeps the AST constructor's recursion depth in per-interpreter state rather than per call
(gh-106905; Python 3.11 here): when two threads convert trees at once — a garbage collection that runs a
finalizer mid-conversion hands the GIL to the other — each corrupts the other's count and one of them
raises ``SystemError: AST constructor recursion depth mismatch``. The host parses test files while
concurrent rollouts are graded in threads (the perturbation planner, the task factory), and such an error
there once zeroed a correct rollout as the policy's failure, so every parse in the house goes through
:func:`parse`, which holds one process-wide lock around ``ast.parse``.
"""

from __future__ import annotations

import ast
import threading

__all__ = ["parse"]

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)`` under the process-wide lock (same result, same exceptions)."""
    with _LOCK:
        return ast.parse(source, filename)
