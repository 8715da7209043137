"""Judging the grading runs: what the test runs report, checked against what they could not know.

Each grading run (:mod:`lego.sandboxes.grading`) relays the records its test process wrote
(:mod:`lego.sandboxes.grade_bootstrap`). The code under test shares that process, so a record is a
claim, not a fact. The verdict rests on what a cheat cannot produce without being correct:

* every expected test must pass in the run **as written** (its outcome is the process's claim, with
  one record per phase: a second record of a phase is tampering);
* in the **blind copy** (:mod:`lego.sandboxes.blind`), which holds no expected outcome, the value
  each assertion looked at is witnessed in structural form. The host evaluates the assertion with
  the expected side it kept when the values are plain builtins (a subclass of one counts as the value
  its base type holds, read through the base's own methods); otherwise the witness must equal the
  **reference**'s, the gold patch's on the same copy, field by field (an object's type and every field
  the reference's has). Code that read its answers from the test as written, returns values that
  equal anything, or forged the as-written run shows something else where the answers are hidden:
  a test that passes as written and not blind is tampering, reward 0.

A FAIL_TO_PASS test with no informative witness in the blind copy rests on its pass/fail bit alone;
:class:`Evidence` lists both kinds. Symptoms of a run that could not be graded at all (no records,
collection errors, expected tests not collected, pytest usage errors, a time-out) are listed in
``Evidence.ungradable``: the grader then checks the pristine repo, so a broken task is infrastructure
and a diff that breaks collection the policy's 0.
"""

from __future__ import annotations

import json
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any

from lego.sandboxes.blind import BlindPlan, Site, Unknown, rows_of

__all__ = ["Evidence", "Reference", "RunRecords", "judge", "parse_run", "reference"]

_WHENS = ("setup", "call", "teardown")


@dataclass
class RunRecords:
    """What one run's test process reported."""

    started: bool = False
    collected: list[str] | None = None
    everything: list[str] | None = None  # every item pytest found, before the expected ones were kept
    outcome: dict[str, str] = field(default_factory=dict)  # node id -> passed|failed|error|skipped|missing
    witnesses: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)  # (node id, key)
    collect_errors: list[str] = field(default_factory=list)
    exitstatus: int | None = None
    malformed: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)  # a second record of one phase of one test


def parse_run(lines: list[str]) -> RunRecords:
    """Fold one run's record lines into per-test outcomes and witnesses (fail closed: a test without a
    passing setup, call and teardown is not passed; a failed subtest fails its test)."""
    run = RunRecords()
    stages: dict[str, dict[str, str]] = {}
    sub_failed: set[str] = set()
    current: str | None = None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            run.malformed.append(line[:120])
            continue
        if not isinstance(rec, dict):
            run.malformed.append(line[:120])
            continue
        kind = rec.get("k")
        if kind == "hello":
            run.started = True
        elif kind == "collected" and isinstance(rec.get("ids"), list):
            if run.collected is not None:
                run.duplicates.append("collection")
            run.collected = [str(i) for i in rec["ids"]]
        elif kind == "all" and isinstance(rec.get("ids"), list):
            if run.everything is not None:
                run.duplicates.append("collection")
            run.everything = [str(i) for i in rec["ids"]]
        elif kind == "collect_error":
            run.collect_errors.append(f"{rec.get('id')}: {str(rec.get('msg'))[-800:]}")
        elif kind == "start":
            current = str(rec.get("id"))
        elif kind == "witness" and current is not None:
            run.witnesses.setdefault((current, str(rec.get("site"))), []).append(rec)
        elif kind == "report":
            test, when, result = str(rec.get("id")), rec.get("when"), rec.get("outcome")
            if when not in _WHENS or result not in ("passed", "failed", "skipped"):
                run.malformed.append(line[:120])
            elif rec.get("sub"):
                if result == "failed":
                    sub_failed.add(test)
            elif str(when) in stages.setdefault(test, {}):
                run.duplicates.append(f"{test} {when}")
            else:
                stages[test][str(when)] = str(result)
        elif kind == "finish":
            if run.exitstatus is not None:
                run.duplicates.append("finish")
            status = rec.get("exitstatus")
            run.exitstatus = status if isinstance(status, int) else None
    for test, done in stages.items():
        setup, call, teardown = done.get("setup"), done.get("call"), done.get("teardown")
        if setup is None or teardown is None:
            run.outcome[test] = "missing"
        elif setup != "passed":
            run.outcome[test] = "error" if setup == "failed" else "skipped"
        elif teardown == "failed":
            run.outcome[test] = "error"
        elif call is None:
            run.outcome[test] = "missing"
        else:
            run.outcome[test] = "failed" if test in sub_failed and call == "passed" else call
    return run


