"""The graded pytest run's entry point: runs inside a grading sandbox, started by the supervisor.

Not imported by lego: the supervisor runs it as ``python -s -B -c <this file> FD CONFIG_FD [pytest
args...]`` with the task's own interpreter, which may be as old as Python 3.6 (SWE-bench images), so
this file uses nothing newer. ``CONFIG`` arrives on the pipe ``CONFIG_FD`` the supervisor feeds (one
argument holds at most 128 KiB). It is JSON: ``repo``, ``roots`` (repo-relative import roots),
``ids`` (the expected test ids), ``prelude`` (the text of :mod:`lego.sandboxes.suite_profile`) and
``meta`` (the project's own dist-info files, :mod:`lego.sandboxes.project_meta`, or null).
What it does, in order:

1. puts the repo's import roots FIRST on ``sys.path`` and drops the working directory from it, then
   enters the repo (the supervisor starts it in ``/`` and passes no ``PYTHON*`` variable but
   ``PYTHONHASHSEED=0`` and ``PYTHONDONTWRITEBYTECODE``: nothing of the repo runs before this), so the repo under test is the code under test even when the environment
   also has an installed copy of the project (pluggy, packaging, pytest itself) — as on a
   developer's machine with an editable install; writes ``meta`` into a fresh folder put LAST on
   ``sys.path`` (the project's metadata, as that install also gives); then runs ``prelude`` (Hypothesis' settings for
   a grader: the same examples every run, no deadline), before pytest reads any conftest;
2. installs the builtins ``__lego_w__(key, thunk, mode)`` and ``__lego_x__(key, mode)``: the blind
   copy of the hidden tests (:mod:`lego.sandboxes.blind`) calls them where the tests as written
   assert; they record the structural form of the value (or the exception, or the warnings) and let
   the test go on;
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
import random as _random
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
os.chdir(_REPO)  # started in "/" (the supervisor): nothing of the repo was importable before this line
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

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (C types are not)
_TMOD = type.__dict__["__module__"].__get__
_TQUAL = type.__dict__["__qualname__"].__get__
_TMRO = type.__dict__["__mro__"].__get__
_TFLAGS = type.__dict__["__flags__"].__get__
_ARGS = BaseException.__dict__["args"].__get__
_ITEMS = 4000  # items per witness before it is cut ("deep")
_OUTCOMES = ("_pytest.outcomes", "_pytest.runner")


def _tname(t):
    try:
        mod = _TMOD(t)
        qual = _TQUAL(t)
        return "%s.%s" % (str.__str__(mod) if isinstance(mod, str) else "?", str.__str__(qual))
    except BaseException:
        return "?"


def _mro(t):
    try:
        return [_tname(c) for c in _TMRO(t)]
    except BaseException:
        return [_tname(t)]


class _Deep(Exception):
    pass


def _canon(x, depth, state):
    """``x``'s structural form, as JSON: its exact type and its parts, read through the base types'
    own methods and the instance dict, never through the value's own ``__eq__``/``__repr__``/
    ``__bool__``/``__iter__`` (a forger's value shows its own type and fields, whatever it claims)."""
    state[0] += 1
    if depth > 24 or state[0] > _ITEMS:
        raise _Deep()
    t = type(x)
    if x is None:
        return ["N"]
    if t is bool:
        return ["b", x is True]
    if t is int:
        return ["i", int.__repr__(x)]
    if t is float:
        return ["f", float.__repr__(x)]
    if t is complex:
        return ["c", complex.__repr__(x)]
    if t is str:
        return ["s", x]
    if t is bytes:
        return ["y", bytes.hex(x)]
    if t in (list, tuple):
        return ["l" if t is list else "t", [_canon(i, depth + 1, state) for i in t.__getitem__(x, slice(None))]]
    if t is dict:
        return ["d", [[_canon(k, depth + 1, state), _canon(v, depth + 1, state)] for k, v in dict.items(x)]]
    if t in (set, frozenset):
        items = [_canon(i, depth + 1, state) for i in t.copy(x)]
        items.sort(key=lambda c: _dumps(c, sort_keys=True))
        return ["S" if t is set else "F", items]
    name = _tname(t)
    if isinstance(x, BaseException):
        try:
            msg = BaseException.__str__(x)
        except BaseException:
            msg = "?"
        return ["exc", _mro(t), _canon(_ARGS(x), depth + 1, state), msg[:2000], _fields(x, depth, state)]
    if isinstance(x, type):
        return ["type", _tname(x)]
    for base in (bool, int, float, str, bytes, tuple, list, dict, frozenset, set):
        if isinstance(x, base) and base in _TMRO(t):
            plain = _canon(_rebuild(base, x), depth + 1, state)
            return ["sub", name, plain, _fields(x, depth, state)]
    if not (_TFLAGS(t) & _HEAPTYPE):  # a C type: its own reduction, which code under test cannot change
        try:
            reduced = t.__reduce_ex__(x, 2)
        except BaseException:
            return ["opaque", name]
        if isinstance(reduced, str):
            return ["red", name, reduced]
        parts = [reduced[1], *reduced[2:3]] if isinstance(reduced, tuple) and len(reduced) > 1 else []
        return ["red", name, [_canon(p, depth + 1, state) for p in parts]]
    return ["obj", name, _fields(x, depth, state)]


def _rebuild(base, x):
    if base is bool:
        return int.__int__(x) == 1
    if base is int:
        return int.__int__(x)
    if base is float:
        return float.__float__(x)
    if base is str:
        return str.__str__(x)
    if base is bytes:
        return bytes.__add__(x, b"")
    if base in (tuple, list):
        return base(base.__getitem__(x, slice(None)))
    if base is dict:
        return dict(dict.items(x))
    return base(base.copy(x) if base is set else frozenset.copy(x))


def _fields(x, depth, state):
    """An object's own state: its instance dict and its slots, by name (sorted)."""
    out = []
    try:
        own = object.__getattribute__(x, "__dict__")
    except BaseException:
        own = None
    if type(own) is dict:
        for k, v in sorted(dict.items(own), key=lambda kv: str(kv[0])):
            out.append([str.__str__(k) if isinstance(k, str) else "?", _canon(v, depth + 1, state)])
    for cls in _TMRO(type(x)):
        slots = cls.__dict__.get("__slots__", ()) if isinstance(cls.__dict__, type(type.__dict__)) else ()
        for slot in [slots] if isinstance(slots, str) else slots:
            if slot in ("__dict__", "__weakref__"):
                continue
            try:
                out.append(["@" + slot, _canon(object.__getattribute__(x, slot), depth + 1, state)])
            except _Deep:
                raise
            except BaseException:
                pass
    return out


def _structural(value):
    try:
        return _canon(value, 0, [0])
    except _Deep:
        return ["deep"]
    except RecursionError:
        return ["deep"]
    except BaseException:
        return ["opaque", _tname(type(value))]


def _passes_through(exc):
    """Exceptions a witness must not swallow: pytest's own outcomes (skip, fail, exit) and ^C."""
    return isinstance(exc, KeyboardInterrupt) or _tname(type(exc)).startswith(_OUTCOMES)


class _Info(object):
    """What ``with pytest.raises(...) as info`` (or unittest's ``assertRaises``/``assertWarns`` context)
    gives the code after the block, in the blind copy: the exception, or the warnings caught."""

    def __init__(self, exc, caught=None):
        self.value = self.exception = exc
        self.type = type(exc) if exc is not None else None
        self.tb = getattr(exc, "__traceback__", None)
        self.typename = self.type.__name__ if self.type is not None else ""
        self.warnings = list(caught or [])
        first = self.warnings[0] if self.warnings else None
        self.warning = getattr(first, "message", None)
        self.filename = getattr(first, "filename", None)
        self.lineno = getattr(first, "lineno", None)

    def __len__(self):
        return len(self.warnings)

    def __iter__(self):
        return iter(self.warnings)

    def __getitem__(self, i):
        return self.warnings[i]

    def match(self, regexp):
        return True

    def errisinstance(self, exc):
        return self.value is not None and isinstance(self.value, exc)


def _record(key, raised, value, caught):
    record = {"k": "witness", "site": key}
    if raised:
        record["e"] = _structural(value)
    else:
        record["r"] = _structural(value)
    if caught is not None:
        record["w"] = [_mro(w.category) for w in caught]
    try:
        _emit(record)
    except BaseException:
        pass


def __lego_w__(key, thunk, mode=0, *value):
    """The blind copy's witness (lego.sandboxes.blind): records ``thunk()``'s structural value, or the
    exception it raised, and carries on; mode 1 (``raises``) and 2 (``warns``) return an ``_Info``."""
    caught = None
    raised = False
    if thunk is None:
        result = value[0] if value else None
    else:
        try:
            if mode == 2:
                import warnings

                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    result = thunk()
            else:
                result = thunk()
        except BaseException as exc:
            if _passes_through(exc):
                raise
            raised, result = True, exc
    _record(key, raised, result, caught)
    if mode:
        return _Info(result if raised else None, caught)
    return result


class __lego_x__(object):
    """``with __lego_x__(key, mode):`` — a ``raises``/``warns`` body that could not move into a function."""

    def __init__(self, key, mode=1):
        self.key, self.mode, self.info, self.caught, self._cm = key, mode, _Info(None), None, None

    def __enter__(self):
        if self.mode == 2:
            import warnings

            self._cm = warnings.catch_warnings(record=True)
            self.caught = self._cm.__enter__()
            warnings.simplefilter("always")
        return self.info

    def __exit__(self, kind, exc, tb):
        if self._cm is not None:
            self._cm.__exit__(None, None, None)
        if exc is not None and _passes_through(exc):
            return False
        self.info.__init__(exc, self.caught)
        _record(self.key, exc is not None, exc, self.caught)
        return True


builtins.__lego_w__ = __lego_w__
builtins.__lego_x__ = __lego_x__

import pytest

_WANTED = set(_CONFIG.get("ids") or [])


def _function(nodeid):
    """``a/t.py::C::test_x[p]`` -> ``a/t.py::C::test_x``: the instances of one function."""
    return nodeid.split(" ", 1)[0].split("[", 1)[0]


# The run as written keeps the expected ids exactly (a 17,000-row table runs the rows it names). The
# blind copy names its tests anew, so the grader says which instances to keep by their position among
# their function's instances ("positions"), or, with no reference to tell them, whole functions.
_POSITIONS = dict((k, set(v)) for k, v in (_CONFIG.get("positions") or {}).items())
_FUNCTIONS = set(_CONFIG.get("functions") or [])


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
        keep, drop, seen = [], [], {}
        for item in items:
            nodeid = item.nodeid
            function = _function(nodeid)
            index = seen.get(function, 0)
            seen[function] = index + 1
            if _POSITIONS or _FUNCTIONS:
                wanted = index in _POSITIONS.get(function, ()) or function in _FUNCTIONS
            else:
                wanted = nodeid in _WANTED or nodeid.split(" ", 1)[0] in _WANTED
            (keep if wanted else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep

    # A test that changes os.name / sys.platform and fails before it puts them back (colorama's
    # `with osname("nt"):` has no try/finally) leaves pytest itself on "Windows": the next test's
    # location builds a WindowsPath and the run ends in an INTERNALERROR. A failing fix fails
    # assertions on purpose, inside such blocks too, so each phase of a test gets them back as they were.
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item):
        # The same random draws in every run of a test: the gold patch's, the run as written and the
        # blind copy see one sequence (cachetools' RRCache evicts at random), as pytest-randomly does
        _random.seed(0)
        numpy = sys.modules.get("numpy")
        if numpy is not None and hasattr(numpy, "random"):
            try:
                numpy.random.seed(0)
            except Exception:
                pass
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
