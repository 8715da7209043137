"""Splitting template text into text, variable, block and comment tokens."""

import re

_TAG = re.compile(r"({{.*?}}|{%.*?%}|{#.*?#})", re.DOTALL)


class TemplateSyntaxError(ValueError):
    """The template text is malformed; the message gives the line number."""

    def __init__(self, message, line):
        super().__init__(f"line {line}: {message}")
        self.line = line


class Token:
    __slots__ = ("kind", "line", "value")

    def __init__(self, kind, value, line):
        self.kind = kind
        self.value = value
        self.line = line

    def __repr__(self):
        return f"Token({self.kind!r}, {self.value!r}, {self.line})"


def tokenize(source):
    """Tokens of kind ``text``, ``var``, ``block``; comments are dropped.

    A block tag written ``{%- ... %}`` strips whitespace before it, ``{% ... -%}`` after it.
    """
    tokens = []
    line = 1
    strip_next = False
    for piece in _TAG.split(source):
        if not piece:
            continue
        if piece.startswith("{#") and piece.endswith("#}"):
            line += piece.count("\n")
            continue
        if piece.startswith("{{") and piece.endswith("}}"):
            expr = piece[2:-2].strip()
            if not expr:
                raise TemplateSyntaxError("empty variable tag", line)
            tokens.append(Token("var", expr, line))
            strip_next = False
        elif piece.startswith("{%") and piece.endswith("%}"):
            body = piece[2:-2]
            if body.startswith("-"):
                body = body[1:]
                if tokens and tokens[-1].kind == "text":
                    tokens[-1].value = tokens[-1].value.rstrip()
            strip_next = body.endswith("-")
            if strip_next:
                body = body[:-1]
            tokens.append(Token("block", body.strip(), line))
        else:
            text = piece.lstrip() if strip_next else piece
            strip_next = False
            if "{{" in text or "{%" in text:
                raise TemplateSyntaxError("unclosed tag", line)
            tokens.append(Token("text", text, line))
        line += piece.count("\n")
    return tokens
