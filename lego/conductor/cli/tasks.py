"""`lego tasks`: list, show, build, validate and export SWE task instances.

Sources are named by spec: ``builtin``, ``builtin:train``, ``builtin:heldout``, ``FILE.jsonl`` or
``FILE.jsonl:SPLIT``, a directory of Harbor task directories (``DIR[:SPLIT]``) or an index of them
(see :func:`lego.tasks.sources.load_source`).
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lego.conductor.cli.tasks_make import make_cmd
from lego.engines.script_answer import ScriptAnswer
from lego.errors import LegoError, SandboxError, TaskError
from lego.seams import TaskSource
from lego.tasks import builtin, starter
from lego.tasks.sources import load_source
from lego.types import Task

if TYPE_CHECKING:
    from lego.tasks.validate import Backend, TaskValidation, ValidationRecord

__all__ = ["tasks_group"]

_err = Console(stderr=True)


def _report_errors(source: TaskSource) -> None:
    for error in source.errors:
        _err.print(f"[yellow]skipped:[/] {escape(str(error))}", highlight=False, soft_wrap=True)
    if source.errors:
        _err.print(f"[yellow]{len(source.errors)} malformed line(s) skipped[/]", soft_wrap=True)


def _records(source: TaskSource) -> list[Task]:
    return source.records()


def _only_ids(records: list[Task], ids_file: str | None) -> list[Task]:
    """``records`` restricted to the instance ids listed in ``ids_file`` (all of them without one)."""
    if ids_file is None:
        return records
    lines = (line.split("#", 1)[0].strip() for line in Path(ids_file).read_text(encoding="utf-8").splitlines())
    wanted = {line for line in lines if line}
    unknown = sorted(wanted - {t.instance_id for t in records})
    if unknown:
        more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
        raise TaskError(f"--ids: {len(unknown)} id(s) not in the source: {', '.join(unknown[:5])}{more}")
    return [t for t in records if t.instance_id in wanted]


def _print_repeats(results: list[TaskValidation], repeat: int) -> None:
    """Per task, whether the same diff got the same reward every time; then the totals."""
    from lego.tasks.validate import flaky_rate

    for r in results:
        verdict = "consistent" if r.consistent else "INCONSISTENT"
        click.echo(
            f"{r.instance_id}\t{verdict}\tgold {r.rewards.get('gold', [])}\tbase {r.rewards.get('base', [])}"
            f"\tflaky {len(r.flaky_tests)}/{r.tests_checked}"
        )
    flaky, checked = flaky_rate(results)
    consistent = sum(r.consistent and bool(r.rewards) for r in results)
    click.echo(
        f"repeat {repeat}: {consistent}/{len(results)} tasks consistent; flaky tests {flaky}/{checked} "
        f"({100.0 * flaky / max(checked, 1):.1f}%)"
    )


def _title(task: Task) -> str:
    return task.problem_statement.strip().splitlines()[0][:90] if task.problem_statement.strip() else ""


@click.group("tasks")
def tasks_group() -> None:
    """SWE task instances: the built-in suites, SWE-bench-format JSONL files and Harbor task directories."""


_SKIP_BAD_LINES = click.option(
    "--skip-bad-lines",
    is_flag=True,
    help="Skip malformed lines of a JSONL task file (each reported) instead of stopping at the first.",
)


@tasks_group.command("list")
@click.argument("source", default="builtin")
@click.option("--repos-dir", type=click.Path(file_okay=False), help="Where local repos of a JSONL file live.")
@_SKIP_BAD_LINES
def list_cmd(source: str, repos_dir: str | None, skip_bad_lines: bool) -> None:
    """One instance per line: id, split, repo, #FAIL_TO_PASS, title."""
    src = load_source(source, repos_dir=repos_dir, skip_bad_lines=skip_bad_lines)
    records = _records(src)
    for task in records:
        click.echo(f"{task.instance_id}\t{task.split or '-'}\t{task.repo}\t{len(task.FAIL_TO_PASS)}\t{_title(task)}")
    _report_errors(src)
    _err.print(f"{len(records)} instance(s)")


