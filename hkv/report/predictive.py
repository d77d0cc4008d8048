"""Notebook 05's analysis: what hkv's `predictive` policy learns on a generated workload (its
bucket table, a reliability curve, estimates by feature) and how it and every other policy fare
in the committed policy suite (`data/results/policy_suite.json`).

Tables are pandas DataFrames; pandas is imported by the functions that use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hkv.policies import make_policy
from hkv.report.suite import LRU, cells, regret_summary
from hkv.sim import Trace, replay


def run_predictive(trace: Trace, capacity_percent: float, store: str = "per_request", **params):
    """Replay `trace` through a fresh `predictive` policy whose capacity is `capacity_percent` %
    of the trace's distinct blocks; return (the policy, afterwards, and the ReplayResult)."""
    capacity = max(1, round(trace.distinct_blocks() * capacity_percent / 100))
    policy = make_policy("predictive", capacity, **params)
    return policy, replay(trace, policy, store=store)


def learned_table(policy):
    """The policy's learned buckets (`PredictivePolicy.learned_table`) as a DataFrame, with the
    observed return rate (positives / labels) of each."""
    import pandas as pd

    table = pd.DataFrame(policy.learned_table())
    if table.empty:
        raise ValueError("the policy holds no labels yet: replay a longer trace through it")
    return table.assign(observed=table["positives"] / table["labels"])


def reliability_note(table) -> str:
    """What the reliability curve can show for `table` (`learned_table`'s): nothing learned where
    every `p` is still the prior of 1 (no table rebuild yet), else how many of the labels sit at
    confident estimates (below 0.1 or above 0.9)."""
    labels = table["labels"].sum()
    if (table["p"] == 1.0).all():
        return ("Every bucket's p is still 1, the prior before the first table rebuild: this run "
                f"filed {labels:.0f} labels, too few for one, so the curve shows the prior, not "
                "what was learned (a larger NUM_SESSIONS gives it a rebuild).")  # fmt: skip
    confident = table.loc[(table["p"] < 0.1) | (table["p"] > 0.9), "labels"].sum()
    return (f"{confident / labels:.0%} of the {labels:.0f} (decayed) labels sit at confident "
            "estimates (p below 0.1 or above 0.9).")  # fmt: skip


def reliability(table, bins: int = 10):
    """Predicted probability of return within the horizon against the observed rate: buckets
    grouped into `bins` equal-width bins of `p`, each bin's label-weighted mean `p` and its
    positives / labels; only bins that hold labels."""
    import pandas as pd

    edges = [i / bins for i in range(bins + 1)]
    binned = table.assign(
        bin=pd.cut(table["p"], edges, include_lowest=True),
        weighted_p=table["p"] * table["labels"],
    )
    grouped = binned.groupby("bin", observed=True)[["weighted_p", "positives", "labels"]].sum()
    grouped = grouped[grouped["labels"] > 0]
    return pd.DataFrame(
        {
            "bin": [f"{b.left:.1f}-{b.right:.1f}" for b in grouped.index],
            "predicted": grouped["weighted_p"] / grouped["labels"],
            "observed": grouped["positives"] / grouped["labels"],
            "labels": grouped["labels"],
        }
    ).reset_index(drop=True)


def by_feature(table, rows: str = "depth", columns: str = "references", value: str = "p"):
    """A `rows` x `columns` table of the label-weighted mean of `value` (`p` or `observed`)."""
    weighted = table.assign(w=table[value] * table["labels"])
    sums = weighted.groupby([rows, columns])[["w", "labels"]].sum()
    return (sums["w"] / sums["labels"]).unstack(columns)


def suite_long(results: dict[str, Any]):
    """One row per (workload, capacity, policy) of the suite: block hit rate (%) and the kind
    (vLLM, peer, hkv, offline)."""
    import pandas as pd

    rows = [
        {
            "workload": name,
            "capacity %": 100 * cell["capacity_frac"],
            "policy": policy,
            "kind": policy.split(":")[0] if ":" in policy else "offline",
            "block hit rate %": 100 * numbers["block_hit_rate"],
        }
        for name, cell in cells(results)
        for policy, numbers in cell["policies"].items()
    ]
    return pd.DataFrame(rows)


