"""`auto` against vLLM's own options on variants of a real trace: the bar on traffic drawn from it.

    python -m bench.trace_variants --out data/results/trace_variants_mooncake.json
    python -m bench.trace_variants --candidate 'first_lru={"first": "lru"}' --out out/tv.json

The issue's bar for real traffic nobody tuned on: at 1, 2, 5 and 10 % of a trace's distinct
blocks, `auto` never more than half a point of block hit rate below the best of vLLM's `lru`,
`arc` and `lru` + `store_threshold` 2. The policy suite runs Mooncake's trace once; this bench
runs it as several other traffics drawn from it (`variants`), each a trace of the source's own
requests: every other request (`even`: the first, third, ...; `odd`: the second, fourth, ...),
the first and the second half, the middle third, each request kept with probability 3/4 or 1/2
(`keep75`, `keep50`, seeded), and the order shuffled within windows of 50 requests (`jitter50`,
seeded). Each variant's capacities are shares of its own distinct blocks. The trace is read
where it lies (`--trace`); nothing of it is copied.

Every cell runs in hkv's simulator with vLLM's per-request store (`store="per_request"`, which
agrees with hkv's adapter inside vLLM's manager to 0.00 points in the suite's cells): vLLM's
three options as the simulator models them (`hkv.sim.suite.SIM_NATIVES`) and `auto` with each
candidate's hyperparameters (`default`: as shipped; `--candidate NAME=JSON` as
`bench.auto_candidates` takes them). Per candidate: the cells that miss the bar, the mean and the
worst difference from the best of the three in points, and each cell's row (with how often `auto`
switched leader there and the leader it ended with).
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.auto_candidates import DEFAULT_TRACE, ROOT, candidates
from hkv.errors import HkvError
from hkv.report import save_results
from hkv.sim.trace import Trace, load_trace, trace_from_requests

FRACTIONS = (0.01, 0.02, 0.05, 0.1)
BAR_POINTS = 0.5
WINDOW = 50


def variants(trace: Trace, seed: int = 0) -> dict[str, Trace]:
    """The traces drawn from `trace` (see the module docstring), by name; `seed` draws the kept
    requests and the shuffles (the same every time for one seed)."""
    requests = list(trace.requests)
    n = len(requests)
    if n < 2 * WINDOW:
        raise ValueError(f"{n} requests; expected at least {2 * WINDOW} to draw variants from")

    def kept(probability: float, salt: int) -> list:
        draw = random.Random(seed * 1000 + salt)
        return [r for r in requests if draw.random() < probability]

    shuffled, draw = [], random.Random(seed * 1000 + 3)
    for start in range(0, n, WINDOW):
        window = requests[start : start + WINDOW]
        draw.shuffle(window)
        shuffled += window
    drawn = {
        "even": requests[0::2], "odd": requests[1::2],
        "first_half": requests[: n // 2], "second_half": requests[n // 2 :],
        "middle_third": requests[n // 3 : 2 * n // 3],
        "keep75": kept(0.75, 1), "keep50": kept(0.5, 2), "jitter50": shuffled,
    }  # fmt: skip
    return {
        name: trace_from_requests(part, block_tokens=trace.block_tokens, source=f"{name} of trace")
        for name, part in drawn.items()
    }


def cell(job: tuple[str, dict, str, int, str, float]) -> dict[str, Any]:
    """One variant at one capacity: vLLM's three options (`params` None) or `auto`."""
    trace_path, params, name, seed, label, fraction = job
    from hkv.cost import CostModel
    from hkv.policies import make_policy
    from hkv.sim import simulate
    from hkv.sim.replay import replay
    from hkv.sim.suite import SIM_NATIVES, capacity_for

    trace = _drawn(trace_path, seed)[name]
    capacity, cost = capacity_for(trace, fraction), CostModel.default()
    row: dict[str, Any] = {"variant": name, "capacity_frac": fraction, "capacity_blocks": capacity}
    if params is None:
        for native, (policy, threshold) in SIM_NATIVES.items():
            result = simulate(trace, [policy], capacity, cost_model=cost,
                              store_threshold=threshold, store="per_request")[0]  # fmt: skip
            row[native] = result.block_hit_rate
        return row
    policy = make_policy("auto", capacity, cost_model=cost, **params)
    result = replay(trace, policy, cost_model=cost, store="per_request")
    return row | {"candidate": label, "block_hit_rate": result.block_hit_rate,
                  "switches": policy.switches, "leader": policy.leader}  # fmt: skip


