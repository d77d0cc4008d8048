"""Notebook 04's figures, drawn with seaborn from the tables of `hkv.report.eviction`; each
function saves a PNG and returns its path. matplotlib and seaborn are imported inside."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from hkv.report.eviction import KIND_ORDER, OFFLINE
from hkv.report.figures import save_figure


def plot_hit_rates(
    runs, kinds: Mapping[str, str], percents: Sequence[float], path: str | os.PathLike[str]
) -> Path:
    """Block hit rate against cache size, one panel per workload, one line per policy
    (offline policies black, controls grey); returns the saved PNG."""
    import seaborn as sns
    from matplotlib.ticker import PercentFormatter

    online = [name for name, kind in kinds.items() if kind == "online"]
    palette = dict(
        zip(online, sns.color_palette("tab10", len(online)), strict=True),
        **{name: "black" for name, kind in kinds.items() if kind == OFFLINE},
        **{name: "grey" for name, kind in kinds.items() if kind == "control"},
    )
    grid = sns.relplot(
        data=runs,
        kind="line",
        x="capacity %",
        y="block_hit_rate",
        hue="policy",
        style="kind",
        palette=palette,
        hue_order=list(kinds),
        style_order=list(KIND_ORDER),
        col="workload",
        markers=True,
        linewidth=2,
        height=4.2,
        aspect=0.95,
        facet_kws={"sharey": False},
    )
    grid.set(xscale="log", xticks=list(percents))
    for ax in grid.axes.flat:
        ax.set_xticklabels([f"{pct:g}%" for pct in percents])
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    grid.set_axis_labels("cache size (% of the trace's distinct blocks)", "block hit rate")
    grid.set_titles("{col_name}")
    grid.figure.suptitle("Block hit rate against cache size, per policy", y=1.03)
    return save_figure(grid.figure, path)


def plot_gap_closed(
    gaps, order: Sequence[str], num_workloads: int, path: str | os.PathLike[str]
) -> Path:
    """Bars of the share of the LRU -> Belady gap each online policy closes (`gaps`, as
    `eviction.gap_long` gives it), in `order`, the committed Mooncake rows last in grey."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import PercentFormatter

    fig, ax = plt.subplots(figsize=(9, 4.8))
    sns.barplot(
        data=gaps,
        x="policy",
        y="share of the gap closed",
        hue="workload",
        order=list(order),
        errorbar=("pi", 100),
        err_kws={"linewidth": 1.2},
        palette=[*sns.color_palette("Set2", num_workloads), "dimgrey"],
        ax=ax,
    )
    ax.axhline(0, color="black", linewidth=1)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set(
        xlabel="online policy (best first)",
        ylabel="share of the LRU → Belady gap closed",
        title="How much of the gap between LRU and Belady each online policy closes",
    )
    ax.legend(title="workload", loc="upper right")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_rereference(
    workloads, distances, percents: Sequence[float], path: str | os.PathLike[str]
) -> Path:
    """The ECDF of re-reference distances (% of each workload's distinct blocks), with the
    cache sizes as dotted lines; returns the saved PNG."""
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns
    from matplotlib.ticker import PercentFormatter, StrMethodFormatter

    frame = pd.concat(
        [
            pd.DataFrame(
                {"workload": name, "distance": 100 * d / workloads[name].distinct_blocks()}
            )
            for name, d in distances.items()
        ]
    )
    fig, ax = plt.subplots(figsize=(9, 4.8))
    sns.ecdfplot(data=frame, x="distance", hue="workload", palette="Set2", linewidth=2.2, ax=ax)
    for pct in percents:
        ax.axvline(pct, color="grey", linestyle=":", linewidth=1)
    ax.text(percents[-1] * 1.1, 0.03, "cache sizes\nof section 3", color="grey")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:g}%"))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set(
        xlabel="re-reference distance (block references since the last one, % of distinct blocks)",
        ylabel="share of re-references",
        title="How long blocks wait before they are asked for again",
    )
    fig.tight_layout()
    return save_figure(fig, path)
