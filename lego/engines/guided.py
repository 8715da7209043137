"""Guided decoding for the in-process engine: sample only tokens that keep the text inside a regex.

A request with ``SamplingParams.guided_regex`` (a forced tool call's arguments and closing, built by
:mod:`lego.models.tool_grammar`) is decoded so that its text is always a prefix of a match, ends
when the match is complete, and fits ``max_tokens``:

- the regex (a small portable dialect; see :mod:`lego.models.tool_grammar`) is compiled to a
  Thompson NFA, walked as a DFA built lazily (:class:`lego.engines.automaton.Automaton`);
- each step draws by the Gumbel-max trick over the row's temperature distribution and takes the
  best-scoring token whose text the automaton accepts -- an exact sample of that distribution
  restricted to the allowed tokens, without scoring the whole vocabulary against the automaton;
  a first-character test over the vocabulary (vectorised) prunes the candidates first;
- a token is allowed only if the shortest completion after it still fits the tokens left, and
  when nothing else fits, the shortest completion is forced, so a call is cut at ``max_tokens``
  only when even its shortest form does not fit;
- the generation ends (``finish_reason`` "stop") on the token that completes the match.

What the logprobs are: as for every row, ``log_softmax(logits / T)`` of the drawn token over the
full vocabulary -- the policy's own probability, before the constraint restricted which tokens could
be drawn (like top-k / top-p). The tokens were not drawn from the policy, so the Generation is
flagged ``constrained`` and the proxy records them with mask 0: never trained on.

Limits: tokens whose text alone is not whole UTF-8 (a byte-fallback piece) are never drawn under a
constraint; the search for an allowed token looks at most :data:`MAX_CANDIDATES` tokens a step
before it forces the shortest completion.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from lego.engines.automaton import DEAD, Automaton, compile_regex

__all__ = ["MAX_CANDIDATES", "GuidedRow", "Guides", "TokenTable"]

MAX_CANDIDATES = 4096
"""Tokens a step looks at, best-scoring first, before it forces the shortest completion."""


class TokenTable:
    """What guided decoding needs of a vocabulary: each token's text, which tokens may be drawn under a
    constraint (whole text, not special, not a stop id), and each one's first character."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: list[int]) -> None:
        self.tokenizer = tokenizer
        n = min(len(tokenizer), vocab_size)
        texts = tokenizer.batch_decode(
            [[i] for i in range(n)], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        self.texts: list[str] = list(texts) + [""] * (vocab_size - n)
        special = set(getattr(tokenizer, "all_special_ids", []) or []) | set(stop_ids)
        firsts: dict[str, int] = {}
        usable = torch.zeros(vocab_size, dtype=torch.bool)
        first_idx = torch.zeros(vocab_size, dtype=torch.long)
        for i, text in enumerate(self.texts):
            if not text or "\ufffd" in text or i in special:
                continue
            usable[i] = True
            first_idx[i] = firsts.setdefault(text[0], len(firsts))
        self.usable, self.first_idx = usable, first_idx
        self.first_cps = torch.tensor([ord(c) for c in firsts], dtype=torch.long)
        self.stop_ids = [i for i in stop_ids if i < vocab_size]

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)] if text else []

    def allowed_first(self, automaton: Automaton, q: int) -> torch.Tensor:
        """Tokens whose first character ``q`` accepts (bool (V,)); cached per state."""
        ok = automaton.ok_cache.get(q)
        if ok is None:
            chars = torch.zeros_like(self.first_cps, dtype=torch.bool)
            for cs in automaton.classes(q):
                chars |= cs.mask(self.first_cps)
            ok = self.usable & chars[self.first_idx]
            automaton.ok_cache[q] = ok
        return ok


class GuidedRow:
    """The constraint state of one request (see the module docstring)."""

    def __init__(self, automaton: Automaton, table: TokenTable, budget: int) -> None:
        self.automaton, self.table, self.budget = automaton, table, budget
        self.state = automaton.start
        self.generated = 0
        self.done = automaton.final(self.state)
        self.forced: list[int] = []
        self._min_tokens: dict[int, int] = {}

    def min_tokens(self, q: int) -> int:
        if q not in self._min_tokens:
            self._min_tokens[q] = len(self.table.encode(self.automaton.shortest(q)))
        return self._min_tokens[q]

    def choose(self, logp: torch.Tensor, generator: torch.Generator, greedy: bool) -> int:
        """The next token given the row's full logprobs ``logp`` (V,): a draw from them restricted to
        what the constraint and the budget allow."""
        if not self.forced:
            token = self._draw(logp, generator, greedy)
            if token is not None:
                return self._take(token)
            self.forced = self.table.encode(self.automaton.shortest(self.state))
        return self._take(self.forced.pop(0))

    def _draw(self, logp: torch.Tensor, generator: torch.Generator, greedy: bool) -> int | None:
        left = self.budget - self.generated - 1  # tokens still allowed after this one
        ok = self.table.allowed_first(self.automaton, self.state).to(logp.device)
        scores = logp.clone()
        if not greedy:
            u = torch.rand(scores.shape, generator=generator, device=scores.device).clamp_(1e-20, 1.0)
            scores -= torch.log(-torch.log(u))  # Gumbel-max: argmax is a draw from softmax(logp)
        stops = self.table.stop_ids if self.automaton.accepting(self.state) else []
        allowed = ok.clone()
        allowed[stops] = True
        scores = scores.masked_fill(~allowed, -math.inf)
        n = min(int(allowed.sum()), MAX_CANDIDATES)
        for token in torch.topk(scores, n).indices.tolist() if n else []:
            if token in stops:
                return int(token)
            nxt = self.automaton.feed(self.state, self.table.texts[token])
            if nxt != DEAD and left >= self.min_tokens(nxt):
                return int(token)
        return None

    def _take(self, token: int) -> int:
        self.generated += 1
        if token in self.table.stop_ids and self.automaton.accepting(self.state):
            self.done = True
            return token
        self.state = self.automaton.feed(self.state, self.table.texts[token])
        self.done = self.state == DEAD or self.automaton.final(self.state)
        return token


class Guides:
    """Builds a :class:`GuidedRow` per constrained request: one token table per engine (made on first
    use, from ``load_tokenizer``), compiled automata kept per regex (the last :attr:`keep`)."""

    keep = 64

    def __init__(self, load_tokenizer: Callable[[], Any], vocab_size: int, stop_ids: Callable[[], list[int]]) -> None:
        self.load_tokenizer = load_tokenizer
        self.vocab_size = vocab_size
        self.stop_ids = stop_ids
        self._table: TokenTable | None = None
        self._automata: OrderedDict[str, Automaton] = OrderedDict()

    def row(self, regex: str, budget: int) -> GuidedRow:
        if self._table is None:
            self._table = TokenTable(self.load_tokenizer(), self.vocab_size, self.stop_ids())
        automaton = self._automata.pop(regex, None) or compile_regex(regex)
        self._automata[regex] = automaton
        while len(self._automata) > self.keep:
            self._automata.popitem(last=False)
        return GuidedRow(automaton, self._table, budget)
