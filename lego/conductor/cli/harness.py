"""`lego harness list | install NAME | doctor`: which harnesses exist, installing them, checking them."""

from __future__ import annotations

import os
import shutil
import subprocess

import click
from rich.console import Console
from rich.table import Table

from lego.harnesses.base import HARNESSES, install_spec_of
from lego.harnesses.install import InstallSpec, harnesses_root, install, installed
from lego.harnesses.intercept import MITM_SPEC, Interceptor

__all__ = ["harness_group"]


def _spec(name: str) -> InstallSpec | None:
    """The adapter's install spec (None for the built-in lego-agent, which needs no install).

    ``mitmproxy`` (interception mode, :mod:`lego.harnesses.intercept`) installs the same way."""
    if name == Interceptor.name:
        return MITM_SPEC
    return install_spec_of(name)


@click.group("harness")
def harness_group() -> None:
    """List, install and check agent harnesses (installed under the lego data dir, never into lego's venv)."""


@harness_group.command("list")
def list_harnesses() -> None:
    """Every registered harness, its pinned version and whether it is installed."""
    table = Table("harness", "package", "pinned", "installed", "install s")
    for name in HARNESSES.names():
        spec = _spec(name)
        if spec is None:
            table.add_row(name, "built in", "-", "yes", "-")
            continue
        record = installed(name)
        table.add_row(
            name,
            f"{spec.kind}:{spec.package}",
            spec.version,
            record.version if record else "no",
            f"{record.install_s:.0f}" if record else "-",
        )
    Console().print(table)
    click.echo(f"install dir: {harnesses_root()}")


@harness_group.command("install")
@click.argument("names", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Reinstall even when the pinned version is already installed.")
def install_cmd(names: tuple[str, ...], force: bool) -> None:
    """Install NAMES at their pinned, tested versions (`all` installs every harness; `mitmproxy` the
    interception proxy for harnesses that cannot be given a base URL)."""
    todo = HARNESSES.names() if names == ("all",) else list(names)
    for name in todo:
        spec = _spec(name)
        if spec is None:
            click.echo(f"{name}: built in, nothing to install")
            continue
        click.echo(f"{name}: installing {spec.package}=={spec.version} ...")
        record = install(name, spec, force=force)
        click.echo(f"{name}: {record.version} installed in {record.install_s:.0f} s at {spec.install_dir(name)}")


@harness_group.command("doctor")
def doctor() -> None:
    """Check each installed harness starts (`--version`) and what each needs from this machine."""
    table = Table("harness", "status", "detail")
    for name in HARNESSES.names():
        spec = _spec(name)
        if spec is None:
            table.add_row(name, "[green]ok[/green]", "built in (stdlib-only script; needs python3 in the sandbox)")
            continue
        record = installed(name)
        if record is None:
            needs = "npm" if spec.kind == "npm" else spec.python
            table.add_row(name, "[yellow]not installed[/yellow]", f"lego harness install {name} (needs {needs})")
            continue
        exe = spec.executable_path(name)
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENHANDS_SUPPRESS_BANNER": "1"}
        try:
            proc = subprocess.run([str(exe), *spec.check_args], capture_output=True, text=True, timeout=60, env=env)
            ok, detail = proc.returncode == 0, (proc.stdout + proc.stderr).strip().splitlines()[:1]
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, detail = False, [str(exc)]
        status = "[green]ok[/green]" if ok else "[red]broken[/red]"
        table.add_row(name, status, f"{record.version}: {(detail or [''])[0][:80]}")
    if shutil.which("node") is None:
        table.add_row("node", "[red]missing[/red]", "the npm harnesses need node >= 18 on PATH")
    Console().print(table)