@tasks_group.command("show")
@click.argument("instance_id")
@click.option("--source", "source_spec", default="builtin", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the full record as JSON.")
def show_cmd(instance_id: str, source_spec: str, as_json: bool) -> None:
    """Print one instance: statement, gold patch, tests and metadata."""
    src = load_source(source_spec)
    task = next((t for t in _records(src) if t.instance_id == instance_id), None) or src.get(instance_id)
    if as_json:
        click.echo(json.dumps(task.model_dump(), indent=2))
        return
    click.echo(f"# {task.instance_id}  ({task.repo}, split {task.split or '-'}, base {task.base_commit[:12]})")
    click.echo(f"metadata: {json.dumps(task.metadata, sort_keys=True)}\n")
    click.echo(task.problem_statement)
    script = ScriptAnswer.decode(task.patch)
    if script is not None:
        files = script.files()
        click.echo(f"--- solution: {', '.join(sorted(files))} (a script answer) ---")
        click.echo(files[script.entry].decode(errors="replace"))
    else:
        click.echo("--- gold patch ---")
        click.echo(task.patch)
    click.echo(f"FAIL_TO_PASS ({len(task.FAIL_TO_PASS)}):")
    for test in task.FAIL_TO_PASS:
        click.echo(f"  {test}")
    click.echo(
        f"PASS_TO_PASS: {len(task.PASS_TO_PASS)} tests; hidden test files: {task.metadata.get('hidden_tests', [])}"
    )


@tasks_group.command("build")
@click.option(
    "--suite",
    type=click.Choice(["builtin", *starter.FAMILIES]),
    default="builtin",
    show_default=True,
    help="builtin: mutate the eight libraries and validate each bug with real test runs (minutes). "
    "starter: generate the small one-module repos the embedded default trains on (seconds); boundary: the same "
    "repos with off-by-one bounds (`>=` written `>`) instead of operator swaps.",
)
@click.option("--seed", default=0, show_default=True, help="Seed for the order mutation sites are tried in.")
@click.option("--workers", default=2, show_default=True, help="Concurrent test runs.")
@click.option("--library", "libraries", multiple=True, type=click.Choice(sorted(builtin.LIBRARIES)), help="Only these.")
@click.option(
    "--cap-train", default=builtin.DEFAULT_CAPS["train"], show_default=True, help="Instances per train library."
)
@click.option(
    "--cap-heldout", default=builtin.DEFAULT_CAPS["heldout"], show_default=True, help="Instances per held-out library."
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"Where to write [default: {builtin.INSTANCES_PATH.name} or <suite>.jsonl in the package].",
)
def build_cmd(
    suite: str,
    seed: int,
    workers: int,
    libraries: tuple[str, ...],
    cap_train: int,
    cap_heldout: int,
    output: str | None,
) -> None:
    """Regenerate a shipped task suite (deterministic for a given seed)."""
    if suite in starter.FAMILIES:
        t0 = time.monotonic()
        family = starter.FAMILIES[suite]
        tasks = starter.build_starter(seed=seed, family=suite)
        builtin.write_instances(tasks, Path(output or family.path))
        sizes = {s: sum(t.split == s for t in tasks) for s in family.sizes}
        click.echo(
            f"{len(tasks)} {suite} instances {sizes} written to {output or family.path} in {time.monotonic() - t0:.0f}s"
        )
        return
    output = output or str(builtin.INSTANCES_PATH)
    names = list(libraries) or sorted(builtin.LIBRARIES)
    caps = {"train": cap_train, "heldout": cap_heldout}
    t0 = time.monotonic()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"))
    with Progress(*columns, TimeElapsedColumn(), console=_err) as progress:
        bars = {n: progress.add_task(n, total=caps[builtin.LIBRARIES[n]], note="") for n in names}

        def on_progress(name: str, accepted: int, evaluated: int, cap: int) -> None:
            progress.update(bars[name], completed=accepted, note=f"{evaluated} mutants tried")

        tasks, report = builtin.build_suite(
            seed=seed, workers=workers, caps=caps, libraries=names, on_progress=on_progress
        )
    builtin.write_instances(tasks, Path(output))
    for name, counts in report.items():
        detail = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()) if k != "instances")
        click.echo(f"{name:12s} {builtin.LIBRARIES[name]:8s} {counts['instances']:4d} instances  ({detail})")
    splits: dict[str, int] = {}
    for task in tasks:
        splits[task.split] = splits.get(task.split, 0) + 1
    click.echo(f"{len(tasks)} instances {splits} written to {output} in {time.monotonic() - t0:.0f}s")


def _print_failure(console: Console, result: TaskValidation) -> None:
    where = f"{result.instance_id} [{result.backend or '-'}]: {result.reason}"
    console.print(f"[red]FAIL[/] {escape(where)}", highlight=False, soft_wrap=True)
    if result.log:
        console.print(escape(textwrap.indent(result.log.rstrip(), "    ")), highlight=False)


