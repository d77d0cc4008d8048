"""Saving a report's figures: one place for the file format and resolution."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hkv.errors import HkvError

DPI = 150


def save_figure(figure: Any, path: str | os.PathLike[str]) -> Path:
    """Save `figure` (a matplotlib Figure or a seaborn grid) as a PNG at `path`, creating its
    folder; return the path. The notebook still shows the figure inline."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=DPI)
    return target


def simulation_png(rows: Sequence[dict[str, Any]], title: str) -> bytes:
    """A PNG of `hkv simulate`'s rows (`SimResult.to_dict()`): per policy, the prefill seconds
    its hits saved net of loading them, longest bar first, its block hit rate beside the bar.
    Drawn with matplotlib's object API (no display, no pyplot state)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise HkvError("--plot needs matplotlib; install it (pip install matplotlib)") from None
    ordered = sorted(rows, key=lambda r: r["recompute_s_saved"] - r["load_s"])
    figure = Figure(figsize=(7.0, 0.45 * len(ordered) + 1.4), layout="constrained")
    axes = figure.subplots()
    net = [r["recompute_s_saved"] - r["load_s"] for r in ordered]
    bars = axes.barh([r["policy"] for r in ordered], net, color="#4c72b0")
    labels = [f"{100 * r['block_hit_rate']:.1f} % hits" for r in ordered]
    axes.bar_label(bars, labels=labels, padding=3, fontsize=8)
    axes.set_xlabel("prefill seconds saved, net of loads (cost model)")
    axes.set_title(title, fontsize=9)
    axes.margins(x=0.25)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()
