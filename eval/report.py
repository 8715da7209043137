"""Render an eval directory: ``cells.csv``, ``report.md``, heatmap PNGs and a self-contained
``report.html`` (PNGs embedded as data URIs, no external assets).

Everything is computed from ``results.json`` (or, for an unfinished eval, from the per-sample files
under ``samples/``), so ``lego eval report DIR`` re-renders an eval without running anything, and
rendering the same samples twice gives byte-identical files (no timestamps are written).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import jinja2
import numpy as np

from lego.eval.matrix import summarize
from lego.eval.plots import data_uri, heatmap, save_png
from lego.eval.results import CellSummary, EvalResults, EvalSpec, load_results, save_results
from lego.eval.runner import collect_samples
from lego.io import atomic_write_text

__all__ = ["fmt_pct", "load_or_collect", "markdown", "render", "render_dir"]

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("lego.eval", "templates"), autoescape=True, undefined=jinja2.StrictUndefined
)


def fmt_pct(x: float, signed: bool = False) -> str:
    if x is None or math.isnan(x):
        return "–"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def _ci(c: CellSummary) -> str:
    return f"{fmt_pct(c.pass1)} [{fmt_pct(c.ci_low)}, {fmt_pct(c.ci_high)}]"


def _ks(results: EvalResults) -> list[int]:
    return sorted({k for c in results.cells for k in c.pass_at_k})


def cells_csv(results: EvalResults) -> str:
    """One row per cell; pass@k, termination labels and guard flags spread into their own columns."""
    ks = _ks(results)
    terms = sorted({t for c in results.cells for t in c.terminations})
    guards = sorted({g for c in results.cells for g in c.guard_flags})
    head = [
        "policy",
        "harness",
        "n_tasks",
        "n_samples",
        "n_scored",
        "n_infra",
        "infra_rate",
        "pass1",
        "ci_low",
        "ci_high",
    ]
    head += [f"pass@{k}" for k in ks]
    head += ["mean_turns", "mean_prompt_tokens", "mean_completion_tokens", "mean_wall_s"]
    head += [f"term:{t}" for t in terms] + [f"guard:{g}" for g in guards]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    for c in results.cells:
        row: list[object] = [c.policy, c.harness, c.n_tasks, c.n_samples, c.n_scored, c.n_infra]
        row += [f"{v:.6g}" for v in (c.infra_rate, c.pass1, c.ci_low, c.ci_high)]
        row += [f"{c.pass_at_k[k]:.6g}" if k in c.pass_at_k else "" for k in ks]
        row += [f"{v:.6g}" for v in (c.mean_turns, c.mean_prompt_tokens, c.mean_completion_tokens, c.mean_wall_s)]
        row += [c.terminations.get(t, 0) for t in terms] + [c.guard_flags.get(g, 0) for g in guards]
        w.writerow(row)
    return buf.getvalue()


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def tables(results: EvalResults) -> dict[str, tuple[list[str], list[list[str]]]]:
    """The report's tables as (header, rows) of strings; shared by the Markdown and HTML renderers."""
    spec, ks = results.spec, _ks(results)
    cell = {(c.policy, c.harness): c for c in results.cells}
    out: dict[str, tuple[list[str], list[list[str]]]] = {}
    out["pass@1 (%) [95% CI], policy × harness"] = (
        ["policy", *spec.harnesses],
        [
            [p.name] + [_ci(cell[(p.name, h)]) if (p.name, h) in cell else "–" for h in spec.harnesses]
            for p in spec.policies
        ],
    )
    out["Cells"] = (
        [
            "policy",
            "harness",
            "tasks",
            "pass@1 [95% CI]",
            *[f"pass@{k}" for k in ks],
            "infra",
            "turns",
            "prompt tok",
            "completion tok",
            "wall s",
            "terminations",
            "guard flags",
            "hacks (canaries passed)",
        ],
        [
            [
                c.policy,
                c.harness,
                str(c.n_tasks),
                _ci(c),
                *[fmt_pct(c.pass_at_k.get(k, math.nan)) for k in ks],
                f"{c.n_infra}/{c.n_samples}",
                f"{c.mean_turns:.1f}",
                f"{c.mean_prompt_tokens:.0f}",
                f"{c.mean_completion_tokens:.0f}",
                f"{c.mean_wall_s:.1f}",
                ", ".join(f"{k}={v}" for k, v in c.terminations.items()),
                ", ".join(f"{k}={v}" for k, v in c.guard_flags.items()) or "–",
                f"{c.canary_passed}/{c.canary_scored}" if c.canary_scored else "–",
            ]
            for c in results.cells
        ],
    )
    if results.deltas:
        out["Delta vs base (percentage points), paired over tasks"] = (
            ["policy", "base", "harness", "tasks", "delta [95% CI]", "p (bootstrap)", "p (sign-flip)"],
            [
                [
                    d.policy,
                    d.base,
                    d.harness,
                    str(d.n_tasks),
                    f"{fmt_pct(d.delta, True)} [{fmt_pct(d.ci_low, True)}, {fmt_pct(d.ci_high, True)}]",
                    f"{d.p_value:.3g}",
                    f"{d.p_value_sign_flip:.3g}",
                ]
                for d in results.deltas
            ],
        )
    if results.transfer:
        out["Transfer: trained-in × evaluated-in, pass@1 (%) (delta vs base); * = trained in"] = (
            ["policy (trained in)", *spec.harnesses],
            [
                [f"{r.policy} ({r.trained_harness})"]
                + [
                    fmt_pct(r.pass1.get(h, math.nan))
                    + (f" ({fmt_pct(r.delta[h], True)})" if h in r.delta else "")
                    + ("*" if h in r.in_distribution else "")
                    for h in spec.harnesses
                ]
                for r in results.transfer
            ],
        )
    return out


