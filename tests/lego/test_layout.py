"""The repository's top level is the design card's (`pyproject.toml, lego/, proxies/, harnesses/,
sandboxes/, tests/, eval/`) while the wheel installs one namespace, ``lego``: each seam folder is a
sub-package of ``lego`` through a relative link, which the build follows."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import lego.eval
import lego.harnesses
import lego.proxies
import lego.sandboxes

ROOT = Path(__file__).resolve().parents[2]
SEAMS = ("proxies", "harnesses", "sandboxes", "eval")


def test_the_seams_are_top_level_folders_imported_under_lego() -> None:
    for name, module in zip(SEAMS, (lego.proxies, lego.harnesses, lego.sandboxes, lego.eval), strict=True):
        link = ROOT / "lego" / name
        assert link.is_symlink() and Path(link.readlink()) == Path("..") / name, f"lego/{name} must link ../{name}"
        assert (ROOT / name / "__init__.py").is_file() and not (ROOT / name).is_symlink()
        # imported through the link: one module identity, the path mypy and tracebacks show
        assert Path(module.__file__ or "") == link / "__init__.py"


def test_the_wheel_installs_only_lego_with_every_seam_inside(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("lego", *SEAMS):
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=ignore)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "w"),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "w").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"lego"}, tops
    for must in (
        "lego/proxies/app.py",
        "lego/harnesses/lego_agent/agent.py",
        "lego/sandboxes/grade_bootstrap.py",
        "lego/eval/estimators.py",
        "lego/tasks/data/real/manifest.jsonl",
    ):
        assert must in names, must
    # nothing twice: the seam's files are in the wheel once, under lego/
    assert len(names) == len(set(names))
