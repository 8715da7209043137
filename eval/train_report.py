"""`lego report RUN_DIR`: PNG plots and a self-contained HTML page for a training run.

Reads ``RUN_DIR/metrics.jsonl`` (lines of :class:`lego.types.StepMetrics`) and, when present,
``RUN_DIR/trajectories/step_NNNN/*.json`` (:class:`lego.types.Trajectory`). It is deliberately
tolerant of what the trainer logs: every numeric series is plotted, grouped into known sections
(reward / pass rate, fidelity, policy update, KL and entropy, lengths, termination labels, guard
flags) and then by namespace prefix (the text before the first ``/``). A metric whose last path
component (or ``@suffix``) names a harness seen in the trajectories is drawn in the per-harness
breakdown, one line per harness, and a mixed-harness run (more than one harness) gets a "Per
harness" table: rollouts, mean reward, pass rate and rollout–trainer Pearson of each harness, over
the whole run and at its last step. Several lines for one step (a validation line, a resumed run)
are merged, the later value winning.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import jinja2
import matplotlib.pyplot as plt

from lego.errors import ConfigError
from lego.eval.plots import data_uri, save_png
from lego.io import atomic_write_text, read_jsonl
from lego.types import StepMetrics, Trajectory

__all__ = [
    "PEARSON_FLOOR",
    "SECTIONS",
    "fill_counts",
    "gate_floor",
    "group_metrics",
    "harness_table",
    "load_metrics",
    "load_trajectories",
    "panel_figure",
    "pearson_limits",
    "write_train_report",
]

Series = dict[str, list[tuple[int, float]]]

SECTIONS: list[tuple[str, Callable[[str], bool]]] = [
    ("Reward and pass rate", lambda n: "reward" in n or "pass" in n or "resolved" in n),
    ("Fidelity (rollout vs trainer probabilities)",
     lambda n: n.startswith(("rollout_corr/", "training/rollout_")) or "pearson" in n or n.split("/")[-1].startswith("ess")),
    ("Policy update (actor/)", lambda n: n.startswith("actor/") and "kl" not in n and "entropy" not in n),
    ("KL and entropy", lambda n: "kl" in n or "entropy" in n),
    ("Lengths and tokens", lambda n: "len" in n or "token" in n or "turns" in n),
    ("Termination labels", lambda n: n.startswith(("termination/", "terminations/"))),
    ("Guard flags", lambda n: n.startswith(("guards/", "guard/"))),
]  # fmt: skip
"""Section title and membership test, in page order; a metric goes to the first section it matches."""

_STEP_DIR = re.compile(r"step_(\d+)$")
_MAX_PANELS = 12


def load_metrics(run_dir: Path) -> Series:
    """metric name -> [(step, value)], sorted by step; non-numeric values are skipped."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise ConfigError(f"{path} does not exist; pass a run directory written by `lego train`")
    merged: dict[int, dict[str, float]] = defaultdict(dict)
    for raw in read_jsonl(path):
        if not isinstance(raw, dict) or not isinstance(raw.get("metrics"), dict):
            continue
        numeric = {
            k: float(v) for k, v in raw["metrics"].items() if isinstance(v, int | float) and not isinstance(v, bool)
        }
        rec = StepMetrics.model_validate({**raw, "metrics": numeric})
        merged[rec.step].update(rec.metrics)
    series: Series = defaultdict(list)
    for step in sorted(merged):
        for name, value in merged[step].items():
            series[name].append((step, value))
    return dict(series)


def load_trajectories(run_dir: Path) -> dict[int, list[Trajectory]]:
    """step -> trajectories saved for it (files that are not trajectories are skipped)."""
    out: dict[int, list[Trajectory]] = {}
    root = run_dir / "trajectories"
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        m = _STEP_DIR.search(d.name)
        if not (m and d.is_dir()):
            continue
        trajs = []
        for f in sorted(d.glob("*.json")):
            try:
                trajs.append(Trajectory.model_validate_json(f.read_text(encoding="utf-8")))
            except ValueError:
                continue
        out[int(m.group(1))] = trajs
    return out


