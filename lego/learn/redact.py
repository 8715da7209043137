"""Secrets out of text before anything is written: API keys, tokens, private keys, ``KEY=value`` secrets.

    redactor = Redactor(literals=[session_key])
    clean, n = redactor.redact("export OPENAI_API_KEY=sk-proj-...")   # -> "export OPENAI_API_KEY=[REDACTED:openai_key]", 1
    obj, n = redactor.redact_json({"password": "hunter2", "cmd": "cat .env"})

What is found (each rule one regex, applied in :data:`RULES`' order): PEM private-key blocks (an
unterminated one to the end of the text: a truncated ``cat`` of a key file), JWTs, Anthropic
(``sk-ant-``) and OpenAI (``sk-``, ``sk-proj-``) keys, GitHub tokens (``ghp_`` and its siblings,
``github_pat_``), AWS access key ids (``AKIA``/``ASIA``...) and secret access keys
(``aws_secret_access_key = ...``, whatever the case), Slack tokens (``xox?-``), bearer and
``Authorization:`` header values, passwords in URLs (``scheme://user:PASSWORD@host``), and the value
of an assignment whose key looks secret (:func:`secret_key`: PASSWORD, SECRET, TOKEN, API_KEY,
ACCESS_KEY, PRIVATE_KEY, CREDENTIAL, ...): ``.env``/shell ``KEY=value``, ini/TOML ``key = "value"``,
YAML ``key: value`` and JSON ``"key": "value"`` -- which is how an AWS secret access key, a database
password or a webhook secret is found, since those have no shape of their own. Exact strings
(``literals``: the harness's own API key, ``serve.redact_literals``) are redacted wherever they occur.

Every match becomes a stable placeholder, ``[REDACTED:<rule>]``: the same for every secret of a
kind, derived from nothing in the secret (a hash of a low-entropy password could be brute-forced
from the database), and redacting redacted text changes nothing.

The assignment rule trades recall for precision on code, which is most of what an agent reads: a
lowercase key counts only when its value is quoted or has a digit (``password = "x"`` and
``password=hunter2`` are redacted, ``token = self.token`` and ``def f(token: str)`` are not), a
value that is a call, a shell expansion (``$VAR``), a number or a boolean is not a secret, and
``max_tokens``/``tokenizer`` are not secret keys. What is not found: a secret with no recognisable
shape under a key that does not look secret (``X=correct-horse``); add it to ``serve.redact_literals``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

__all__ = ["RULES", "Redactor", "Rule", "placeholder", "secret_key"]


def placeholder(rule: str) -> str:
    return f"[REDACTED:{rule}]"


@dataclass(frozen=True)
class Rule:
    """One kind of secret: ``pattern``'s group ``group`` (0: the whole match) is the secret."""

    name: str
    pattern: re.Pattern[str]
    group: int = 0


RULES: tuple[Rule, ...] = (
    Rule(
        "private_key",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
    ),
    Rule("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    Rule("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}")),
    Rule("openai_key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    Rule("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})")),
    Rule("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b")),
    Rule(
        "aws_secret_key",
        re.compile(r"(?i)(aws_?secret_?access_?key[\"']?[ \t]*[:=][ \t]*[\"']?)([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"),
        group=2,
    ),
    Rule("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    Rule("bearer", re.compile(r"(?i)(\bbearer[ \t]+)([A-Za-z0-9._~+/-]{8,}=*)"), group=2),
    Rule(
        "authorization",
        re.compile(
            r"(?i)(\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:basic[ \t]+|token[ \t]+)?)([^\s\"',;]{8,})"
        ),
        group=2,
    ),
    Rule("url_password", re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@\[\]]+:)(?!\[REDACTED:)([^/\s@]+)(?=@)"), group=2),
)
"""The shaped secrets, in the order they are applied (the assignment rule runs after them)."""

