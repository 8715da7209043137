"""Parsing and resolving JSON pointers such as ``/a/0/b~1c``."""


class PointerError(LookupError):
    """A pointer is malformed or does not resolve in the given document."""


def escape(token):
    """Escape one reference token: ``~`` becomes ``~0`` and ``/`` becomes ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token):
    """Undo :func:`escape` (``~1`` first would turn ``~01`` into ``/``, so order matters)."""
    if "~" in token:
        index = token.find("~")
        while index != -1:
            if index + 1 >= len(token) or token[index + 1] not in "01":
                raise PointerError(f"invalid escape in token {token!r}")
            index = token.find("~", index + 2)
    return token.replace("~1", "/").replace("~0", "~")


def _array_index(token, length, allow_end=False):
    """The list index a token names; ``-`` means one past the end when ``allow_end``."""
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PointerError(f"{token!r} is not a valid array index")
    index = int(token)
    limit = length + 1 if allow_end else length
    if index >= limit:
        raise PointerError(f"index {index} is out of range for an array of length {length}")
    return index


class JsonPointer:
    """A parsed pointer: a tuple of unescaped reference tokens."""

    def __init__(self, text=""):
        if text and not text.startswith("/"):
            raise PointerError(f"pointer {text!r} must be empty or start with '/'")
        self.tokens = tuple(unescape(t) for t in text.split("/")[1:]) if text else ()

    @classmethod
    def from_tokens(cls, tokens):
        pointer = cls()
        pointer.tokens = tuple(str(t) for t in tokens)
        return pointer

    def __str__(self):
        return "".join("/" + escape(t) for t in self.tokens)

    def __repr__(self):
        return f"JsonPointer({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, JsonPointer) and self.tokens == other.tokens

    def __hash__(self):
        return hash(self.tokens)

    def __truediv__(self, token):
        return JsonPointer.from_tokens((*self.tokens, token))

    @property
    def parent(self):
        """The pointer one level up; the root has no parent."""
        if not self.tokens:
            raise PointerError("the root pointer has no parent")
        return JsonPointer.from_tokens(self.tokens[:-1])

    def is_prefix_of(self, other):
        return other.tokens[: len(self.tokens)] == self.tokens

    def step(self, node, token):
        """Follow one token from ``node``."""
        if isinstance(node, dict):
            if token not in node:
                raise PointerError(f"key {token!r} not found")
            return node[token]
        if isinstance(node, list):
            return node[_array_index(token, len(node))]
        raise PointerError(f"cannot follow {token!r} into a {type(node).__name__}")

    def resolve(self, document, default=PointerError):
        """The value this pointer names; ``default`` instead of raising when given."""
        node = document
        try:
            for token in self.tokens:
                node = self.step(node, token)
        except PointerError:
            if default is PointerError:
                raise
            return default
        return node

    def exists(self, document):
        marker = object()
        return self.resolve(document, marker) is not marker
