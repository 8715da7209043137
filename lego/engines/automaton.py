"""A regular expression as an automaton over characters, for guided decoding.

The dialect is :mod:`lego.models.tool_grammar`'s: literals, ``\\`` escapes (``\\n``, ``\\xHH``,
``\\uHHHH``, ``\\d\\s\\w``), classes ``[...]`` / ``[^...]`` with ranges, ``(?:...)``, ``|``, ``*``, ``+``,
``?``, ``{m,n}``. :func:`compile_regex` parses it (recursive descent), builds a Thompson NFA and
wraps it in an :class:`Automaton`: a DFA built lazily as characters are fed, which also knows, for
every state, the shortest text that completes a match (a 0-1 BFS backwards from the accept state,
done once).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["DEAD", "Automaton", "CharSet", "compile_regex"]

DEAD = -1
"""The rejecting state: no continuation matches."""


@dataclass(frozen=True)
class CharSet:
    """A character class: code point ranges, or everything but them (``negated``)."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def __contains__(self, cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in self.ranges) != self.negated

    def mask(self, cps: torch.Tensor) -> torch.Tensor:
        """Which of the code points ``cps`` (N,) are in the class, as a bool tensor (N,)."""
        hit = torch.zeros_like(cps, dtype=torch.bool)
        for lo, hi in self.ranges:
            hit |= (cps >= lo) & (cps <= hi)
        return ~hit if self.negated else hit

    def example(self) -> str:
        """A character of the class (a plain one where there is a choice): for shortest completions."""
        for ch in "a0 x_":
            if ord(ch) in self:
                return ch
        if not self.negated:
            return chr(self.ranges[0][0])
        cp = 0x21
        while cp in self.ranges or cp not in self:
            cp += 1
        return chr(cp)


Node = tuple[Any, ...]
_CLASSES = {"d": ((48, 57),), "s": ((9, 10), (13, 13), (32, 32)), "w": ((48, 57), (65, 90), (95, 95), (97, 122))}
_SIMPLE = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "0": 0}


class _Parser:
    """Recursive descent over the dialect: alternation, sequence, quantified atoms."""

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def fail(self, why: str) -> ValueError:
        return ValueError(f"regex {self.text[:60]!r}: {why} at {self.pos}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self) -> str:
        ch = self.peek()
        if not ch:
            raise self.fail("unexpected end")
        self.pos += 1
        return ch

    def parse(self) -> Node:
        node = self.alt()
        if self.pos != len(self.text):
            raise self.fail(f"unexpected {self.peek()!r}")
        return node

    def alt(self) -> Node:
        options = [self.seq()]
        while self.peek() == "|":
            self.pos += 1
            options.append(self.seq())
        return options[0] if len(options) == 1 else ("alt", options)

    def seq(self) -> Node:
        items: list[Node] = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.quantified(self.atom()))
        return ("seq", items)

    def quantified(self, node: Node) -> Node:
        ch = self.peek()
        if ch and ch in "*+?":
            self.pos += 1
            return ("rep", node, 1 if ch == "+" else 0, None if ch != "?" else 1)
        if ch == "{":
            end = self.text.index("}", self.pos)
            lo, comma, hi = self.text[self.pos + 1 : end].partition(",")
            self.pos = end + 1
            low = int(lo or 0)
            return ("rep", node, low, (int(hi) if hi else None) if comma else low)
        return node

    def atom(self) -> Node:
        ch = self.take()
        if ch == "(":
            if self.text.startswith("?:", self.pos):
                self.pos += 2
            node = self.alt()
            if self.take() != ")":
                raise self.fail("unclosed group")
            return node
        if ch == "[":
            return ("set", self.char_class())
        if ch == "\\":
            return ("set", self.escape())
        if ch == ".":
            return ("set", CharSet(((10, 10),), negated=True))
        return ("set", CharSet(((ord(ch), ord(ch)),)))

    def escape_cp(self) -> int | CharSet:
        ch = self.take()
        if ch in _SIMPLE:
            return _SIMPLE[ch]
        if ch in ("x", "u"):
            n = 2 if ch == "x" else 4
            digits = self.text[self.pos : self.pos + n]
            self.pos += n
            return int(digits, 16)
        if ch.lower() in _CLASSES:
            return CharSet(_CLASSES[ch.lower()], negated=ch.isupper())
        return ord(ch)

    def escape(self) -> CharSet:
        cp = self.escape_cp()
        return cp if isinstance(cp, CharSet) else CharSet(((cp, cp),))

    def char_class(self) -> CharSet:
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            ch = self.take()
            lo = self.escape_cp() if ch == "\\" else ord(ch)
            if isinstance(lo, CharSet):
                if lo.negated:
                    raise self.fail("negated escape inside a class")
                ranges.extend(lo.ranges)
                continue
            hi = lo
            if self.peek() == "-" and self.text[self.pos + 1 : self.pos + 2] not in ("]", ""):
                self.pos += 1
                nxt = self.take()
                end = self.escape_cp() if nxt == "\\" else ord(nxt)
                if isinstance(end, CharSet):
                    raise self.fail("a class escape cannot end a range")
                hi = end
            ranges.append((lo, hi))
        self.pos += 1
        return CharSet(tuple(ranges), negated)


