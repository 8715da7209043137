"""`lego bench ...`: performance benchmarks. Each writes JSON in which every figure sits beside a
baseline measured in the same run (and their ratio), so numbers compare across machines."""

from __future__ import annotations

import click

from lego.cli.main import LazyGroup

BENCHES = {
    "engine": "eval.bench.engine:command",
    "proxy": "eval.bench.proxy:command",
    "sandbox": "eval.bench.sandbox:command",
    "trainer": "eval.bench.trainer:command",
    "learn": "eval.bench.learn:command",
}


@click.group("bench", cls=LazyGroup, lazy=BENCHES)
def bench_group() -> None:
    """Benchmarks (JSON out): engine throughput, proxy overhead, sandbox latency, trainer speed,
    and the learning curve of the embedded default."""
