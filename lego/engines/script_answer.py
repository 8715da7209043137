"""A task's answer that is a program rather than a patch: Harbor's ``solution/`` directory.

A SWE-bench task's answer is its gold patch; a Harbor task's is ``solution/solve.sh`` (with any files
beside it), run in the task's container. Both travel the same way, as the text of ``Task.patch``, to
the only parties that may hold an answer: the oracle engine (``RequestContext.answer``) and the
grader's gold check. A script answer is told from a patch by its first line, :data:`TAG`, which no
unified diff starts with; the rest is the JSON of :class:`ScriptAnswer`.

Played, it is one shell line (:meth:`ScriptAnswer.command`): unpack the directory into
``/solution`` where that directory exists and is writable (lego's Harbor images make it so: Harbor's
oracle runs ``solve.sh`` from there, and scripts name the path), else into a fresh temporary
directory, then ``bash solve.sh`` from the current directory (the repo), with ``[solution].env`` set.
The archive is built deterministically (sorted entries, fixed times), so the same directory always
encodes to the same text.
"""

from __future__ import annotations

import base64
import gzip
import io
import shlex
import tarfile
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["TAG", "ScriptAnswer"]

TAG = "#!lego-script-answer/1"
"""First line of a script answer (a patch starts with ``diff --git`` or ``---``)."""


class ScriptAnswer(BaseModel):
    """A solution directory, its entry script and the environment it runs with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    archive: str = Field(description="base64 of the gzipped tar of the solution directory.")
    entry: str = Field("solve.sh", description="The script to run, relative to the directory.")
    env: dict[str, str] = Field(default_factory=dict, description="Variables set for the script.")

    @classmethod
    def from_files(
        cls, files: Mapping[str, tuple[bytes, int]], *, entry: str = "solve.sh", env: Mapping[str, str] | None = None
    ) -> ScriptAnswer:
        """``files``: relative path -> (content, mode). The entry script must be one of them."""
        if entry not in files:
            raise ValueError(f"the solution has no {entry}; files: {sorted(files)}")
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(files):
                data, mode = files[name]
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), mode & 0o777, 0
                tar.addfile(info, io.BytesIO(data))
        packed = gzip.compress(raw.getvalue(), mtime=0)
        return cls(archive=base64.b64encode(packed).decode(), entry=entry, env=dict(env or {}))

    @classmethod
    def decode(cls, answer: str) -> ScriptAnswer | None:
        """The script answer ``answer`` holds, or None when it is a patch (or anything else)."""
        head, _, body = answer.partition("\n")
        if head.strip() != TAG:
            return None
        try:
            return cls.model_validate_json(body)
        except ValidationError as exc:
            raise ValueError(f"a malformed script answer: {exc}") from exc

    def encode(self) -> str:
        """The text that goes into ``Task.patch``."""
        return f"{TAG}\n{self.model_dump_json()}\n"

    def files(self) -> dict[str, bytes]:
        """The solution directory's files (relative path -> content)."""
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(base64.b64decode(self.archive)))) as tar:
            out = {}
            for member in tar.getmembers():
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is not None:
                    out[member.name] = handle.read()
            return out

    def command(self) -> str:
        """One shell line that unpacks the directory and runs the entry script from the current directory."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        run = f"env {env} bash" if env else "bash"
        return (
            'S=/solution; { [ -d "$S" ] && [ -w "$S" ]; } || S=$(mktemp -d); '
            f'echo {self.archive} | base64 -d | tar -xzf - -C "$S" && {run} "$S/{self.entry}"'
        )
