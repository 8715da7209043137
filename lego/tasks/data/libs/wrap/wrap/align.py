"""Aligning lines: left, right, centre, full justification, and truncation with a placeholder."""

from wrap.core import wrap


def ljust_lines(lines, width, fillchar=" "):
    return [line + fillchar * (width - len(line)) for line in lines]


def rjust_lines(lines, width, fillchar=" "):
    return [fillchar * (width - len(line)) + line for line in lines]


def center(line, width, fillchar=" "):
    """Centre ``line``; an odd leftover goes to the right side."""
    total = width - len(line)
    if total <= 0:
        return line
    left = total // 2
    right = total - left
    return fillchar * left + line + fillchar * right


def _justify_line(line, width):
    words = line.split(" ")
    if len(words) == 1:
        return line
    gaps = len(words) - 1
    spaces = width - sum(len(w) for w in words)
    base, extra = divmod(spaces, gaps)
    out = []
    for index, word in enumerate(words[:-1]):
        out.append(word)
        out.append(" " * (base + (1 if index < extra else 0)))
    out.append(words[-1])
    return "".join(out)


def justify(text, width):
    """Wrap and fully justify: every line but the last is padded to exactly ``width``."""
    lines = wrap(text, width)
    if not lines:
        return []
    return [_justify_line(line, width) for line in lines[:-1]] + [lines[-1]]


def truncate(text, width, placeholder="..."):
    """Collapse whitespace and cut at a word boundary so the result, placeholder included, fits."""
    collapsed = " ".join(text.split())
    if len(collapsed) <= width:
        return collapsed
    if len(placeholder) > width:
        raise ValueError("placeholder is longer than the width")
    room = width - len(placeholder)
    words = collapsed.split(" ")
    kept = []
    used = 0
    for word in words:
        extra = len(word) if not kept else len(word) + 1
        if used + extra > room:
            break
        kept.append(word)
        used += extra
    if not kept:
        return placeholder.lstrip()
    return " ".join(kept) + placeholder
