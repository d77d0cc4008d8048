"""Tables from the vLLM benchmarks: `bench/vllm_replay.py` (vLLM's offloading manager vs hkv's
simulator), `bench.vllm_gpu` (real vLLM on H200s, one GPU and TP=2) and
`bench/vllm_gpu_sim.py` (the same requests, simulated). Each argument named after a file is
that file's loaded results dict (`hkv.report.bench_results.load_result`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

REPLAY_COLUMNS = ["vllm_block_hit_rate", "sim_block_hit_rate", "diff_points", "failed_stores"]
REPLAY_FORMAT = {
    "vllm_block_hit_rate": "{:.4f}",
    "sim_block_hit_rate": "{:.4f}",
    "diff_points": "{:+z.2f}",
}
GPU_TABLE_FORMAT = {
    "cached_share": "{:.1%}",
    "later_turns_cached": "{:.1%}",
    "wall_s": "{:.1f}",
    "ttft_mean_s": "{:.3f}",
    "stored_gb": "{:.1f}",
    "policy_share_of_step": "{:.1%}",
}
TP_FORMAT = {
    "cached share TP=1": "{:.1%}",
    "cached share TP=2": "{:.1%}",
    "difference, points": "{:+z.2f}",
    "wall s TP=1": "{:.1f}",
    "wall s TP=2": "{:.1f}",
}


def replay_table(replay: Mapping[str, Any]) -> pd.DataFrame:
    """The file's rows (vLLM's and the simulator's block hit rate per policy label and
    capacity, `diff_points` between them), with a `capacity` label column."""
    import pandas as pd

    rows = pd.DataFrame(replay["rows"])
    rows["capacity"] = rows["capacity_frac"].map("{:.0%} of distinct blocks".format)
    return rows


def replay_summary(replay: Mapping[str, Any], rows: pd.DataFrame) -> dict[str, Any]:
    """The notebook's `vllm_replay` results: largest |vLLM - simulator| in points, row count
    and the vLLM version."""
    return {
        "max_abs_diff_points": float(rows["diff_points"].abs().max()),
        "rows": len(rows),
        "vllm_version": replay["versions"]["vllm"],
    }


def workload_facts(gpu: Mapping[str, Any], variant: str = "text") -> str:
    """One line: the workload the GPU runs served, read from the file."""
    w = gpu["workload"][variant]
    gpu_kv_gib = sorted({c["gpu_kv_gib"] for c in gpu["configs"] if "gpu_kv_gib" in c})
    return (
        f"{w['sessions']} sessions x {w['turns']} turns ({w['requests']} requests), first prompts "
        f"of {w['first_min'] // 1024}K-{w['first_max'] // 1024}K tokens, GPU KV capped at "
        f"{' / '.join(f'{g:g}' for g in gpu_kv_gib)} GiB; vLLM {gpu['versions']['vllm']} on "
        f"{gpu['machine']['gpus']} x {gpu['machine']['gpu_name']}"
    )


def gpu_runs(gpu: Mapping[str, Any]) -> pd.DataFrame:
    """One row per run of the file, with a `CPU tier` label column ("8 GiB")."""
    import pandas as pd

    runs = pd.DataFrame(gpu["runs"])
    runs["CPU tier"] = runs["cpu_gib"].map("{:g} GiB".format)
    return runs


def gpu_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Means over repeats per (variant, CPU tier, policy): repeats, cached_share,
    later_turns_cached, wall_s, ttft_mean_s, stored_gb, failed_stores (summed),
    policy_share_of_step."""
    return runs.groupby(["variant", "CPU tier", "policy"]).agg(
        repeats=("repeat", "size"),
        cached_share=("cached_frac", "mean"),
        later_turns_cached=("turn_gt0_cached_frac", "mean"),
        wall_s=("wall_s", "mean"),
        ttft_mean_s=("ttft_mean_s", "mean"),
        stored_gb=("store_gb", "mean"),
        failed_stores=("failed_stores", "sum"),
        policy_share_of_step=("policy_frac_of_step_net", "mean"),
    )


def sim_pairs(sim: Mapping[str, Any]) -> pd.DataFrame:
    """Measured vs predicted cached share per configuration (`diff_points` between them)."""
    import pandas as pd

    return pd.DataFrame(sim["measured_vs_predicted"])


