"""`lego tasks make`: SWE tasks from real projects' source distributions, by procedural mutation.

Parses, calls :mod:`lego.tasks.suitebuild` (which runs :mod:`lego.tasks.factory`), prints progress
and the summary. The recipe is in :mod:`lego.tasks.factory`'s docstring.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lego.errors import TaskError
from lego.paths import cache_dir
from lego.tasks.factory import MakeOptions, ProjectResult, ProjectSpec
from lego.tasks.realsuite import MANIFEST_PATH, RECIPE_PATH
from lego.tasks.suitebuild import (
    assign_splits,
    load_recipe,
    lock_environments,
    make_tasks,
    select_projects,
    write_outputs,
)

__all__ = ["make_cmd"]

_err = Console(stderr=True)
if not _err.is_terminal:  # a log file: room for the summary table's columns
    _err = Console(stderr=True, width=160)


class _Progress:
    """One line per milestone. On a terminal the running count updates in place; elsewhere (CI logs)
    it is printed when a task is kept and every 10 mutants, so a log stays readable."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.status = console.status("") if console.is_terminal else None
        self.last: dict[str, str] = {}
        self.started = time.monotonic()

    def __call__(self, project: str, message: str) -> None:
        counting = " kept / " in message
        if counting:
            kept, tried = message.split(" kept / ")[0], message.split(" / ")[1].split()[0]
            changed = self.last.get(project, "").split(" kept")[0] != kept
            self.last[project] = message
            if self.status is not None:
                self.status.update(f"[bold]{escape(project)}[/]: {escape(message)}")
                if not changed:
                    return
            elif not changed and int(tried) % 10:
                return
        elapsed = time.monotonic() - self.started
        self.console.print(
            f"[dim]{elapsed:6.0f}s[/] [bold]{escape(project)}[/]: {escape(message)}", highlight=False, soft_wrap=True
        )

    def __enter__(self) -> _Progress:
        if self.status is not None:
            self.status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.stop()


def _table(results: list[ProjectResult]) -> Table:
    table = Table(title="lego tasks make", show_lines=False)
    for column in ("project", "split", "layout", "tests used", "kept", "tried", "mutants dropped (why)", "time"):
        table.add_column(column, overflow="fold")
    for r in results:
        name = f"{r.project.name} {r.project.version}" if r.project else r.spec.source
        why = ", ".join(f"{k} {v}" for k, v in sorted(r.dropped.items(), key=lambda kv: -kv[1]))
        unused = ", ".join(f"{k} {v}" for k, v in sorted(r.unused_tests.items(), key=lambda kv: -kv[1]))
        if r.error:
            why = f"[red]error:[/] {escape(r.error.splitlines()[0][:160])}" + (f"; {why}" if why else "")
        roots = ",".join(r.project.layout.import_roots) if r.project else "-"
        table.add_row(
            escape(name),
            r.spec.split,
            roots,
            f"{len(r.stable)}" + (f" (unused: {unused})" if unused else ""),
            str(len(r.tasks)),
            str(r.evaluated),
            why,
            f"{r.seconds:.0f}s",
        )
    return table


@click.command("make")
@click.argument("sources", nargs=-1)
@click.option("--suite", type=click.Choice(["real"]), help="Rebuild a shipped suite from its recipe instead.")
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False), help="Write tasks.jsonl, manifest.jsonl, summary.json here."
)
@click.option(
    "--max-per-project",
    type=click.IntRange(min=1),
    default=None,
    help="Tasks per project at most [default: 40, or the recipe's].",
)
@click.option(
    "--seed", type=int, default=None, help="Seed of the order mutations are tried in [default: 0, or the recipe's]."
)
@click.option(
    "--jobs", type=click.IntRange(min=1), default=2, show_default=True, help="Mutants evaluated concurrently."
)
@click.option("--heldout", multiple=True, help="Projects (as given, or by name) whose tasks form the held-out split.")
@click.option("--relock", is_flag=True, help="With --suite: resolve environments anew instead of the manifest's pins.")
@click.option("--only", multiple=True, help="With --suite: only these of its projects (by name), e.g. to rebuild one.")
def make_cmd(
    sources: tuple[str, ...],
    suite: str | None,
    out_dir: str | None,
    max_per_project: int | None,
    seed: int | None,
    jobs: int,
    heldout: tuple[str, ...],
    relock: bool,
    only: tuple[str, ...],
) -> None:
    """Make validated tasks from real projects: SOURCES are requirements (toolz==1.2.0, fetched as source
    distributions through pip) or local checkout directories. Each suite runs 3 times (flaky tests
    dropped), mutants of the project's own functions are kept when >= 1 test goes pass -> fail, and
    repeat; tasks are split train/held-out by project. Each finished project is saved as it finishes
    (in OUT/.progress): the same command again resumes a killed run. Exit 0: tasks made; 1: none made."""
    if bool(sources) == bool(suite):
        raise click.UsageError("give SOURCES (requirements or directories) or --suite real, not both or neither")
    manifest: Path | None = None
    settings: dict[str, object] = {}
    try:
        if suite:
            specs, settings = load_recipe(RECIPE_PATH)
            if only:
                specs = select_projects(specs, list(only))
            manifest = None if out_dir or only else MANIFEST_PATH
            if not relock:
                specs = lock_environments(specs, MANIFEST_PATH)
        else:
            specs = assign_splits([ProjectSpec(source=s) for s in sources], list(heldout), seed or 0)
            if all(s.split == "train" for s in specs):
                _err.print(
                    "note: one project and no --heldout: every task goes to the train split and there is no "
                    "held-out split (tasks are split by project, so held-out tasks come from projects never "
                    "trained on); give two or more projects, or --heldout NAME",
                    highlight=False,
                )
        options = MakeOptions.model_validate(
            {
                **{k: v for k, v in settings.items() if k in MakeOptions.model_fields},
                "jobs": jobs,
                **({"seed": seed} if seed is not None else {}),
                **({"max_per_project": max_per_project} if max_per_project is not None else {}),
            }
        )
    except TaskError as exc:
        raise click.UsageError(str(exc)) from exc
    t0 = time.monotonic()
    # Finished projects are saved as they finish: rerunning the same command resumes a killed run.
    checkpoints = (Path(out_dir) if out_dir else cache_dir() / "make" / (suite or "projects")) / ".progress"
    with _Progress(_err) as progress:
        results = make_tasks(specs, options, progress, checkpoints=checkpoints)
    written = write_outputs(results, Path(out_dir) if out_dir else None, manifest)
    _err.print(_table(results))
    tasks = [t for r in results for t in r.tasks]
    splits = {s: sum(t.split == s for t in tasks) for s in sorted({t.split for t in tasks})}
    for what, path in written.items():
        click.echo(f"{what}: {path}")
    click.echo(
        f"{len(tasks)} tasks {splits} from {sum(bool(r.tasks) for r in results)}/{len(results)} projects in {time.monotonic() - t0:.0f}s"
    )
    if not tasks:
        sys.exit(1)
