"""The segment recorder: turns a session's calls into token-exact training segments. Pure: no I/O,
no engine, no clock; the server calls :meth:`SessionRecorder.render` before a generation and
:meth:`SessionRecorder.commit` after it succeeds (nothing changes if the generation fails).

This module stays over 400 lines on purpose: :meth:`SessionRecorder.render` and
:meth:`SessionRecorder.commit` are one state machine over a thread's snapshot, segment and
boundaries (extend / retry / new segment), and its reasoning-history modes change both halves;
split apart, neither half can be checked against the other. The thread records it works on live
in :mod:`lego.proxies.threads`.

The algorithm (DESIGN.md "Faithful rollouts", rules 1-5):

* A session holds *threads*, keyed by the conversation's first messages (the system prompt) and
  the tools schema; a request opening like an existing thread (same system prompt and first user
  message) with changed tools continues it. Every thread is recorded the same way; one of them is
  the *main thread* (below), the others (subagents, title generators, quota probes) are *side
  threads*: exported apart (``Trajectory.side_threads``), never in the main segments, and trained
  on only when ``training.train_side_threads`` says so.
* A thread keeps the message snapshot ``S`` (the last request's messages plus the assistant
  message the proxy returned), the current segment's flat token list with a mask, logprobs and
  policy versions, and *boundaries*: for message counts ``j`` seen at a call, the token length and
  rendered-text length of ``S[:j]``.
* A new request ``M`` is matched message by message against ``S``: an assistant turn the proxy
  produced matches by its tool-call ids (or, without tool calls, its content text); every other
  message must be equal; the tools schema must be equal. With ``k`` messages matched:

  - ``k == len(S)`` (an extension): the prompt is the segment's tokens + the tokens of the rendered
    text of ``M`` beyond ``S`` + the generation prompt. Only the delta is tokenized, so assistant
    turns keep the exact ids the policy sampled (rule 3).
  - ``k == len(S) - 1`` and ``S[-1]`` is the last generation (the same request again, or the last
    assistant replaced): an exact retry. The last generation is rolled back into ``discarded`` and
    the segment is extended from the boundary before it (rule 5).
  - otherwise (compaction, truncation, re-serialized history): the prompt is spliced from the
    longest known boundary ``<= k`` plus the rendered rest. If that is not a token-prefix
    extension of the segment, the segment is sealed and a new one starts -- both only at commit,
    after the generation succeeded (rule 4). Earlier generations keep their original context.

* After a generation, the sampled ids enter the segment with mask 1 and their logprobs (ids drawn
  under a decoding constraint -- a forced tool call -- with mask 0, flagged in
  ``Segment.constrained_spans`` and counted in ``constrained_tokens``); the template's closing
  tokens (the end-of-turn token if the policy did not sample one, then whatever the template puts
  after it, e.g. a newline) enter with mask 0 (rule 3).

Which thread is the main thread (rule 5) is decided by what its opening request *is*, never by
how many generations a thread has:

* declared: the session was opened with a :class:`~lego.types.MainThreadSpec` (the adapter knows
  its harness's main request: a system-prompt text, tool names). The first thread whose opening
  request fits is the main thread; no other thread can ever be, and until one fits there is none
  (nothing is exported as main, no call counts against ``max_turns``).
* default: a thread's *standing* is fixed by its opening request: 3 with tools and a system
  prompt (the shape of an agent harness's main request), 2 with tools only, 1 with a system
  prompt only, 0 with neither (a quota probe). The main thread is the first committed thread of
  the highest standing. A thread of lower standing that came first (a quota probe before the first
  turn) is main only until a higher one appears; a thread of standing 3 is main for good, since no
  thread outranks it and every later thread comes after it.

Limits, stated plainly. The recorder sees requests, not senders: the agent can reach its session's
model face, so what protects the main thread is that it came first. (1) Once a standing-3 or a
declared main thread exists, nothing the agent sends replaces it. (2) Without a declaration, a
harness whose main request has no tools is outranked by any later request with tools (the
agent's own included): such adapters should declare their main thread. (3) A request that opens
exactly like the main thread (same system prompt and tools, or same system prompt and first user
message) *is* the main thread by this definition: it continues it, as a new segment if it does not
extend the history (how compaction looks), its turns count against ``max_turns``, and an exact
repeat of the main thread's last request is a retry like any other (rule 5). Sealed segments stay.
(4) At most ``MAX_SIDE_THREADS`` threads are kept; beyond that the side thread with the fewest
generations is dropped (``side_threads_evicted`` counts them), never the main thread.

Reasoning history (rule 8) follows ``reasoning_history``:

* ``template`` (the default): the engine sees what the model's own template renders from the
  messages the client sent (``apply_chat_template`` of them, token for token where the sampled ids
  render as the template writes them). The whole conversation is rendered on each call; where the
  rendering extends the segment's text, the segment grows (the sampled ids of earlier turns stay);
  where it does not -- a Qwen3 template strips historical ``<think>`` blocks, a client dropped
  ``reasoning_content`` -- the segment is sealed and a new one starts from the full rendering.
  ``reasoning_seals`` counts those seals and ``reprefill_tokens`` the prompt tokens the new
  segments re-read.
* ``keep`` (interleaved thinking): matched assistant turns are rendered as the proxy returned them
  and spliced by their sampled ids, reasoning included, so a conversation stays one segment;
  ``kept_reasoning_tokens`` counts the reasoning tokens kept in context this way. Rendering is
  windowed (O(new messages)).

``template_kwargs`` (a request's ``chat_template_kwargs``, e.g. ``enable_thinking``) go to every
render of the call; a thread whose kwargs change does not extend (its rendering changes).

In ``keep`` mode the chat template must be prefix-stable: rendering ``messages[:j]`` is a textual prefix of rendering
``messages[:j+1]``. Where a template breaks that for some request, the recorder notices (the
stored text is not a prefix of the new rendering), counts ``template_unstable`` and starts a new
segment from a full rendering rather than guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from lego.proxies.threads import (
    OpenSegment,
    Thread,
    Turn,
    first_user,
    standing,
    system_text,
    thread_key,
    tool_arguments,
)
from lego.types import CounterName, DiscardedGeneration, Generation, MainThreadSpec, Segment, SideThread

# Thread, standing and thread_key are defined in lego.proxies.threads and re-exported: they are
# part of how a reader of the recorder inspects its decisions.
__all__ = ["ChatTemplate", "ReasoningHistory", "RenderedCall", "SessionRecorder", "Thread", "standing", "thread_key"]

Message = dict[str, Any]
ReasoningHistory = Literal["template", "keep"]
MAX_SIDE_THREADS = 32
OPENING_CHARS = 200  # of a side thread's system prompt, exported so a reader can tell what it was


class ChatTemplate(Protocol):
    """What the recorder needs from a model's chat format (lego.models.chat.ChatFormat has it)."""

    end_of_turn_id: int
    eos_token_ids: list[int]
    prefix_stable: bool  # rendering messages[:k] is a prefix of rendering messages[:k+1] (probed)

    def render_text(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        template_kwargs: dict[str, Any] | None = None,
    ) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass
