"""Notebook 04's analysis: policies replayed on traces, the share of the LRU -> Belady gap each
closes, the committed Mooncake benchmark, and how far blocks are re-referenced.

Tables are pandas DataFrames indexed by workload and capacity (% of a trace's distinct blocks);
pandas, matplotlib and seaborn are imported by the functions that use them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hkv.policies import get_policy_class, make_policy, policy_names
from hkv.sim import Request, Trace, replay, simulate, trace_from_requests

OFFLINE = "offline (knows the future)"
KIND_ORDER = ("online", OFFLINE, "control")


def example_trace(example: Mapping[str, Sequence[int]], block_tokens: int = 512) -> Trace:
    """A trace of one request per entry of `example` (label -> block ids), no output tokens."""
    return trace_from_requests(
        [
            Request(i, input_length=len(ids) * block_tokens, output_length=0, hash_ids=tuple(ids))
            for i, ids in enumerate(example.values())
        ],
        block_tokens=block_tokens,
    )


def example_steps(
    labels: Iterable[str], trace: Trace, capacity: int, policies: Sequence[str] = ("lru", "belady")
):
    """A DataFrame, one row per request: its blocks, and per policy the blocks that hit and the
    cache after it. Each prefix of the trace is replayed from scratch on a fresh policy."""
    import pandas as pd

    future = trace.reference_stream()
    caches = {
        (name, i): make_policy(name, capacity, future=future)
        for name in policies
        for i in range(len(trace))
    }
    hits = {
        (name, i): replay(
            trace_from_requests(trace.requests[: i + 1], block_tokens=trace.block_tokens), policy
        ).block_hits
        for (name, i), policy in caches.items()
    }
    rows = []
    for i, (label, request) in enumerate(zip(labels, trace.requests, strict=True)):
        row: dict[str, Any] = {"request": label, "blocks": list(request.hash_ids)}
        for name in policies:
            new_hits = hits[name, i] - hits.get((name, i - 1), 0)
            row[f"{name}: hits"] = list(request.hash_ids[:new_hits])
        for name in policies:
            row[f"{name}: cached after"] = sorted(caches[name, i])
        rows.append(row)
    return pd.DataFrame(rows).set_index("request")


def turns_sentence(steps, capacity: int, turns: Sequence[str], what: str) -> str:
    """How many blocks the requests `turns` (rows of `example_steps`, called `what`) hit under
    each policy it ran, at `capacity` blocks."""
    policies = [column[: -len(": hits")] for column in steps.columns if column.endswith(": hits")]
    counts = [
        " and ".join(str(len(steps.loc[turn, f"{name}: hits"])) for turn in turns)
        + f" under {name}"
        for name in policies
    ]
    return f"At {capacity} blocks {what} hit " + ", ".join(counts) + " (blocks each)."


def workload_sizes(workloads: Mapping[str, Trace]) -> dict[str, dict[str, Any]]:
    """Workload -> its source, requests, block references and distinct blocks."""
    return {
        name: {
            "source": trace.source,
            "requests": len(trace),
            "block_refs": trace.num_block_refs,
            "distinct_blocks": trace.distinct_blocks(),
        }
        for name, trace in workloads.items()
    }


def workload_table(workloads: Mapping[str, Trace]):
    """A DataFrame, one row per workload: source, requests, block references, distinct blocks,
    the share of references to a block seen before, whether it has modality labels."""
    import pandas as pd

    return pd.DataFrame(
        {
            name: {
                "source": trace.source,
                "requests": len(trace),
                "block references": trace.num_block_refs,
                "distinct blocks": trace.distinct_blocks(),
                "references to a block seen before": 1
                - trace.distinct_blocks() / trace.num_block_refs,
                "has modality labels": trace.has_modalities(),
            }
            for name, trace in workloads.items()
        }
    ).T


def policy_kinds(control: Iterable[str]) -> dict[str, str]:
    """Every registered policy's kind: offline (knows the future), control, or online."""
    control = set(control)
    return {
        name: OFFLINE
        if get_policy_class(name).offline
        else "control"
        if name in control
        else "online"
        for name in policy_names()
    }


def capacity_blocks(
    workloads: Mapping[str, Trace], percents: Iterable[float]
) -> dict[str, dict[float, int]]:
    """Workload -> capacity % -> that share of its distinct blocks (at least 1)."""
    return {
        name: {pct: max(1, round(trace.distinct_blocks() * pct / 100)) for pct in percents}
        for name, trace in workloads.items()
    }


