"""One rollout's session: its recorder, locks, budgets and counters, and how its token is kept.

The model-face token is kept only as a SHA-256 digest (:func:`token_digest`): a lookup compares
digests, so its timing says nothing about the secret (see :mod:`lego.proxies.service`).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from lego.proxies.errors import ApiError
from lego.proxies.recorder import SessionRecorder
from lego.types import SessionSpec, TerminationLabel

__all__ = ["Session", "token_digest"]


@dataclass
class Session:
    """One rollout's state: its recorder, locks, and what the rollout code told us about it.

    ``spec``: what the rollout said about it (:class:`~lego.types.SessionSpec`, passed on unchanged).
    ``token``: the model-face secret (see :mod:`lego.proxies.service`). ``sealed``: the episode is over, the token
    is revoked and nothing more is recorded (the trajectory is still readable on the control face).
    """

    id: str
    recorder: SessionRecorder
    spec: SessionSpec = field(default_factory=SessionSpec)
    token: str = field(default="", repr=False)
    sealed: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    """The spec's metadata, copied: exported with the trajectory."""
    generations_started: int = 0
    termination: TerminationLabel = "completed"
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    calls: int = 0
    engine_time_s: float = 0.0
    proxy_time_s: float = 0.0
    engine_unavailable: int = 0
    """Calls the engine could not serve at all (unreachable, timed out): no request can cause that."""
    engine_errors: int = 0
    """Calls the engine failed on (a 502): possibly caused by what the request held, so the rollout code
    attributes a failed rollout to the infrastructure only for ``engine_unavailable``."""
    tool_choice_failures: int = 0
    """Generations under a forcing ``tool_choice`` that did not yield a call of a declared tool (not
    recorded; the client got an error instead of a wrong tool or plain text)."""
    created_at: float = field(default_factory=time.time)
    cut: str = ""
    """Why the session was cut (:meth:`lego.proxies.service.ProxyService.cut_session`); empty: it was not.
    A cut session serves no new generation; one in flight completes and is recorded."""

    def lock(self, key: str) -> asyncio.Lock:
        if key not in self.locks:
            self.locks[key] = asyncio.Lock()
        return self.locks[key]

    def spend_generation(self) -> None:
        """Count a generation against the session's budget on every thread, or refuse it.

        Check and count run with no await between them (one event loop), so concurrent requests
        cannot overshoot; a generation counts once it starts, served or not: it is the engine
        time an agent can make the rollout spend (side calls and floods included)."""
        limit = self.spec.max_generations
        if limit is not None and self.generations_started >= limit:
            self.termination = "max_turns"
            raise ApiError(
                400,
                f"this session reached its limit of {limit} generations (all threads together)",
                code="max_turns",
            )
        self.generations_started += 1

    def check_cut(self) -> None:
        """Refuse a new generation on a cut session, as its turn budget would (a 400 the harness ends on)."""
        if self.cut:
            self.termination = "cut"
            raise ApiError(400, f"this session was cut at a turn boundary: {self.cut}", code="max_turns")

    def check_open(self) -> None:
        """Refuse a call on a sealed or closed session (401: its key no longer works)."""
        if self.sealed:
            raise ApiError(
                401,
                f"session {self.id!r} has ended (sealed or closed by the rollout); its key no longer works",
                "authentication",
            )


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()