_SECRET_KEY = re.compile(
    r"(?i)(?:^|[^a-z])(?:pass|pwd)(?:$|[^a-z])|passw(?:or)?d|passphrase|secret|token(?!s|iz)|api[_-]?key|apikey"
    r"|access[_-]?key|private[_-]?key|credential|auth[_-]?key|signing[_-]?key|session[_-]?key|client[_-]?secret"
)
_ASSIGNMENT = re.compile(
    r"""(?P<lead>(?<![A-Za-z0-9_])(?P<q>["']?)(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)[ \t]*(?P<sep>:|=)[ \t]*)"""
    r"""(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s"'#,;&|()\[\]{}<>`]+)(?![\w(])"""
)
_NOT_A_SECRET = re.compile(r"(?i)(?:true|false|none|null|nil|yes|no|on|off|-?\d{1,9}(?:\.\d+)?|\$.*|\[REDACTED:.*)")


def secret_key(key: str) -> bool:
    """Whether an assignment's key names a secret (PASSWORD, DB_PASS, API_KEY, GITHUB_TOKEN, ...)."""
    return bool(_SECRET_KEY.search(key))


def _assignment(match: re.Match[str]) -> str:
    key, value, sep = match["key"], match["value"], match["sep"]
    quoted = value[:1] in "\"'" and len(value) >= 2
    inner = value[1:-1] if quoted else value
    if not secret_key(key) or not inner or _NOT_A_SECRET.fullmatch(inner):
        return match.group(0)
    if not quoted and not key.isupper() and not any(c.isdigit() for c in inner):
        return match.group(0)  # code: `token = self.token`, `def f(token: str)`
    if sep == ":" and not quoted and len(inner) < 6:
        return match.group(0)  # YAML-looking `token: str`
    mark = placeholder("secret_value")
    return match["lead"] + (value[0] + mark + value[-1] if quoted else mark)


class Redactor:
    """Replaces secrets in text with placeholders (see the module docstring). Configuration only:
    one redactor serves every turn; per-session keys come in :meth:`with_literals`."""

    def __init__(self, literals: Iterable[str] = ()) -> None:
        # Longest first, so a literal that contains another is replaced whole.
        self.literals = tuple(sorted({s for s in literals if len(s) >= 4}, key=len, reverse=True))

    def with_literals(self, literals: Iterable[str]) -> Redactor:
        return Redactor([*self.literals, *literals])

    def redact(self, text: str) -> tuple[str, int]:
        """``text`` with every secret replaced, and how many were."""
        count = 0
        for lit in self.literals:
            if lit in text:
                count += text.count(lit)
                text = text.replace(lit, placeholder("literal"))
        for rule in RULES:
            text, n = rule.pattern.subn(partial(_replace, rule=rule), text)
            count += n
        text, n = _redact_assignments(text)
        return text, count + n

    def redact_json(self, obj: Any) -> tuple[Any, int]:
        """``obj`` (JSON-like) with every string redacted, and a string under a secret-looking key
        (``{"password": "..."}``) replaced whole; returns the copy and how many secrets were found."""
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, list):
            parts = [self.redact_json(v) for v in obj]
            return [p for p, _ in parts], sum(n for _, n in parts)
        if isinstance(obj, dict):
            out: dict[str, Any] = {}
            count = 0
            for k, v in obj.items():
                if isinstance(v, str) and v and secret_key(str(k)) and not _NOT_A_SECRET.fullmatch(v):
                    out[k] = placeholder("secret_value")
                    count += 1
                else:
                    out[k], n = self.redact_json(v)
                    count += n
            return out, count
        return obj, 0

    def count(self, text: str) -> int:
        """How many secrets ``text`` holds."""
        return self.redact(text)[1]


def _replace(match: re.Match[str], rule: Rule) -> str:
    if rule.group == 0:
        return placeholder(rule.name)
    start, end = match.span(rule.group)
    whole = match.group(0)
    base = match.start()
    return whole[: start - base] + placeholder(rule.name) + whole[end - base :]


def _redact_assignments(text: str) -> tuple[str, int]:
    count = 0

    def one(match: re.Match[str]) -> str:
        nonlocal count
        out = _assignment(match)
        count += out != match.group(0)
        return out

    return _ASSIGNMENT.sub(one, text), count
