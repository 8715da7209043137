"""JSON Pointer (RFC 6901): parse, resolve, set, remove, and list the pointers of a document."""

from jsonpointer.ops import add, remove, replace, walk
from jsonpointer.pointer import JsonPointer, PointerError, escape, unescape

__all__ = ["JsonPointer", "PointerError", "add", "escape", "remove", "replace", "unescape", "walk"]
