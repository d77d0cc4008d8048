"""Tables from `bench/policies.py`'s results: each eviction policy's block hit rate per
workload and cache size, against Belady's (the offline optimum). `pol` is the loaded results
dict (`hkv.report.bench_results.load_result`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

BEST_FORMAT = {
    "block hit rate": "{:.3f}",
    "share of belady": "{:.0%}",
    "lru": "{:.3f}",
    "belady": "{:.3f}",
}


def policy_rates(pol: Mapping[str, Any]) -> pd.DataFrame:
    """One row per workload x capacity x policy: block hit rate and its share of Belady's at
    the same workload and capacity (capacity labelled as a share of distinct blocks)."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "workload": workload,
                "capacity": f"{float(cap):.0%} of distinct blocks",
                "policy": policy,
                "block hit rate": stats["block_hit_rate"],
                "share of belady": stats["block_hit_rate"]
                / by_cap["policies"]["belady"]["block_hit_rate"],
            }
            for workload, wl in pol["workloads"].items()
            for cap, by_cap in wl["capacities"].items()
            for policy, stats in by_cap["policies"].items()
        ]
    )


def policy_order(pol: Mapping[str, Any]) -> list[str]:
    """The file's policies, Belady first."""
    return ["belady", *[p for p in pol["parameters"]["policies"] if p != "belady"]]


def policies_facts(pol: Mapping[str, Any]) -> str:
    """One line: where and when the file was made, and the cache sizes it used."""
    machine = pol["machine"]
    capacities = pol["parameters"]["capacities_frac_of_distinct_blocks"]
    sizes = " and ".join(f"{c:.0%}" for c in capacities)
    commit = machine.get("git_commit", "not recorded")[:10]
    return (
        f"{machine.get('hostname', 'host not recorded')}, {pol['date_utc']}, hkv commit "
        f"{commit}; caches of {sizes} of the distinct blocks"
    )


def best_online(rates: pd.DataFrame) -> pd.DataFrame:
    """Per (workload, capacity): the online policy with the highest hit rate (column `best
    online policy`), its hit rate and share of Belady's, beside lru's and Belady's rates."""
    online = rates[rates["policy"] != "belady"]
    best = (
        online.loc[online.groupby(["workload", "capacity"])["block hit rate"].idxmax()]
        .set_index(["workload", "capacity"])
        .rename(columns={"policy": "best online policy"})
    )
    for policy in ("lru", "belady"):
        best[policy] = rates[rates["policy"] == policy].set_index(["workload", "capacity"])[
            "block hit rate"
        ]
    return best


def policies_summary(rates: pd.DataFrame) -> dict[str, Any]:
    """The notebook's `policies` results: the best online policy per `"workload @ capacity"`
    and the highest share of Belady's hit rate any online policy reached."""
    best = best_online(rates)
    online = rates[rates["policy"] != "belady"]
    return {
        "best_online": {
            f"{workload} @ {capacity}": {
                "policy": row["best online policy"],
                "hit_rate": row["block hit rate"],
                "share_of_belady": row["share of belady"],
                "lru": row["lru"],
                "belady": row["belady"],
            }
            for (workload, capacity), row in best.iterrows()
        },
        "max_share_of_belady_any_online": float(online["share of belady"].max()),
    }
