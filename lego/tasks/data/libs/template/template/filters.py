"""Built-in filters and value lookup."""


class TemplateRuntimeError(LookupError):
    """Rendering failed: an unknown filter, or a strict lookup of a missing name."""


def escape_html(value):
    text = str(value)
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;").replace("'", "&#39;")
    )


def _truncate(value, length="10"):
    text = str(value)
    size = int(length)
    if len(text) <= size:
        return text
    return text[: size - 1] + "…"


def _default(value, fallback=""):
    return fallback if value in (None, "") else value


def _join(value, sep=", "):
    return sep.join(str(v) for v in value)


def _pluralize(value, suffix="s"):
    return "" if value == 1 else suffix


FILTERS = {
    "upper": lambda v: str(v).upper(),
    "lower": lambda v: str(v).lower(),
    "title": lambda v: str(v).title(),
    "strip": lambda v: str(v).strip(),
    "length": len,
    "first": lambda v: v[0],
    "last": lambda v: v[-1],
    "reverse": lambda v: v[::-1],
    "escape": escape_html,
    "truncate": _truncate,
    "default": _default,
    "join": _join,
    "pluralize": _pluralize,
}


def lookup(context, dotted, strict=False):
    """Resolve ``a.b.0`` against dicts, lists (integer parts) and attributes."""
    parts = dotted.split(".")
    if parts[0] not in context:
        if strict:
            raise TemplateRuntimeError(f"undefined name {parts[0]!r}")
        return None
    value = context[parts[0]]
    for part in parts[1:]:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list | tuple) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif hasattr(value, part):
            value = getattr(value, part)
        else:
            if strict:
                raise TemplateRuntimeError(f"{dotted!r}: cannot find {part!r}")
            return None
    return value


def literal_or_lookup(context, text, strict=False):
    """A quoted string, an integer, ``true``/``false``/``none``, or a dotted name."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if text.lstrip("-").isdigit():
        return int(text)
    constants = {"true": True, "false": False, "none": None}
    if text in constants:
        return constants[text]
    return lookup(context, text, strict)


def apply_filter(name, value, args):
    func = FILTERS.get(name)
    if func is None:
        raise TemplateRuntimeError(f"unknown filter {name!r}")
    return func(value, *args)
