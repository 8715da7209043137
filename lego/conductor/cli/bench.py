"""`lego bench ...`: performance benchmarks. Each writes JSON in which every figure sits beside a
baseline measured in the same run (and their ratio), so numbers compare across machines."""

from __future__ import annotations

import click

from lego.conductor.cli.main import LazyGroup

BENCHES: dict[str, tuple[str, str]] = {
    "engine": ("lego.conductor.bench.engine:command", "Engine throughput and latency."),
    "proxy": ("lego.conductor.bench.proxy:command", "Proxy overhead per call."),
    "sandbox": ("lego.conductor.bench.sandbox:command", "Sandbox create-to-ready and grade latency."),
    "verdict": (
        "lego.conductor.bench.verdict:command",
        "Grade time of the blind-copy verdict vs the grader it replaced.",
    ),
    "trainer": ("lego.conductor.bench.trainer:command", "Trainer step speed."),
    "learn": ("lego.conductor.bench.learn:command", "Does the embedded default learn (best-vs-best)."),
    "use": ("lego.conductor.bench.use:command", "Learning from use: a simulated person's replies, best-vs-best."),
    "async": ("lego.conductor.bench.asynchrony:command", "Synchronous vs asynchronous training, same budget."),
    "reasoning": ("lego.conductor.bench.reasoning:command", "Reasoning-history policies compared."),
    "probe": ("lego.conductor.bench.probe:command", "Teacher-forced probability of chosen tokens."),
    "cli": ("lego.conductor.bench.cli:command", "Start-up time of the first commands vs python -c pass."),
}


@click.group("bench", cls=LazyGroup, lazy=BENCHES)
def bench_group() -> None:
    """Benchmarks (JSON out): engine throughput, proxy overhead, sandbox latency, trainer speed,
    the learning curve of the embedded default, synchronous vs asynchronous training, and the CLI's start-up."""
