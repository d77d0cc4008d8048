"""Notebook 05's figures, drawn with seaborn from the tables of `hkv.report.predictive`; each
function saves a PNG and returns its path. matplotlib and seaborn are imported inside."""

from __future__ import annotations

import os
from pathlib import Path

from hkv.report.figures import save_figure


def plot_learned(curve, estimates, path: str | os.PathLike[str]) -> Path:
    """Left: the reliability curve (predicted against observed, marker size = labels). Right:
    the estimates by chain depth and references so far, as a heatmap. Returns the PNG."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    left.plot([0, 1], [0, 1], color="grey", linestyle="--", label="perfectly calibrated")
    sns.scatterplot(
        data=curve, x="predicted", y="observed", size="labels", sizes=(30, 300), ax=left
    )
    sns.lineplot(data=curve, x="predicted", y="observed", ax=left, color="C0")
    left.set(xlim=(0, 1), ylim=(0, 1), title="Reliability of the learned table")
    left.set(xlabel="predicted P(return within horizon)", ylabel="observed return rate")
    sns.heatmap(estimates, annot=True, fmt=".2f", cmap="viridis", vmin=0, vmax=1, ax=right)
    right.set(title="Estimate p by feature", xlabel="references so far", ylabel="chain depth")
    figure.tight_layout()
    return save_figure(figure, path)


def plot_suite_hit_rates(long, path: str | os.PathLike[str]) -> Path:
    """Block hit rate against capacity, one facet per suite workload, one line per policy."""
    import seaborn as sns

    policies = list(dict.fromkeys(long["policy"]))
    contenders = [p for p in policies if p not in ("belady", "hkv:random")]
    palette = dict(zip(contenders, sns.color_palette("husl", len(contenders)), strict=True))
    palette.update({"belady": "black", "hkv:random": "grey"})
    title = "Policy suite: block hit rate against cache size"
    return _by_capacity(
        long, path, title, hue="policy", palette=palette, hue_order=policies, style="kind"
    )


def _by_capacity(long, path: str | os.PathLike[str], title: str, **lines) -> Path:
    """Block hit rate against capacity (log scale), a facet per workload; `lines` says how
    seaborn tells the lines apart (hue, style, palette...)."""
    import seaborn as sns

    grid = sns.relplot(
        data=long,
        kind="line",
        x="capacity %",
        y="block hit rate %",
        col="workload",
        col_wrap=4,
        markers=True,
        height=3.2,
        aspect=1.1,
        facet_kws={"sharey": False},
        **lines,
    )
    ticks = sorted(set(long["capacity %"]))
    grid.set(xscale="log", xticks=ticks, xticklabels=[f"{t:g}%" for t in ticks])
    grid.set_titles("{col_name}")
    grid.figure.subplots_adjust(top=0.88)
    grid.figure.suptitle(title)
    return save_figure(grid.figure, path)


def plot_regret_heatmap(regrets, path: str | os.PathLike[str], clip: float = 10.0) -> Path:
    """Points below each cell's best competitor, policy x cell (negative: ahead of it); the
    colours saturate at +-`clip` points so that `random` does not wash out the rest."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    figure, ax = plt.subplots(figsize=(16, 0.42 * len(regrets) + 2))
    label = f"points below the best competitor (clipped at {clip:g})"
    sns.heatmap(
        regrets, cmap="RdYlGn_r", center=0, vmin=-clip, vmax=clip, ax=ax, cbar_kws={"label": label}
    )
    ax.set(xlabel="workload @ capacity (share of distinct blocks)", ylabel="policy")
    ax.set_title("Regret per policy and suite cell")
    figure.tight_layout()
    return save_figure(figure, path)


def plot_ceiling(long, path: str | os.PathLike[str]) -> Path:
    """Block hit rate against capacity per workload: the best competitor, `auto`, `predictive`,
    `lru` behind an admission oracle, half the gap to Belady, and Belady."""
    lines = list(dict.fromkeys(long["line"]))
    title = "What a perfect reuse predictor could buy in front of lru"
    return _by_capacity(long, path, title, hue="line", hue_order=lines, style="line")
