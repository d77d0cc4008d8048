"""The policy suite: every policy, every workload, four tier sizes, one table.

A cell is one workload at one capacity (a fraction of the workload's distinct blocks). In each
cell every runner replays the workload from an empty tier; a runner is any callable
`(trace, capacity_blocks) -> row` whose row holds at least `block_hit_rate`. This module's
runners replay in hkv's simulator with vLLM's per-request store semantics (`store=
"per_request"`): `hkv:<name>` for every online registered policy, `vllm:lru`, `vllm:arc` and
`vllm:lru+st2` as the simulator's model of vLLM's own options, and `belady` (per-block, the
offline yardstick of docs/design.md §5). `bench.policy_suite` adds runners that measure inside
vLLM's own `CPUOffloadingManager` (vLLM's options, the third-party peers, hkv through its adapter).

Per row the suite adds `regret_points`: 100 x (best competitor's block hit rate - this row's);
the competitors are vLLM's options and the peers, whichever ran; the best competitor's regret is
0, a row ahead of it is negative. `lru_to_belady_gap_closed` is the share of the LRU -> Belady
gap (docs/design.md §5).
A row without `recompute_s_saved` but with per-request `num_hits` is priced here with the same
cost model the simulator uses. Every row then gets `net_s_saved`: the prefill seconds its hits
saved less the seconds of loading them from the tier (`ReplayResult.net_s_saved`), the figure to
judge a policy by beside its hit rate. Standard library and numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from hkv.blocks import Tier
from hkv.cost import CostModel
from hkv.errors import HkvError, is_number
from hkv.policies import policy_names
from hkv.sim.replay import _BlockCosts, simulate
from hkv.sim.trace import Trace

Runner = Callable[[Trace, int], dict[str, Any]]

FRACTIONS = (0.01, 0.02, 0.05, 0.10)
NATIVES = ("vllm:lru", "vllm:arc", "vllm:lru+st2")
"""vLLM's own options: its `lru`, its `arc`, and `lru` with `store_threshold` 2."""
PEERS = ("peer:evoke", "peer:marconi")
"""The published third-party policies for vLLM's CPU tier (measured by `bench.policy_suite`)."""
COMPETITORS = NATIVES + PEERS
YARDSTICK = "belady"
SIM_NATIVES = {"vllm:lru": ("lru", 1), "vllm:arc": ("arc", 1), "vllm:lru+st2": ("lru", 2)}
"""Each native option as the simulator models it: (hkv policy, store threshold)."""


def capacity_for(trace: Trace, fraction: float) -> int:
    """`fraction` of the trace's distinct blocks, rounded, at least 1."""
    number = is_number(fraction)
    if not number or not 0 < fraction < math.inf:
        raise HkvError(f"capacity fraction: got {fraction!r}; expected a number above 0 (0.05: 5%)")
    return max(1, round(fraction * trace.distinct_blocks()))


def sim_runner(name: str, cost_model: CostModel, *, threshold: int = 1) -> Runner:
    """Replay hkv policy `name` in the simulator; offline policies per block, others per
    request (vLLM's tier)."""
    store = "per_block" if name == YARDSTICK else "per_request"

    def run(trace: Trace, capacity: int) -> dict[str, Any]:
        result = simulate(
            trace, [name], capacity, cost_model=cost_model, store_threshold=threshold, store=store
        )[0]
        return _sim_row(result) | {"measured_in": f"sim:{store}"}

    return run


def _sim_row(result) -> dict[str, Any]:
    return {
        "block_hit_rate": result.block_hit_rate,
        "prefix_token_hit_frac": result.prefix_token_hit_frac,
        "recompute_s_saved": result.recompute_s_saved,
        "load_s": result.load_s,
        "store_failed": result.store_failed,
    }


def sim_runners(cost_model: CostModel, *, natives: bool = True) -> dict[str, Runner]:
    """`hkv:<name>` for every online registered policy (read now: newly registered ones
    join), the simulator's model of vLLM's options (`natives`), and `belady`."""
    runners = {
        f"hkv:{name}": sim_runner(name, cost_model) for name in policy_names(online_only=True)
    }
    if natives:
        for label, (name, threshold) in SIM_NATIVES.items():
            runners[label] = sim_runner(name, cost_model, threshold=threshold)
    runners[YARDSTICK] = sim_runner(YARDSTICK, cost_model)
    return runners


