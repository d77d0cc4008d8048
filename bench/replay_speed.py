"""Replay speed on one core: block references a second, each policy against `lru` in the same run.

    python -m bench.replay_speed                       # writes data/results/replay_speed_cpu.json
    python -m bench.replay_speed --no-trace --repeats 3 --out out/speed.json   # generated only

What is timed: hkv's simulator replaying a whole workload through one policy, per block
(docs/design.md §2: lookup, then each block touched or offered, one eviction at a time), costs
accounted, as `hkv simulate` runs it; or, with `--through vllm`, vLLM's own
`CPUOffloadingManager` driven request by request as its connector's scheduler drives it
(`hkv.integrations.vllm.replay.drive`), each hkv policy behind hkv's adapter against vLLM's
built-in `lru` (the baseline there) in the same rounds:

    python -m bench.replay_speed --through vllm --only mooncake --policies auto lru \
        --capacities 0.01 0.02 0.05 0.1 --out data/results/replay_speed_vllm_cpu.json

Workloads: Mooncake's synthetic trace (`--trace`, read where it lies) and the policy suite's
generated ones (`hkv.sim.suite_workloads`, explicit seeds), each at 1 % and 5 % of its distinct
blocks by default (`--capacities`). The process is pinned to one core where the OS allows it.

Shared machines change speed from minute to minute, so every policy's passes alternate with
`lru`'s in the same loop and each row carries its ratio to `lru` from the same rounds; the
absolute rate is the best of `--repeats` passes (the least disturbed one), the median beside it.
The heap is frozen once everything is imported and the traces are read (`frozen_heap`), as vLLM's
engine freezes its own once it is up, so that no pass pays the cyclic collector for vLLM's,
torch's and the trace's objects.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.policy_suite import DEFAULT_TRACE, ROOT
from bench.policy_suite import workloads as suite_workloads
from bench.vllm_gpu.plans import split_policy
from hkv.cost import CostModel
from hkv.policies import make_policy
from hkv.report import save_results
from hkv.sim import Trace, replay
from hkv.sim.suite import capacity_for

BASELINE = "lru"
VLLM_BASELINE = "vllm:lru"
"""The baseline `--through vllm`: vLLM's own `lru`, every other name an hkv policy there."""


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.replay_speed", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake's trace")
    parser.add_argument("--no-trace", dest="trace", action="store_const", const=None)
    parser.add_argument(
        "--policies",
        nargs="+",
        default=["predictive", "cost_aware"],
        help="hkv policies, each a name or with hyperparameters: auto+experts=lean",
    )
    parser.add_argument("--capacities", type=float, nargs="+", default=[0.01, 0.05])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", choices=("full", "ci"), default="full")
    parser.add_argument("--through", choices=("sim", "vllm"), default="sim")
    parser.add_argument("--only", nargs="+", default=None, help="these workloads alone")
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/replay_speed_cpu.json")
    return parser.parse_args(argv)


@contextmanager
def one_core():
    """This process on one of the cores it may use (the last) while inside; yields the core,
    or None where the OS offers no affinity. The previous affinity is restored on the way out."""
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    before = os.sched_getaffinity(0)
    core = max(before)
    os.sched_setaffinity(0, {core})
    try:
        yield core
    finally:
        os.sched_setaffinity(0, before)


@contextmanager
def frozen_heap(trace: Trace | None = None):
    """Everything imported and built so far out of the cyclic collector's reach while inside (the
    heap frozen, as vLLM's engine freezes its own after start-up: `freeze_gc_heap`); vLLM's
    offloading manager and hkv's adapter imported first where `trace` is given. Otherwise the
    hundreds of thousands of objects vLLM and torch leave at import are walked by every full
    collection, which lands on whichever pass happens to cross the collector's threshold and
    charges it for objects no policy made."""
    if trace is not None:
        from hkv.integrations.vllm.replay import hkv_manager, native_manager

        native_manager("lru", 16)
        hkv_manager("auto", trace, 16)
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def workloads(trace: Path | None, size: str, only=None) -> dict[str, Trace]:
    """The policy suite's workloads (`bench.policy_suite.workloads`, seed 0); a trace asked
    for and absent ends the run."""
    wanted = argparse.Namespace(trace=trace, size=size, seed=0, extra_trace=[], only=only)
    traces, missing = suite_workloads(wanted)
    if missing:
        sys.exit(f"--trace {trace}: no such file; give the Mooncake trace or --no-trace")
    return traces


