"""`lego`: the command-line entry point.

Commands are imported lazily (``LazyGroup``: `lego --help` lists them from :data:`COMMANDS` and
imports none), so `--help`, `version`, `config`, `tasks list`, `doctor` and a user's mistake answer
without loading torch, and a command whose optional dependency is missing fails only when used.
`lego bench cli` measures it. Every command that fails on bad input prints
what was wrong and how to fix it, and exits with code 2.
"""

from __future__ import annotations

import faulthandler
import importlib
import signal
import sys
from typing import Any

import click

from lego import __version__
from lego.errors import ConfigError, LegoError, ModelError, TaskError

# name -> ("module:attr", short help); each module defines one click command or group. The short help
# is here so `lego --help` lists every command without importing any of them (several pull in torch).
COMMANDS: dict[str, tuple[str, str]] = {
    "version": ("lego.conductor.cli.basic:version", "Print lego's version, Python's and torch's."),
    "doctor": ("lego.conductor.cli.doctor:doctor", "Check this machine for everything lego uses."),
    "config": ("lego.conductor.cli.basic:config_group", "Inspect configuration files."),
    "models": ("lego.conductor.cli.models:models_group", "Build, import and check models."),
    "generate": ("lego.conductor.cli.models:generate", "Sample one completion from a model."),
    "proxy": ("lego.conductor.cli.proxy:proxy", "Serve a policy to any harness and record its calls."),
    "serve": ("lego.conductor.cli.serve:serve_group", "Serve your own harnesses; record the sessions you opt in."),
    "feedback": ("lego.conductor.cli.serve:feedback", "Keep +1/-1 (and a note) on a turn of a recorded session."),
    "tasks": ("lego.conductor.cli.tasks:tasks_group", "List, build, make and validate tasks."),
    "harness": ("lego.conductor.cli.harness:harness_group", "List and install agent harnesses."),
    "run": ("lego.conductor.cli.run:run", "Run ONE rollout and print its reward."),
    "sft": ("lego.conductor.cli.sft:sft", "Warm-start SFT on lego-agent conversations."),
    "train": ("lego.conductor.cli.train:train", "Run GSPO in an unmodified harness."),
    "report": ("lego.conductor.cli.train:report", "Plots and an HTML report of a training run."),
    "eval": ("lego.conductor.cli.eval:eval_group", "The policy x harness matrix with confidence intervals."),
    "bench": ("lego.conductor.cli.bench:bench_group", "Benchmarks: engine, proxy, sandbox, trainer, learn, cli."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use; ``--help`` lists them from the
    short help each entry carries, importing none."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, _, attr = self.lazy[cmd_name][0].partition(":")
            try:
                cmd = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                return _unavailable(cmd_name, exc)
            return cmd  # type: ignore[no-any-return]
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, self.lazy[name][1]) for name in self.list_commands(ctx) if name in self.lazy]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _unavailable(name: str, exc: Exception) -> click.Command:
    """A placeholder listed in --help for a command whose module failed to import; using it says why."""
    reason = f"{type(exc).__name__}: {exc}"

    def fail() -> None:
        raise click.ClickException(f"command {name!r} is unavailable ({reason}); run `lego doctor`")

    return click.Command(name, callback=fail, help=f"(unavailable: {reason})", short_help="(unavailable)")


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="lego")
def cli() -> None:
    """lego: harness-native RL for coding agents.

    \b
    Point any unmodified agent harness at the recording proxy, train the policy with GSPO on
    SWE tasks graded by hidden tests, and measure how the gain carries across harnesses.

    \b
    Start here:
      lego doctor                      what this machine has, and what to install
      lego train                       RL on the embedded default (tiny policy, CPU, built-in tasks)
      lego proxy --model PATH          serve a policy to any harness and record token-exact segments
      lego eval --policy a=PATH ...    the policy x harness matrix with confidence intervals
    """


def _quiet_libraries() -> None:
    """lego draws its own progress; silence transformers' per-load bars and info logs. By environment
    variables, read when those libraries are first imported: importing them here would cost every
    command (`lego --help` included) seconds."""
    import os
    import warnings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' bars follow huggingface_hub's
    # peft asks transformers for `is_gradient_checkpointing`, deprecated in transformers 5: a warning
    # about library internals that opened every `lego train`, with nothing for the user to do.
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)


def interrupt_like_ctrl_c() -> None:
    """For long commands (`lego train`, `lego eval`): SIGTERM (what `kill`, Docker, systemd and a
    scheduler's preemption send) acts as Ctrl-C, so the command saves and says how to continue; and a
    SIGINT inherited *ignored* (a job started in the background of a non-interactive shell) is
    restored, so `kill -INT` works. Under torchrun only rank 0 takes SIGTERM: the launcher ends the rest."""
    import os
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.environ.get("RANK", "0") == "0":
        signal.signal(signal.SIGTERM, stop)


def invoked_as() -> str:
    """This CLI as the user started it, to print in a command they can type again: ``lego`` when that
    is what their PATH finds, the path they typed otherwise (``.venv/bin/lego`` after the README's
    set-up), ``python -m lego`` (or the module they named) under ``-m``, and under ``torchrun``
    the torchrun command that starts as many ranks again."""
    import os
    import shlex
    import shutil

    prog = sys.argv[0] if sys.argv and sys.argv[0] else "lego"
    if prog.endswith(".py") or prog == "-m":
        module = "lego" if os.path.basename(prog) == "__main__.py" else "lego.conductor.cli.main"
        if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun started this rank
            nodes = os.environ.get("GROUP_WORLD_SIZE", "1")
            where = "--standalone" if nodes == "1" else f"--nnodes {nodes} --rdzv-endpoint HOST:PORT"
            return f"torchrun {where} --nproc-per-node {os.environ.get('LOCAL_WORLD_SIZE', '1')} -m {module}"
        return f"{shlex.quote(sys.executable)} -m {module}"
    name = os.path.basename(prog)
    found = shutil.which(name)
    if found is not None and os.path.realpath(found) == os.path.realpath(prog):
        return name
    return shlex.quote(prog)


def _one_line(exc: Exception) -> str:
    """An error's message on one line (a wrapped library error may span several)."""
    return " ".join(str(exc).split())


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; lego's own errors become a clear message and exit code 2 (bad input) or 1.
    ``kill -USR1 <pid>`` prints every thread's Python stack to stderr (where a long command waits)."""
    _quiet_libraries()
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2 if isinstance(exc, click.UsageError | click.BadParameter) else exc.exit_code)
    except (ConfigError, TaskError, ModelError) as exc:  # the user's input: say what and how to fix it
        click.secho(f"error: {_one_line(exc)}", fg="red", err=True)
        sys.exit(2)
    except LegoError as exc:
        click.secho(f"error: {type(exc).__name__}: {exc}", fg="red", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
