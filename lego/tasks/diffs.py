"""Git-style unified diffs written without git, so a patch's text depends only on file contents."""

from __future__ import annotations

import difflib

__all__ = ["file_diff", "new_file_diff", "patch_files"]


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def file_diff(path: str, before: str, after: str, context: int = 3) -> str:
    """A ``diff --git`` section changing ``path`` from ``before`` to ``after`` (empty if equal)."""
    if before == after:
        return ""
    body = "".join(difflib.unified_diff(_lines(before), _lines(after), f"a/{path}", f"b/{path}", n=context))
    return f"diff --git a/{path} b/{path}\n{body}"


def new_file_diff(path: str, content: str) -> str:
    """A ``diff --git`` section creating ``path`` with ``content``."""
    lines = _lines(content)
    header = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
    return header + f"@@ -0,0 +1,{len(content.splitlines())} @@\n" + "".join("+" + line for line in lines)


def patch_files(patch: str) -> list[str]:
    """Paths a git-style patch touches (the ``b/`` side, or ``a/`` for deletions), in order."""
    files: list[str] = []
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            parts = line.split(" b/", 1)
            if len(parts) == 2 and parts[1] not in files:
                files.append(parts[1])
    return files