def acceptance(
    table: pd.DataFrame,
    runs: pd.DataFrame,
    pairs: pd.DataFrame,
    best: str,
    compare_gib: float,
    full_gib: float,
) -> dict[str, Any]:
    """The issue's acceptance numbers for policy `best` against vLLM's lru and arc (text
    variant): cached share and wall time at `compare_gib`, the wall-time cut against the better
    of vLLM's two, failed stores, wall time against lru at `full_gib`, the policy's share of a
    step (worst run, `best` and vLLM's lru), and the simulator's largest miss in points."""
    half = _tier_rows(table, compare_gib, ("lru", "arc", best))
    full = _tier_rows(table, full_gib, ("lru", best))
    better_vllm = str(half.loc[["lru", "arc"], "wall_s"].idxmin())
    shown = ("lru", "arc", best)

    return {
        "best_hkv": best,
        "compare_gib": compare_gib,
        "full_gib": full_gib,
        "better_vllm_policy": better_vllm,
        "cached_share": {p: float(half.loc[p, "cached_share"]) for p in shown},
        "wall_s": {p: float(half.loc[p, "wall_s"]) for p in shown},
        "wall_cut_vs_better_vllm": float(
            1 - half.loc[best, "wall_s"] / half.loc[better_vllm, "wall_s"]
        ),
        "failed_stores_best": int(half.loc[best, "failed_stores"]),
        "wall_vs_lru_full_tier": float(full.loc[best, "wall_s"] / full.loc["lru", "wall_s"] - 1),
        "policy_share_of_step_best_max": _worst_step_share(runs, best),
        "policy_share_of_step_vllm_lru_max": _worst_step_share(runs, "lru"),
        "sim_max_abs_diff_points": float(pairs["diff_points"].abs().max()),
    }


def _tier_rows(table: pd.DataFrame, gib: float, policies: tuple[str, ...]) -> pd.DataFrame:
    """The text variant's rows at a CPU tier of `gib`, which must hold `policies`."""
    from hkv.errors import HkvError

    label = f"{gib:g} GiB"
    held = {(variant, tier) for variant, tier, _ in table.index}
    rows = table.loc[("text", label)] if ("text", label) in held else None
    missing = [p for p in policies if rows is None or p not in rows.index]
    if missing:
        ran = sorted({tier for variant, tier, _ in table.index if variant == "text"})
        raise HkvError(f"no text run of {', '.join(missing)} at {label} in this file (its "
                       f"text tiers: {', '.join(ran)}); pick a tier and policy it ran")  # fmt: skip
    return rows


def _worst_step_share(runs: pd.DataFrame, policy: str) -> float:
    """The policy's largest share of a step over its runs (net of the timer's cost)."""
    return float(runs.loc[runs["policy"] == policy, "policy_frac_of_step_net"].max())


def targets_table(a: Mapping[str, Any]) -> pd.DataFrame:
    """The issue's six targets (index `target`): wanted, measured, met (bool)."""
    import pandas as pd

    best, better = a["best_hkv"], a["better_vllm_policy"]
    share, cut = a["cached_share"][best], a["wall_cut_vs_better_vllm"]
    full, step = a["wall_vs_lru_full_tier"], a["policy_share_of_step_best_max"]
    sim, failed = a["sim_max_abs_diff_points"], a["failed_stores_best"]
    small, large = f"{a['compare_gib']:g} GiB", f"{a['full_gib']:g} GiB"
    rows = [
        (f"cached share at {small}", ">= 33 %", share, share >= 0.33),
        (f"wall time cut vs {better} at {small}", ">= 20 %", cut, cut >= 0.20),
        (f"failed stores at {small}", "0", failed, failed == 0),
        (f"wall time vs lru at {large}", "within 3 %", full, abs(full) <= 0.03),
        ("policy time, share of step (worst run)", "< 1 %", step, step < 0.01),
        ("simulator vs vLLM, cached share", "within 5 points", sim, sim <= 5),
    ]
    return pd.DataFrame(rows, columns=["target", "wanted", "measured", "met"]).set_index("target")


def targets_met(targets: pd.DataFrame) -> dict[str, bool]:
    """`{target: met}` as plain bools."""
    return {k: bool(v) for k, v in targets["met"].items()}


def describe_tp2_check(check: Mapping[str, Any]) -> str:
    """vLLM's rule for the TP=2 engine, then the plan's GPU KV error and CPU tier check."""
    return (
        f"{check['vllm_rule']}\nGPU KV per GPU: plan vs vLLM {check['gpu_kv_error_frac']:+.2%}; "
        f"CPU tier per rank exact: {check['cpu_exact']}"
    )


def tp2_plan_check(check: Mapping[str, Any]) -> pd.DataFrame:
    """`hkv plan` against the engine started at TP=2 (index `quantity`): vLLM (measured) and
    hkv plan, in blocks or GiB per GPU / rank."""
    import pandas as pd

    gib = 2**30
    plan_non_kv = check["plan_weights_bytes_per_gpu"] + check["plan_reserve_bytes_per_gpu"]
    rows = [
        ("GPU KV blocks per GPU", check["vllm_gpu_blocks"], check["plan_gpu_blocks"]),
        (
            "GPU KV GiB per GPU",
            check["vllm_kv_bytes_per_gpu"] / gib,
            check["plan_kv_bytes_per_gpu"] / gib,
        ),
        (
            "non-KV GiB per GPU (weights + reserve)",
            check["vllm_non_kv_bytes_per_gpu"] / gib,
            plan_non_kv / gib,
        ),
        ("CPU tier blocks", check["vllm_cpu_blocks"], check["plan_cpu_blocks"]),
        (
            "CPU tier GiB per rank",
            check["vllm_cpu_bytes_per_rank"] / gib,
            check["plan_cpu_bytes_per_rank"] / gib,
        ),
    ]
    columns = ["quantity", "vLLM (measured)", "hkv plan"]
    return pd.DataFrame(rows, columns=columns).set_index("quantity")


