"""Tables from the later vLLM engines (`vllm_h200_tail_first.json`): bip with and without
`tail_first` against vLLM's lru and arc, one engine per run call, the oracle's ceiling and
where the policy's time goes. Compare within an engine only: hosts differ by several per cent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

TAIL_FORMAT = {
    "cached_share": "{:.1%}",
    "later_turns_cached": "{:.1%}",
    "wall_s": "{:.1f}",
    "wall vs lru": "{:+.1%}",
    "wall_spread": "{:.1%}",
    "policy_share_upper": "{:.2%}",
    "policy_share_probe": "{:.2%}",
    "policy_share_lower": "{:.2%}",
}
# vLLM calls these once per block; touch, evict and remove once per request or step
PER_BLOCK_METHODS = ("get", "insert", "mark_evictable", "mark_non_evictable")
WALL_CUT = "wall cut vs better of lru/arc"


def tail_runs(tail: Mapping[str, Any]) -> pd.DataFrame:
    """One row per run of the file, with a `CPU tier` label column ("8 GiB")."""
    import pandas as pd

    runs = pd.DataFrame(tail["runs"])
    runs["CPU tier"] = runs["cpu_gib"].map("{:g} GiB".format)
    return runs


def _spread(wall_s: pd.Series) -> float:
    """Slowest run over fastest, less one."""
    return wall_s.max() / wall_s.min() - 1


def tail_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (engine, CPU tier, policy), in the file's order: repeats, means of cached_share,
    later_turns_cached and wall_s, wall_spread, failed_stores (summed), the policy's share of a
    step (worst run) as upper, probe and lower bounds, and `wall vs lru` in the same engine."""
    table = runs.groupby(["engine", "CPU tier", "policy"], sort=False).agg(
        repeats=("repeat", "size"),
        cached_share=("cached_frac", "mean"),
        later_turns_cached=("turn_gt0_cached_frac", "mean"),
        wall_s=("wall_s", "mean"),
        wall_spread=("wall_s", _spread),
        failed_stores=("failed_stores", "sum"),
        policy_share_upper=("policy_frac_of_step", "max"),
        policy_share_probe=("policy_frac_of_step_net", "max"),
        policy_share_lower=("policy_frac_of_step_net_low", "max"),
    )
    lru_wall = table.xs("lru", level="policy")["wall_s"]
    same_engine_lru = lru_wall.reindex(table.index.droplevel("policy")).to_numpy()
    table["wall vs lru"] = table["wall_s"].to_numpy() / same_engine_lru - 1
    return table


def widest_spread(table: pd.DataFrame) -> dict[str, str]:
    """`{CPU tier: widest wall_spread over its engines and policies}`, as percentages."""
    return table["wall_spread"].groupby(level="CPU tier").max().map("{:.0%}".format).to_dict()


def head_to_head(table: pd.DataFrame, compare_gib: float) -> pd.DataFrame:
    """At `compare_gib`, per (engine, policy) for hkv's policies and the oracle: the wall-time
    cut against the better of vLLM's lru and arc, the policy's share of the step (worst run,
    upper and lower bound) and vLLM lru's lower bound."""
    import pandas as pd

    rows = []
    tier = table.xs(f"{compare_gib:g} GiB", level="CPU tier")
    for engine, runs in tier.groupby(level="engine", sort=False):
        runs = runs.droplevel("engine")
        better = runs.loc[["lru", "arc"], "wall_s"].min()
        for policy in (p for p in runs.index if p.startswith("hkv_") or p == "oracle"):
            rows.append(
                {
                    "engine": engine,
                    "policy": policy,
                    WALL_CUT: 1 - runs.loc[policy, "wall_s"] / better,
                    "policy share (upper)": runs.loc[policy, "policy_share_upper"],
                    "policy share (lower)": runs.loc[policy, "policy_share_lower"],
                    "vLLM lru share (lower)": runs.loc["lru", "policy_share_lower"],
                }
            )
    return pd.DataFrame(rows).set_index(["engine", "policy"])


