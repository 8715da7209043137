"""Name -> implementation registries, imported lazily.

A registry maps short names to dotted import paths ("package.module:attr"). A full dotted path also
works, so users can plug in their own class without editing lego. An unknown name raises a
:class:`ConfigError` listing the valid names.
"""

from __future__ import annotations

import importlib
from typing import Any

from lego.errors import ConfigError

__all__ = ["Registry"]


class Registry:
    """A lazy name -> ``module:attr`` mapping for one kind of component."""

    def __init__(self, kind: str, entries: dict[str, str]) -> None:
        self.kind = kind
        self._entries = dict(entries)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def register(self, name: str, target: str) -> None:
        self._entries[name] = target

    def resolve(self, name: str) -> Any:
        target = self._entries.get(name)
        if target is None:
            if ":" not in name:
                raise ConfigError(f"unknown {self.kind} {name!r}; valid names: {', '.join(self.names())}")
            target = name
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"cannot import {self.kind} {name!r} from {module_name}: {exc}") from exc
        try:
            return getattr(module, attr)
        except AttributeError as exc:
            raise ConfigError(f"{module_name} has no {attr!r} ({self.kind} {name!r})") from exc
