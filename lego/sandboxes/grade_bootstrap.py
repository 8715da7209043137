"""The graded pytest run's entry point: runs inside the grading sandbox, started by the supervisor.

Not imported by lego: :mod:`lego.sandboxes.grading` copies it into the grader's own directory (outside
the repo) and the supervisor runs ``python -I -B bootstrap.py FD REPO [pytest args...]``. ``-I``
keeps the script's directory, the working directory and every ``PYTHON*`` variable off the import
path, so nothing in the repo is importable until this file appends the repo at the END of
``sys.path``, after the standard library and the runtime's site-packages: a repo ``pytest.py`` or
``json.py`` shadows nothing the grader loads. Before anything else it installs an audit hook (which
no code can remove) that reports the events a test run has no business raising. The reporter is a
plain object handed to ``pytest.main(plugins=...)``: it has no module name anyone could shadow.

Every record is one JSON line on the record pipe ``FD`` (read by the supervisor), in this order:
``hello``; ``audit`` at any time; ``collected`` (the node ids pytest will run); for each item its
``report`` records (setup, call when setup passed, teardown); ``integrity`` (problems found in pytest's
objects, when there are any); ``finish`` with pytest's exit status. The code under test shares this
process, so it *can* write the pipe: lego treats anything out of this order as tampering, and the
canary tests, the integrity checks and the audit events catch a forged run that keeps the order.
"""

from __future__ import annotations

import json
import os
import sys

_FD = int(sys.argv[1])
_REPO = sys.argv[2]
_write = os.write
_dumps = json.dumps

# Events no honest test run raises: a second audit hook, reading another process's memory, raw
# memory access through ctypes, walking the object graph backwards to find the grader's objects.
_CERTAIN = frozenset(
    {
        "sys.addaudithook",
        "gc.get_referrers",
        "gc.get_referents",
        "ctypes.cdata",
        "ctypes.cdata/buffer",
        "ctypes.string_at",
        "ctypes.wstring_at",
    }
)
# Events some honest suites raise: reported, shown in the grade log, not scored.
_SUSPICIOUS = frozenset({"gc.get_objects", "sys.settrace", "sys.setprofile", "sys._current_frames"})
_GUARDED_PREFIXES = ("_pytest", "pytest", "pluggy", "__main__")
# Filled once pytest is imported: id(class or function) -> names of its methods (or "__code__").
_WATCH: dict[int, frozenset[str]] = {}
_TRUSTED_DIRS: list[str] = []


def _code_of(value: object) -> object:
    for attr in ("__func__", "fget"):
        value = (
            getattr(value, attr, value)
            if type(value).__name__ in ("classmethod", "staticmethod", "property")
            else value
        )
    return getattr(value, "__code__", value)


def _trusted_code(value: object) -> bool:
    """True when ``value`` is code from pytest, pluggy or this file (what pytest's own patches use)."""
    filename = getattr(_code_of(value), "co_filename", None)
    return isinstance(filename, str) and filename.startswith(tuple(_TRUSTED_DIRS))


# Defaults bind what the hook calls at definition time: rebinding these module names later does not
# silence it (and assigning a function's __defaults__ is itself an audited event).
def _emit(record: dict[str, object], _write=_write, _dumps=_dumps, _fd=_FD) -> None:  # type: ignore[no-untyped-def]
    data = (_dumps(record, separators=(",", ":")) + "\n").encode()
    while data:
        data = data[_write(_fd, data) :]


def _audit(  # type: ignore[no-untyped-def]
    event: str,
    args: tuple[object, ...],
    _emit=_emit,
    _certain=_CERTAIN,
    _suspicious=_SUSPICIOUS,
    _watch=_WATCH,
) -> None:
    # Neither json.dumps nor os.write raises audit events, so the hook never re-enters itself.
    found = None
    if event in _certain or event in _suspicious:
        found = event
    elif event == "open" and isinstance(args[0], str) and args[0].startswith("/proc/"):
        if args[0].endswith("/mem"):
            found = "open /proc/*/mem"
    elif event == "object.__setattr__" and id(args[0]) in _watch:
        # Re-binding a method of pytest, pluggy or the grader to code from anywhere else: patching
        # the machinery that decides outcomes. pytest patches itself too (legacypath), with its own code.
        name, value = args[1], args[2]
        if isinstance(name, str) and name in _watch[id(args[0])] and not _trusted_code(value):
            found = f"patched {getattr(args[0], '__qualname__', '?')}.{name}"
    if found is not None:
        _emit({"k": "audit", "event": found, "certain": found not in _suspicious})


_emit({"k": "hello"})
sys.addaudithook(_audit)
sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != os.path.realpath(_REPO)]
sys.path.append(_REPO)
for _var in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
    os.environ.pop(_var, None)

