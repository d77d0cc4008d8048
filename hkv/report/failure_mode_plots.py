"""Notebook 06's figures, drawn with seaborn; each function saves a PNG and returns its path.
matplotlib, pandas and seaborn are imported inside."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hkv.blocks import BlockMeta
from hkv.cost import CostModel
from hkv.report.figures import save_figure


def plot_load_vs_recompute(
    cost_model: CostModel,
    blocks: Mapping[int, BlockMeta],
    rows: Sequence[Mapping[str, Any]],
    title: str,
    path: str | os.PathLike[str],
) -> Path:
    """Bars per block position: recompute time (black) and the load time from each tier of
    `rows` (as `failure_modes.price_tiers` gives them), log scale; returns the saved PNG."""
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns
    from matplotlib.ticker import StrMethodFormatter

    label = {pos: f"{pos // 1024}K" if pos else "0" for pos in blocks}
    tiers = list(dict.fromkeys(row["tier"] for row in rows))
    recompute = pd.DataFrame(
        {
            "position": [label[pos] for pos in blocks],
            "what": "recompute (prefill)",
            "seconds": [cost_model.recompute_s(meta) for meta in blocks.values()],
        }
    )
    loads = pd.DataFrame(
        {
            "position": [label[row["position"]] for row in rows],
            "what": [f"load from {row['tier']}" for row in rows],
            "seconds": [row["load_s"] for row in rows],
        }
    )
    fig, ax = plt.subplots(figsize=(11.5, 5))
    sns.barplot(
        data=pd.concat([recompute, loads]),
        x="position",
        y="seconds",
        hue="what",
        palette=["black", *sns.color_palette("viridis_r", len(tiers))],
        ax=ax,
    )
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    block_tokens = next(iter(blocks.values())).tokens
    ax.set(
        xlabel=f"position of the block's first token (block of {block_tokens} tokens)",
        ylabel="seconds (log scale)",
        title=title,
    )
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1), title=None, frameon=False)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_break_even(
    curve, gbps: Mapping[str, float], max_position: int, title: str, path: str | os.PathLike[str]
) -> Path:
    """The break-even bandwidth against position (`failure_modes.break_even_curve`), each
    tier's bandwidth as a dashed line; returns the saved PNG."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import StrMethodFormatter

    fig, ax = plt.subplots(figsize=(9, 5))
    sns.lineplot(data=curve, x="position", y="break-even GB/s", color="black", linewidth=2.4, ax=ax)
    ax.fill_between(curve["position"], curve["break-even GB/s"], 1e-3, color="tab:red", alpha=0.08)
    colors = sns.color_palette("viridis_r", len(gbps))
    for (name, value), color in zip(gbps.items(), colors, strict=True):
        ax.axhline(value, color=color, linestyle="--", linewidth=1.6)
        ax.annotate(
            f"{name}: {value:g} GB/s", (max_position * 0.99, value * 1.12), color=color, ha="right"
        )
    ax.set_yscale("log")
    ax.set_ylim(0.1, 100)
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set(
        xlabel="position of the block's first token",
        ylabel="bandwidth to the GPU, GB/s (log scale)",
        title=title,
    )
    fig.tight_layout()
    return save_figure(fig, path)
