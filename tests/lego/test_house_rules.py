"""House rules read from the source (issue 27): no room holds more than a quarter of the house, the
composing faces (the proxy's route table, the CLI) keep their functions short, and no caller asks an
engine what it is (``isinstance(x, SomeEngine)``) or what it takes (``inspect.signature``): a
capability some engines have is its own small protocol in ``lego.seams``, checked by type.

The walk follows the links ``lego/proxies -> ../proxies`` (and harnesses, sandboxes, eval), so each
seam folder is counted under its import name."""

from __future__ import annotations

import ast
import os
from collections import Counter
from pathlib import Path

import pytest

LEGO = Path(__file__).resolve().parents[2] / "lego"
EXCLUDED = (LEGO / "tasks" / "data",)  # the shipped suites' libraries: task data, not the project's code
MAX_SHARE = 0.25
MAX_FUNCTION_LINES = 80
SHORT_FUNCTIONS = (LEGO / "proxies" / "app.py", LEGO / "conductor" / "cli")


def _python_files(root: Path) -> list[Path]:
    """Every ``.py`` file under ``root``, through the seam links, by the path it is imported from."""
    files = []
    for folder, dirs, names in os.walk(root, followlinks=True):
        here = Path(folder)
        dirs[:] = [d for d in dirs if d != "__pycache__" and here / d not in EXCLUDED]
        files += [here / n for n in names if n.endswith(".py")]
    return sorted(files)


def _package(path: Path) -> str:
    """``lego.<package>`` a file belongs to (a module directly under ``lego/`` is its own)."""
    first = path.relative_to(LEGO).parts[0]
    return "lego." + first.removesuffix(".py")


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_the_walk_sees_every_room_and_each_seam_through_its_link() -> None:
    packages = {_package(p) for p in _python_files(LEGO)}
    rooms = ("conductor", "training", "tasks", "proxies", "harnesses", "sandboxes", "eval", "engines", "algos")
    assert {f"lego.{r}" for r in rooms} <= packages
    assert LEGO / "proxies" / "app.py" in _python_files(LEGO)
    assert not any(p.is_relative_to(EXCLUDED[0]) for p in _python_files(LEGO))


def test_no_package_holds_more_than_a_quarter_of_the_lines() -> None:
    lines: Counter[str] = Counter()
    for path in _python_files(LEGO):
        lines[_package(path)] += _lines(path)
    total = sum(lines.values())
    over = {name: f"{n / total:.1%}" for name, n in lines.items() if n > MAX_SHARE * total}
    assert not over, f"packages over {MAX_SHARE:.0%} of lego's {total} Python lines: {over}; split a room out"


@pytest.mark.parametrize("place", SHORT_FUNCTIONS, ids=lambda p: str(p.relative_to(LEGO.parent)))
def test_the_composing_faces_have_no_function_over_80_lines(place: Path) -> None:
    files = _python_files(place) if place.is_dir() else [place]
    assert files
    long = [
        f"{path.relative_to(LEGO.parent)}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for path in files
        for fn in _functions(path)
        if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (a face parses, builds, calls, prints): {long}"


def _names_an_engine_class(node: ast.expr) -> bool:
    if isinstance(node, ast.Tuple):
        return any(_names_an_engine_class(e) for e in node.elts)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.endswith("Engine")


def _is_signature_call(node: ast.Call) -> bool:
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr == "signature") or (
        isinstance(func, ast.Name) and func.id == "signature"
    )


def _engine_probes(source: str, name: str) -> list[str]:
    """``name:line call`` for every ``isinstance(x, ...Engine)`` and ``signature(<an engine's ...>)`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if not isinstance(node, ast.Call):
            continue
        where = f"{name}:{node.lineno} {ast.unparse(node)}"
        if isinstance(node.func, ast.Name) and node.func.id == "isinstance" and len(node.args) == 2:
            if _names_an_engine_class(node.args[1]):
                found.append(where)
        elif _is_signature_call(node) and any("engine" in ast.unparse(a).lower() for a in node.args):
            found.append(where)
    return found


def test_no_caller_asks_an_engine_what_it_is_or_what_it_takes() -> None:
    probes = [
        probe
        for path in _python_files(LEGO)
        for probe in _engine_probes(path.read_text(encoding="utf-8"), str(path.relative_to(LEGO.parent)))
    ]
    assert not probes, f"engines probed by class or signature (make the capability a protocol in lego.seams): {probes}"


def test_the_probe_finder_finds_what_it_forbids() -> None:
    """The rule is only as good as its finder: each forbidden form is found, a model's signature is not."""
    source = (
        "import inspect\n"
        "isinstance(engine, VLLMEngine)\n"
        "isinstance(e, (str, engines.TransformersEngine))\n"
        "inspect.signature(self.engine.generate)\n"
        "inspect.signature(model.forward)\n"
        "isinstance(engine, InProcessWeights)\n"
    )
    assert _engine_probes(source, "example.py") == [
        "example.py:2 isinstance(engine, VLLMEngine)",
        "example.py:3 isinstance(e, (str, engines.TransformersEngine))",
        "example.py:4 inspect.signature(self.engine.generate)",
    ]