@functools.cache
def _drawn(trace_path: str, seed: int) -> dict[str, Trace]:
    """`variants` of the trace at `trace_path`, read and drawn once per worker process."""
    return variants(load_trace(trace_path), seed)


def judge(natives: list[dict], rows: list[dict]) -> dict[str, Any]:
    """A candidate's rows against the natives' cells: each row's best native and difference in
    points, the cells more than `BAR_POINTS` below it, the mean and the worst difference."""
    best = {}
    for n in natives:
        options = [(rate, label) for label, rate in n.items() if label.startswith("vllm:")]
        best[n["variant"], n["capacity_frac"]] = max(options)
    cells = []
    for row in rows:
        rate, label = best[row["variant"], row["capacity_frac"]]
        diff = 100 * (row["block_hit_rate"] - rate)
        cells.append(row | {"best_native": label, "best_native_rate": rate, "points": diff})
    points = [c["points"] for c in cells]
    return {
        "cells": cells,
        "missing_the_bar": sum(p < -BAR_POINTS for p in points),
        "mean_points": statistics.fmean(points),
        "worst_points": min(points),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.trace_variants", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="a Mooncake-format trace")
    parser.add_argument("--candidate", action="append", default=[], help="NAME=JSON")
    parser.add_argument("--seed", type=int, default=0, help="draws keep75, keep50, jitter50")
    parser.add_argument("--capacities", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/trace_variants.json")
    args = parser.parse_args(argv)
    if not args.trace.is_file():
        parser.error(f"--trace {args.trace}: no such file; give a Mooncake-format trace")
    if any(not 0 < f <= 1 for f in args.capacities):
        parser.error(f"--capacities {args.capacities}: expected shares in (0, 1]")
    args.candidates = candidates(parser, args.candidate)
    from hkv.policies import make_policy

    for label, params in args.candidates.items():  # a bad hyperparameter ends the run here
        try:
            make_policy("auto", 100, **params)
        except (HkvError, TypeError) as exc:
            parser.error(f"--candidate {label}: {exc}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        names = list(variants(load_trace(args.trace), args.seed))
    except (ValueError, HkvError) as exc:
        raise SystemExit(f"--trace {args.trace}: {exc}") from None
    grid = [(name, f) for name in names for f in args.capacities]
    path = str(args.trace)
    with ProcessPoolExecutor(args.workers) as pool:
        natives = list(pool.map(cell, [(path, None, n, args.seed, "", f) for n, f in grid]))
        out = {}
        for label, params in args.candidates.items():
            jobs = [(path, params, n, args.seed, label, f) for n, f in grid]
            out[label] = {"params": params} | judge(natives, list(pool.map(cell, jobs)))
            print(summary(label, out[label]))
    command = ["python -m bench.trace_variants", *(sys.argv[1:] if argv is None else argv)]
    parameters = {"trace": args.trace.name, "seed": args.seed, "capacities": args.capacities,
                  "variants": names, "bar_points": BAR_POINTS}  # fmt: skip
    results = {"natives": natives, "candidates": out}
    save_results(args.out, results, generated_by=" ".join(command), parameters=parameters)
    return 0


def summary(label: str, judged: dict[str, Any]) -> str:
    """One candidate's line."""
    return (
        f"{label}: {judged['missing_the_bar']} of {len(judged['cells'])} cells more than "
        f"{BAR_POINTS} points below vLLM's best option, mean {judged['mean_points']:+.2f}, "
        f"worst {judged['worst_points']:+.2f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
