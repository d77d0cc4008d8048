"""A live run on the notebook's own CPU: `hkv.simulate` on one trace at a few cache sizes, each
a percentage of the trace's distinct blocks. Unlike the rest of `hkv.report.bench_*` these
numbers are measured now, not read from a committed file."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from hkv.sim import Trace

LIVE_COLUMNS = ["capacity_blocks", "block_hit_rate", "prefix_token_hit_frac", "refs_per_s"]


@dataclass(frozen=True)
class LiveRun:
    """One live simulation: `runs` has one row per capacity label ("10 %") x policy with
    `ReplayResult.to_dict()`'s columns; `elapsed_s` is the wall time of all of them."""

    trace_source: str
    num_requests: int
    num_block_refs: int
    capacity_blocks: dict[float, int]
    runs: pd.DataFrame
    elapsed_s: float

    def describe(self) -> str:
        """One line: the trace, its size and the wall time (labelled live)."""
        return (
            f"live CPU run: {self.trace_source}, {self.num_requests} requests, "
            f"{self.num_block_refs:,} block refs, {self.elapsed_s:.2f} s"
        )

    def table(self) -> pd.DataFrame:
        """Per (capacity, policy): capacity_blocks, block_hit_rate, prefix_token_hit_frac,
        refs_per_s."""
        return self.runs.set_index(["capacity", "policy"])[LIVE_COLUMNS]

    def summary(self) -> dict[str, Any]:
        """The notebook's `live` results: label, trace, elapsed_s, capacity_blocks per
        percentage and each policy's hit rate per percentage."""
        return {
            "label": "live CPU run on the notebook's machine",
            "trace": self.trace_source,
            "elapsed_s": self.elapsed_s,
            "capacity_blocks": {f"{p:g}": c for p, c in self.capacity_blocks.items()},
            "hit_rates": {
                policy: dict(
                    zip(group["capacity"].str.rstrip(" %"), group["block_hit_rate"], strict=True)
                )
                for policy, group in self.runs.groupby("policy")
            },
        }


def run_live(trace: Trace, capacity_percents: Iterable[float], policies: Sequence[str]) -> LiveRun:
    """Simulate `policies` on `trace` at each of `capacity_percents` (of the trace's distinct
    blocks, at least one block) and time it; returns a LiveRun."""
    import pandas as pd

    from hkv.sim import simulate

    capacity_blocks = {
        pct: max(1, round(trace.distinct_blocks() * pct / 100)) for pct in capacity_percents
    }
    start = time.perf_counter()
    runs = pd.DataFrame(
        [
            {"capacity": f"{pct:g} %", **result.to_dict()}
            for pct, capacity in capacity_blocks.items()
            for result in simulate(trace, list(policies), capacity)
        ]
    )
    elapsed_s = time.perf_counter() - start
    return LiveRun(
        trace_source=trace.source,
        num_requests=len(trace),
        num_block_refs=trace.num_block_refs,
        capacity_blocks=capacity_blocks,
        runs=runs,
        elapsed_s=elapsed_s,
    )