def _harness_of(name: str, harnesses: set[str]) -> tuple[str, str] | None:
    """(base metric, harness) when ``name`` carries a harness suffix (``x/y/<h>`` or ``x/y@<h>``)."""
    for sep in ("@", "/"):
        base, s, last = name.rpartition(sep)
        if s and base and last in harnesses:
            return base, last
    return None


def group_metrics(series: Series, harnesses: set[str]) -> tuple[dict[str, Series], dict[str, Series]]:
    """(sections, per_harness): section title -> its series; base metric -> harness -> series."""
    sections: dict[str, Series] = {title: {} for title, _ in SECTIONS}
    per_harness: dict[str, Series] = defaultdict(dict)
    for name in sorted(series):
        if hit := _harness_of(name, harnesses):
            per_harness[hit[0]][hit[1]] = series[name]
            continue
        title = next((t for t, match in SECTIONS if match(name.lower())), None)
        if title is None:
            title = f"{name.split('/')[0]}/" if "/" in name else "Other"
        sections.setdefault(title, {})[name] = series[name]
    return {t: s for t, s in sections.items() if s}, dict(per_harness)


def _step_axis(ax: plt.Axes, fontsize: float | None = None) -> None:
    """Steps are whole numbers, counted from 1 as the console and checkpoints count: no 0.5 ticks."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("step", fontsize=fontsize)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


PEARSON_FLOOR = 0.99
"""The fidelity gate's floor when the run's config.toml does not say (``training.fidelity.min_pearson``)."""


def _is_pearson(name: str) -> bool:
    return "pearson" in name


def pearson_limits(values: list[float], floor: float) -> tuple[float, float]:
    """A fixed y range for a Pearson panel: up to 1, down to below the gate's floor (or the lowest
    value), so noise at 1 - 1e-10 reads as a flat line at 1 and a fall toward the floor as a fall."""
    lowest = min([v for v in values if math.isfinite(v)], default=floor)
    return min(floor, lowest) - 0.1 * (1.0 - min(floor, lowest)), 1.0 + 0.02 * (1.0 - floor)


def _draw(ax: plt.Axes, name: str, xs: tuple[int, ...], ys: tuple[float, ...], floor: float, **kw: object) -> None:
    ax.plot(xs, ys, marker="o", ms=6 if len(xs) == 1 else 3, **kw)  # type: ignore[arg-type]
    ax.ticklabel_format(axis="y", useOffset=False)  # never a "+1e-10" offset that turns noise into swings
    if len(xs) == 1:
        ax.annotate(f"{ys[0]:.4g}", (xs[0], ys[0]), textcoords="offset points", xytext=(6, 6), fontsize=8)
    if _is_pearson(name):
        ax.set_ylim(*pearson_limits(list(ys), floor))
        ax.axhline(floor, color="tab:red", linestyle="--", linewidth=1, label=f"gate floor {floor:g}")


def panel_figure(series: Series, title: str, legend: bool = False, floor: float = PEARSON_FLOOR) -> plt.Figure:
    """One small line plot per entry (or, with ``legend``, all entries in one axis). A Pearson
    metric is drawn on a fixed scale with the fidelity gate's floor as a dashed line; a one-point
    series is a marked dot labelled with its value."""
    names = list(series)
    if legend:
        fig, ax = plt.subplots(figsize=(6, 3.2))
        for n in names:
            xs, ys = zip(*series[n], strict=True) if series[n] else ((), ())
            _draw(ax, "", xs, ys, floor, label=n)
        if _is_pearson(title):  # one harness per line: one scale and one floor for all of them
            ax.set_ylim(*pearson_limits([y for n in names for _, y in series[n]], floor))
            ax.axhline(floor, color="tab:red", linestyle="--", linewidth=1, label=f"gate floor {floor:g}")
        ax.set_title(title, fontsize=10)
        _step_axis(ax)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        return fig
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, n in zip(axes.flat, names, strict=False):
        xs, ys = zip(*series[n], strict=True)
        _draw(ax, n, xs, ys, floor)
        ax.set_title(n, fontsize=9)
        _step_axis(ax, fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if _is_pearson(n):
            ax.legend(fontsize=7, loc="lower left")
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _panels(series: Series, title: str, path: Path, legend: bool = False, floor: float = PEARSON_FLOOR) -> Path:
    return save_png(panel_figure(series, title, legend, floor), path)


def fill_counts(series: Series) -> Series:
    """Counts and fractions that the trainer logs only on the steps they occur (``termination/<label>``,
    ``guards/<flag>``) are 0 on the other logged steps: filled in, so such a panel is a line, not a dot."""
    steps = sorted({s for v in series.values() for s, _ in v})
    out = dict(series)
    for name, points in series.items():
        if name.startswith(("termination/", "terminations/", "guards/", "guard/")):
            have = dict(points)
            out[name] = [(s, have.get(s, 0.0)) for s in steps]
    return out


def gate_floor(run: Path) -> float:
    """``training.fidelity.min_pearson`` from the run's config.toml (the default floor without one)."""
    import tomllib

    try:
        cfg = tomllib.loads((run / "config.toml").read_text(encoding="utf-8"))
        return float(cfg["training"]["fidelity"]["min_pearson"])
    except (OSError, KeyError, TypeError, ValueError, tomllib.TOMLDecodeError):
        return PEARSON_FLOOR