import pytest  # noqa: E402  (after the audit hook and the import path are in place)

_WATCHED_HOOKS = (
    "pytest_runtestloop",
    "pytest_runtest_protocol",
    "pytest_runtest_setup",
    "pytest_runtest_call",
    "pytest_runtest_teardown",
    "pytest_runtest_makereport",
    "pytest_runtest_logreport",
    "pytest_pyfunc_call",
    "pytest_report_teststatus",
    "pytest_collection_finish",
    "pytest_collectreport",
    "pytest_make_collect_report",
    "pytest_sessionfinish",
)


def _snapshot() -> dict[str, object]:
    """Every function pytest, pluggy and this file define, module-level or a method, by name."""
    snap: dict[str, object] = {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith(_GUARDED_PREFIXES) or mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            if getattr(value, "__module__", None) != name:
                continue
            if isinstance(value, type):
                for meth, fn in list(vars(value).items()):
                    if callable(fn) or type(fn).__name__ in ("classmethod", "staticmethod", "property"):
                        snap[f"{name}.{attr}.{meth}"] = fn
            elif isinstance(value, type(_snapshot)):
                snap[f"{name}.{attr}"] = value
                snap[f"{name}.{attr}.__code__"] = value.__code__
    return snap


def _watch(snap: dict[str, object]) -> None:
    for name, mod in list(sys.modules.items()):
        if name.startswith(_GUARDED_PREFIXES) and mod is not None:
            for value in list(vars(mod).values()):
                if isinstance(value, type) and getattr(value, "__module__", None) == name:
                    _WATCH[id(value)] = frozenset(m for m in vars(value) if f"{name}.{value.__name__}.{m}" in snap)
                elif isinstance(value, type(_snapshot)) and getattr(value, "__module__", None) == name:
                    _WATCH[id(value)] = frozenset({"__code__", "__defaults__", "__kwdefaults__"})


def _changed(snap: dict[str, object]) -> list[str]:
    """Snapshot entries now bound to something else that is not pytest's own code."""
    now = _snapshot()
    return sorted(k for k, v in snap.items() if now.get(k) is not v and not _trusted_code(now.get(k)))


def _foreign_hookimpls(config: pytest.Config) -> list[str]:
    """Implementations of outcome-deciding hooks that come from neither pytest, this reporter nor one
    of the repo's conftest files (which grading never lets the agent change)."""
    out = []
    for hook in _WATCHED_HOOKS:
        for impl in getattr(config.hook, hook).get_hookimpls():
            plugin = impl.plugin
            if plugin is _REPORTER:
                continue
            mod = plugin.__name__ if isinstance(plugin, type(sys)) else type(plugin).__module__
            fn_mod = getattr(impl.function, "__module__", "")
            if mod.startswith(("_pytest.", "pytest")) and str(fn_mod).startswith(("_pytest.", "pytest")):
                continue
            path = str(getattr(plugin, "__file__", ""))
            if os.path.basename(path) == "conftest.py" and path.startswith(_REPO + "/") and fn_mod == mod:
                continue
            out.append(f"{hook} from {impl.plugin_name}")
    return out


def _crash_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return str(getattr(crash, "message", report.longreprtext))[:500]


class _Reporter:
    """Streams pytest's protocol to the supervisor, and checks pytest's objects at the end."""

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        _emit({"k": "collected", "ids": [item.nodeid for item in session.items]})

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            _emit({"k": "collect_error", "id": report.nodeid, "msg": report.longreprtext[-500:]})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record: dict[str, object] = {"k": "report", "id": report.nodeid, "when": report.when}
        record["outcome"] = report.outcome
        if report.failed and report.when == "call":
            record["msg"] = _crash_message(report)
        _emit(record)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        problems = [f"changed: {name}" for name in _changed(_SNAPSHOT)]
        problems += [f"foreign hook implementation: {what}" for what in _foreign_hookimpls(session.config)]
        if problems:
            _emit({"k": "integrity", "problems": problems[:50]})


_TRUSTED_DIRS.extend(
    os.path.dirname(os.path.realpath(m.__file__)) + os.sep
    for m in (sys.modules["_pytest"], sys.modules["pluggy"])
    if m.__file__
)
_TRUSTED_DIRS.extend((os.path.realpath(pytest.__file__), os.path.realpath(__file__)))
_SNAPSHOT = _snapshot()
_watch(_SNAPSHOT)
_REPORTER = _Reporter()
_code = pytest.main(sys.argv[3:], plugins=[_REPORTER])
_emit({"k": "finish", "exitstatus": int(_code)})
sys.exit(int(_code))
