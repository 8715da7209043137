"""Greedy word wrapping and indentation helpers."""


def _split_long(word, width):
    """Cut a word longer than ``width`` into ``width``-sized chunks."""
    return [word[i : i + width] for i in range(0, len(word), width)]


def wrap(text, width=70, initial_indent="", subsequent_indent="", break_long_words=True):
    """Split ``text`` into lines of at most ``width`` characters, breaking at whitespace.

    Runs of whitespace collapse to one space. A word longer than the room on a line is cut when
    ``break_long_words``, otherwise it gets a line of its own (which may exceed ``width``).
    """
    if width <= 0:
        raise ValueError(f"width must be positive, got {width}")
    words = text.split()
    lines = []
    current = []
    current_len = 0
    indent = initial_indent
    for word in words:
        room = width - len(indent)
        if room <= 0:
            raise ValueError("indent is wider than the line width")
        pieces = _split_long(word, room) if break_long_words and len(word) > room else [word]
        for piece in pieces:
            needed = len(piece) if not current else current_len + 1 + len(piece)
            if current and needed > room:
                lines.append(indent + " ".join(current))
                indent = subsequent_indent
                room = width - len(indent)
                current = [piece]
                current_len = len(piece)
            else:
                current.append(piece)
                current_len = needed
    if current:
        lines.append(indent + " ".join(current))
    return lines


def fill(text, width=70, **kwargs):
    """:func:`wrap`, joined with newlines."""
    return "\n".join(wrap(text, width, **kwargs))


def indent(text, prefix, only_nonblank=True):
    """Put ``prefix`` before every line (blank lines too unless ``only_nonblank``)."""
    out = []
    for line in text.splitlines(keepends=True):
        if only_nonblank and not line.strip():
            out.append(line)
        else:
            out.append(prefix + line)
    return "".join(out)


def _leading_whitespace(line):
    return line[: len(line) - len(line.lstrip())]


def dedent(text):
    """Remove the longest whitespace prefix common to all non-blank lines."""
    lines = text.splitlines(keepends=True)
    margins = [_leading_whitespace(line) for line in lines if line.strip()]
    if not margins:
        return text
    common = margins[0]
    for margin in margins[1:]:
        size = 0
        while size < len(common) and size < len(margin) and common[size] == margin[size]:
            size += 1
        common = common[:size]
    cut = len(common)
    return "".join(line[cut:] if line.strip() else line.lstrip(" \t") for line in lines)
