"""The project's own dist-info, read from the pristine repo's static metadata (lego.sandboxes.project_meta)."""

from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

from lego.sandboxes.project_meta import meta_folder, project_metadata, repo_metadata


def _meta(files: dict[str, str], roots: tuple[str, ...] = (".",)) -> dict[str, str] | None:
    return project_metadata(files.get, list(files), roots)


def test_a_static_pyproject_gives_name_version_and_entry_points() -> None:
    meta = _meta(
        {
            "pyproject.toml": "[project]\nname = 'My.Tool'\nversion = '1.0'\n[project.scripts]\nmt = 'my_tool:main'\n"
            "[project.entry-points.pytest11]\nmine = 'my_tool.plugin'\n"
        }
    )
    assert meta is not None and meta["folder"] == "My_Tool-1.0.dist-info"
    assert "Name: My.Tool\nVersion: 1.0\n" in meta["METADATA"]
    assert meta["entry_points.txt"] == "[console_scripts]\nmt = my_tool:main\n\n[pytest11]\nmine = my_tool.plugin\n\n"


def test_pkg_info_wins_and_is_kept_verbatim() -> None:
    pkg = "Metadata-Version: 2.4\nName: tool\nVersion: 3.2.1\nRequires-Dist: attrs\n\nLong: text: here\n"
    meta = _meta({"PKG-INFO": pkg, "pyproject.toml": "[project]\nname = 'tool'\ndynamic = ['version']\n"})
    assert meta is not None and meta["METADATA"] == pkg and meta["folder"] == "tool-3.2.1.dist-info"


def test_no_static_version_gives_nothing() -> None:
    assert _meta({"pyproject.toml": "[project]\nname = 'tool'\ndynamic = ['version']\n"}) is None
    assert _meta({"setup.cfg": "[metadata]\nname = tool\nversion = attr: tool.__version__\n"}) is None
    assert _meta({"setup.py": "from setuptools import setup\nsetup(name='tool', version='1')\n"}) is None
    assert _meta({"pyproject.toml": "not toml ["}) is None


def test_setup_cfg_with_a_literal_version_and_entry_points() -> None:
    cfg = "[metadata]\nname = tool\nversion = 0.4\n\n[options.entry_points]\nconsole_scripts =\n    tool = tool.cli:main\n"
    meta = _meta({"setup.cfg": cfg})
    assert meta is not None and meta["folder"] == "tool-0.4.dist-info"
    assert meta["entry_points.txt"] == "[console_scripts]\ntool = tool.cli:main\n\n"


def test_a_repo_that_ships_its_egg_info_at_an_import_root_gets_none() -> None:
    pkg = "Metadata-Version: 2.1\nName: tool\nVersion: 1.0\n"
    assert _meta({"PKG-INFO": pkg, "tool.egg-info/PKG-INFO": pkg}) is None
    assert _meta({"PKG-INFO": pkg, "src/tool.egg-info/PKG-INFO": pkg}, ("src",)) is None
    assert _meta({"PKG-INFO": pkg, "docs/tool.egg-info/PKG-INFO": pkg}) is not None  # not on the path


def test_the_folder_is_what_importlib_metadata_reads(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("[project]\nname = 'lego-meta-probe'\nversion = '9.8.7'\n")
    meta = repo_metadata(repo)
    assert meta is not None
    folder = meta_folder(meta, tmp_path / "metas")
    assert meta_folder(meta, tmp_path / "metas") == folder  # content-addressed: written once
    assert [d.metadata["Version"] for d in md.distributions(path=[str(folder)])] == ["9.8.7"]
    assert str(folder) not in sys.path
