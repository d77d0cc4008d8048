"""The policy suite's results (`data/results/policy_suite.json`) as the README and notebooks
state them: per-policy regret against the best of vLLM's options and the peers, cells where a
policy falls below vLLM's `lru`, the best hkv policy per cell, and beside the hit rates the
prefill seconds each policy's hits saved net of their loads (`net_s_saved`, priced by the
suite's cost model, `parameters.cost_model`). Standard library only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hkv.report.bench_results import section

LRU = "vllm:lru"


def cells(results: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload name, cell) for every cell of the suite, in file order."""
    for name, workload in results["workloads"].items():
        for cell in workload["cells"]:
            yield name, cell


def _rate(cell: dict[str, Any], policy: str) -> float:
    """A policy's block hit rate in a cell, in percent."""
    return 100 * cell["policies"][policy]["block_hit_rate"]


def regret_summary(results: dict[str, Any], policy: str) -> dict[str, Any]:
    """`policy`'s regret in points against each cell's best competitor: the largest and the
    mean, the cells over half a point, and the cells below vLLM's `lru` (rounded to 0.01)."""
    regrets, below_lru = [], 0
    for _, cell in cells(results):
        rate = _rate(cell, policy)
        regrets.append(100 * cell["best_competitor_block_hit_rate"] - rate)
        below_lru += round(rate, 2) < round(_rate(cell, LRU), 2)
    return {
        "cells": len(regrets),
        "max_regret": max(regrets),
        "mean_regret": sum(regrets) / len(regrets),
        "cells_over_half_point": sum(r > 0.5 for r in regrets),
        "cells_below_lru": below_lru,
    }


def best_hkv_summary(results: dict[str, Any]) -> dict[str, Any]:
    """Over all cells, how the best hkv policy of each cell stands against the best competitor:
    cells within 1 point (or ahead), the largest lead, and the cells where it trails by more."""
    regrets = {f"{name}@{cell['capacity_frac']:g}": cell["best_hkv_regret_points"]
               for name, cell in cells(results)}  # fmt: skip
    return {
        "cells": len(regrets),
        "within_one_point": sum(r <= 1 for r in regrets.values()),
        "largest_lead": -min(regrets.values()),
        "trailing": {k: r for k, r in regrets.items() if r > 1},
    }


def regret_table(results: dict[str, Any], policies: list[str]) -> list[dict[str, Any]]:
    """One row per policy: `regret_summary`'s numbers, for a table in a notebook."""
    return [{"policy": p, **regret_summary(results, p)} for p in policies]


def ranking(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every policy of the suite but the yardstick, the safest first: fewest cells more than
    half a point behind the best competitor, then the lowest mean regret (which policy to use)."""
    _, first = next(cells(results))
    names = [name for name in first["policies"] if name != "belady"]
    rows = regret_table(results, names)
    return sorted(rows, key=lambda row: (row["cells_over_half_point"], row["mean_regret"]))


def rankings_side_by_side(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """`ranking` of several results files (by label, e.g. the suite and its unseen seeds) as
    one row per policy: each file's cells more than half a point behind, mean regret and cells
    below vLLM's `lru`, in the order of the last file's ranking."""
    rows: dict[str, dict[str, Any]] = {}
    ranked: list[dict[str, Any]] = []
    for label, result in results.items():
        ranked = ranking(result)
        for row in ranked:
            entry = rows.setdefault(row["policy"], {"policy": row["policy"]})
            entry[f"{label}: cells"] = row["cells"]
            entry[f"{label}: >0.5 behind"] = row["cells_over_half_point"]
            entry[f"{label}: mean regret"] = round(row["mean_regret"], 2)
            entry[f"{label}: below lru"] = row["cells_below_lru"]
    return [
        rows[row["policy"]]
        for row in ranked
        if all(f"{label}: cells" in rows[row["policy"]] for label in results)
    ]


def _net_s(cell: dict[str, Any], policy: str) -> float:
    """A policy's prefill seconds saved in a cell, net of its loads from the tier."""
    return cell["policies"][policy]["net_s_saved"]


def seconds_summary(results: dict[str, Any], policy: str) -> dict[str, Any]:
    """`policy`'s net prefill seconds saved summed over the cells, that sum over vLLM's `lru`'s,
    and the cells where it saves less time than `lru` (rounded to 0.1 s): the time-side
    counterparts of `regret_summary`'s hit-rate numbers."""
    total = lru_total = 0.0
    below_lru = 0
    for _, cell in cells(results):
        net_s, lru_s = _net_s(cell, policy), _net_s(cell, LRU)
        total, lru_total = total + net_s, lru_total + lru_s
        below_lru += round(net_s, 1) < round(lru_s, 1)
    return {
        "net_s_saved": total,
        "net_s_vs_lru": total / lru_total if lru_total else None,
        "cells_below_lru_s": below_lru,
    }


def ranking_with_seconds(results: dict[str, Any]) -> list[dict[str, Any]]:
    """`ranking` (by hit-rate regret), each row with `seconds_summary`'s numbers beside it."""
    return [row | seconds_summary(results, row["policy"]) for row in ranking(results)]


def seconds_table(results: dict[str, Any], policies: list[str]) -> list[dict[str, Any]]:
    """One row per cell: the best competitor (by hit rate) and each of `policies`, each with its
    block hit rate (%) and its net prefill seconds saved, side by side."""
    rows = []
    for name, cell in cells(results):
        best = cell["best_competitor"]
        row = {"workload": name, "capacity %": 100 * cell["capacity_frac"], "best competitor": best}
        for label, policy in [("best competitor", best), *((p, p) for p in policies)]:
            row[f"{label} hit %"] = _rate(cell, policy)
            row[f"{label} net s"] = _net_s(cell, policy)
        rows.append(row)
    return rows


def priced_by(results: dict[str, Any]) -> str:
    """What the suite's seconds are priced for: model, hardware profile, where hits load from."""
    cost = section(results["parameters"], "cost_model", "SUITE", "a policy suite's file "
                   "(`python -m bench.policy_suite`, e.g. policy_suite)", results)  # fmt: skip
    profile, memory = cost["profile"], cost["host_memory"]
    return f"{cost['model']} on the {profile} profile, hits loaded from {memory} host RAM"
