"""Notebook 04's replay under both store disciplines (docs/design.md §2), ranked side by side,
so that what the notebook recommends can be set against what it shows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hkv.errors import HkvError
from hkv.report.eviction import MIN_GAP
from hkv.sim import simulate

if TYPE_CHECKING:
    import pandas as pd

    from hkv.cost import CostModel
    from hkv.sim import Trace


def per_request_hit_rates(
    workloads: Mapping[str, Trace],
    capacities: Mapping[str, Mapping[float, int]],
    cost_model: CostModel,
    policies: Sequence[str],
) -> pd.DataFrame:
    """Block hit rates of online `policies` replayed with vLLM's store discipline
    (`store="per_request"`), index (workload, capacity %), one column per policy."""
    import pandas as pd

    rows = [
        {"workload": name, "capacity %": pct, "policy": r.policy, "rate": r.block_hit_rate}
        for name, trace in workloads.items()
        for pct, blocks in capacities[name].items()
        for r in simulate(trace, policies, blocks, cost_model=cost_model, store="per_request")
    ]
    frame = pd.DataFrame(rows).pivot(index=["workload", "capacity %"], columns="policy")
    return frame["rate"][list(policies)]


def gap_closed_per_request(per_request: pd.DataFrame, hit_rates: pd.DataFrame) -> pd.DataFrame:
    """Each policy's share of the gap from `lru` (per request, the 0 point) to Belady (whose
    per-block replay `hit_rates` holds: no offline policy runs per request); NaN where the gap is
    narrower than `eviction.MIN_GAP`."""
    lru, belady = per_request["lru"], hit_rates["belady"].reindex(per_request.index)
    width = belady - lru
    return per_request.sub(lru, axis=0).div(width.where(width >= MIN_GAP), axis=0)


def store_ranking(per_block_gap: pd.DataFrame, per_request_gap: pd.DataFrame) -> pd.DataFrame:
    """Mean share of the gap per policy under each discipline, and the rank it gives (1: the
    most), the per-block order first. `attrs` holds the cells and workloads averaged over."""
    import pandas as pd

    policies = list(per_request_gap.columns)
    table = pd.DataFrame(
        {
            "per block": per_block_gap[policies].mean(),
            "per request": per_request_gap.mean(),
        }
    )
    if table.isna().all().any():  # every cell's LRU -> Belady gap under half a point (MIN_GAP)
        raise HkvError("no capacity here leaves LRU and Belady half a point apart (the tier holds "
                       "nearly every block), so no share of the gap ranks the policies: give "
                       "smaller capacities (CAPACITY_PERCENTS)")  # fmt: skip
    for column in ("per block", "per request"):
        table[f"rank, {column}"] = table[column].rank(ascending=False, method="min").astype(int)
    table = table.sort_values("rank, per block")
    table.attrs = {
        "cells": len(per_request_gap),
        "workloads": per_request_gap.index.get_level_values(0).nunique(),
    }
    return table