def with_check(runner: Runner, check: Runner, prefix: str = "sim") -> Runner:
    """`runner`'s row plus `check`'s hit rate as `<prefix>_block_hit_rate` and the difference
    in points: one number measured two ways (e.g. in vLLM and in the simulator)."""

    def run(trace: Trace, capacity: int) -> dict[str, Any]:
        row = runner(trace, capacity)
        other = check(trace, capacity)["block_hit_rate"]
        row[f"{prefix}_block_hit_rate"] = other
        row[f"{prefix}_diff_points"] = 100 * (row["block_hit_rate"] - other)
        return row

    return run


def price_hits(
    trace: Trace, num_hits: list[int], cost_model: CostModel, tier: Tier = Tier.HOST
) -> tuple[float, float]:
    """(recompute seconds saved, load seconds) of `num_hits[i]` prefix hits of request `i`,
    priced like the simulator prices its hits (a block keeps its first appearance's meta)."""
    costs = _BlockCosts(cost_model, tier, "auto")
    first: dict = {}
    saved_s = load_s = 0.0
    for request, num_hit in zip(trace.requests, num_hits, strict=True):
        for index, key in enumerate(request.hash_ids):
            if key not in first:
                first[key] = costs.of(request.block_meta(index, trace.block_tokens, tier))
            if index < num_hit:
                saved_s += first[key][0]
                load_s += first[key][1]
    return saved_s, load_s


def net_s_saved(row: Mapping[str, Any]) -> float | None:
    """Seconds of prefill the row's hits saved net of loading them from the tier
    (`recompute_s_saved - load_s`, as `ReplayResult.net_s_saved`), to the millisecond (the
    cost model is no finer); None for a row without prices (its runner failed)."""
    if row.get("recompute_s_saved") is None or row.get("load_s") is None:
        return None
    return round(row["recompute_s_saved"] - row["load_s"], 3)


def run_cell(
    trace: Trace, capacity: int, runners: Mapping[str, Runner], cost_model: CostModel
) -> dict[str, dict[str, Any]]:
    """Every runner on `trace` at `capacity`, keyed by label; rows priced where needed, each
    with its `net_s_saved`."""
    rows = {}
    for label, runner in runners.items():
        row = dict(runner(trace, capacity))
        num_hits = row.pop("num_hits", None)
        if "recompute_s_saved" not in row and num_hits is not None:
            row["recompute_s_saved"], row["load_s"] = price_hits(trace, num_hits, cost_model)
        row["net_s_saved"] = net_s_saved(row)
        rows[label] = row
    return rows


def score_cell(rows: dict[str, dict[str, Any]], competitors=COMPETITORS) -> dict[str, Any]:
    """Regret and gap closed for every row (in place), and the cell's summary. A row whose
    `block_hit_rate` is None (its runner failed; the row says why) takes no part."""
    ran = {label for label, row in rows.items() if row.get("block_hit_rate") is not None}
    present = [c for c in competitors if c in ran]
    best = max(present, key=lambda c: rows[c]["block_hit_rate"]) if present else None
    top = rows[best]["block_hit_rate"] if best else None
    lru = rows.get("vllm:lru", {}).get("block_hit_rate")
    opt = rows.get(YARDSTICK, {}).get("block_hit_rate")
    span = None if lru is None or opt is None else opt - lru
    for row in rows.values():
        hit = row.get("block_hit_rate")
        row["regret_points"] = None if top is None or hit is None else 100 * (top - hit)
        closed = span and span > 0 and hit is not None
        row["lru_to_belady_gap_closed"] = (hit - lru) / span if closed else None
    hkv = hkv_contenders(ran)
    best_hkv = max(hkv, key=lambda n: rows[n]["block_hit_rate"]) if hkv else None
    return {
        "best_competitor": best,
        "best_competitor_block_hit_rate": top,
        "best_hkv": best_hkv,
        "best_hkv_block_hit_rate": rows[best_hkv]["block_hit_rate"] if best_hkv else None,
        "best_hkv_regret_points": rows[best_hkv]["regret_points"] if best_hkv else None,
        "belady_block_hit_rate": opt,
    }


def hkv_contenders(labels) -> list[str]:
    """The hkv policies among `labels` that a cell's best hkv policy is taken from (not the
    `random` control)."""
    return [label for label in labels if label.startswith("hkv:") and label != "hkv:random"]


