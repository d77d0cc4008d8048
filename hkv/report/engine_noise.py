"""Two ways to see a few percent between policies through an engine's run-to-run noise.

Identical runs of one policy in one engine on the GPU machines differ by a quarter or more in
wall time, so the median of three to eight rounds moves by a few percent from engine to engine
even where two policies decide alike (`bench_vllm_auto.noise_band`). Both functions here read
folded engine files (`python -m bench.vllm_gpu fold`):

- `speed_adjusted`: one engine, policies compared at equal host speed. Each run carries the host's
  speed around it (`bench.vllm_gpu.probe`: a fixed piece of Python timed in the engine's process
  while it is idle, just before and after the run); a least-squares fit of log wall time on the
  policy and the log of that rate gives the policy's wall-time ratio to lru at equal host speed, its
  standard error, and the fit's elasticity (how much slower a run gets per unit slower host).
- `pooled`: many engines, one cell, where the policy decided alike in every engine (the same
  blocks stored and loaded: its decisions do not depend on timing). Each engine's ratio of
  medians to lru's, their geometric mean, and a bootstrap interval over engines; `outcomes`, the
  same cell's engines grouped by what the policy decided (and where its first switch went), the
  groups `pooled` leaves out beside the one it keeps; `wave_changes`, where in the run one of
  those outcomes gains or loses, wave by wave of requests.

Standard library and numpy only.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

Cell = tuple[float, float]  # (CPU tier GiB, popularity)


def cell_runs(
    data: Mapping[str, Any], cell: Cell, variant: str = "text", seed: int = 0
) -> list[dict]:
    """The runs of one cell (CPU GiB, popularity) in a folded engine file, in its order: those of
    the workload drawn with `seed` (0: the engines' own; `bench.vllm_gpu run --seed`)."""
    gib, popularity = cell
    return [
        run for run in data["runs"]
        if run["cpu_gib"] == gib and run.get("popularity", 0.0) == popularity
        and run.get("variant", "text") == variant and run.get("seed", 0) == seed
    ]  # fmt: skip


def engine_files(folder: str | Path, pattern: str = "vllm_h*_time*.json") -> list[tuple[str, dict]]:
    """The folded engine files in `folder` whose names match `pattern` (by default every engine
    whose policies took turns), as (name, contents), oldest first (`date_utc`)."""
    files = [(path.name, json.loads(path.read_text())) for path in Path(folder).glob(pattern)]
    return sorted(files, key=lambda item: item[1].get("date_utc", ""))


def speed_adjusted(
    data: Mapping[str, Any], cell: Cell, policy: str = "hkv_auto", base: str = "lru"
) -> dict[str, float] | None:
    """`policy`'s wall-time ratio to `base` at equal host speed in one engine, or None where a
    run of either has no probe rate (`host_rate`) or either ran under twice.

    Fit: log(wall) = a + d * [run is `policy`'s] + b * log(host rate), over both policies'
    runs. `ratio` is exp(d), `se` its standard error (relative), `elasticity` is -b, `raw_ratio`
    the plain ratio of medians, `r` the correlation of log wall time with log rate once each
    policy's mean is taken out (how much of the noise the host explains), and `rate_gap` the
    ratio of the two policies' mean rates (geometric): near 1 where the rate does not depend on
    the policy, as a yardstick must not."""
    runs = [r for r in cell_runs(data, cell) if r["policy"] in (policy, base)]
    if any(r.get("host_rate") is None for r in runs):
        return None
    mine = [r for r in runs if r["policy"] == policy]
    theirs = [r for r in runs if r["policy"] == base]
    if len(mine) < 2 or len(theirs) < 2:
        return None
    wall = np.log([r["wall_s"] for r in runs])
    rate = np.log([r["host_rate"] for r in runs])
    flag = np.array([r["policy"] == policy for r in runs], dtype=float)
    x = np.column_stack([np.ones_like(wall), flag, rate])
    coef, _, _, _ = np.linalg.lstsq(x, wall, rcond=None)
    left = wall - x @ coef
    dof = len(runs) - 3
    sigma2 = float(left @ left) / dof if dof > 0 else math.nan
    se = math.sqrt(sigma2 * np.linalg.inv(x.T @ x)[1, 1]) if dof > 0 else math.nan
    centred = [wall - _group_mean(wall, flag), rate - _group_mean(rate, flag)]
    return {
        "ratio": math.exp(coef[1]),
        "se": se,
        "elasticity": -float(coef[2]),
        "r": float(np.corrcoef(*centred)[0, 1]),
        "raw_ratio": _median_ratio(mine, theirs, "wall_s"),
        "rate_gap": math.exp(float(rate[flag == 1].mean() - rate[flag == 0].mean())),
        "runs": len(runs),
    }


def _group_mean(values: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """Each value's own group's mean (the groups: `flag` 1 and 0)."""
    ones = flag == 1
    return np.where(ones, values[ones].mean(), values[~ones].mean())


def _decided(run: Mapping[str, Any]) -> tuple[int, int]:
    return run["stored_blocks"], run["loaded_blocks"]


def _median_ratio(mine: list[dict], theirs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in mine) / statistics.median(r[key] for r in theirs)


def _engines(
    results: Iterable[tuple[str, Mapping[str, Any]]], cell: Cell, policy: str, base: str
) -> list[dict[str, Any]]:
    """Each engine where `policy` ran with `base` in `cell`: what `policy` decided there (its
    first run's `stored_blocks` and `loaded_blocks`), the expert its first switch went to (None:
    none, or no leaders logged), and its ratios of medians to `base`'s."""
    engines = []
    for name, data in results:
        runs = cell_runs(data, cell)
        mine = [r for r in runs if r["policy"] == policy]
        theirs = [r for r in runs if r["policy"] == base]
        if mine and theirs:
            leaders = mine[0].get("policy_leaders") or []
            engines.append({
                "file": name, "rounds": len(mine),
                "decided": _decided(mine[0]),
                "switched_to": leaders[1][1] if len(leaders) > 1 else None,
                "gpu": data.get("machine", {}).get("gpu_name"),
                "wall": _median_ratio(mine, theirs, "wall_s"),
                "ttft": _median_ratio(mine, theirs, "ttft_mean_s"),
                "policy_s": _median_ratio(mine, theirs, "policy_s"),
            })  # fmt: skip
    return engines


def outcomes(
    results: Iterable[tuple[str, Mapping[str, Any]]],
    cell: Cell,
    policy: str = "hkv_auto",
    base: str = "lru",
) -> list[dict[str, Any]]:
    """What `pooled` leaves out, beside what it keeps: the engines of `cell` grouped by what
    `policy` decided there (blocks stored and loaded), the most engines first (of as many, the
    later outcome first, as `pooled` keeps it), each group's engines, files, first switches
    (expert: engines) and the geometric means of its ratios to `base` (wall, mean TTFT, policy
    time)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    last: dict[tuple, int] = {}
    for index, engine in enumerate(_engines(results, cell, policy, base)):
        groups.setdefault(engine["decided"], []).append(engine)
        last[engine["decided"]] = index
    ranked = sorted(groups, key=lambda decided: (len(groups[decided]), last[decided]))
    return [{
        "decided": group[0]["decided"], "engines": len(group),
        "files": [e["file"] for e in group],
        "switched_to": dict(Counter(e["switched_to"] for e in group)),
        **{key: math.exp(statistics.fmean(math.log(e[key]) for e in group))
           for key in ("wall", "ttft", "policy_s")},
    } for group in (groups[decided] for decided in reversed(ranked))]  # fmt: skip


def wave_changes(
    results: Iterable[tuple[str, Mapping[str, Any]]],
    cell: Cell,
    decided: tuple[int, int],
    policy: str = "hkv_auto",
    base: str = "lru",
) -> dict[str, Any] | None:
    """Where in the run one outcome of `cell` (`decided`: blocks stored and loaded, as
    `outcomes` groups them) gains or loses against `base`: over its engines whose runs log
    `by_wave`, per wave of requests the mean of each engine's change in its median summed TTFT
    (seconds, `policy` minus `base`) and the change in cached tokens (each engine's first run;
    they decide alike). None where no such engine logged its waves."""
    engines, ttft, cached = [], None, None
    for name, data in results:
        runs = cell_runs(data, cell)
        mine = [r for r in runs if r["policy"] == policy and r.get("by_wave")]
        theirs = [r for r in runs if r["policy"] == base and r.get("by_wave")]
        if not mine or not theirs or _decided(mine[0]) != decided:
            continue
        waves = range(len(mine[0]["by_wave"]["ttft_s"]))
        change = [
            statistics.median(r["by_wave"]["ttft_s"][w] for r in mine)
            - statistics.median(r["by_wave"]["ttft_s"][w] for r in theirs)
            for w in waves
        ]
        tokens = [
            a - b
            for a, b in zip(
                mine[0]["by_wave"]["cached_tokens"],
                theirs[0]["by_wave"]["cached_tokens"],
                strict=True,
            )
        ]
        ttft = change if ttft is None else [a + b for a, b in zip(ttft, change, strict=True)]
        cached = cached or tokens
        engines.append(name)
    if not engines:
        return None
    return {"engines": engines, "ttft_s": [t / len(engines) for t in ttft],
            "cached_tokens": cached}  # fmt: skip


def pooled(
    results: Iterable[tuple[str, Mapping[str, Any]]],
    cell: Cell,
    policy: str = "hkv_auto",
    base: str = "lru",
    resamples: int = 10_000,
) -> dict[str, Any] | None:
    """Engines where `policy` ran with `base` in `cell` and decided as in most of them
    (`stored_blocks` and `loaded_blocks` of its first run there equal; of two outcomes as common,
    the later one's): each one's ratio of median wall time and of median mean TTFT to `base`'s,
    their geometric means, and 95 % percentile intervals of those means over `resamples` draws
    of the engines (seeded: the same every time). `results` are (name, folded file) pairs,
    oldest first. None where no engine ran both. Most, not the latest: each engine seeds its own
    block hashes, so a sampled `auto` samples other keys in each and may decide otherwise in one
    engine; the engines that decided alike are the repeats of one comparison."""
    engines = _engines(results, cell, policy, base)
    if not engines:
        return None
    counts = Counter(e["decided"] for e in engines)
    most = max(counts.values())
    common = next(e["decided"] for e in reversed(engines) if counts[e["decided"]] == most)
    kept = [e for e in engines if e["decided"] == common]
    out: dict[str, Any] = {"engines": kept, "left_out": len(engines) - len(kept)}
    draw = random.Random(0)
    for key in ("wall", "ttft", "policy_s"):
        logs = [math.log(e[key]) for e in kept]
        means = sorted(statistics.fmean(draw.choices(logs, k=len(logs))) for _ in range(resamples))
        out[key] = {
            "mean": math.exp(statistics.fmean(logs)),
            "low": math.exp(means[int(0.025 * resamples)]),
            "high": math.exp(means[int(0.975 * resamples) - 1]),
            "above_base": sum(value > 0 for value in logs),
        }
    return out


CELLS: tuple[tuple[str, Cell], ...] = (
    ("anchor, 8 GiB", (8.0, 0.0)),
    ("anchor, 12 GiB", (12.0, 0.0)),
    ("anchor, 16 GiB", (16.0, 0.0)),
    ("skewed, 8 GiB", (8.0, 1.0)),
    ("skewed, 12 GiB", (12.0, 1.0)),
)
"""The engine cells of issue 34's bar: (label, (CPU tier GiB, popularity))."""


def pooled_rows(
    results: list[tuple[str, Mapping[str, Any]]], policy: str = "hkv_auto", base: str = "lru"
) -> list[dict[str, Any]]:
    """`pooled` at each of `CELLS`, one row each: the engines kept and their rounds, and the
    changes against `base` in percent (geometric mean, 95 % interval) of median wall time,
    median mean TTFT and median policy time. Cells no engine ran are left out."""
    rows = []
    for label, cell in CELLS:
        out = pooled(results, cell, policy, base)
        if out is None:
            continue
        row: dict[str, Any] = {
            "cell": label,
            "engines": len(out["engines"]),
            "rounds": sum(e["rounds"] for e in out["engines"]),
            "left out": out["left_out"],
        }
        for key, name in (("wall", "wall"), ("ttft", "mean TTFT"), ("policy_s", "policy time")):
            stats = out[key]
            row[f"{name} %"] = 100 * (stats["mean"] - 1)
            row[f"{name} 95 % low"] = 100 * (stats["low"] - 1)
            row[f"{name} 95 % high"] = 100 * (stats["high"] - 1)
        rows.append(row)
    return rows


def follows_wall(data: Mapping[str, Any], cell: Cell, key: str) -> float | None:
    """How closely a run's `key` (the probe's `host_rate`, the process's `cpu_s`, ...) follows
    its wall time in one engine's cell: the correlation of their logs over every policy's runs,
    each policy's mean taken out (so no policy's own level counts). None where a run lacks it
    or no policy ran twice."""
    runs = cell_runs(data, cell)
    if not runs or any(not run.get(key) for run in runs):
        return None
    walls: list[float] = []
    values: list[float] = []
    for policy in dict.fromkeys(run["policy"] for run in runs):
        own = [run for run in runs if run["policy"] == policy]
        if len(own) < 2:
            continue
        wall = np.log([run["wall_s"] for run in own])
        value = np.log([run[key] for run in own])
        walls += list(wall - wall.mean())
        values += list(value - value.mean())
    return float(np.corrcoef(walls, values)[0, 1]) if len(walls) > 2 else None


def pooled_frames(folder: str | Path, policies: Iterable[str] = ("hkv_auto", "hkv_lru")) -> list:
    """Notebook 08: `pooled_rows` over `engine_files(folder)` as one styled table per policy
    (changes in percent, signed), its caption naming the policy and the files read."""
    import pandas as pd

    engines = engine_files(folder)
    span = f"{len(engines)} engine files, {engines[0][0]} to {engines[-1][0]}" if engines else ""
    frames = []
    for policy in policies:
        frame = pd.DataFrame(pooled_rows(engines, policy))
        if frame.empty:
            continue
        frame = frame.set_index("cell")
        signed = [column for column in frame if "%" in column]
        caption = f"{policy} against vLLM's lru, pooled over {span}"
        frames.append(frame.style.format("{:+.1f}", subset=signed).set_caption(caption))
    return frames


def outcomes_frame(folder: str | Path, cell: Cell, policy: str = "hkv_auto") -> Any:
    """Notebook 08: `outcomes` of `cell` over `engine_files(folder)` as a styled table, one row
    per outcome (its ratios to lru: geometric means), its caption naming the cell."""
    import pandas as pd

    frame = pd.DataFrame(outcomes(engine_files(folder), cell, policy)).drop(columns="files")
    caption = f"{policy} on the cell {cell} (CPU GiB, popularity) by what it decided"
    return frame.style.format("{:.3f}", subset=["wall", "ttft", "policy_s"]).set_caption(caption)


def drawn_against_model(
    engine: Mapping[str, Any], model: Mapping[str, Any], policy: str = "hkv_auto"
) -> list[dict[str, Any]]:
    """Each cell of a folded `engine` file run on another draw of its workload (`bench.vllm_gpu
    run --seed`) beside what the two-tier model of `model` (`bench.auto_candidates --seeds`, its
    `default` candidate) predicted for that draw: the engine's change in percent of `policy`'s
    median mean TTFT and median wall time against lru's, and the model's of `auto`'s wait for
    the first token (`ttft_frac`) and prefill left (`prefill_frac`) against lru's."""
    rows = model["candidates"]["default"]["two_tier"]
    modelled = {(r["cpu_gib"], r["popularity"], r["seed"], r["policy"]): r for r in rows}
    cells = sorted({(r["cpu_gib"], r.get("popularity", 0.0), r["seed"]) for r in engine["runs"]
                    if r.get("seed")})  # fmt: skip
    out = []
    for gib, popularity, seed in cells:
        runs = cell_runs(engine, (gib, popularity), seed=seed)
        mine = [r for r in runs if r["policy"] == policy]
        lru = [r for r in runs if r["policy"] == "lru"]
        auto = modelled.get((gib, popularity, seed, "auto"))
        base = modelled.get((gib, popularity, seed, "lru"))
        if not mine or not lru or auto is None or base is None:
            continue
        out.append({
            "popularity": popularity, "cpu_gib": gib, "seed": seed, "rounds": len(mine),
            "engine TTFT %": 100 * (_median_ratio(mine, lru, "ttft_mean_s") - 1),
            "model TTFT %": 100 * (auto["ttft_frac"] / base["ttft_frac"] - 1),
            "engine wall %": 100 * (_median_ratio(mine, lru, "wall_s") - 1),
            "model prefill %": 100 * (auto["prefill_frac"] / base["prefill_frac"] - 1),
        })  # fmt: skip
    return out


def candidates_over_draws(model: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each candidate of a `bench.auto_candidates --seeds` file over every two-tier cell and
    draw it ran: the mean and the worst change in percent of `auto`'s modelled wait for the first
    token (`ttft_frac`) against lru's at the same cell and draw, where the worst was, how many
    came out over lru's, and how many cells of the suite and of the held-out seeds (tiers small
    enough for exact shadows) miss the bar."""
    rows = model["candidates"]["default"]["two_tier"]
    lru = {(r["popularity"], r["cpu_gib"], r["seed"]): r["ttft_frac"]
           for r in rows if r["policy"] == "lru"}  # fmt: skip
    seeds = sorted({r["seed"] for r in rows})
    out = []
    for name, entry in model["candidates"].items():
        mine = [r for r in entry["two_tier"] if r["policy"] == "auto"]
        change = [100 * (r["ttft_frac"] / lru[r["popularity"], r["cpu_gib"], r["seed"]] - 1)
                  for r in mine]  # fmt: skip
        worst = mine[change.index(max(change))]
        out.append({
            "draws": f"{seeds[0]} to {seeds[-1]}", "candidate": name, "cells x draws": len(change),
            "mean TTFT %": statistics.fmean(change), "worst TTFT %": max(change),
            "worst at": f"Zipf {worst['popularity']:g}, {worst['cpu_gib']:g} GiB, "
                        f"seed {worst['seed']}",
            "over lru": sum(c > 1e-9 for c in change),
            "suite misses": entry["suite"]["missing_the_bar"],
            "held-out misses": entry["heldout"]["missing_the_bar"],
        })  # fmt: skip
    return out