def _resume(
    record: ValidationRecord | None, records: list[Task], repeat: int
) -> tuple[list[TaskValidation], list[Task]]:
    """(the verdicts ``record`` already holds for ``records`` at ``repeat``, the tasks still to grade); says
    so on stderr, with the recorded failures."""
    if record is None:
        return [], list(records)
    done = {t.instance_id: record.done(t, repeat) for t in records}
    results = [r for r in done.values() if r is not None]
    todo = [t for t in records if done[t.instance_id] is None]
    torn = f"; {record.torn} torn line(s) ignored" if record.torn else ""
    _err.print(
        f"record {record.path}: {len(results)} of {len(records)} task(s) already validated with --repeat "
        f"{repeat}, {len(todo)} to go{torn}",
        highlight=False,
        soft_wrap=True,
    )
    for earlier in results:
        if not earlier.ok:
            _err.print(f"[red]FAIL[/] (recorded) {escape(f'{earlier.instance_id}: {earlier.reason}')}", soft_wrap=True)
    return results, todo


def _print_evidence(results: list[TaskValidation]) -> None:
    """Per task, and over all, how many FAIL_TO_PASS tests the gold grade judged on witnessed behaviour
    rather than a reported pass/fail bit (`tasks.min_behavioural_evidence` keeps the weak ones out of
    training)."""
    judged = [r for r in results if r.behavioural + r.bit_only]
    for r in judged:
        click.echo(
            f"evidence {r.instance_id}: {r.behavioural}/{r.behavioural + r.bit_only} FAIL_TO_PASS tests on behaviour"
        )
    behavioural = sum(r.behavioural for r in judged)
    total = behavioural + sum(r.bit_only for r in judged)
    if total:
        click.echo(
            f"behavioural evidence: {behavioural}/{total} FAIL_TO_PASS tests ({100 * behavioural / total:.1f}%) "
            f"over {len(judged)} task(s); the rest rest on a pass/fail bit"
        )


