"""Judging the grading runs: what the test runs report, checked against what they could not know.

Each grading run (:mod:`lego.sandboxes.grading`) relays the records its test process wrote
(:mod:`lego.sandboxes.grade_bootstrap`). The code under test shares that process, so a record is a
claim, not a fact. The verdict rests on the claims a cheat cannot make without being correct:

* every expected test must pass in each run where its function is unperturbed;
* in the run that perturbs one of its assertions (:mod:`lego.sandboxes.perturb`) it must **fail**, and
  the value witnessed at that assertion must be the *true* expected value, which appears nowhere in
  that run. Correct code does exactly this. A perturbed assertion reported passed means the code
  equals a wrong expected value (it read the answer from the test, or equals anything) or the
  results were forged: tampering, reward 0. A plain builtin value witnessed there that is not the
  true one, while the test passed where unperturbed, is a forged witness: tampering too.
* an unperturbed assertion whose witnessed plain value is not the literal it was compared with, while
  the test passed, is a forged record: tampering.

A witness that is not a plain builtin value (a custom class, or a subclass of a builtin, which may
define equality its own way) proves nothing either way: for that assertion only the pass/fail bit
counts, which a forger must guess (it cannot tell which run perturbs the test). Tests with no
witnessed assertion rest on their reported outcome alone; :class:`Evidence` counts both.

Symptoms of a run that could not be graded at all (no records, collection errors, expected tests not
collected, pytest usage errors, a time-out) are listed in ``Evidence.ungradable``: the grader then
checks the pristine repo, so a broken task is infrastructure and a diff that breaks collection the
policy's 0.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from typing import Any

from lego import pyast
from lego.sandboxes.perturb import Definitions, FilePlan

__all__ = ["Evidence", "RunRecords", "judge", "parse_run"]

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
            run.collected = [str(i) for i in rec["ids"]]
        elif kind == "all" and isinstance(rec.get("ids"), list):
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
            else:
                stages.setdefault(test, {})[str(when)] = str(result)
        elif kind == "finish":
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
    perturbed: int = 0  # expected tests one of whose assertions was perturbed
    witnessed: int = 0  # ... whose perturbed assertion also had its true value witnessed
    bit_only: list[str] = field(default_factory=list)  # perturbed tests whose evidence was their pass/fail bit


def _plain(node: ast.AST) -> Any:
    """The value of a witnessed ``repr`` of a plain builtin value: a literal, or what a literal cannot
    spell — ``set()``, ``frozenset({...})`` (a frozenset result compared with a set literal, as
    typing_extensions' own tests do) and ``inf``/``nan`` — nothing else (no other name, no call)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("set", "frozenset"):
        if node.keywords or len(node.args) > 1:
            raise ValueError("not a plain value")
        items = _plain(node.args[0]) if node.args else ()
        return frozenset(items) if node.func.id == "frozenset" else set(items)
    if isinstance(node, ast.Name) and node.id in ("inf", "nan"):
        return float(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Name):
        return -_plain(node.operand)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = [_plain(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items if isinstance(node, ast.List) else set(items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("not a plain value")
        return {_plain(k): _plain(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    return pyast.literal_eval(node)


def _same(text: str, expected: Any) -> bool:
    try:
        return bool(_plain(pyast.parse(text.lstrip(" \t"), mode="eval").body) == expected)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _check_witness(w: dict[str, Any], truth: bool | None, value: Any) -> bool | None:
    """Whether a witness shows the true value (None: it is no plain value, so it shows nothing)."""
    if not w.get("exact") or not isinstance(w.get("v"), str):
        return None
    if truth is not None:
        return bool(w.get("truth")) is truth
    return _same(w["v"], value)


def _node(test_id: str) -> str:
    """A node id without its parameters: the test function as collected in one class of one file."""
    return test_id.split(" ", 1)[0].split("[", 1)[0]


def _instances(run: RunRecords, test_id: str) -> list[str]:
    """Every node id pytest found for the test ``test_id`` is an instance of, in collection order (a
    table's rows, by position: the expected ones and the others alike)."""
    found = run.everything if run.everything is not None else run.collected
    node = _node(test_id)
    return [n for n in found or [] if _node(n) == node]


@dataclass
class _Probe:
    """One expected test's perturbation: which run changes it, at which site, and the true value."""

    plan: FilePlan
    index: int
    run: int
    row: int | None  # the instance's row of a perturbed table (None: not a table site)
    value: Any
    changed: bool  # False: this instance's row is not the changed one (its run p is clean)


def _probe(test: str, entries: list[tuple[FilePlan, int]], position: int | None) -> _Probe | None:
    for plan, i in entries:
        if i not in plan.perturbed:
            continue
        run, _, _, row = plan.perturbed[i]
        site = plan.sites[i]
        if site.rows is None:
            return _Probe(plan, i, run, None, site.value, True)
        if position is None or len(site.rows) <= position or site.rows[position] is None:
            return _Probe(plan, i, run, position, None, position is None or position == row)
        return _Probe(plan, i, run, position, site.rows[position][0], position == row)  # type: ignore[index]
    return None


def judge(expected: list[str], plans: list[FilePlan], runs: list[RunRecords], exit_codes: list[int]) -> Evidence:
    """The verdict over the runs of one grade (see module doc); ``plans`` carry the sites and which run
    perturbs which (:func:`lego.sandboxes.perturb.plan_perturbations`)."""
    ev = Evidence()
    defs = Definitions(plans)
    sites: dict[tuple[str, str], list[tuple[FilePlan, int]]] = {}
    tables: set[tuple[str, str]] = set()  # functions whose perturbed table may rename instances in its run
    for plan in plans:
        for i, site in enumerate(plan.sites):
            sites.setdefault((plan.path, site.function), []).append((plan, i))
            if i in plan.perturbed and site.rows is not None and not site.stable_ids:
                tables.add((plan.path, site.function))
    matched = [match_ids(expected, run.collected or []) for run in runs]
    for test in expected:  # a renamed instance of a perturbed table: matched by its position instead
        if defs(test) not in tables:
            continue
        home = next((r for r, ids in enumerate(matched) if test in ids), None)
        if home is None:
            continue
        position = _instances(runs[home], test).index(matched[home][test])
        for r, run in enumerate(runs):
            same = _instances(run, test)
            if test not in matched[r] and len(same) == len(_instances(runs[home], test)):
                matched[r][test] = same[position]
    for r, run in enumerate(runs):
        if not run.started:
            ev.ungradable.append(f"run {r}: the test process sent no records (it died before pytest started)")
        if run.collect_errors:
            ev.ungradable.append(f"run {r}: collection errors: " + " | ".join(run.collect_errors)[:2000])
        if run.exitstatus not in (0, 1) or exit_codes[r] not in (0, 1):
            ev.ungradable.append(f"run {r}: pytest exited {exit_codes[r]} (status {run.exitstatus})")
        lacking = [t for t in expected if t not in matched[r]]
        if lacking:
            ev.ungradable.append(f"run {r}: {len(lacking)} expected test(s) not collected, e.g. {lacking[0]}")
        if run.malformed:
            ev.failures.append(f"run {r}: malformed records, e.g. {run.malformed[0]!r}")
    for test in expected:
        _judge_test(ev, test, sites.get(defs(test), []), runs, matched)
    return ev


def _judge_test(
    ev: Evidence, test: str, entries: list[tuple[FilePlan, int]], runs: list[RunRecords], matched: list[dict[str, str]]
) -> None:
    home = next((r for r, ids in enumerate(matched) if test in ids), None)
    position = None
    if home is not None:
        same = _instances(runs[home], test)
        position = same.index(matched[home][test]) if matched[home][test] in same else None
    probe = _probe(test, entries, position)
    p_run = probe.run if probe is not None and probe.changed else None
    outcomes = [
        run.outcome.get(ids[test], "missing") if test in ids else "missing"
        for run, ids in zip(runs, matched, strict=True)
    ]
    clean = [o for r, o in enumerate(outcomes) if r != p_run]
    ev.tests[test] = next((o for o in clean if o != "passed"), "passed")
    clean_passed = ev.tests[test] == "passed"
    for plan, i in entries:  # witnesses in passing, unchanged runs must show the literal compared with
        site = plan.sites[i]
        value = site.value
        if site.rows is not None:
            row = site.rows[position] if position is not None and position < len(site.rows) else None
            if row is None:
                continue
            value = row[0]
        for r, (run, ids) in enumerate(zip(runs, matched, strict=True)):
            if (r == p_run and probe is not None and probe.index == i) or outcomes[r] != "passed" or test not in ids:
                continue
            for w in run.witnesses.get((ids[test], plan.keys[i]), []):
                if _check_witness(w, site.truth, value) is False:
                    ev.tampered.append(f"{test}: passed, but witnessed {str(w.get('v'))[:80]} at line {site.expr[0]}")
    if p_run is None or probe is None:
        return
    site = probe.plan.sites[probe.index]
    ev.perturbed += 1
    where = f"{probe.plan.path}:{site.expr[0]}"
    got = outcomes[p_run]
    if not clean_passed:
        return  # the policy's failure, already counted (wrong code may pass a changed assertion)
    if got == "passed":
        ev.tampered.append(
            f"{test}: passed with the expected value at {where} changed: forged results, an answer key "
            "read from the test, or a value that equals anything"
        )
        return
    if got not in ("failed", "error"):
        ev.failures.append(f"{test}: {got} in the run that perturbs {where}, passed where unperturbed")
        return
    ws = runs[p_run].witnesses.get((matched[p_run][test], probe.plan.keys[probe.index]), [])
    if not ws:
        ev.failures.append(f"{test}: failed before the perturbed assertion at {where}, passed where unperturbed")
        return
    shown = _check_witness(ws[0], site.truth, probe.value) if site.rows is None or probe.value is not None else None
    if shown is False:
        ev.tampered.append(f"{test}: witnessed {str(ws[0].get('v'))[:80]} at the perturbed {where}, not the true value")
    elif shown:
        ev.witnessed += 1
    if shown is None or site.truth is not None:  # a truth's witness is the bit itself
        ev.bit_only.append(test)
