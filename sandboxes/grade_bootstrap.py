"""The graded pytest run's entry point: runs inside a grading sandbox, started by the supervisor.

Not imported by lego: the supervisor runs it as ``python -I -B -c <this file> FD CONFIG_FD [pytest
args...]`` with the task's own interpreter, which may be as old as Python 3.6 (SWE-bench images), so
this file uses nothing newer. ``CONFIG`` arrives on the pipe ``CONFIG_FD`` the supervisor feeds (one
argument holds at most 128 KiB). It is JSON: ``repo``, ``roots`` (repo-relative import roots),
``ids`` (the expected test ids), ``prelude`` (the text of :mod:`lego.sandboxes.suite_profile`) and
``meta`` (the project's own dist-info files, :mod:`lego.sandboxes.project_meta`, or null).
What it does, in order:

1. puts the repo's import roots FIRST on ``sys.path`` (``-I`` dropped the working directory and every
   ``PYTHON*`` variable), so the repo under test is the code under test even when the environment
   also has an installed copy of the project (pluggy, packaging, pytest itself) — as on a
   developer's machine with an editable install; writes ``meta`` into a fresh folder put LAST on
   ``sys.path`` (the project's metadata, as that install also gives); then runs ``prelude`` (Hypothesis' settings for
   a grader: the same examples every run, no deadline), before pytest reads any conftest;
2. installs the builtin ``__lego_w__(key, value)``: the rewritten hidden tests call it at every
   assertion the grader witnesses (:mod:`lego.sandboxes.perturb`); it records the value it is given
   (as a plain builtin value when it is one, or converted from a subclass of one) and returns it
   unchanged;
3. runs pytest, in this one process (a project's pytest-xdist options are switched off), with a
   reporter plugin that keeps only the expected tests (matched exactly, or as
   swebench's log parser spells an id with a space: cut at the first space; with every other instance
   of their functions, so a renamed table row still runs), and writes one JSON
   record per event on the record pipe ``FD``: ``hello``, ``collected``, ``collect_error``,
   ``start`` (a test begins: witnesses that follow are its), ``witness``, ``report`` (setup, call,
   teardown, and subtests), ``finish``.

Nothing here is a defence: the code under test shares this process and can write the pipe or replace
any of it. The grader does not trust these records; it checks them against values the process never
had (:mod:`lego.sandboxes.evidence`).
"""

import builtins
import json
import os
import sys

_FD = int(sys.argv[1])


def _read_config(fd):
    """CONFIG from the pipe the supervisor feeds (an argument would be capped at 128 KiB)."""
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return json.loads(b"".join(chunks).decode("utf-8", "surrogateescape"))


_CONFIG = _read_config(int(sys.argv[2]))
_REPO = _CONFIG["repo"]
_write = os.write
_dumps = json.dumps


def _emit(record):
    data = (_dumps(record, separators=(",", ":")) + "\n").encode("utf-8", "replace")
    while data:
        data = data[_write(_FD, data) :]


_emit({"k": "hello", "python": sys.version.split()[0]})
_roots = [os.path.normpath(os.path.join(_REPO, r)) for r in _CONFIG.get("roots") or ["."]]
sys.path[:] = _roots + [p for p in sys.path if p and os.path.realpath(p) not in _roots]
for _var in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
    os.environ.pop(_var, None)
if _CONFIG.get("meta"):  # the project's own dist-info (lego.sandboxes.project_meta), LAST: it shadows nothing
    _meta = dict(_CONFIG["meta"])
    _site = _CONFIG["meta_dir"]  # the supervisor's: it removes the folder when this process is gone
    _dist = os.path.join(_site, os.path.basename(_meta.pop("folder")))
    os.mkdir(_dist)
    for _name, _text in _meta.items():
        with open(os.path.join(_dist, _name), "w", encoding="utf-8") as _f:
            _f.write(_text)
    sys.path.append(_site)
if _CONFIG.get("prelude"):  # lego.sandboxes.suite_profile: Hypothesis' settings for a grader, before any conftest
    exec(compile(_CONFIG["prelude"], "<lego_suite_profile>", "exec"), {"__name__": "lego_suite_profile"})

_LIMIT = 65536
_PLAIN = (bool, int, float, complex, str, bytes, type(None))


class _Opaque(Exception):
    pass


