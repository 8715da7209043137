"""Matplotlib helpers shared by the eval report and the training report: headless (Agg) figures
saved as byte-reproducible PNGs, and the base64 data URIs that keep the HTML self-contained."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from lego.io import atomic_write_bytes

__all__ = ["data_uri", "heatmap", "save_png"]


def save_png(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` as PNG atomically and close it. No software/date metadata, so re-rendering the
    same data gives the same bytes (the resume test compares reports byte for byte)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def data_uri(path: str | Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def heatmap(
    values: np.ndarray,
    rows: Sequence[str],
    cols: Sequence[str],
    labels: Sequence[Sequence[str]],
    title: str,
    *,
    vmin: float,
    vmax: float,
    cmap: str = "viridis",
    colorbar: str = "",
    percent: bool = False,
) -> Any:
    """A rows x cols heatmap with a text label in every cell (NaN cells drawn grey, labelled as given).
    ``percent``: the values are fractions the cells label in %, so the colour bar's ticks are % too
    (signed, in points, when the scale is centred on 0)."""
    h = max(2.5, 0.7 * len(rows) + 1.5)
    w = max(4.0, 1.9 * len(cols) + 2.5)
    fig, ax = plt.subplots(figsize=(w, h))
    masked = np.ma.masked_invalid(values)
    cm = plt.get_cmap(cmap).with_extremes(bad="#dddddd")
    im = ax.imshow(masked, cmap=cm, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(cols)), labels=list(cols), rotation=20, ha="right")
    ax.set_yticks(range(len(rows)), labels=list(rows))
    mid = (vmin + vmax) / 2
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = values[i, j]
            dark = not math.isnan(v) and (v < mid if cmap == "viridis" else abs(v - mid) > (vmax - vmin) / 3)
            ax.text(j, i, labels[i][j], ha="center", va="center", fontsize=9, color="white" if dark else "black")
    ax.set_title(title)
    bar = fig.colorbar(im, ax=ax, label=colorbar, fraction=0.046, pad=0.04)
    if percent:
        from matplotlib.ticker import FuncFormatter

        signed = vmin < 0 < vmax
        bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v * 100:+.0f}" if signed else f"{v * 100:.0f}%"))
    return fig