def tp2_policies(tp2: Mapping[str, Any]) -> pd.DataFrame:
    """Per policy (index): mean cached share and wall time at TP=1 and TP=2, and the file's
    mean difference in points."""
    import numpy as np
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "policy": row["policy"],
                "cached share TP=1": np.mean(row["tp1_cached_frac"]),
                "cached share TP=2": np.mean(row["tp2_cached_frac"]),
                "difference, points": row["diff_points_mean"],
                "wall s TP=1": np.mean(row["tp1_wall_s"]),
                "wall s TP=2": np.mean(row["tp2_wall_s"]),
            }
            for row in tp2["tp1_reference"]["by_policy"]
        ]
    ).set_index("policy")


def tp2_summary(tp2: Mapping[str, Any]) -> dict[str, Any]:
    """The notebook's `tp2` results: the plan's GPU KV error, whether the CPU tier per rank
    was exact, and each policy's cached-share difference TP=2 vs TP=1 in points."""
    check = tp2["plan_check"]
    return {
        "gpu_kv_error_frac": check["gpu_kv_error_frac"],
        "cpu_exact": check["cpu_exact"],
        "cached_share_diff_points": tp2_policies(tp2)["difference, points"].to_dict(),
    }


def one_engine_cells(data: Mapping[str, Any]) -> dict[tuple, list[Mapping[str, Any]]]:
    """A folded engine file's runs by cell (CPU tier, popularity, variant), in the file's order,
    leaving out a cell two of its engines ran (their runs' order in the engine is unknown)."""
    from collections import Counter

    def cell(item: Mapping[str, Any]) -> tuple:
        return item["cpu_gib"], item.get("popularity", 0.0), item["variant"]

    engines = Counter(map(cell, data["parameters"]["engines"]))
    cells: dict[tuple, list[Mapping[str, Any]]] = {}
    for run in data["runs"]:
        if engines[cell(run)] == 1:
            cells.setdefault(cell(run), []).append(run)
    return cells


def first_run_penalty(results: list[Mapping[str, Any]]) -> dict[str, Any]:
    """How much slower an engine's first timed run is, over folded engine files (`bench.vllm_gpu
    fold`) whose engines each ran one cell, policies alternated: in every cell with at least
    three repeats, the first run's wall time over the median of its policy's later repeats, and
    for the other policies their first repeat's over the median of their later ones (the
    control: what the first round costs a policy that does not open the engine)."""
    import statistics

    first, control, slowest = [], [], 0
    for data in results:
        for runs in one_engine_cells(data).values():
            order = list(dict.fromkeys(run["policy"] for run in runs))
            for policy in order:
                walls = [run["wall_s"] for run in runs if run["policy"] == policy]
                if len(walls) < 3:
                    continue
                ratio = walls[0] / statistics.median(walls[1:])
                if policy == order[0]:
                    first.append(ratio)
                    slowest += walls[0] > max(walls[1:])
                else:
                    control.append(ratio)
    return {
        "cells": len(first),
        "first_run_slowest": slowest,
        "first_run_ratio_median": statistics.median(first) if first else None,
        "control_runs": len(control),
        "control_ratio_median": statistics.median(control) if control else None,
    }


def slot_effect(results: list[Mapping[str, Any]]) -> dict[int, dict[str, float]]:
    """What a run's place in its round costs, over folded engine files whose rounds rotated
    the policies' order (`bench.vllm_gpu run --order rotate`: each run has its `slot`, 0 the
    round's first): every run's wall time over the median of its policy's repeats in its cell,
    by slot (a cell two engines of one file ran is left out: `one_engine_cells`). With the order
    rotated each policy runs in every slot, so a slot's cost shows here and falls on every policy
    alike; in the files before it the first policy ran first in every round, where its cost could
    not be told from the policy's own."""
    import statistics
    from collections import defaultdict

    by_slot: dict[int, list[float]] = defaultdict(list)
    for data in results:
        for runs in one_engine_cells(data).values():
            placed = [run for run in runs if "slot" in run]
            for policy in {run["policy"] for run in placed}:
                own = [run for run in placed if run["policy"] == policy]
                median = statistics.median(run["wall_s"] for run in own)
                for run in own:
                    by_slot[run["slot"]].append(run["wall_s"] / median)
    return {
        slot: {
            "runs": len(ratios),
            "ratio_median": statistics.median(ratios),
            "ratio_mean": statistics.fmean(ratios),
        }
        for slot, ratios in sorted(by_slot.items())
    }