def replay_runs(workloads, capacities, cost_model, kinds: Mapping[str, str]):
    """A DataFrame, one row per (workload, capacity %, policy): `simulate`'s result with every
    registered policy, plus the policy's kind."""
    import pandas as pd

    runs = pd.DataFrame(
        [
            {"workload": name, "capacity %": pct, **result.to_dict()}
            for name, trace in workloads.items()
            for pct, blocks in capacities[name].items()
            for result in simulate(trace, "all", blocks, cost_model=cost_model)
        ]
    )
    runs["kind"] = runs["policy"].map(kinds)
    return runs


def hit_rate_table(runs):
    """Block hit rates, indexed by (workload, capacity %), one column per registered policy."""
    table = runs.pivot_table(
        index=["workload", "capacity %"], columns="policy", values="block_hit_rate"
    )
    return table[policy_names()]


MIN_GAP = 0.005
"""The narrowest LRU -> Belady gap a share is taken of (half a point of hit rate): where the two
nearly agree (a tier that holds almost everything) a share of the difference is noise over a
hundredth of a point, in the thousands of percent."""


def gap_closed(hit_rates):
    """(hit rate - LRU's) / (Belady's - LRU's), shaped like `hit_rates`; NaN where the gap is
    narrower than `MIN_GAP`."""
    width = hit_rates["belady"] - hit_rates["lru"]
    return hit_rates.sub(hit_rates["lru"], axis=0).div(width.where(width >= MIN_GAP), axis=0)


