"""`lego bench ...`: performance benchmarks. Each writes JSON in which every figure sits beside a
baseline measured in the same run (and their ratio), so numbers compare across machines."""

from __future__ import annotations

import click

from lego.conductor.cli.main import LazyGroup

BENCHES = {
    "engine": "lego.conductor.bench.engine:command",
    "proxy": "lego.conductor.bench.proxy:command",
    "sandbox": "lego.conductor.bench.sandbox:command",
    "trainer": "lego.conductor.bench.trainer:command",
    "learn": "lego.conductor.bench.learn:command",
    "reasoning": "lego.conductor.bench.reasoning:command",
    "probe": "lego.conductor.bench.probe:command",
}


@click.group("bench", cls=LazyGroup, lazy=BENCHES)
def bench_group() -> None:
    """Benchmarks (JSON out): engine throughput, proxy overhead, sandbox latency, trainer speed,
    and the learning curve of the embedded default."""
