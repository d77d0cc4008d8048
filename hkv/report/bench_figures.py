"""Notebooks 08 and 09's figures, drawn with seaborn from the tables of `hkv.report.bench_*`.
Each function draws one figure, saves it as `<figures_dir>/<NN>_<name>.png`, NN the notebook
that shows it (150 dpi, folder created), and returns that path; the figure stays open so that a
notebook shows it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hkv.report.figures import save_figure

if TYPE_CHECKING:
    import pandas as pd

    from hkv.report.bench_claim import ArticleClaim


def _save(figure: Any, figures_dir: str | os.PathLike[str], name: str) -> Path:
    """Save `figure` (a matplotlib Figure or a seaborn grid) as <name>.png."""
    return save_figure(figure, Path(figures_dir) / f"{name}.png")


def transfer_figure(
    links: pd.DataFrame, gpu_name: str, figures_dir: str | os.PathLike[str]
) -> Path:
    """GB/s per block size, method and direction (`bench_transfer.transfer_links`)."""
    import seaborn as sns

    grid = sns.catplot(
        data=links,
        x="block",
        y="GB/s",
        hue="method",
        col="direction",
        kind="bar",
        palette=["tab:blue", "black", "tab:orange"],
        height=4.2,
        aspect=1.25,
    )
    grid.set_axis_labels("block size (one layer's K and V)", "GB/s")
    grid.figure.suptitle(f"Host ↔ GPU copies on {gpu_name} (pinned host RAM)", y=1.03)
    return _save(grid, figures_dir, "09_transfer")


def policies_figure(
    rates: pd.DataFrame, order: list[str], figures_dir: str | os.PathLike[str]
) -> Path:
    """Block hit rate per policy (in `order`), capacity and workload
    (`bench_policies.policy_rates`)."""
    import seaborn as sns

    grid = sns.catplot(
        data=rates,
        x="policy",
        y="block hit rate",
        hue="capacity",
        col="workload",
        col_wrap=2,
        kind="bar",
        order=order,
        palette="crest",
        height=3.6,
        aspect=1.6,
    )
    grid.tick_params(axis="x", rotation=90)
    grid.figure.suptitle("Block hit rate per policy (belady = offline optimum)", y=1.02)
    return _save(grid, figures_dir, "08_policies")


def replay_figure(rows: pd.DataFrame, figures_dir: str | os.PathLike[str]) -> Path:
    """vLLM minus simulator, points of hit rate, per label and capacity, with ±0.5 points
    dashed (`bench_vllm.replay_table`)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(11, 4.5))
    sns.barplot(data=rows, x="label", y="diff_points", hue="capacity", palette="crest", ax=ax)
    ax.axhline(0, color="black", linewidth=1)
    for bound in (-0.5, 0.5):
        ax.axhline(bound, color="tab:red", linestyle="--", linewidth=1)
    ax.set(
        xlabel=None,
        ylabel="vLLM − simulator, points of hit rate",
        title="vLLM's offloading manager vs hkv's simulator (Mooncake trace); dashed: ±0.5 points",
    )
    ax.tick_params(axis="x", rotation=40)
    plt.setp(ax.get_xticklabels(), ha="right")
    fig.tight_layout()
    return _save(fig, figures_dir, "08_vllm_vs_sim")