def by_capacity(table, workloads: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Workload -> policy -> capacity ("{:g}") -> value of a (workload, capacity %) table, NaN
    as None."""
    plain = table.astype(object).where(table.notna(), None)
    return {name: plain.loc[name].rename(index="{:g}".format).to_dict() for name in workloads}


def read_benchmark(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The committed policy benchmark, its provenance under the current names (`generated_by`,
    `date_utc`, `parameters`) whether the file uses those or the older ones."""
    benchmark = json.loads(Path(path).read_text())
    for new, old in (("generated_by", "benchmark"), ("date_utc", "date"), ("parameters", "params")):
        if new not in benchmark and old in benchmark:
            benchmark[new] = benchmark[old]
    return benchmark


def describe_benchmark(benchmark: Mapping[str, Any]) -> str:
    """Three lines: what wrote the benchmark and when, the machine, the Mooncake trace's size.
    Versions are read from `versions`, or from `machine` in files written before that key."""
    machine, mooncake = benchmark["machine"], benchmark["workloads"]["mooncake"]
    versions = {**machine, **benchmark.get("versions", {})}
    commit = machine.get("git_commit") or "unknown"
    cpus = machine.get("cpu_count", machine.get("cpus"))
    return "\n".join(
        [
            f"{benchmark['generated_by']} on {benchmark['date_utc']} (commit {commit[:10]})",
            f"machine: {machine['hostname']} ({machine['platform']}), {cpus} CPUs, "
            f"GPU: {machine.get('gpu') or 'none'}, Python {versions.get('python')}, "
            f"hkv {versions.get('hkv')}",
            f"trace: {mooncake['requests']:,} requests, {mooncake['block_refs']:,} block "
            f"references, {mooncake['distinct_blocks']:,} distinct blocks",
        ]
    )


def mooncake_table(mooncake: Mapping[str, Any]):
    """The benchmark's Mooncake rows: block hit rate and gap closed per (capacity, policy)."""
    import pandas as pd

    rows = [
        {
            "capacity": f"{float(frac):.0%} ({cap['capacity_blocks']:,} blocks)",
            "policy": name,
            "block hit rate": row["block_hit_rate"],
            "share of the LRU → Belady gap closed": row["lru_to_belady_gap_closed"],
        }
        for frac, cap in mooncake["capacities"].items()
        for name, row in cap["policies"].items()
    ]
    return pd.DataFrame(rows).set_index(["capacity", "policy"])


def mooncake_best(mooncake: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Capacity fraction -> the best online policy's, LRU's, Belady's and the static popularity
    oracle's hit rates on Mooncake, and the share of the gap the best and the oracle close."""
    best = {}
    for frac, cap in mooncake["capacities"].items():
        target, lru = cap["target"], cap["policies"]["lru"]["block_hit_rate"]
        oracle, belady = cap["static_top_oracle_block_hit_rate"], target["belady_block_hit_rate"]
        best[frac] = {
            "capacity_blocks": cap["capacity_blocks"],
            "best_online": target["best_online"],
            "best_online_block_hit_rate": target["best_online_block_hit_rate"],
            "lru_block_hit_rate": lru,
            "belady_block_hit_rate": belady,
            "static_top_oracle_block_hit_rate": oracle,
            "gap_closed": cap["policies"][target["best_online"]]["lru_to_belady_gap_closed"],
            "static_top_oracle_gap_closed": (oracle - lru) / (belady - lru),
        }
    return best


def gap_long(gap: Any, online: Sequence[str], mooncake: Mapping[str, Any]):
    """A long DataFrame of the share of the gap each online policy closes: the replayed
    workloads' (from `gap`) and the benchmark's Mooncake capacities."""
    import pandas as pd

    replayed = gap[list(online)].stack().rename("share of the gap closed").reset_index()
    committed = pd.DataFrame(
        [
            {
                "workload": "mooncake (committed benchmark)",
                "capacity %": 100 * float(frac),
                "policy": name,
                "share of the gap closed": row["lru_to_belady_gap_closed"],
            }
            for frac, cap in mooncake["capacities"].items()
            for name, row in cap["policies"].items()
            if name in online
        ]
    )
    return pd.concat([replayed, committed], ignore_index=True)


def rereference_distances(workloads: Mapping[str, Trace]) -> dict[str, np.ndarray]:
    """Workload -> the distance (block references since the previous reference to the same
    block) of every re-reference, in the order the trace sorts by block."""
    distances = {}
    for name, trace in workloads.items():
        refs = np.array([key for ids in trace.reference_stream() for key in ids])
        order = np.argsort(refs, kind="stable")  # each block's references, in trace order
        same_block = refs[order][1:] == refs[order][:-1]
        distances[name] = np.diff(order)[same_block]
    return distances


def rereference_table(workloads: Mapping[str, Trace], distances: Mapping[str, np.ndarray]):
    """A DataFrame, one row per workload: the share of references that are re-references, of
    blocks referenced once, and the median distance as a % of distinct blocks."""
    import pandas as pd

    singletons = {}
    for name, trace in workloads.items():
        refs = np.array([key for ids in trace.reference_stream() for key in ids])
        singletons[name] = float(np.mean(np.unique(refs, return_counts=True)[1] == 1))
    return pd.DataFrame(
        {
            "re-references (share of block references)": {
                name: len(d) / workloads[name].num_block_refs for name, d in distances.items()
            },
            "blocks referenced only once (share of distinct blocks)": singletons,
            "median re-reference distance (% of distinct blocks)": {
                name: 100 * float(np.median(d)) / workloads[name].distinct_blocks()
                for name, d in distances.items()
            },
        }
    )


def reuse_table(workloads, distances, capacities, hit_rates, gap, policy: str):
    """A DataFrame by (workload, capacity %): the share of re-references within the cache size,
    the share LRU served (its hits over the re-references), and `policy`'s share of the gap."""
    import pandas as pd

    rows = [
        {
            "workload": name,
            "capacity %": pct,
            "re-references within the cache size": np.mean(d <= capacities[name][pct]),
            "re-references LRU served": hit_rates.loc[(name, pct), "lru"]
            * workloads[name].num_block_refs
            / len(d),
            f"gap closed by {policy}": gap.loc[(name, pct), policy],
        }
        for name, d in distances.items()
        for pct in capacities[name]
    ]
    return pd.DataFrame(rows).set_index(["workload", "capacity %"])


def rereference_results(reref, reuse) -> dict[str, dict[str, Any]]:
    """Workload -> the median distance, singleton share and, per capacity ("{:g}"), the shares
    of re-references within the cache size and served by LRU."""
    return {
        name: {
            "median_distance_pct_of_distinct": reref.loc[
                name, "median re-reference distance (% of distinct blocks)"
            ],
            "singleton_block_share": reref.loc[
                name, "blocks referenced only once (share of distinct blocks)"
            ],
            "share_within_capacity": reuse.loc[name, "re-references within the cache size"]
            .rename(index="{:g}".format)
            .to_dict(),
            "share_lru_served": reuse.loc[name, "re-references LRU served"]
            .rename(index="{:g}".format)
            .to_dict(),
        }
        for name in reref.index
    }


def mooncake_reuse(
    mooncake: Mapping[str, Any], best: Mapping[str, Mapping[str, Any]]
) -> tuple[float, dict[str, float]]:
    """The share of Mooncake's block references that are re-references, and per capacity
    ("1%") the share of them LRU served."""
    share = 1 - mooncake["distinct_blocks"] / mooncake["block_refs"]
    served = {f"{float(frac):.0%}": b["lru_block_hit_rate"] / share for frac, b in best.items()}
    return share, served