def passes(trace: Trace, names: list[str], capacity: int, repeats: int, through: str):
    """`repeats` rounds; each round replays every policy once (the baseline first), fresh
    policies (and, through vLLM, a fresh manager)."""
    rates: dict[str, list[float]] = {name: [] for name in names}
    cost = CostModel.default()
    for _ in range(repeats):
        for name in names:
            if through == "vllm":
                rates[name].append(through_vllm(trace, name, capacity))
                continue
            policy_name, params = split_policy(name)
            policy = make_policy(policy_name, capacity, cost_model=cost, **params)
            rates[name].append(replay(trace, policy, cost_model=cost).refs_per_s)
    return rates


def through_vllm(trace: Trace, name: str, capacity: int) -> int:
    """Block references a second of `trace` through vLLM's manager run by `name`."""
    from hkv.integrations.vllm.replay import drive, hkv_manager, native_manager

    if name == VLLM_BASELINE:
        manager = native_manager("lru", capacity)
    else:
        policy, params = split_policy(name)
        manager = hkv_manager(policy, trace, capacity, params=params)
    return drive(trace, manager)["refs_per_s"]


def measure(trace: Trace, args: argparse.Namespace, capacity: int) -> dict[str, Any]:
    baseline = VLLM_BASELINE if args.through == "vllm" else BASELINE
    names = [baseline, *[p for p in args.policies if p != baseline]]
    rates = passes(trace, names, capacity, args.repeats, args.through)
    rows = {}
    for name in names:
        pairs = zip(rates[name], rates[baseline], strict=True)
        ratios = [mine / base for mine, base in pairs]
        rows[name] = {
            "refs_per_s_best": round(max(rates[name])),
            "refs_per_s_median": round(statistics.median(rates[name])),
            "vs_lru_median": round(statistics.median(ratios), 3),
            "vs_lru_range": [round(min(ratios), 3), round(max(ratios), 3)],
        }
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    traces = workloads(args.trace, args.size, args.only)
    warm = next(iter(traces.values())) if args.through == "vllm" else None
    with one_core() as core, frozen_heap(warm):
        cells = run_cells(traces, args)
    worst = {
        name: min(c["policies"][name]["refs_per_s_best"] for c in cells)
        for name in cells[0]["policies"]
    }
    print("slowest cell, best of repeats:", worst)
    save_results(
        args.out,
        {"cells": cells, "slowest_cell_refs_per_s": worst},
        generated_by="python -m bench.replay_speed " + " ".join(sys.argv[1:]),
        parameters={
            "trace": None if args.trace is None else args.trace.name,
            "policies": args.policies,
            "capacities_frac_of_distinct_blocks": args.capacities,
            "repeats": args.repeats,
            "size": args.size,
            "store": "per_block" if args.through == "sim" else "vllm_manager",
            "through": args.through,
            "only": args.only,
            "pinned_core": core,
        },
        packages=("hkv", "numpy") if args.through == "sim" else ("hkv", "numpy", "vllm"),
        machine={"cpu_model": cpu_model()},
    )
    return 0


def run_cells(traces: dict[str, Trace], args: argparse.Namespace) -> list[dict[str, Any]]:
    cells = []
    for label, trace in traces.items():
        for fraction in args.capacities:
            capacity = capacity_for(trace, fraction)
            rows = measure(trace, args, capacity)
            cells.append(
                {
                    "workload": label,
                    "block_refs": trace.num_block_refs,
                    "capacity_frac": fraction,
                    "capacity_blocks": capacity,
                    "policies": rows,
                }
            )
            line = "  ".join(
                f"{n} {r['refs_per_s_best'] / 1e3:.0f}k ({r['vs_lru_median']:.2f}x)"
                for n, r in rows.items()
            )
            print(f"{label:20s} {fraction:4.0%}  {line}", flush=True)
    return cells


if __name__ == "__main__":
    raise SystemExit(main())