class RenderedCall:
    """What :meth:`SessionRecorder.render` decided; handed back to :meth:`SessionRecorder.commit`."""

    thread_key: str
    mode: Literal["extend", "retry", "new_segment"]
    matched: int  # leading messages that matched the snapshot
    prompt_ids: list[int]
    messages: list[Message]  # as rendered: matched assistant turns replaced by the proxy's own
    tools: list[dict[str, Any]]
    template_kwargs: dict[str, Any]
    keep: int  # tokens of the current segment kept (extend: all; retry: up to the boundary)
    context_len: int  # tokens of prompt_ids before the generation prompt
    text_keep: int  # characters of the thread's rendered text kept before ``delta_text``
    delta_text: str  # rendered text of the messages after the kept part (no generation prompt)
    gen_text: str  # the template's generation prompt
    kept_bounds: dict[int, tuple[int, int]]
    standing: int = 0  # of the request, used if it opens a new thread
    reason: str = ""


class SessionRecorder:
    """Records one session's calls (see the module docstring for the algorithm)."""

    def __init__(
        self,
        template: ChatTemplate,
        main_thread: MainThreadSpec | None = None,
        reasoning_history: ReasoningHistory = "template",
    ) -> None:
        if reasoning_history not in ("template", "keep"):
            raise ValueError(f"reasoning_history must be 'template' or 'keep', got {reasoning_history!r}")
        self.template = template
        self.spec = main_thread
        self.reasoning_history: ReasoningHistory = reasoning_history
        self.threads: dict[str, Thread] = {}
        self.discarded: list[DiscardedGeneration] = []
        self.counters: dict[CounterName, float] = {
            "calls": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "rewrites": 0,
            "retries": 0,
            "template_unstable": 0,
            "tool_call_parse_failures": 0,
            "overflows": 0,
            "side_threads_evicted": 0,
            "reasoning_seals": 0,
            "reprefill_tokens": 0,
            "kept_reasoning_tokens": 0,
            "constrained_tokens": 0,
            "hosted_tools_dropped": 0,
        }
        self._eot_text = template.decode([template.end_of_turn_id])

    # ------------------------------------------------------------------ threads
    def main_thread(self) -> Thread | None:
        """The first committed thread of the highest standing (declared: the first that fits)."""
        candidates = [t for t in self.threads.values() if self.spec is None or t.standing > 0]
        return min(candidates, key=lambda t: (-t.standing, t.order), default=None)

    def is_main(self, key: str, messages: list[Message], tools: list[dict[str, Any]] | None) -> bool:
        """Whether a call on thread ``key`` (with this request) is, or would open, the main thread."""
        main = self.main_thread()
        if key in self.threads:
            return main is not None and main.key == key
        rank = standing(messages, tools, self.spec)
        if main is None:
            return self.spec is None or rank > 0
        return rank > main.standing  # a new thread comes last: it wins on standing alone

    def generations(self, key: str) -> int:
        """Turns recorded on thread ``key`` so far (0 for a thread not opened yet)."""
        th = self.threads.get(key)
        return th.generations if th else 0

    # ------------------------------------------------------------------ matching
    def _matches(self, th: Thread, i: int, incoming: Message) -> bool:
        turn = th.generated.get(i)
        if turn is None:
            return bool(incoming == th.messages[i])
        if incoming.get("role") != "assistant":
            return False
        calls = incoming.get("tool_calls") or []
        if turn.tool_call_ids:
            return tuple(sorted(str(c.get("id")) for c in calls)) == tuple(sorted(turn.tool_call_ids))
        if calls:
            return False
        content = incoming.get("content")
        return isinstance(content, str | None) and (content or "").strip() == turn.content.strip()

    def _matched_prefix(
        self, th: Thread, messages: list[Message], tools: list[dict[str, Any]], kwargs: dict[str, Any]
    ) -> int:
        if tools != th.tools or kwargs != th.template_kwargs:
            return 0
        n = min(len(messages), len(th.messages))
        if messages[:n] == th.messages[:n]:  # one C-level pass: the client echoed every turn verbatim
            return n
        k = 0
        for i in range(min(len(messages), len(th.messages))):
            if not self._matches(th, i, messages[i]):
                break
            k += 1
        return k

    # ------------------------------------------------------------------ render / commit
    def resolve_thread(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> str:
        """The key of the thread a request belongs to.

        Normally its :func:`thread_key`; but a request that opens like an existing thread (same
        system prompt and first user message) with a changed tool set continues that thread
        (harnesses that load tools lazily), as a new segment since the tools schema changed.
        """
        key = thread_key(messages, tools)
        if key in self.threads:
            return key
        opening = (system_text(messages), first_user(messages))
        for th in self.threads.values():
            if th.opening == opening:
                return th.key
        return key

    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> RenderedCall:
        """Build the engine prompt for ``messages``; changes nothing (see :meth:`commit`)."""
        tools = list(tools or [])
        kwargs = dict(template_kwargs or {})
        key = self.resolve_thread(messages, tools)
        th = self.threads.get(key) or Thread(key=key)
        k = self._matched_prefix(th, messages, tools, kwargs)
        if self.reasoning_history == "template" and not (
            self.template.prefix_stable and self._client_renders_ours(th, messages, k)
        ):
            return self._render_full(th, messages, tools, kwargs, k)
        # keep (or template where the client's turns render exactly as ours, with a prefix-stable
        # template: the same text, rendered in O(new messages)): matched assistant turns are
        # rendered as the proxy returned them (their tokens are spliced).
        messages = [th.generated[i].message if i < k and i in th.generated else m for i, m in enumerate(messages)]
        seg = th.seg
        encode = self.template.encode

        if seg.bounds and 0 < k == len(th.messages) and k in seg.bounds and th.gen_text is not None:
            delta = self._render_from(th, messages, k, tools, kwargs)
            if delta is not None:
                ctx = seg.ids + encode(delta)  # the only copy of the history this call makes
                return self._call(th, "extend", k, ctx, messages, tools, kwargs, len(seg), len(th.text), delta, {})

        last = th.last_gen
        if last is not None and 0 < k == len(th.messages) - 1 == last[0] and k in seg.bounds:
            tok, chars = seg.bounds[k]
            delta = self._render_from(th, messages, k, tools, kwargs)
            if delta is not None:
                ctx = seg.prefix(tok)
                ctx.extend(encode(delta))
                kept = {j: b for j, b in seg.bounds.items() if j <= k}
                call = self._call(th, "retry", k, ctx, messages, tools, kwargs, tok, chars, delta, kept)
                call.reason = "exact retry" if len(messages) == k else "last assistant replaced"
                return call

        return self._render_full(th, messages, tools, kwargs, k)

    @staticmethod
    def _client_renders_ours(th: Thread, messages: list[Message], k: int) -> bool:
        """Whether every matched assistant turn, as the client sent it, carries what the proxy
        returned: the same content, reasoning (absent and empty alike) and call arguments."""
        for i, turn in th.generated.items():
            if i >= k:
                continue
            mine, theirs = turn.message, messages[i]
            if (mine.get("content") or "") != (theirs.get("content") or ""):
                return False
            if (mine.get("reasoning_content") or "") != (theirs.get("reasoning_content") or ""):
                return False
            mine_args = [tool_arguments(c) for c in mine.get("tool_calls") or []]
            if mine_args != [tool_arguments(c) for c in theirs.get("tool_calls") or []]:
                return False
        return True

    def _render(self, messages: list[Message], tools: list[dict[str, Any]], kwargs: dict[str, Any], gen: bool) -> str:
        return self.template.render_text(messages, tools or None, add_generation_prompt=gen, template_kwargs=kwargs)

    def _render_full(
        self, th: Thread, messages: list[Message], tools: list[dict[str, Any]], kwargs: dict[str, Any], k: int
    ) -> RenderedCall:
        """Render in full, splice from the longest known boundary, check the token prefix.

        ``template`` mode always comes here; ``keep`` mode when the call is not a plain extension.
        """
        seg = th.seg
        encode = self.template.encode
        text_mg = self._render(messages, tools, kwargs, True)
        gen = th.gen_text
        if gen and text_mg.endswith(gen) and k == len(th.messages):
            text_m = text_mg[: len(text_mg) - len(gen)]  # one render: the generation prompt is known
        else:
            text_m = self._render(messages, tools, kwargs, False)
        if not text_mg.startswith(text_m):
            raise ValueError("the chat template's generation prompt is not appended after the rendered messages")
        j = max((b for b in seg.bounds if b <= k), default=0)
        tok, chars = seg.bounds.get(j, (0, 0))
        if j and text_m.startswith(th.text[:chars]):
            ctx, kept = seg.prefix(tok) + encode(text_m[chars:]), {b: v for b, v in seg.bounds.items() if b <= j}
        else:
            ctx, kept = encode(text_m), {}
        gen_text = text_mg[len(text_m) :]
        if seg.bounds and len(ctx) >= len(seg) and ctx[: len(seg)] == seg.ids:
            return self._call(th, "extend", k, ctx, messages, tools, kwargs, len(seg), 0, text_m, {}, gen_text)
        last = th.last_gen
        if kept and last is not None and k == j == len(th.messages) - 1 == last[0]:
            call = self._call(th, "retry", k, ctx, messages, tools, kwargs, tok, chars, text_m[chars:], kept, gen_text)
            call.reason = "exact retry" if len(messages) == k else "last assistant replaced"
            return call
        call = self._call(th, "new_segment", k, ctx, messages, tools, kwargs, 0, 0, text_m, kept, gen_text)
        call.reason = "first call" if not seg.bounds else f"history rewritten after message {k}"
        return call

    def _render_from(
        self, th: Thread, messages: list[Message], j: int, tools: list[dict[str, Any]], kwargs: dict[str, Any]
    ) -> str | None:
        """The rendered text of ``messages[j:]``, in O(new messages): rendered after a small window
        (the system message and ``messages[j-1]``) instead of the whole history. None if the
        template does not behave prefix-stably here (the caller then renders in full)."""
        window = [messages[0]] if j >= 2 and messages[0].get("role") in ("system", "developer") else []
        window.append(messages[j - 1])
        base = self._render(window, tools, kwargs, False)
        full = self._render(window + messages[j:], tools, kwargs, True)
        gen = th.gen_text or ""
        if not full.startswith(base) or not full.endswith(gen):
            self.counters["template_unstable"] += 1
            return None
        return full[len(base) : len(full) - len(gen)]

    def _call(
        self,
        th: Thread,
        mode: Literal["extend", "retry", "new_segment"],
        matched: int,
        ctx: list[int],
        messages: list[Message],
        tools: list[dict[str, Any]],
        kwargs: dict[str, Any],
        keep: int,
        text_keep: int,
        delta_text: str,
        kept: dict[int, tuple[int, int]],
        gen_text: str | None = None,
    ) -> RenderedCall:
        """Package a decision; appends the generation prompt's ids to ``ctx`` in place (no copy)."""
        gen_text = (th.gen_text or "") if gen_text is None else gen_text
        context_len = len(ctx)
        ctx.extend(self.template.encode(gen_text))
        return RenderedCall(
            standing=th.standing if th.key in self.threads else standing(messages, tools, self.spec),
            thread_key=th.key,
            mode=mode,
            matched=matched,
            prompt_ids=ctx,
            messages=list(messages),
            tools=tools,
            template_kwargs=kwargs,
            keep=keep,
            context_len=context_len,
            text_keep=text_keep,
            delta_text=delta_text,
            gen_text=gen_text,
            kept_bounds=kept,
        )

    def commit(self, call: RenderedCall, gen: Generation, assistant: Message, parse_failures: int = 0) -> None:
        """Record a successful generation and the assistant message returned to the client."""
        th = self.threads.get(call.thread_key)
        if th is None:
            if len(self.threads) >= MAX_SIDE_THREADS:
                self._evict_side_thread()
            order = max((t.order for t in self.threads.values()), default=-1) + 1
            th = Thread(key=call.thread_key, order=order, standing=call.standing)
            self.threads[th.key] = th
        seg = th.seg
        if call.mode == "retry" and th.last_gen is not None:
            _, start, end = th.last_gen
            self.discarded.append(
                DiscardedGeneration.model_construct(  # built from validated parts; O(history) to re-validate
                    prompt_ids=seg.prefix(start),
                    token_ids=seg.ids[start:end],
                    logprobs=seg.logprobs[start:end].tolist(),
                    policy_version=int(seg.versions[start]) if end > start else 0,
                    versions=seg.versions[start:end].tolist(),
                    reason=call.reason or "exact retry",
                )
            )
            self.counters["retries"] += 1
            seg.truncate(call.keep)
            seg.bounds = dict(call.kept_bounds)
        elif call.mode == "new_segment":
            old = seg.export()
            if old is not None:
                th.sealed.append(old)
                self.counters["rewrites"] += 1
                if self.reasoning_history == "template":
                    self.counters["reasoning_seals"] += 1
                self.counters["reprefill_tokens"] += call.context_len
            seg = th.seg = OpenSegment(bounds=dict(call.kept_bounds))
        elif len(seg) != call.keep:
            raise RuntimeError("segment changed between render and commit; calls on one thread must be serialized")
        seg.extend_context(call.prompt_ids[len(seg) : call.context_len])
        seg.bounds[len(call.messages)] = (call.context_len, call.text_keep + len(call.delta_text))
        seg.extend_context(call.prompt_ids[call.context_len :])
        start = len(seg)
        if seg.prompt_len is None:
            seg.prompt_len = start
        if gen.constrained:
            seg.extend_constrained(gen.token_ids, gen.logprobs, gen.versions)
            self.counters["constrained_tokens"] += len(gen.token_ids)
        else:
            seg.extend_sampled(gen.token_ids, gen.logprobs, gen.versions)
        end = len(seg)

        snapshot = [*call.messages, assistant]
        text_m = th.text[: call.text_keep] + call.delta_text
        asst_text = self._assistant_text(snapshot, call.tools, call.template_kwargs, text_m)
        if self.reasoning_history == "keep" and assistant.get("reasoning_content"):
            self.counters["kept_reasoning_tokens"] += len(self.template.encode(str(assistant["reasoning_content"])))
        seg.extend_context(self._closing(gen.token_ids, asst_text))
        th.gen_text = call.gen_text
        text_s = text_m + asst_text
        th.messages = snapshot
        th.opening = (system_text(snapshot), first_user(snapshot))
        th.tools = call.tools
        th.template_kwargs = call.template_kwargs
        th.text = text_s
        th.generated = {i: t for i, t in th.generated.items() if i < call.matched}
        th.generated[len(call.messages)] = Turn(
            message=assistant,
            tool_call_ids=tuple(str(c.get("id")) for c in assistant.get("tool_calls") or []),
            content=str(assistant.get("content") or ""),
        )
        seg.bounds[len(snapshot)] = (len(seg), len(text_s))
        th.last_gen = (len(call.messages), start, end)
        if call.mode != "retry":  # a retry replaces a turn, it does not add one
            th.generations += 1

        self.counters["calls"] += 1
        self.counters["prompt_tokens"] += len(call.prompt_ids)
        self.counters["completion_tokens"] += len(gen.token_ids)
        self.counters["tool_call_parse_failures"] += parse_failures

    def _assistant_text(
        self, snapshot: list[Message], tools: list[dict[str, Any]], kwargs: dict[str, Any], text_m: str
    ) -> str:
        """The rendered text of the last message of ``snapshot`` (an assistant turn): windowed in
        ``keep`` mode or with a prefix-stable template, else from the whole conversation (templates
        that look at the whole history, such as Qwen3's, render the last turn differently in a
        window), where ``text_m`` (the rendering of the messages before it) is already known."""
        if self.reasoning_history == "keep" or self.template.prefix_stable:
            window = [snapshot[0]] if len(snapshot) >= 3 and snapshot[0].get("role") in ("system", "developer") else []
            window.append(snapshot[-2])
            base = self._render(window, tools, kwargs, False)
            full = self._render([*window, snapshot[-1]], tools, kwargs, False)
            if full.startswith(base):
                return full[len(base) :]
            self.counters["template_unstable"] += 1
            before = self._render(snapshot[:-1], tools, kwargs, False)
        else:
            before = text_m
        full = self._render(snapshot, tools, kwargs, False)
        if not full.startswith(before):
            self.counters["template_unstable"] += 1
        return full[len(before) :]

    def _closing(self, sampled: list[int], assistant_text: str) -> list[int]:
        """Template tokens after the sampled ids: end-of-turn if not sampled, then the template tail."""
        idx = assistant_text.rfind(self._eot_text)
        tail = assistant_text[idx + len(self._eot_text) :] if idx >= 0 else ""
        ended = bool(sampled) and sampled[-1] in (self.template.end_of_turn_id, *self.template.eos_token_ids)
        out = [] if ended else [self.template.end_of_turn_id]
        return out + (self.template.encode(tail) if tail else [])

    def _evict_side_thread(self) -> None:
        main = self.main_thread()
        side = [t for t in self.threads.values() if main is None or t.key != main.key]
        if side:
            victim = min(side, key=lambda t: (t.generations, t.order))
            del self.threads[victim.key]
            self.counters["side_threads_evicted"] += 1

    def note_overflow(self) -> None:
        self.counters["overflows"] += 1

    # ------------------------------------------------------------------ export
    def segments(self) -> list[Segment]:
        """The main thread's segments in order: sealed ones, then the open one."""
        main = self.main_thread()
        if main is None:
            return []
        cur = main.seg.export()
        return [*main.sealed, *([cur] if cur is not None else [])]

    def side_threads(self) -> list[SideThread]:
        """Every thread but the main one, in the order they started, each with its own segments."""
        main = self.main_thread()
        out = []
        for th in sorted(self.threads.values(), key=lambda t: t.order):
            if th is main:
                continue
            cur = th.seg.export()
            system, user = system_text(th.messages), first_user(th.messages)
            out.append(
                SideThread(
                    thread_id=th.key,
                    opening=(system or user)[:OPENING_CHARS],
                    has_tools=bool(th.tools),
                    generations=th.generations,
                    segments=[*th.sealed, *([cur] if cur is not None else [])],
                )
            )
        return out

    def snapshot(self) -> tuple[list[Message], list[dict[str, Any]]]:
        main = self.main_thread()
        return (list(main.messages), list(main.tools)) if main else ([], [])

    def summary_counters(self) -> dict[CounterName, float]:
        out = dict(self.counters)
        out["segments"] = len(self.segments())
        out["threads"] = len(self.threads)
        main = self.main_thread()
        out["turns"] = main.generations if main else 0
        # Side calls are counted against the main thread as it stands now: a quota probe answered
        # while it was the only thread is a side call once the harness's main thread exists.
        out["side_calls"] = sum(t.generations for t in self.threads.values() if t is not main)
        return out