def _stacked(counts: dict[int, Counter[str]], title: str, ylabel: str, path: Path) -> Path:
    steps = sorted(counts)
    labels = sorted({k for c in counts.values() for k in c})
    fig, ax = plt.subplots(figsize=(6, 3.2))
    bottom = [0] * len(steps)
    for lab in labels:
        vals = [counts[s].get(lab, 0) for s in steps]
        ax.bar(steps, vals, bottom=bottom, label=lab)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_title(title, fontsize=10)
    _step_axis(ax)
    ax.set_ylabel(ylabel)
    if labels:
        ax.legend(fontsize=8)
    return save_png(fig, path)


def _trajectory_series(
    trajs: dict[int, list[Trajectory]],
) -> tuple[dict[str, Series], dict[int, Counter[str]], dict[int, Counter[str]]]:
    """From saved trajectories: per-harness reward / sampled tokens per step, termination and guard counts."""
    per_h: dict[str, Series] = {"reward (trajectories)": {}, "sampled tokens (trajectories)": {}}
    terms: dict[int, Counter[str]] = {}
    guards: dict[int, Counter[str]] = {}
    for step, ts in sorted(trajs.items()):
        terms[step] = Counter(t.termination for t in ts)
        guards[step] = Counter(g for t in ts for g, raised in t.guard_flags.items() if raised)
        by_h: dict[str, list[Trajectory]] = defaultdict(list)
        for t in ts:
            by_h[t.harness or "?"].append(t)
        for h, group in sorted(by_h.items()):
            rewards = [t.reward for t in group if t.reward is not None and not t.is_infra_failure]
            if rewards:
                per_h["reward (trajectories)"].setdefault(h, []).append((step, sum(rewards) / len(rewards)))
            per_h["sampled tokens (trajectories)"].setdefault(h, []).append(
                (step, sum(t.num_sampled_tokens for t in group) / len(group))
            )
    return {k: v for k, v in per_h.items() if v}, terms, guards


HARNESS_COLUMNS = [
    ("rollouts", "rollout/count"),
    ("reward", "reward/mean"),
    ("pass rate", "reward/pass_rate"),
    ("Pearson", "training/rollout_actor_probs_pearson_corr"),
]
"""Per-harness table: column title and the metric whose ``/<harness>`` copy fills it."""


