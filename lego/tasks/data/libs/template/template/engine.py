"""Parse tokens into a node tree and render it against a context dict."""

from template.filters import apply_filter, literal_or_lookup
from template.lexer import TemplateSyntaxError, tokenize

_COMPARATORS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "in": lambda a, b: a in b,
}


def _split_filters(expr):
    """``name|f1|f2:arg`` -> ("name", [("f1", []), ("f2", ["arg"])])."""
    head, *rest = [p.strip() for p in expr.split("|")]
    filters = []
    for item in rest:
        name, _, arg = item.partition(":")
        filters.append((name.strip(), [arg.strip().strip("\"'")] if arg else []))
    return head, filters


class Template:
    """A compiled template; ``strict`` makes undefined names an error instead of empty output."""

    def __init__(self, source, strict=False, autoescape=False):
        self.strict = strict
        self.autoescape = autoescape
        self._tokens = tokenize(source)
        self._pos = 0
        self.nodes = self._parse(stop=())
        if self._pos < len(self._tokens):
            token = self._tokens[self._pos]
            raise TemplateSyntaxError(f"unexpected {{% {token.value} %}}", token.line)

    def _parse(self, stop):
        nodes = []
        while self._pos < len(self._tokens):
            token = self._tokens[self._pos]
            if token.kind == "text":
                nodes.append(("text", token.value))
            elif token.kind == "var":
                nodes.append(("var", _split_filters(token.value)))
            else:
                keyword = token.value.split()[0] if token.value else ""
                if keyword in stop:
                    return nodes
                if keyword == "if":
                    nodes.append(self._parse_if(token))
                elif keyword == "for":
                    nodes.append(self._parse_for(token))
                else:
                    raise TemplateSyntaxError(f"unknown tag {keyword!r}", token.line)
            self._pos += 1
        if stop:
            raise TemplateSyntaxError(f"missing {{% {stop[-1]} %}}", self._tokens[-1].line if self._tokens else 1)
        return nodes

    def _parse_if(self, token):
        branches = []
        condition = token.value[2:].strip()
        if not condition:
            raise TemplateSyntaxError("if without a condition", token.line)
        else_body = []
        while True:
            self._pos += 1
            body = self._parse(stop=("elif", "else", "endif"))
            branches.append((condition, body))
            closing = self._tokens[self._pos].value.split()
            if closing[0] == "elif":
                condition = " ".join(closing[1:])
                continue
            if closing[0] == "else":
                self._pos += 1
                else_body = self._parse(stop=("endif",))
            return ("if", branches, else_body)

    def _parse_for(self, token):
        words = token.value.split()
        if len(words) != 4 or words[2] != "in":
            raise TemplateSyntaxError("expected {% for NAME in EXPR %}", token.line)
        self._pos += 1
        body = self._parse(stop=("endfor",))
        return ("for", words[1], words[3], body)

    def _value(self, context, expr):
        head, filters = _split_filters(expr)
        value = literal_or_lookup(context, head, self.strict)
        for name, args in filters:
            value = apply_filter(name, value, args)
        return value

    def _test(self, context, condition):
        words = condition.split()
        if words and words[0] == "not":
            return not self._test(context, " ".join(words[1:]))
        if " and " in condition:
            return all(self._test(context, part) for part in condition.split(" and "))
        if " or " in condition:
            return any(self._test(context, part) for part in condition.split(" or "))
        if len(words) == 3 and words[1] in _COMPARATORS:
            left = self._value(context, words[0])
            right = self._value(context, words[2])
            return _COMPARATORS[words[1]](left, right)
        return bool(self._value(context, condition))

    def _render(self, nodes, context, out):
        for node in nodes:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
            elif kind == "var":
                head, filters = node[1]
                value = literal_or_lookup(context, head, self.strict)
                for name, args in filters:
                    value = apply_filter(name, value, args)
                text = "" if value is None else str(value)
                if self.autoescape and not any(name == "escape" for name, _ in filters):
                    text = apply_filter("escape", text, [])
                out.append(text)
            elif kind == "if":
                for condition, body in node[1]:
                    if self._test(context, condition):
                        self._render(body, context, out)
                        break
                else:
                    self._render(node[2], context, out)
            elif kind == "for":
                _, name, expr, body = node
                items = list(self._value(context, expr) or [])
                for index, item in enumerate(items):
                    loop = {"index": index + 1, "index0": index, "first": index == 0, "last": index == len(items) - 1}
                    self._render(body, {**context, name: item, "loop": loop}, out)

    def render(self, context=None, **kwargs):
        out = []
        self._render(self.nodes, {**(context or {}), **kwargs}, out)
        return "".join(out)


def render(source, context=None, **kwargs):
    """Compile and render in one call."""
    return Template(source).render(context, **kwargs)