def vllm_h200_figure(
    pairs: pd.DataFrame, table: pd.DataFrame, best: str, figures_dir: str | os.PathLike[str]
) -> Path:
    """Left: measured vs predicted cached share (`bench_vllm.sim_pairs`); right: wall time of
    lru, arc, `best`, hkv_arc and hkv_dip per CPU tier, text variant (`bench_vllm.gpu_table`)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 5.2))
    _measured_vs_predicted(axes[0], pairs, ("lru", "arc", best))
    _wall_times(axes[1], table, ("lru", "arc", best, "hkv_arc", "hkv_dip"))
    fig.tight_layout()
    return _save(fig, figures_dir, "08_vllm_h200")


def _measured_vs_predicted(ax: Any, pairs: pd.DataFrame, labelled: tuple[str, ...]) -> None:
    """Draw measured against predicted cached share on `ax`, ±5 points shaded, the policies
    in `labelled` annotated; returns None."""
    import numpy as np
    import seaborn as sns
    from matplotlib.ticker import PercentFormatter

    sns.scatterplot(
        data=pairs,
        x="predicted_cached_frac",
        y="measured_cached_frac",
        hue="cpu_gib",
        style="variant",
        palette="flare",
        s=80,
        ax=ax,
    )
    line = np.linspace(0, 0.8, 2)
    ax.plot(line, line, color="black", linewidth=1)
    ax.fill_between(line, line - 0.05, line + 0.05, color="grey", alpha=0.2, label="±5 points")
    for _, row in pairs[pairs["policy"].isin(labelled)].iterrows():
        point = (row["predicted_cached_frac"], row["measured_cached_frac"])
        ax.annotate(row["policy"], point, xytext=(4, -10), textcoords="offset points", fontsize=8)
    ax.set(
        xlabel="simulator's prediction (same request sequence)",
        ylabel="measured in vLLM on the H200",
        title="Cached share of prompt tokens: vLLM vs hkv's simulator",
    )
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.legend(title="CPU tier, GiB", fontsize=8)


def _wall_times(ax: Any, table: pd.DataFrame, shown: tuple[str, ...]) -> None:
    """Draw the text variant's mean wall time of the policies in `shown` per CPU tier on
    `ax`; returns None."""
    import seaborn as sns

    text = table.xs("text", level="variant").reset_index()
    text = text[text["policy"].isin(shown)]
    sns.barplot(data=text, x="policy", y="wall_s", hue="CPU tier", palette="flare", ax=ax)
    ax.set(
        xlabel=None,
        ylabel="workload wall time, s (mean of repeats)",
        title="Wall time of the 128 requests (text)",
    )


def frontier_figure(
    frontier: pd.DataFrame,
    claim: ArticleClaim,
    title: str,
    figures_dir: str | os.PathLike[str],
) -> Path:
    """KV VRAM saved against speed per workload (`bench_e2e.frontier`), the article's claim
    as a red star."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import PercentFormatter

    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    sns.lineplot(
        data=frontier,
        x="KV VRAM saved",
        y="speed vs baseline",
        hue="workload",
        marker="o",
        palette="viridis",
        linewidth=2.2,
        markersize=9,
        ax=ax,
    )
    star = (claim.vram_saved, claim.speed_kept)
    ax.scatter([star[0]], [star[1]], marker="*", s=320, color="tab:red")
    ax.annotate(
        f"article's claim ({claim.hardware}, not reproducible)",
        star,
        xytext=(-150, -32),
        textcoords="offset points",
        color="tab:red",
    )
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set(xlim=(-0.05, 1.0), ylim=(0, 1.45), title=title)
    fig.tight_layout()
    return _save(fig, figures_dir, "09_e2e_frontier")


def ttft_figure(long: pd.DataFrame, title: str, figures_dir: str | os.PathLike[str]) -> Path:
    """Next turn's TTFT per prefix and way (`bench_e2e.ttft_long`), log scale."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    sns.barplot(data=long, x="prefix", y="seconds", hue="how", palette="muted", ax=ax)
    ax.set(
        xlabel="prefix length, tokens",
        ylabel="time to first token of the next turn, s",
        yscale="log",
        title=title,
    )
    ax.legend(title=None)
    fig.tight_layout()
    return _save(fig, figures_dir, "09_e2e_ttft")


def live_figure(runs: pd.DataFrame, title: str, figures_dir: str | os.PathLike[str]) -> Path:
    """Block hit rate per policy and cache size of the live run (`bench_live.LiveRun.runs`)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(8, 4.5))
    sns.barplot(data=runs, x="policy", y="block_hit_rate", hue="capacity", palette="crest", ax=ax)
    ax.set(xlabel=None, ylabel="block hit rate", title=title)
    ax.legend(title="cache size")
    fig.tight_layout()
    return _save(fig, figures_dir, "08_live_sim")