def match_ids(expected: list[str], collected: list[str]) -> dict[str, str]:
    """Expected id -> collected node id: the same id, or (as swebench's log parser writes ids with a
    space) a collected id cut at its first space; an expected id matching several is unmatched."""
    exact = set(collected)
    cut: dict[str, list[str]] = {}
    for nodeid in collected:
        cut.setdefault(nodeid.split(" ", 1)[0], []).append(nodeid)
    out = {}
    for test in expected:
        if test in exact:
            out[test] = test
        elif len(cut.get(test, [])) == 1:
            out[test] = cut[test][0]
    return out


@dataclass
class Evidence:
    """The verdict's parts: per expected test its outcome, and why a reward is 0."""

    tests: dict[str, str] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    ungradable: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    behavioural: list[str] = field(default_factory=list)  # expected tests judged on their witnessed behaviour
    bit_only: list[str] = field(default_factory=list)  # ... that rest on a pass/fail bit alone
    unstable: int = 0  # reference witnesses dropped because two reference runs disagreed


@dataclass
class Reference:
    """The gold patch on the hidden tests: the order pytest collects them in as written (``real``),
    and on the blind copy (``blind``), with the witnesses both blind runs agreed on."""

    real: list[str]
    blind: list[str]
    outcomes: dict[str, str]
    witnesses: dict[str, dict[str, list[dict[str, Any]]]]  # blind id -> key -> records
    unstable: int = 0
    evidence: dict[str, bool] = field(default_factory=dict)  # FAIL_TO_PASS test -> rests on behaviour

    def to_json(self) -> dict[str, Any]:
        return {"real": self.real, "blind": self.blind, "outcomes": self.outcomes, "witnesses": self.witnesses,
                "unstable": self.unstable, "evidence": self.evidence}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reference:
        return cls(
            data["real"], data["blind"], data["outcomes"], data["witnesses"], int(data.get("unstable", 0)),
            {str(k): bool(v) for k, v in dict(data.get("evidence") or {}).items()},
        )  # fmt: skip

    @property
    def share(self) -> float | None:
        """The share of FAIL_TO_PASS tests that rest on witnessed behaviour (None: none named)."""
        return sum(self.evidence.values()) / len(self.evidence) if self.evidence else None


def reference(real: RunRecords, blinds: list[RunRecords]) -> Reference:
    """The reference from the gold patch's run as written and its blind runs: a witness kept only
    where every blind run recorded the same (time, randomness and addresses differ between runs)."""
    first = blinds[0]
    kept: dict[str, dict[str, list[dict[str, Any]]]] = {}
    unstable = 0
    for (test, key), records in first.witnesses.items():
        if all(_same_records(records, other.witnesses.get((test, key), [])) for other in blinds[1:]):
            kept.setdefault(test, {})[key] = [_bare(r) for r in records]
        else:
            unstable += 1
    return Reference(
        real=list(real.everything or real.collected or []),
        blind=list(first.everything or first.collected or []),
        outcomes={t: o for t, o in first.outcome.items() if all(b.outcome.get(t) == o for b in blinds[1:])},
        witnesses=kept,
        unstable=unstable,
    )


def _bare(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in ("r", "e", "w") if k in record}