def regret_frame(results: dict[str, Any], policies: Sequence[str] | None = None):
    """Policy x cell (`workload@capacity`) of points below the cell's best competitor (negative:
    ahead of it); `policies` defaults to every policy but the offline yardstick."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            f"{name}@{cell['capacity_frac']:g}": {
                policy: 100 * (cell["best_competitor_block_hit_rate"] - n["block_hit_rate"])
                for policy, n in cell["policies"].items()
            }
            for name, cell in cells(results)
        }
    )
    keep = [p for p in frame.index if p != "belady"] if policies is None else list(policies)
    return frame.loc[keep]


def future_work_claim(results: dict[str, Any], policies: Sequence[str]) -> dict[str, Any]:
    """Each policy's `regret_summary` plus its mean hit-rate gain over vLLM's `lru` (points)."""
    claim = {}
    for policy in policies:
        gains = [
            100 * (c["policies"][policy]["block_hit_rate"] - c["policies"][LRU]["block_hit_rate"])
            for _, c in cells(results)
        ]
        claim[policy] = {**regret_summary(results, policy), "mean_gain_over_lru": _mean(gains)}
    return claim


def claim_line(policy: str, numbers: dict[str, Any]) -> str:
    """One sentence of `future_work_claim`'s numbers for `policy`."""
    return (
        f"{policy}: mean regret {numbers['mean_regret']:.2f} points (max "
        f"{numbers['max_regret']:.2f}) against the best of vLLM's options and the peers; "
        f"{numbers['mean_gain_over_lru']:+z.2f} points over vLLM's lru on average; below vLLM's "
        f"lru in {numbers['cells_below_lru']} of {numbers['cells']} cells"
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def replay_speed_frame(results: dict[str, Any], policy: str = "predictive"):
    """`bench.replay_speed`'s cells as a DataFrame: workload, capacity, `policy`'s and lru's
    best rates (block references a second, one core) and the median ratio in the same rounds."""
    import pandas as pd

    rows = []
    for cell in results["cells"]:
        mine, lru = cell["policies"][policy], cell["policies"]["lru"]
        rows.append(
            {
                "workload": cell["workload"],
                "capacity %": 100 * cell["capacity_frac"],
                f"{policy} refs/s": mine["refs_per_s_best"],
                "lru refs/s": lru["refs_per_s_best"],
                "vs lru (median)": mine["vs_lru_median"],
            }
        )
    return pd.DataFrame(rows)


CEILING_LINES = {
    "best_competitor_block_hit_rate": "best of vLLM's options and the peers",
    "hkv:predictive": "hkv predictive",
    "hkv:auto": "hkv auto",
    "block_hit_rate": "lru + admission oracle (ceiling)",
    "half_gap_block_hit_rate": "half the gap to Belady",
    "belady_block_hit_rate": "Belady",
}


def ceiling_long(results: dict[str, Any]):
    """`bench.admission_ceiling`'s cells that have the suite beside them, one row per (workload,
    capacity, line of `CEILING_LINES`): block hit rate (%)."""
    import pandas as pd

    rows = []
    for name, cells_ in results["workloads"].items():
        for cell in cells_:
            if "belady_block_hit_rate" not in cell:
                continue
            for key, line in CEILING_LINES.items():
                value = cell.get(key)
                rate = value["block_hit_rate"] if isinstance(value, dict) else value
                if rate is not None:
                    rows.append(
                        {
                            "workload": name,
                            "capacity %": 100 * cell["capacity_frac"],
                            "line": line,
                            "block hit rate %": 100 * rate,
                        }
                    )
    return pd.DataFrame(rows)


def ceiling_summary(results: dict[str, Any], workload: str = "mooncake"):
    """Per capacity of `workload`: the best competitor, `auto`, `predictive`, the admission
    ceiling (and its horizon), half the gap to Belady and Belady (%), and the share of that gap
    the ceiling closes."""
    import pandas as pd

    rows = []
    for cell in results["workloads"].get(workload, []):
        if "belady_block_hit_rate" not in cell:
            continue
        rows.append(
            {
                "capacity %": 100 * cell["capacity_frac"],
                "best competitor %": 100 * cell["best_competitor_block_hit_rate"],
                "auto %": 100 * cell["hkv:auto"]["block_hit_rate"],
                "predictive %": 100 * cell["hkv:predictive"]["block_hit_rate"],
                "ceiling %": 100 * cell["block_hit_rate"],
                "horizon (x tier)": cell["best_horizon_factor"],
                "half gap %": 100 * cell["half_gap_block_hit_rate"],
                "belady %": 100 * cell["belady_block_hit_rate"],
                "gap closed": cell["ceiling_gap_closed"],
            }
        )
    return pd.DataFrame(rows)