def describe(trace: Trace) -> dict[str, Any]:
    """A workload's size and shape."""
    return {
        "source": trace.source,
        "requests": len(trace),
        "block_refs": trace.num_block_refs,
        "distinct_blocks": trace.distinct_blocks(),
        "block_tokens": trace.block_tokens,
        "has_modalities": trace.has_modalities(),
    }


def run_suite(
    traces: Mapping[str, Trace],
    runners: Mapping[str, Runner],
    cost_model: CostModel,
    fractions=FRACTIONS,
    *,
    competitors=COMPETITORS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every runner on every trace at every fraction; `{"workloads": {name: {..., "cells"}}}`,
    with the `competitors` that ran."""
    workloads = {}
    for name, trace in traces.items():
        entry = describe(trace) | {"cells": []}
        for fraction in fractions:
            capacity = capacity_for(trace, fraction)
            rows = run_cell(trace, capacity, runners, cost_model)
            cell = {"capacity_frac": fraction, "capacity_blocks": capacity}
            cell |= score_cell(rows, competitors) | {"policies": rows}
            entry["cells"].append(cell)
            if progress:
                progress(cell_line(name, cell))
        workloads[name] = entry
    ran = [c for c in competitors if c in runners]  # (the peers run in bench.policy_suite only)
    return {"competitors": ran, "workloads": workloads}


def cell_line(name: str, cell: dict[str, Any]) -> str:
    """One line per cell: best competitor, best hkv policy and its regret, belady."""
    return (
        f"{name} @ {cell['capacity_frac']:.0%} ({cell['capacity_blocks']} blocks): "
        f"best competitor {cell['best_competitor']} {_pct(cell['best_competitor_block_hit_rate'])}"
        f", best hkv {cell['best_hkv']} {_pct(cell['best_hkv_block_hit_rate'])}"
        f" (regret {_points(cell['best_hkv_regret_points'])} pts)"
        f", belady {_pct(cell['belady_block_hit_rate'])}"
    )


METRICS = {
    "seconds": ("net prefill seconds saved", "net_s_saved", "best hkv over best competitor (s)"),
    "hits": ("block hit rate, %", "block_hit_rate", "best hkv regret (pts)"),
}
"""`suite_table`'s views: a title, the rows' field, the last line's label."""


def suite_table(results: dict[str, Any], metrics: tuple[str, ...] = ("hits",)) -> str:
    """Per workload and metric of `METRICS`, a row per policy and a column per capacity, then the
    best hkv policy against the best competitor: by hits, its regret (points); by seconds, its net
    prefill seconds saved less the best competitor's (seconds: what a user waits less)."""
    lines = []
    for name, entry in results["workloads"].items():
        cells = entry["cells"]
        labels = list(cells[0]["policies"]) if cells else []
        width = max([len(label) for label in labels] + [34])
        head = "".join(f"{c['capacity_frac']:>9.0%}" for c in cells)
        lines.append(f"{name} ({entry['requests']} requests, {entry['distinct_blocks']} blocks)")
        for metric in metrics:
            title, key, last = METRICS[metric]
            show = _pct if metric == "hits" else _seconds
            lines.append(f"  {title:<{width}}{head}")
            for label in labels:
                row = "".join(f"{show(c['policies'][label].get(key)):>9}" for c in cells)
                lines.append(f"  {label:<{width}}{row}")
            if metric == "hits":
                ends = "".join(f"{_points(c['best_hkv_regret_points']):>9}" for c in cells)
            else:
                ends = "".join(
                    f"{_seconds(_seconds_ahead(c, results['competitors'])):>9}" for c in cells
                )
            lines.append(f"  {last:<{width}}{ends}")
    return "\n".join(lines)


def _seconds_ahead(cell: dict[str, Any], competitors: list[str]) -> float | None:
    """The best hkv policy's net seconds saved less the best competitor's, in `cell` (None where
    either has none)."""

    def best(labels):
        saved = [cell["policies"][n].get("net_s_saved") for n in labels if n in cell["policies"]]
        saved = [s for s in saved if s is not None]
        return max(saved) if saved else None

    hkv = hkv_contenders(cell["policies"])
    mine, theirs = best(hkv), best(competitors)
    return None if mine is None or theirs is None else mine - theirs


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.2f}"


def _points(points: float | None) -> str:
    return "-" if points is None else f"{points:+.2f}"
