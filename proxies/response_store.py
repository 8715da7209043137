"""The Responses API's stored conversations, behind ``previous_response_id``.

A response id from one session means nothing in another, so entries are keyed by
``(session id, response id)``: no session can continue (or read) another's conversation. The
store is bounded (least recently stored first out) because an agent can mint ids without end.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["ResponseStore"]

Message = dict[str, Any]


class ResponseStore:
    """Conversations (system messages left out) by ``(session id, response id)``, at most ``capacity``."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._items: OrderedDict[tuple[str, str], list[Message]] = OrderedDict()

    def get(self, session_id: str, response_id: str) -> list[Message] | None:
        return self._items.get((session_id, response_id))

    def put(self, session_id: str, response_id: str, messages: list[Message]) -> None:
        self._items[(session_id, response_id)] = messages
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