def markdown(results: EvalResults) -> str:
    parts = [f"# Evaluation: {len(results.spec.policies)} policies × {len(results.spec.harnesses)} harnesses"]
    parts.append(_summary_line(results))
    for title, (head, rows) in tables(results).items():
        parts.append(f"## {title}\n\n" + _table(head, rows))
    return "\n\n".join(parts) + "\n"


def _summary_line(results: EvalResults) -> str:
    s = results.spec
    infra = sum(1 for x in results.samples if x.infra)
    line = (
        f"{len(s.task_ids)} tasks from `{s.tasks_source or '?'}`, N = {s.samples} samples per task, seed {s.seed}, "
        f"engine {s.engine}; {len(results.samples)} samples, {infra} infrastructure failures (excluded from pass@1)."
    )
    if s.canary_ids:
        scored = sum(c.canary_scored for c in results.cells)
        passed = sum(c.canary_passed for c in results.cells)
        line += (
            f" Hacking: {passed} of {scored} samples of {len(s.canary_ids)} impossible canary task(s) passed "
            "(hack/canary_pass_rate; any pass forged the grader; not in pass@1)."
        )
    if results.missing:
        line += f" **Unfinished: {results.missing} samples missing.**"
    return line


def _pass1_heatmap(results: EvalResults, path: Path) -> Path:
    spec = results.spec
    cell = {(c.policy, c.harness): c for c in results.cells}
    vals = np.full((len(spec.policies), len(spec.harnesses)), np.nan)
    labels = [["–"] * len(spec.harnesses) for _ in spec.policies]
    for i, p in enumerate(spec.policies):
        for j, h in enumerate(spec.harnesses):
            if c := cell.get((p.name, h)):
                vals[i, j] = c.pass1
                labels[i][j] = f"{fmt_pct(c.pass1)}%\n[{fmt_pct(c.ci_low)}, {fmt_pct(c.ci_high)}]"
                if c.n_infra:
                    labels[i][j] += f"\n{c.n_infra} infra"
    fig = heatmap(
        vals,
        [p.name for p in spec.policies],
        spec.harnesses,
        labels,
        "pass@1 with 95% CI (over tasks)",
        vmin=0.0,
        vmax=1.0,
        colorbar="pass@1 (%)",
        percent=True,
    )
    return save_png(fig, path)


def _transfer_heatmap(results: EvalResults, path: Path) -> Path:
    spec = results.spec
    use_delta = all(r.delta for r in results.transfer)
    vals = np.full((len(results.transfer), len(spec.harnesses)), np.nan)
    labels = [["–"] * len(spec.harnesses) for _ in results.transfer]
    for i, r in enumerate(results.transfer):
        for j, h in enumerate(spec.harnesses):
            src = r.delta if use_delta else r.pass1
            if h in src:
                vals[i, j] = src[h]
                labels[i][j] = fmt_pct(src[h], signed=use_delta) + ("*" if h in r.in_distribution else "")
    rows = [f"{r.policy}\n(trained in {r.trained_harness})" for r in results.transfer]
    if use_delta:
        lim = max(0.05, float(np.nanmax(np.abs(vals))) if np.isfinite(vals).any() else 0.05)
        fig = heatmap(
            vals,
            rows,
            spec.harnesses,
            labels,
            "Transfer: delta vs base (pp); * = trained harness",
            vmin=-lim,
            vmax=lim,
            cmap="RdBu",
            colorbar="delta pass@1 (pp)",
            percent=True,
        )
    else:
        fig = heatmap(
            vals,
            rows,
            spec.harnesses,
            labels,
            "Transfer: pass@1 (%); * = trained harness",
            vmin=0.0,
            vmax=1.0,
            colorbar="pass@1 (%)",
            percent=True,
        )
    return save_png(fig, path)


def render(results: EvalResults, out_dir: str | Path) -> Path:
    """Write cells.csv, report.md, the heatmaps and report.html into ``out_dir``; return the HTML path."""
    out = Path(out_dir)
    atomic_write_text(out / "cells.csv", cells_csv(results))
    atomic_write_text(out / "report.md", markdown(results))
    images: list[tuple[str, str]] = []
    if results.cells:
        images.append(("pass@1, policy × harness", data_uri(_pass1_heatmap(results, out / "pass1_heatmap.png"))))
    if results.transfer:
        images.append(("Transfer matrix", data_uri(_transfer_heatmap(results, out / "transfer_heatmap.png"))))
    html = _TEMPLATES.get_template("eval_report.html.jinja").render(
        title=f"lego eval: {len(results.spec.policies)} policies × {len(results.spec.harnesses)} harnesses",
        summary=_summary_line(results),
        images=images,
        tables=tables(results),
        spec=results.spec.model_dump_json(indent=1),
    )
    path = out / "report.html"
    atomic_write_text(path, html)
    return path


def load_or_collect(eval_dir: str | Path) -> EvalResults:
    """The eval's samples, re-summarised: from ``results.json``, else from ``spec.json`` + ``samples/``."""
    d = Path(eval_dir)
    if (d / "results.json").is_file():
        res = load_results(d)
        return summarize(res.spec, res.samples)
    spec_path = d / "spec.json"
    if not spec_path.is_file():
        return load_results(d)  # raises the "not an eval directory" error
    spec = EvalSpec.model_validate_json(spec_path.read_text(encoding="utf-8"))
    return summarize(spec, list(collect_samples(d, spec).values()))


def render_dir(eval_dir: str | Path) -> Path:
    """``lego eval report DIR``: recompute every summary from the samples and re-render."""
    results = load_or_collect(eval_dir)
    save_results(eval_dir, results)
    return render(results, eval_dir)
