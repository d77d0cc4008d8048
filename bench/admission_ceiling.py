"""What a perfect reuse predictor could buy: `lru` behind an admission oracle, per suite cell.

    python -m bench.admission_ceiling        # writes data/results/admission_ceiling.json
    python -m bench.admission_ceiling --no-trace --size ci --out out/ceiling.json

For every workload and capacity of the policy suite (`bench.policy_suite`: Mooncake's trace by
`--trace`, the generated workloads at `--seed`), `bench.sim.ceiling.admission_ceiling` replays
the trace through vLLM's CPU tier with `lru` eviction, storing only the blocks whose next
reference comes within a horizon (read from the trace's future), at horizons of 0.25 to 32
tier-sizes and "ever", and keeps the best. Beside it, from the suite's results file (`--suite`,
when its cell has the same capacity): the best of vLLM's options and the peers, `auto`,
`predictive` and Belady, and how much of the gap from that best to Belady the ceiling closes.
That is the question behind "close half the gap to Belady" and behind the article's
ML-predicted offload: where even a predictor that is never wrong falls short, the rest is
eviction order, not admission.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from bench.policy_suite import DEFAULT_TRACE, ROOT, write_results
from bench.policy_suite import workloads as suite_workloads
from bench.sim.ceiling import NEVER, admission_ceiling
from hkv.sim.suite import FRACTIONS, capacity_for

FACTORS = (*(2 ** (k / 2) for k in range(-4, 11)), NEVER)  # 0.25 .. 32 tier-sizes, and ever
COMPARED = ("hkv:auto", "hkv:predictive")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.admission_ceiling", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake's trace")
    parser.add_argument("--no-trace", dest="trace", action="store_const", const=None)
    parser.add_argument("--size", choices=("full", "ci"), default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--capacities", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--only", nargs="+", default=None, metavar="WORKLOAD")
    parser.add_argument("--suite", type=Path, default=ROOT / "data/results/policy_suite.json")
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/admission_ceiling.json")
    return parser.parse_args(argv)


def suite_cells(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The suite's cells by (workload, capacity in blocks); none when the file is absent."""
    if not path.is_file():
        return {}
    from hkv.inputs import read_json

    suite = read_json(path, "--suite")
    return {
        (name, cell["capacity_blocks"]): cell
        for name, workload in suite["workloads"].items()
        for cell in workload["cells"]
    }


def compare(row: dict[str, Any], cell: dict[str, Any] | None) -> dict[str, Any]:
    """`row` with the suite cell's numbers beside it, and the share of the best competitor's
    gap to Belady that the ceiling closes (and that half of it would need)."""
    if cell is None:
        return row
    best, belady = cell["best_competitor_block_hit_rate"], cell["belady_block_hit_rate"]
    span = belady - best
    row |= {
        "best_competitor": cell["best_competitor"],
        "best_competitor_block_hit_rate": best,
        "belady_block_hit_rate": belady,
        "half_gap_block_hit_rate": best + 0.5 * span,
        "ceiling_gap_closed": (row["block_hit_rate"] - best) / span if span > 0 else None,
    }
    for label in COMPARED:
        if label in cell["policies"]:
            rate = cell["policies"][label]["block_hit_rate"]
            row[label] = {
                "block_hit_rate": rate,
                "gap_closed": (rate - best) / span if span > 0 else None,
            }
    return row


def line(name: str, row: dict[str, Any]) -> str:
    text = (
        f"{name:20s} {row['capacity_frac']:4.0%}  ceiling {row['block_hit_rate']:6.2%} "
        f"(horizon {row['best_horizon_factor']} x tier)"
    )
    if "belady_block_hit_rate" in row:
        text += (
            f"  best {row['best_competitor_block_hit_rate']:6.2%}  half-gap "
            f"{row['half_gap_block_hit_rate']:6.2%}  belady {row['belady_block_hit_rate']:6.2%}"
        )
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    wanted = argparse.Namespace(
        trace=args.trace, size=args.size, seed=args.seed, extra_trace=[], only=args.only
    )
    traces, missing = suite_workloads(wanted)
    if missing:
        sys.exit(f"--trace {args.trace}: no such file; give the Mooncake trace or --no-trace")
    cells = suite_cells(args.suite)
    workloads: dict[str, list[dict[str, Any]]] = {}
    for name, trace in traces.items():
        for fraction in args.capacities:
            capacity = capacity_for(trace, fraction)
            ceiling = admission_ceiling(trace, capacity, FACTORS)
            row = {"capacity_frac": fraction, "capacity_blocks": capacity, **ceiling}
            row = compare(row, cells.get((name, capacity)))
            workloads.setdefault(name, []).append(row)
            print(line(name, row), flush=True)
    results = {"workloads": workloads, "elapsed_s": round(time.perf_counter() - started, 1)}
    parameters = {
        "trace": None if args.trace is None else args.trace.name,
        "size": args.size,
        "seed": args.seed,
        "capacities_frac_of_distinct_blocks": args.capacities,
        "horizon_factors": [f"{f:.3g}" for f in FACTORS],
        "eviction": "lru",
        "store": "per_request",
        "suite": args.suite.name if cells else None,
    }
    return write_results("admission_ceiling", argv, args.out, results, parameters)


if __name__ == "__main__":
    raise SystemExit(main())
