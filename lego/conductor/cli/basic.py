"""`lego version` and `lego config show`."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from importlib import metadata
from typing import Any, TypeVar

import click

from lego import __version__

F = TypeVar("F", bound=Callable[..., Any])


@click.command()
def version() -> None:
    """Print lego's version, Python's and torch's (torch's from its package metadata: importing it takes seconds)."""
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "not installed"
    click.echo(f"lego {__version__} (python {platform.python_version()}, torch {torch})")


def override_option(example: str = "-o training.steps=3 -o algorithm.group_size=8") -> Callable[[F], F]:
    """The ``-o KEY.SUB=VALUE`` option every config-driven command takes (dotted, repeatable)."""
    return click.option(
        "-o",
        "--override",
        "overrides",
        multiple=True,
        metavar="KEY.SUB=VALUE",
        help=f"Dotted config override, repeatable, e.g. {example}.",
    )


def flag_overrides(flags: dict[str, Any]) -> list[str]:
    """Dotted overrides for the shortcut flags a user gave (``{"engine.model": "x", "proxy.port": None}``:
    None means not given). They go after the ``-o`` overrides, so a flag wins over ``-o`` for the same field."""
    return [f"{key}={json.dumps(value)}" for key, value in flags.items() if value is not None]


@click.group("config")
def config_group() -> None:
    """Inspect configuration files."""


@config_group.command("show")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@override_option()
@click.option("--format", "fmt", type=click.Choice(["toml", "json"]), default="toml", show_default=True)
@click.option("--doc", is_flag=True, help="Print every field with its type, default and description instead.")
def config_show(config: str | None, overrides: tuple[str, ...], fmt: str, doc: bool) -> None:
    """Print the merged configuration: CONFIG (default: the shipped embedded-default config)
    with every default filled in and every -o override applied.

    \b
    Examples:
      lego config show
      lego config show my_run.toml -o training.steps=3 -o harness.name=mini-swe-agent
      lego config show --doc
    """
    from lego.config import config_doc, load_config, to_toml

    cfg = load_config(config, list(overrides))
    if doc:
        for field in config_doc():
            click.echo(f"{field.key}: {field.type} = {field.default}\n    {field.description}")
        return
    click.echo(json.dumps(cfg.model_dump(mode="json"), indent=2) if fmt == "json" else to_toml(cfg), nl=False)
