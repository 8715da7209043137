"""Edits addressed by pointers (JSON Patch's add / remove / replace) and document walking.

Edits return a new document; the input is never changed.
"""

import copy

from jsonpointer.pointer import JsonPointer, PointerError, _array_index


def _parent_and_token(document, pointer):
    pointer = pointer if isinstance(pointer, JsonPointer) else JsonPointer(pointer)
    if not pointer.tokens:
        return None, None, pointer
    doc = copy.deepcopy(document)
    parent = pointer.parent.resolve(doc)
    return doc, parent, pointer


def add(document, pointer, value):
    """Insert ``value``: a new or replaced object member, or an array element inserted before the index."""
    doc, parent, pointer = _parent_and_token(document, pointer)
    if doc is None:
        return copy.deepcopy(value)
    token = pointer.tokens[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_array_index(token, len(parent), allow_end=True), value)
    else:
        raise PointerError(f"cannot add into a {type(parent).__name__}")
    return doc


def remove(document, pointer):
    """Delete the member or element the pointer names."""
    doc, parent, pointer = _parent_and_token(document, pointer)
    if doc is None:
        raise PointerError("cannot remove the whole document")
    token = pointer.tokens[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PointerError(f"key {token!r} not found")
        del parent[token]
    elif isinstance(parent, list):
        del parent[_array_index(token, len(parent))]
    else:
        raise PointerError(f"cannot remove from a {type(parent).__name__}")
    return doc


def replace(document, pointer, value):
    """Replace an existing value (the target must exist)."""
    doc, parent, pointer = _parent_and_token(document, pointer)
    if doc is None:
        return copy.deepcopy(value)
    token = pointer.tokens[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PointerError(f"key {token!r} not found")
        parent[token] = value
    elif isinstance(parent, list):
        parent[_array_index(token, len(parent))] = value
    else:
        raise PointerError(f"cannot replace inside a {type(parent).__name__}")
    return doc


def walk(document, leaves_only=False):
    """Every (pointer string, value) pair in document order, the root first."""
    out = []

    def visit(node, tokens):
        is_container = isinstance(node, dict | list)
        if not (leaves_only and is_container):
            out.append((str(JsonPointer.from_tokens(tokens)), node))
        if isinstance(node, dict):
            for key, child in node.items():
                visit(child, (*tokens, key))
        elif isinstance(node, list):
            for index, child in enumerate(node):
                visit(child, (*tokens, str(index)))

    visit(document, ())
    return out