class _Nfa:
    """Thompson construction: per state, epsilon successors and (class, successor) edges."""

    def __init__(self, node: Node) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[CharSet, int]]] = []
        self.start, self.accept = self.build(node)

    def new(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, node: Node) -> tuple[int, int]:
        kind = node[0]
        if kind == "set":
            s, e = self.new(), self.new()
            self.edges[s].append((node[1], e))
            return s, e
        if kind == "seq":
            s = cur = self.new()
            for item in node[1]:
                a, b = self.build(item)
                self.eps[cur].append(a)
                cur = b
            return s, cur
        if kind == "alt":
            s, e = self.new(), self.new()
            for option in node[1]:
                a, b = self.build(option)
                self.eps[s].append(a)
                self.eps[b].append(e)
            return s, e
        _, inner, lo, hi = node
        s = cur = self.new()
        for _ in range(lo):
            a, b = self.build(inner)
            self.eps[cur].append(a)
            cur = b
        e = self.new()
        if hi is None:
            a, b = self.build(inner)
            self.eps[cur] += [a, e]
            self.eps[b].append(cur)
        else:
            for _ in range(hi - lo):
                a, b = self.build(inner)
                self.eps[cur] += [a, e]
                cur = b
            self.eps[cur].append(e)
        return s, e


class Automaton:
    """A regex as a lazily built DFA over characters. States are ints; :data:`DEAD` rejects."""

    def __init__(self, nfa: _Nfa) -> None:
        self.nfa = nfa
        self._sets: list[frozenset[int]] = []
        self._ids: dict[frozenset[int], int] = {}
        self._trans: dict[tuple[int, str], int] = {}
        self._dist = self._distances()
        self._shortest: dict[int, str] = {}
        self.ok_cache: dict[int, torch.Tensor] = {}  # state -> allowed first characters (TokenTable's)
        self.start = self._state({nfa.start})

    def _closure(self, states: set[int]) -> frozenset[int]:
        stack, seen = list(states), set(states)
        while stack:
            for t in self.nfa.eps[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)

    def _state(self, states: set[int]) -> int:
        closed = self._closure(states)
        if not closed:
            return DEAD
        if closed not in self._ids:
            self._ids[closed] = len(self._sets)
            self._sets.append(closed)
        return self._ids[closed]

    def step(self, q: int, ch: str) -> int:
        key = (q, ch)
        if key not in self._trans:
            cp = ord(ch)
            nxt = {t for s in self._sets[q] for cs, t in self.nfa.edges[s] if cp in cs}
            self._trans[key] = self._state(nxt) if nxt else DEAD
        return self._trans[key]

    def feed(self, q: int, text: str) -> int:
        for ch in text:
            q = self.step(q, ch)
            if q == DEAD:
                return DEAD
        return q

    def accepting(self, q: int) -> bool:
        return self.nfa.accept in self._sets[q]

    def final(self, q: int) -> bool:
        """Accepting, and no character can follow: the match is complete."""
        return self.accepting(q) and not self.classes(q)

    def classes(self, q: int) -> list[CharSet]:
        """The character classes of the edges leaving ``q``."""
        return [cs for s in self._sets[q] for cs, _ in self.nfa.edges[s]]

    def _distances(self) -> list[float]:
        """Per NFA state, the fewest characters that reach the accept state (0-1 BFS backwards)."""
        back: list[list[tuple[int, int]]] = [[] for _ in self.nfa.eps]
        for s, targets in enumerate(self.nfa.eps):
            for t in targets:
                back[t].append((s, 0))
        for s, edges in enumerate(self.nfa.edges):
            for _, t in edges:
                back[t].append((s, 1))
        dist = [math.inf] * len(back)
        dist[self.nfa.accept] = 0
        todo = deque([self.nfa.accept])
        while todo:
            t = todo.popleft()
            for s, cost in back[t]:
                if dist[t] + cost < dist[s]:
                    dist[s] = dist[t] + cost
                    (todo.appendleft if cost == 0 else todo.append)(s)
        return dist

    def shortest(self, q: int) -> str:
        """The shortest text that completes a match from ``q``."""
        if q in self._shortest:
            return self._shortest[q]
        dist = self._dist
        s = min(self._sets[q], key=lambda x: dist[x])
        out: list[str] = []
        while dist[s] > 0:
            # breadth-first over same-distance epsilon moves to a state with a tight character edge
            frontier, seen, found = deque([s]), {s}, None
            while frontier and found is None:
                u = frontier.popleft()
                for cs, t in self.nfa.edges[u]:
                    if dist[t] == dist[u] - 1:
                        found = (cs, t)
                        break
                for t in self.nfa.eps[u]:
                    if dist[t] == dist[u] and t not in seen:
                        seen.add(t)
                        frontier.append(t)
            if found is None:  # cannot happen in a Thompson NFA (every state reaches the accept state)
                break
            out.append(found[0].example())
            s = found[1]
        self._shortest[q] = "".join(out)
        return self._shortest[q]


def compile_regex(regex: str) -> Automaton:
    """The automaton of ``regex`` (ValueError if it is outside the dialect)."""
    return Automaton(_Nfa(_Parser(regex).parse()))