@tasks_group.command("validate")
@click.argument("source", default="builtin")
@click.option("--limit", type=int, default=None, help="Validate only the first N instances (after --ids).")
@click.option(
    "--ids",
    "ids_file",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="A file of instance ids, one per line ('#' starts a comment): validate only those, in the source's "
    "order (the failures of an earlier run, or one shard of a large suite). An id the source lacks is an error.",
)
@click.option("--workers", default=2, show_default=True, help="Instances validated concurrently.")
@click.option("--repos-dir", type=click.Path(file_okay=False), help="Where local repos of a JSONL file live.")
@click.option(
    "--sandbox",
    type=click.Choice(["local", "docker"]),
    default=None,
    help="Backend to grade on [default: what each task needs: docker for a task with an image or a Dockerfile "
    "and no local repo, else local].",
)
@click.option("--docker-image", default=None, help="Image for docker tasks that name none (sandbox.docker_image).")
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Grade gold and pristine N times each: report per task whether the same diff got the same reward "
    "every time, and the flaky-test rate.",
)
@click.option(
    "--no-sandbox",
    is_flag=True,
    help="The same grader on the local backend without bubblewrap (sandbox.unsafe_no_isolation=true: commands "
    "run on the host), for trusted tasks on a machine without bubblewrap; not for docker tasks.",
)
@click.option(
    "--record",
    "record_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append each task's verdict to this JSON-lines file as it finishes (fsynced). Tasks it already holds "
    "with the same content and --repeat are not graded again and count in the totals: a killed or sharded "
    "run resumes with the same command.",
)
@_SKIP_BAD_LINES
def validate_cmd(
    source: str,
    limit: int | None,
    ids_file: str | None,
    workers: int,
    repos_dir: str | None,
    sandbox: Backend | None,
    docker_image: str | None,
    repeat: int,
    no_sandbox: bool,
    record_path: str | None,
    skip_bad_lines: bool,
) -> None:
    """For every instance, with the grader that trains on it: the gold answer scores 1 and the pristine repo
    does not. Prints the grader's log for every invalid task. Exit 0: all valid; 1: some invalid; 2: usage."""
    from lego.tasks.validate import TaskValidation, ValidationRecord, sandbox_for, validate_task

    if no_sandbox and sandbox == "docker":
        raise click.UsageError(
            "--no-sandbox runs the local backend without bubblewrap; it cannot go with --sandbox docker"
        )
    try:
        src = load_source(source, repos_dir=repos_dir, skip_bad_lines=skip_bad_lines)
        records = _only_ids(_records(src), ids_file)
        records = records[:limit] if limit else records
        cfgs = {
            t.instance_id: sandbox_for(t, sandbox, no_isolation=no_sandbox, docker_image=docker_image) for t in records
        }
    except (TaskError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    if any(c.kind == "docker" for c in cfgs.values()):
        from lego.sandboxes.docker_engine import docker_client

        try:
            docker_client()
        except SandboxError as exc:
            raise click.UsageError(f"these tasks grade on docker: {exc}") from exc
    _report_errors(src)
    record = ValidationRecord(record_path) if record_path else None
    results, todo = _resume(record, records, repeat)
    by_id = {t.instance_id: t for t in todo}

    def check(task: Task) -> TaskValidation:
        try:
            task = src.materialize(task)
        except Exception as exc:  # a broken repo or image fails this task only
            return TaskValidation(task.instance_id, False, f"{type(exc).__name__}: {exc}", log=str(exc)[-4000:])
        return validate_task(task, cfgs[task.instance_id], repeat=repeat)

    t0 = time.monotonic()
    columns = (TextColumn("validate"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"))
    with Progress(*columns, TimeElapsedColumn(), console=_err) as progress:
        bar = progress.add_task("validate", total=len(records), completed=len(results), note="")
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for result in pool.map(check, todo):
                results.append(result)
                if record is not None:
                    record.add(by_id[result.instance_id], result, repeat)
                if not result.ok:
                    _print_failure(progress.console, result)
                bad = sum(not r.ok for r in results)
                progress.update(bar, advance=1, note=f"{bad} failed")
                if not _err.is_terminal:  # a log file shows no bar: a line per task
                    _err.print(
                        f"validate {len(results)}/{len(records)} {'ok' if result.ok else 'FAIL'} {result.instance_id}"
                        f" ({bad} failed, {time.monotonic() - t0:.0f}s)",
                        highlight=False,
                        soft_wrap=True,
                    )
    order = {t.instance_id: i for i, t in enumerate(records)}
    results.sort(key=lambda r: order[r.instance_id])
    failures = [r for r in results if not r.ok]
    if repeat > 1:
        _print_repeats(results, repeat)
    passed = len(records) - len(failures)
    _print_evidence(results)
    click.echo(f"{passed}/{len(records)} instances valid ({len(failures)} failed) in {time.monotonic() - t0:.0f}s")
    if failures or src.errors:
        sys.exit(1)


@tasks_group.command("export")
@click.argument("source")
@click.option("--format", "fmt", type=click.Choice(["harbor"]), required=True, help="The format to write.")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Directory to write the tasks into.")
@click.option(
    "--base-image",
    default=None,
    help="Image the Dockerfile of a task with a local repo starts FROM (it needs git and python3) "
    "[default: python:3.11-bookworm].",
)
@click.option("--limit", type=int, default=None, help="Export only the first N instances.")
@click.option("--repos-dir", type=click.Path(file_okay=False), help="Where local repos of a JSONL file live.")
def export_cmd(
    source: str, fmt: str, out: str, base_image: str | None, limit: int | None, repos_dir: str | None
) -> None:
    """Write a source's tasks in another format: Harbor task directories (one per task: task.toml,
    instruction.md, environment/Dockerfile, tests/test.sh, solution/solve.sh)."""
    from lego.tasks.harbor_export import DEFAULT_BASE_IMAGE, export_task

    try:
        src = load_source(source, repos_dir=repos_dir)
        records = _records(src)[:limit] if limit else _records(src)
    except TaskError as exc:
        raise click.UsageError(str(exc)) from exc
    _report_errors(src)
    dest = Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    written, failed = 0, 0
    for task in records:
        try:
            export_task(src.materialize(task), dest, base_image=base_image or DEFAULT_BASE_IMAGE)
            written += 1
        except LegoError as exc:
            failed += 1
            _err.print(f"[red]not exported[/] {escape(task.instance_id)}: {escape(str(exc))}", highlight=False)
    click.echo(f"{written} {fmt} task(s) written to {dest}" + (f" ({failed} failed)" if failed else ""))
    click.echo(f"check them with: lego tasks validate {dest} --sandbox docker")
    if failed:
        sys.exit(1)


tasks_group.add_command(make_cmd)