def policy_time_split(runs: pd.DataFrame, compare_gib: float) -> tuple[str, pd.DataFrame]:
    """In the last engine at `compare_gib`: (engine, table per policy of the lower bound of its
    time as shares of the step, split into `per-block calls` and `per-request calls`, and
    `both (lower bound)`), means over repeats. Each method's time is less the timer's per-call
    floor."""
    import pandas as pd

    compare = runs[runs["cpu_gib"] == compare_gib]
    engine = compare["engine"].iloc[-1]
    rows = [_split_run(run) for _, run in compare[compare["engine"] == engine].iterrows()]

    split = pd.DataFrame(rows).groupby("policy", sort=False).mean()
    split["both (lower bound)"] = split.sum(axis=1)
    return engine, split


def _split_run(run: pd.Series) -> dict[str, Any]:
    """One run's policy, and its per-block and per-request time as shares of the step."""
    floor = run["timer_floor_s_per_call"]
    step_s = run["policy_s_net_low"] / run["policy_frac_of_step_net_low"]
    net = {m: v["s"] - v["calls"] * floor for m, v in run["policy_by_method"].items()}
    per_block = sum(v for m, v in net.items() if m in PER_BLOCK_METHODS)
    return {
        "policy": run["policy"],
        "per-block calls": per_block / step_s,
        "per-request calls": (sum(net.values()) - per_block) / step_s,
    }


def describe_split(engine: str, split: pd.DataFrame, best: str) -> str:
    """One line: `best`'s and vLLM lru's own code against vLLM's per-block calls into them."""
    own, calls = split["per-request calls"], split["per-block calls"]
    return (
        f"engine {engine}: {best}'s own code took {own[best]:.2%} of the step, vLLM's "
        f"per-block calls into it {calls[best]:.2%}; vLLM's lru {own['lru']:.2%} and "
        f"{calls['lru']:.2%}"
    )


def oracle_ceiling(table: pd.DataFrame, head: pd.DataFrame, compare_gib: float) -> pd.DataFrame:
    """Per engine that ran the oracle (index `engine`): the oracle's cached share and wall-time
    cut at `compare_gib`, beside the hkv policy with the largest cut in that engine."""
    import pandas as pd

    rows = []
    for engine, policy in head.index:
        if policy != "oracle":
            continue
        tier_rows = table.loc[(engine, f"{compare_gib:g} GiB")]
        hkv = head.loc[engine].drop("oracle")
        best = hkv[WALL_CUT].idxmax()
        rows.append(
            {
                "engine": engine,
                "oracle cached": tier_rows.loc["oracle", "cached_share"],
                "oracle wall cut": head.loc[(engine, "oracle"), WALL_CUT],
                "best hkv policy": best,
                "its cached": tier_rows.loc[best, "cached_share"],
                "its wall cut": hkv.loc[best, WALL_CUT],
            }
        )
    return pd.DataFrame(rows).set_index("engine")


def describe_ceiling(ceiling: pd.DataFrame, target: float = 0.20) -> str:
    """One line: the most perfect eviction cut, and whether `target` lies beyond it."""
    cut = float(ceiling["oracle wall cut"].max())
    verdict = (
        "lies beyond what any eviction policy reaches in this engine."
        if cut < target
        else "is within what eviction can reach."
    )
    return (
        f"Perfect eviction cut the wall time by at most {cut:.1%} against the better of vLLM's "
        f"two, keeping {ceiling['oracle cached'].max():.1%} of prompt tokens cached: the "
        f"{target * 100:g} % target {verdict}"
    )


def full_tier_vs_lru(table: pd.DataFrame, full_gib: float) -> pd.DataFrame:
    """At `full_gib`, per engine (index): each policy's wall time against lru's, and the
    widest spread of runs of one configuration in that engine."""
    full = table.xs(f"{full_gib:g} GiB", level="CPU tier")
    versus = full["wall vs lru"].unstack("policy").drop(columns="lru")
    versus["widest spread"] = full["wall_spread"].groupby(level="engine").max()
    return versus


def pooled_vs_lru(versus: pd.DataFrame) -> pd.Series:
    """Each policy's wall time against lru's, mean over engines."""
    return versus.drop(columns="widest spread").mean()


def describe_pooled(versus: pd.DataFrame) -> str:
    """One line: the pooled wall time against lru's and the widest spread of runs."""
    pooled = ", ".join(f"{p} {v:+.1%}" for p, v in pooled_vs_lru(versus).items())
    return (
        f"Mean over engines, wall time against lru's: {pooled}; runs of one configuration "
        f"spread by up to {versus['widest spread'].max():.0%}"
    )
