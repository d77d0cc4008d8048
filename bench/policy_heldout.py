"""The policy suite's generated workloads at seeds it was not built on: does the recommendation
hold on traffic nobody tuned for?

    PYTHONPATH=.peers python -m bench.policy_heldout            # seeds 9-12 -> policy_heldout.json
    python -m bench.policy_heldout --seeds 7 --size ci --no-vllm --out out/heldout.json  # seconds

`auto`'s defaults (its experts, half-life, margin, first expert) and the other policies' were
chosen while looking at the suite's workloads at seed 0, and `auto`'s eight experts and first
expert also at seeds 1 to 8, so the default seeds are 9 to 12. Each seed here draws new sessions,
lengths, popularity ranks, bursts and documents from the same generators
(`hkv.sim.suite_workloads`), so a policy that only fits seed 0 shows it here.

Per cell: every online hkv policy in the simulator (`store="per_request"`, which agrees with
hkv's adapter inside vLLM's manager to 0.00 points in all 32 suite cells), and the five
competitors as the suite measures them: vLLM's `lru`, `arc` and `lru` + `store_threshold` 2
inside vLLM's own `CPUOffloadingManager`, and the peers that import (`bench.peers`). Without
vLLM (`--no-vllm`) the competitors are the simulator's models of vLLM's three options and the
peers are left out. The cells have the suite's shape, so `hkv.report.suite` reads this file as
it reads the suite's; `ranking` (per policy: cells more than half a point behind the best
competitor, mean and largest regret, cells below vLLM's `lru`) is stored with them.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.policy_suite import ROOT, vllm_runners, write_results
from hkv.cost import CostModel
from hkv.report.suite import ranking
from hkv.sim.suite import (
    COMPETITORS,
    FRACTIONS,
    SIM_NATIVES,
    run_suite,
    sim_runner,
    sim_runners,
)
from hkv.sim.suite_workloads import generated_workloads

KEPT = ("block_hit_rate", "regret_points", "recompute_s_saved")
"""What each row keeps (the suite's rows hold more; this file holds 112 cells)."""


def competitor_runners(in_vllm: bool) -> dict[str, Any]:
    """vLLM's three options (in its manager, or the simulator's models without vLLM) and the
    peers that import."""
    if not in_vllm:
        return {
            label: sim_runner(name, CostModel.default(), threshold=threshold)
            for label, (name, threshold) in SIM_NATIVES.items()
        }
    runners, _ = vllm_runners(CostModel.default())  # the suite's own, natives checked
    return {label: runners[label] for label in COMPETITORS if label in runners}


def run_workload(job: tuple[int, str, str, bool, tuple[float, ...]]) -> dict[str, Any]:
    """One seed's workload at every capacity, as `hkv.sim.suite.run_suite` scores it (regret
    against the best competitor present), each row cut to its hit rate, regret and seconds."""
    seed, size, name, in_vllm, fractions = job
    trace = generated_workloads(size, seed)[name]
    cost = CostModel.default()
    competitors = competitor_runners(in_vllm)
    ours = {k: r for k, r in sim_runners(cost, natives=False).items() if k.startswith("hkv:")}
    present = [label for label in COMPETITORS if label in competitors]
    scored = run_suite(
        {f"{name} seed {seed}": trace}, competitors | ours, cost, fractions, competitors=present
    )
    for workload in scored["workloads"].values():
        workload |= {"workload": name, "seed": seed}
        for cell in workload["cells"]:
            cell["policies"] = {
                label: {key: _round(row.get(key)) for key in KEPT}
                for label, row in cell["policies"].items()
            }
    return scored


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def summary_table(ranked: list[dict[str, Any]]) -> str:
    """`hkv.report.suite.ranking`'s rows as text, the safest policy first."""
    lines = [f"{'policy':20s} {'>0.5 behind':>12s} {'mean regret':>12s} {'max':>7s} {'< lru':>6s}"]
    for row in ranked:
        lines.append(
            f"{row['policy']:20s} {row['cells_over_half_point']:12d} {row['mean_regret']:+12.2f} "
            f"{row['max_regret']:+7.2f} {row['cells_below_lru']:6d}"
        )
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.policy_heldout", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[9, 10, 11, 12])
    parser.add_argument("--size", choices=("full", "ci"), default="full")
    parser.add_argument("--capacities", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--no-vllm", action="store_true", help="competitors from the simulator")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/policy_heldout.json")
    args = parser.parse_args(argv)
    if 0 in args.seeds:
        parser.error("--seeds: seed 0 is the suite's own (bench.policy_suite); pick others")
    if args.jobs < 1:
        parser.error(f"--jobs: got {args.jobs}; expected 1 or more")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    names = list(generated_workloads("ci", 0))
    jobs = [
        (seed, args.size, name, not args.no_vllm, tuple(args.capacities))
        for seed in args.seeds
        for name in names
    ]
    results: dict[str, Any] = {"competitors": [], "workloads": {}}
    with ProcessPoolExecutor(min(args.jobs, len(jobs))) as pool:
        for done in pool.map(run_workload, jobs):
            results["workloads"] |= done["workloads"]
            results["competitors"] = done["competitors"]
            print(f"{next(iter(done['workloads']))}: done", flush=True)
    ranked = ranking(results)
    print(summary_table(ranked))
    results |= {"ranking": ranked, "elapsed_s": round(time.perf_counter() - started, 1)}
    parameters = {
        "seeds": args.seeds,
        "size": args.size,
        "capacities_frac_of_distinct_blocks": args.capacities,
        "competitors_in_vllm": not args.no_vllm,
        "hkv_policies": "simulator, store=per_request",
    }
    return write_results("policy_heldout", argv, args.out, results, parameters)


if __name__ == "__main__":
    raise SystemExit(main())