def _same_records(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return len(a) == len(b) and all(_same_record(x, y) for x, y in zip(a, b, strict=True))


def _same_record(agent: dict[str, Any], gold: dict[str, Any]) -> bool:
    if ("e" in agent) != ("e" in gold) or ("r" in agent) != ("r" in gold):
        return False
    if "w" in gold and [w[0] for w in agent.get("w") or []] != [w[0] for w in gold["w"]]:
        return False
    return same(agent.get("e", agent.get("r")), gold.get("e", gold.get("r")))


class NotPlain(Exception):
    """A witnessed value that is not a plain builtin value: only the reference can judge it."""


def decode(c: Any) -> Any:
    """A witness's structural form as the plain builtin value it is; :class:`NotPlain` otherwise."""
    if not isinstance(c, list) or not c or not isinstance(c[0], str):
        raise NotPlain
    tag, rest = c[0], c[1:]
    try:
        if tag == "N":
            return None
        if tag == "b":
            return bool(rest[0])
        if tag == "i":
            return int(rest[0])
        if tag == "f":
            return float(rest[0])
        if tag == "c":
            return complex(rest[0])
        if tag == "s" and isinstance(rest[0], str):
            return rest[0]
        if tag == "y":
            return bytes.fromhex(rest[0])
        if tag in ("l", "t", "S", "F"):
            items = [decode(i) for i in rest[0]]
            return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
        if tag == "d":
            return {decode(k): decode(v) for k, v in rest[0]}
        if tag == "sub":  # a subclass of a builtin (a namedtuple, an IntEnum): the value its base type holds,
            return decode(rest[1])  # read through the base's own methods, whatever its __eq__ says
    except (TypeError, ValueError, IndexError, KeyError):
        raise NotPlain from None
    raise NotPlain


def _key(c: Any) -> str:
    return json.dumps(c, sort_keys=True)


def same(agent: Any, gold: Any) -> bool:
    """Whether the agent's witness shows what the reference's does: the same structure, floats to
    1e-9, and an object's fields a superset of the reference's (a cache attribute is no lie)."""
    if agent == gold:
        return True
    if isinstance(agent, list) and isinstance(gold, list) and agent[:1] != gold[:1] and "sub" in (agent[:1] + gold[:1]):
        return same(agent[2] if agent[:1] == ["sub"] else agent, gold[2] if gold[:1] == ["sub"] else gold)
    if not (isinstance(agent, list) and isinstance(gold, list) and agent and gold and agent[0] == gold[0]):
        return False
    tag = gold[0]
    try:
        if tag == "f":
            a, g = float(agent[1]), float(gold[1])
            return math.isclose(a, g, rel_tol=1e-9, abs_tol=1e-12) or (a != a and g != g)
        if tag in ("l", "t", "S", "F"):
            return len(agent[1]) == len(gold[1]) and all(same(x, y) for x, y in zip(agent[1], gold[1], strict=True))
        if tag == "d":
            a_map = {_key(k): v for k, v in agent[1]}
            return len(agent[1]) == len(gold[1]) and all(
                _key(k) in a_map and same(a_map[_key(k)], v) for k, v in gold[1]
            )
        if tag == "obj":
            return agent[1] == gold[1] and _fields_cover(agent[2], gold[2])
        if tag == "sub":
            return agent[1] == gold[1] and same(agent[2], gold[2]) and _fields_cover(agent[3], gold[3])
        if tag == "exc":
            return agent[1][:1] == gold[1][:1]
        if tag == "red":
            return agent[1] == gold[1] and same(agent[2], gold[2])
    except (TypeError, ValueError, IndexError):
        return False
    return False


def _fields_cover(agent: list[Any], gold: list[Any]) -> bool:
    mine = {name: value for name, value in agent}
    return all(name in mine and same(mine[name], value) for name, value in gold)


def informative(record: dict[str, Any]) -> bool:
    """Whether a reference witness says anything (a value too deep or opaque to read does not)."""
    value = record.get("r", record.get("e"))
    return not (isinstance(value, list) and value[:1] in (["deep"], ["opaque"]))


def _short(names: list[str]) -> set[str]:
    return {n.rsplit(".", 1)[-1] for n in names if isinstance(n, str)}


def _approx_equal(actual: Any, expected: Any) -> bool:
    if isinstance(expected, dict) and isinstance(actual, dict):
        return actual.keys() == expected.keys() and all(_approx_equal(actual[k], expected[k]) for k in expected)
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        return len(actual) == len(expected) and all(_approx_equal(a, e) for a, e in zip(actual, expected, strict=True))
    if isinstance(expected, int | float | complex) and isinstance(actual, int | float | complex):
        return bool(abs(actual - expected) <= max(1e-6 * abs(expected), 1e-12)) or actual == expected
    return bool(actual == expected)


def _binary(op: str, a: Any, b: Any, approx: bool) -> bool:
    if op == "==":
        return _approx_equal(a, b) if approx else bool(a == b)
    if op == "!=":
        return not (_approx_equal(a, b) if approx else a == b)
    if op in ("is", "is not"):
        if not all(v is None or type(v) is bool for v in (a, b)):
            raise NotPlain
        return (a is b) == (op == "is")
    if op == "~=":
        return bool(round(abs(a - b), 7) == 0)
    if op == "count":
        return sorted(map(repr, a)) == sorted(map(repr, b))
    if op in ("regex", "not regex"):
        return bool(re.search(b, a)) == (op == "regex")
    if op == "subset":
        return all(k in b and b[k] == v for k, v in a.items())
    table = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
             "in": lambda x, y: x in y, "not in": lambda x, y: x not in y}  # fmt: skip
    return bool(table[op](a, b))