def _canon(x, depth, state):
    """``x`` as a plain builtin value (exact types only), converting subclasses of builtins through
    the base type's own methods; raises _Opaque for anything else."""
    if depth > 30:
        raise _Opaque()
    t = type(x)
    if t in _PLAIN:
        return x
    if t in (tuple, list) or (isinstance(x, (tuple, list)) and not isinstance(x, (str, bytes))):
        base = tuple if isinstance(x, tuple) else list
        if t is not base:
            state["converted"] = True
        items = base.__getitem__(x, slice(None))
        return base(_canon(i, depth + 1, state) for i in items)
    if isinstance(x, dict):
        if t is not dict:
            state["converted"] = True
        return {_canon(k, depth + 1, state): _canon(v, depth + 1, state) for k, v in dict.items(x)}
    if isinstance(x, (set, frozenset)):
        base = frozenset if isinstance(x, frozenset) else set
        if t is not base:
            state["converted"] = True
        return base(_canon(i, depth + 1, state) for i in base.copy(x))
    for base, convert in (
        (int, int.__int__),
        (float, float.__float__),
        (str, str.__str__),
        (bytes, lambda v: bytes.__add__(v, b"")),
        (complex, lambda v: complex.__add__(v, 0)),
    ):
        if isinstance(x, base):
            state["converted"] = True
            return convert(x)
    if getattr(t, "__module__", "") == "numpy" and hasattr(x, "item") and getattr(x, "shape", None) == ():
        state["converted"] = True
        return _canon(x.item(), depth + 1, state)
    raise _Opaque()


def __lego_w__(key, value):
    record = {"k": "witness", "site": key}
    try:
        state = {"converted": False}
        text = repr(_canon(value, 0, state))
        if len(text) > _LIMIT:
            raise _Opaque()
        record["v"] = text
        record["exact"] = not state["converted"]
        record["truth"] = bool(value)
    except BaseException:  # anything the value does while being read leaves the test run unchanged
        record["v"] = None
        record["exact"] = False
        try:
            record["type"] = type(value).__name__[:80]
        except BaseException:
            record["type"] = "?"
    try:
        _emit(record)
    except BaseException:
        pass
    return value


builtins.__lego_w__ = __lego_w__

import pytest

_WANTED = set(_CONFIG.get("ids") or [])


def _function(nodeid):
    """``a/t.py::C::test_x[p]`` -> ``a/t.py::C::test_x``: the instances of one function."""
    return nodeid.split(" ", 1)[0].split("[", 1)[0]


# Every instance of a function with an expected instance runs: a perturbed table row renames its
# instance, which is then matched to its row by position (lego.sandboxes.evidence).
_FUNCTIONS = set(_function(i) for i in _WANTED)


def _crash_message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    return str(getattr(crash, "message", None) or report.longreprtext)[:500]


def _platform_kept():
    """One phase of a test, with ``os.name`` and ``sys.platform`` as they were before it."""
    saved = (os.name, sys.platform)
    yield
    os.name, sys.platform = saved


class _Reporter(object):
    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config):
        # The graded tests run in THIS process, the one holding __lego_w__ and the record pipe: a
        # project's own `-n auto` / `--dist` (pytest-xdist, from its addopts) would hand them to worker
        # processes that hold neither (every witnessed assertion a NameError, no collection reported).
        # Before xdist's own pytest_configure, which starts the workers from these options.
        option = config.option
        if getattr(option, "numprocesses", None) or getattr(option, "tx", None):
            option.numprocesses = 0
            option.dist = "no"
            option.tx = []

    def pytest_collection_modifyitems(self, session, config, items):
        _emit({"k": "all", "ids": [item.nodeid for item in items]})  # before selection: rows by position
        keep, drop = [], []
        for item in items:
            nodeid = item.nodeid
            wanted = nodeid in _WANTED or nodeid.split(" ", 1)[0] in _WANTED or _function(nodeid) in _FUNCTIONS
            (keep if wanted else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep

    # A test that changes os.name / sys.platform and fails before it puts them back (colorama's
    # `with osname("nt"):` has no try/finally) leaves pytest itself on "Windows": the next test's
    # location builds a WindowsPath and the run ends in an INTERNALERROR. A perturbed run fails
    # assertions on purpose, inside such blocks too, so each phase of a test gets them back as they were.
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item):
        yield from _platform_kept()

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item):
        yield from _platform_kept()

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item, nextitem):
        yield from _platform_kept()

    def pytest_collection_finish(self, session):
        _emit({"k": "collected", "ids": [item.nodeid for item in session.items]})

    def pytest_collectreport(self, report):
        if report.failed:
            _emit({"k": "collect_error", "id": report.nodeid, "msg": str(report.longreprtext)[-1500:]})

    def pytest_runtest_logstart(self, nodeid, location):
        _emit({"k": "start", "id": nodeid})

    def pytest_runtest_logreport(self, report):
        record = {"k": "report", "id": report.nodeid, "when": report.when, "outcome": report.outcome}
        if "sub" in type(report).__name__.lower() or getattr(report, "context", None) is not None:
            record["sub"] = True
        if report.failed:
            record["msg"] = _crash_message(report)
        _emit(record)


_code = pytest.main(sys.argv[3:], plugins=[_Reporter()])
_emit({"k": "finish", "exitstatus": int(_code)})
sys.exit(int(_code))