def harness_table(series: Series, harnesses: set[str]) -> tuple[list[str], list[list[str]]]:
    """(head, rows) of the per-harness table: for each column, the mean over the run's steps and the
    last step's value (rollouts: the total and the last step's count). Empty with one harness."""
    if len(harnesses) < 2:
        return [], []
    head = ["harness", *(f"{title} ({span})" for title, _ in HARNESS_COLUMNS for span in ("run", "last step"))]
    rows = []
    for h in sorted(harnesses):
        row = [h]
        for title, base in HARNESS_COLUMNS:
            points = series.get(f"{base}/{h}", [])
            if not points:
                row += ["–", "–"]
                continue
            values = [v for _, v in points]
            whole = sum(values) if title == "rollouts" else sum(values) / len(values)
            fmt = (lambda v: f"{v:.0f}") if title == "rollouts" else (lambda v: f"{v:.4g}")
            row += [fmt(whole), fmt(values[-1])]
        rows.append(row)
    return head, rows


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", s.lower()).strip("_") or "plot"


def write_train_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the plots (next to the page, in ``<page stem>_plots/``) and the HTML page; return its path."""
    run = Path(run_dir)
    series = fill_counts(load_metrics(run))
    floor = gate_floor(run)
    trajs = load_trajectories(run)
    harnesses = {t.harness for ts in trajs.values() for t in ts if t.harness}
    sections, per_harness = group_metrics(series, harnesses)
    traj_per_h, terms, guards = _trajectory_series(trajs)
    html_path = Path(out) if out else run / "report.html"
    plots = html_path.parent / f"{html_path.stem}_plots"
    figures: list[tuple[str, str]] = []
    for title, group in sections.items():
        names = list(group)
        for i in range(0, len(names), _MAX_PANELS):
            part = {n: group[n] for n in names[i : i + _MAX_PANELS]}
            suffix = f" ({i // _MAX_PANELS + 1})" if len(names) > _MAX_PANELS else ""
            png = _panels(part, title + suffix, plots / f"{_slug(title)}_{i // _MAX_PANELS}.png", floor=floor)
            figures.append((title + suffix, data_uri(png)))
    for base, by_h in sorted({**per_harness, **traj_per_h}.items()):
        png = _panels(by_h, f"per harness: {base}", plots / f"harness_{_slug(base)}.png", legend=True, floor=floor)
        figures.append((f"Per harness: {base}", data_uri(png)))
    if trajs:
        figures.append(
            (
                "Termination labels (trajectories)",
                data_uri(_stacked(terms, "termination labels", "trajectories", plots / "terminations.png")),
            )
        )
        if any(guards.values()):
            figures.append(
                (
                    "Guard flags raised (trajectories)",
                    data_uri(_stacked(guards, "guard flags raised", "trajectories", plots / "guard_flags.png")),
                )
            )
    steps = sorted({s for v in series.values() for s, _ in v})
    rows = [
        [
            n,
            str(len(v)),
            f"{v[0][1]:.4g}",
            f"{v[-1][1]:.4g}",
            f"{min(x for _, x in v):.4g}",
            f"{max(x for _, x in v):.4g}",
        ]
        for n, v in sorted(series.items())
    ]
    n_traj = sum(len(v) for v in trajs.values())
    summary = (
        f"{len(steps)} logged steps ({steps[0]}–{steps[-1]}), {len(series)} metrics; "
        f"{n_traj} saved trajectories over {len(trajs)} steps; harnesses: {', '.join(sorted(harnesses)) or '–'}."
        if steps else "metrics.jsonl holds no steps yet."
    )  # fmt: skip
    env = jinja2.Environment(loader=jinja2.PackageLoader("lego.eval", "templates"), autoescape=True)
    harness_head, harness_rows = harness_table(series, harnesses)
    html = env.get_template("train_report.html.jinja").render(
        title=f"lego training run: {run.resolve().name}", summary=summary, figures=figures,
        head=["metric", "points", "first", "last", "min", "max"], rows=rows,
        harness_head=harness_head, harness_rows=harness_rows,
    )  # fmt: skip
    atomic_write_text(html_path, html)
    return html_path