def evaluate(site: Site, records: list[dict[str, Any] | None], row: dict[int, int]) -> bool | None:
    """The assertion of ``site`` evaluated on the host with the agent's witnessed values (one record per
    operand, None for a kept one) and the expected values the host kept; None when only the reference
    can judge (a value that is no plain builtin, an expected value the host does not know)."""
    if site.kind in ("raises", "warns"):
        record = records[0] if records else None
        if record is None or not site.expect:
            return None
        if site.kind == "warns":
            return any(_short(names) & set(site.expect) for names in record.get("w") or [])
        exc = record.get("e")
        if not isinstance(exc, list) or exc[:1] != ["exc"]:
            return False
        if not _short(exc[1]) & set(site.expect):
            return False
        return site.match is None or bool(re.search(site.match, str(exc[3])))
    values: list[Any] = []
    for operand, record in zip(site.operands, records, strict=True):
        try:
            if operand.witnessed:
                if record is None or "r" not in record:
                    return None
                values.append(decode(record["r"]))
            elif operand.column is not None:
                d, column = operand.column
                if d not in row or row[d] >= len(column) or isinstance(column[row[d]], Unknown):
                    return None
                values.append(column[row[d]])
            else:
                values.append(operand.value)
        except NotPlain:
            return None
    try:
        if site.kind == "truth":
            op = site.ops[0] if site.ops else "true"
            value = values[0]
            result = {"true": bool(value), "false": not value, "none": value is None, "not none": value is not None}[op]
        else:
            approx = any(o.approx for o in site.operands)
            result = all(_binary(op, values[i], values[i + 1], approx) for i, op in enumerate(site.ops))
    except NotPlain:
        return None
    except Exception:  # the comparison itself fails (1 < "a"): so did the assertion
        result = False
    return result != site.negated


def _node(test_id: str) -> str:
    """A node id without its parameters: the test function as collected in one class of one file."""
    return test_id.split(" ", 1)[0].split("[", 1)[0]


def blind_id(test: str, real_order: list[str], blind_order: list[str], plan: BlindPlan) -> str | None:
    """The blind copy's instance of ``test`` (a collected id as written): the same position among its
    function's instances, which the reference collected both ways."""
    node = _node(test)
    mine = [t for t in real_order if _node(t) == node]
    if test not in mine:
        return None
    theirs = [t for t in blind_order if _node(t) == plan.blind_node(node)]
    return theirs[mine.index(test)] if len(theirs) == len(mine) else None


def judge(
    expected: list[str],
    plan: BlindPlan,
    real: RunRecords,
    blind: RunRecords,
    ref: Reference | None,
    exit_codes: list[int],
    fail_to_pass: set[str] | None = None,
) -> Evidence:
    """The verdict over one grade's two runs (see module doc): ``real`` ran the hidden tests as written,
    ``blind`` the blind copy (:mod:`lego.sandboxes.blind`); ``ref`` is the gold patch's (None: the task
    has none, and only what the host can evaluate is judged)."""
    ev = Evidence()
    runs = [real, blind]
    matched = match_ids(expected, real.collected or [])
    for r, run in enumerate(runs):
        name = ("as written", "blind")[r]
        if not run.started:
            ev.ungradable.append(f"{name} run: the test process sent no records (it died before pytest started)")
        # the blind run's collection and exit are judged against the reference's, test by test
        # (_behaviour): a copy the gold patch cannot collect either costs evidence, never a grade
        if r == 0 and run.collect_errors:
            ev.ungradable.append(f"{name} run: collection errors: " + " | ".join(run.collect_errors)[:2000])
        if r == 0 and (run.exitstatus not in (0, 1) or exit_codes[r] not in (0, 1)):
            ev.ungradable.append(f"{name} run: pytest exited {exit_codes[r]} (status {run.exitstatus})")
        if run.malformed:
            ev.failures.append(f"{name} run: malformed records, e.g. {run.malformed[0]!r}")
        if run.duplicates:
            ev.tampered.append(
                f"{name} run: a second record for {run.duplicates[0]}: the result channel was written twice"
            )
    lacking = [t for t in expected if t not in matched]
    if lacking:
        ev.ungradable.append(f"as written: {len(lacking)} expected test(s) not collected, e.g. {lacking[0]}")
    ev.unstable = ref.unstable if ref is not None else 0
    f2p = fail_to_pass if fail_to_pass is not None else set(expected)
    for test in expected:
        outcome = real.outcome.get(matched[test], "missing") if test in matched else "missing"
        ev.tests[test] = outcome
        if outcome != "passed":
            continue
        verdict, behavioural = _behaviour(test, matched[test], plan, real, blind, ref)
        if verdict:
            ev.tampered.append(f"{test}: passes as written but not where the expected outcome is hidden: {verdict}")
        if test in f2p:
            (ev.behavioural if behavioural else ev.bit_only).append(test)
    return ev


def _site_of(key: str) -> str:
    """A witness key's site: ``0_3.1`` (operand 1 of site ``0_3``) -> ``0_3``; ``0_4`` (a raises) -> itself."""
    return key.split(".", 1)[0]


def _behaviour(
    test: str, collected: str, plan: BlindPlan, real: RunRecords, blind: RunRecords, ref: Reference | None
) -> tuple[str, bool]:
    """("", rests on behaviour?) when the blind run shows what the reference does, else (why not, _)."""
    order_real = ref.real if ref is not None else (real.everything or real.collected or [])
    order_blind = ref.blind if ref is not None else (blind.everything or blind.collected or [])
    bid = blind_id(collected, order_real, order_blind, plan)
    if bid is None:
        return "", False
    mine = {key: recs for (t, key), recs in blind.witnesses.items() if t == bid}
    gold = ref.witnesses.get(bid, {}) if ref is not None else None
    if ref is not None and ref.outcomes.get(bid) == "passed" and blind.outcome.get(bid, "missing") != "passed":
        return f"the blind copy's test {blind.outcome.get(bid, 'missing')} where the reference's passed", False
    row = rows_of(bid)
    shown = False
    for site_key in dict.fromkeys(_site_of(k) for k in (gold if gold is not None else mine)):
        site = plan.sites.get(site_key)
        if site is None:
            continue
        where = f"{site.path}:{site.line}"
        keys = (
            [site_key]
            if site.kind in ("raises", "warns")
            else [f"{site_key}.{j}" if o.witnessed else "" for j, o in enumerate(site.operands)]
        )
        source = gold if gold is not None else mine
        counts = {len(source.get(k, [])) for k in keys if k}
        if gold is not None and any(len(mine.get(k, [])) != len(gold.get(k, [])) for k in keys if k):
            return (
                f"{where}: witnessed {len(mine.get(next(k for k in keys if k), []))} time(s), the reference {max(counts)}",
                False,
            )
        for m in range(min(counts) if counts else 0):
            records = [mine[k][m] if k else None for k in keys]
            result = evaluate(site, records, row)
            if result is True:
                shown = True
                continue
            if gold is None:
                if result is False:
                    return f"{where}: the witnessed value fails the assertion", False
                continue
            golds = [gold[k][m] if k else None for k in keys]
            pairs = [(r, g) for r, g in zip(records, golds, strict=True) if r is not None and g is not None]
            if not all(_same_record(r, g) for r, g in pairs):
                bad = next((r, g) for r, g in pairs if not _same_record(r, g))
                if result is False or informative(bad[1]):
                    return f"{where}: witnessed {_brief(bad[0])}, the reference {_brief(bad[1])}", False
                continue
            shown = shown or (result is None and any(informative(g) for _, g in pairs))
    return "", shown


def _brief(record: dict[str, Any]) -> str:
    return json.dumps(record.get("r", record.get("e")))[:120]
