"""Every eviction policy on the Mooncake trace and on generated multimodal workloads.

    python -m bench.policies [--trace ../shared/traces/mooncake/synthetic_trace.jsonl]
                             [--out data/results/policies.json] [--capacities 0.01,0.05]

For each workload and each capacity (a fraction of the workload's distinct blocks) it replays
every registered policy plus vLLM's `store_threshold=2` admission on LRU, and records block and
token hit rates, seconds saved and spent (MiniMax-M2.5 on the default H200 profile, blocks
loaded from pinned host RAM) and replay speed. Each policy's share of the LRU -> Belady gap is
reported, and the target check: the best online policy against the best of vLLM's native
options (lru, arc, lru+st2), as a share of the gap between that and Belady.

`static_top_oracle` is a reference, not a policy: the cache holds, from the start, the blocks
with the most references in the whole trace (an offline popularity oracle). It shows how much
of Belady's lead any popularity estimate could recover.

Design was done on generated traces (`hkv.sim.workload`); the Mooncake trace is evaluation only.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hkv.cost import CostModel, HardwareProfile
from hkv.policies import get_policy_class, make_policy, policy_names
from hkv.policies.admission import StoreThreshold
from hkv.report import save_results
from hkv.sim import Trace, WorkloadSpec, generate, load_trace, overlay_modalities, replay

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"
NATIVE = ("lru", "arc", "lru+st2")

CONTROL = ("random",)


def workloads(args: argparse.Namespace) -> dict[str, Trace]:
    out: dict[str, Trace] = {}
    trace_path = Path(args.trace)
    if trace_path.is_file():
        mooncake = load_trace(trace_path)
        out["mooncake"] = mooncake
        out["mooncake+mm_overlay"] = overlay_modalities(
            mooncake, seed=args.seed, image_request_fraction=0.3, audio_request_fraction=0.05
        )
    out["gen_multimodal_chat"] = generate(
        WorkloadSpec.multimodal(seed=args.seed, num_sessions=args.sessions)
    )
    out["gen_multimodal_doc_qa"] = generate(
        WorkloadSpec.preset(
            "doc_qa",
            seed=args.seed + 1,
            num_sessions=args.sessions,
            image_turn_fraction=0.3,
            audio_turn_fraction=0.05,
        )
    )
    return out


def build(name: str, capacity: int, trace: Trace, cost_model: CostModel):
    if name == "lru+st2":
        return StoreThreshold(capacity, inner=make_policy("lru", capacity), threshold=2)
    future = trace.reference_stream() if get_policy_class(name).offline else None
    return make_policy(name, capacity, cost_model=cost_model, future=future)


def static_top_oracle(trace: Trace, capacity: int) -> float:
    """Block hit rate of a cache pre-loaded with the `capacity` most referenced blocks."""
    counts = Counter(k for r in trace.requests for k in r.hash_ids)
    top = {k for k, _ in counts.most_common(capacity)}
    hits = 0
    for request in trace.requests:
        for key in request.hash_ids:
            if key not in top:
                break
            hits += 1
    return (hits - len(top)) / trace.num_block_refs  # first references are misses anyway


def lru_speed(trace: Trace, capacity: int, cost_model: CostModel, repeats: int) -> float:
    """Best-of-`repeats` block references per second replaying LRU (costs accounted)."""
    return max(
        replay(trace, make_policy("lru", capacity), cost_model=cost_model).refs_per_s
        for _ in range(repeats)
    )


def run_capacity(trace: Trace, capacity: int, cost_model: CostModel) -> dict[str, Any]:
    names = [*policy_names(), "lru+st2"]
    rows = {}
    for name in names:
        result = replay(trace, build(name, capacity, trace, cost_model), cost_model=cost_model)
        rows[name] = {
            "block_hit_rate": round(result.block_hit_rate, 5),
            "prefix_token_hit_frac": round(result.prefix_token_hit_frac, 5),
            "recompute_s_saved": round(result.recompute_s_saved, 2),
            "load_s": round(result.load_s, 2),
            "net_s_saved": round(result.net_s_saved, 2),
            "evictions": result.evictions,
            "declined": result.declined,
            "refs_per_s": round(result.refs_per_s),
        }
    lru, opt = rows["lru"]["block_hit_rate"], rows["belady"]["block_hit_rate"]
    native_name = max(NATIVE, key=lambda n: rows[n]["block_hit_rate"])
    native = rows[native_name]["block_hit_rate"]
    for row in rows.values():
        hit = row["block_hit_rate"]
        row["lru_to_belady_gap_closed"] = round((hit - lru) / (opt - lru), 4) if opt > lru else None
    online = [n for n in names if not get_policy_class(n).offline and n not in CONTROL]
    best_name = max(online, key=lambda n: rows[n]["block_hit_rate"])
    best = rows[best_name]["block_hit_rate"]
    closed = (best - native) / (opt - native) if opt > native else None
    return {
        "capacity_blocks": capacity,
        "policies": rows,
        "static_top_oracle_block_hit_rate": round(static_top_oracle(trace, capacity), 5),
        "target": {
            "best_native": native_name,
            "best_native_block_hit_rate": native,
            "best_online": best_name,
            "best_online_block_hit_rate": best,
            "belady_block_hit_rate": opt,
            "native_to_belady_gap_closed": round(closed, 4) if closed is not None else None,
            "goal": 0.5,
            "met": closed is not None and closed >= 0.5,
        },
    }


def machine() -> dict[str, Any]:
    """What `machine_info` lacks for this benchmark: the host's name and hkv's commit."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    return {"hostname": platform.node(), "git_commit": commit or None, "gpu": None}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.policies", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--trace", default=str(DEFAULT_TRACE), help="Mooncake-format JSONL")
    parser.add_argument("--out", default=str(REPO / "data" / "results" / "policies.json"))
    parser.add_argument("--capacities", default="0.01,0.05", help="fractions of distinct blocks")
    parser.add_argument("--sessions", type=int, default=2000, help="sessions per generated trace")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default=None, help="calibration profile (default: H200)")
    parser.add_argument("--speed-repeats", type=int, default=3)
    return parser.parse_args(argv)


def run_workload(name: str, trace: Trace, fractions, cost_model, speed_repeats: int) -> dict:
    """One workload at every capacity, and LRU's replay speed at the first."""
    distinct = trace.distinct_blocks()
    entry: dict[str, Any] = {
        "source": trace.source,
        "requests": len(trace),
        "block_refs": trace.num_block_refs,
        "distinct_blocks": distinct,
        "has_modalities": trace.has_modalities(),
        "capacities": {},
    }
    for fraction in fractions:
        capacity = max(1, round(fraction * distinct))
        entry["capacities"][f"{fraction:g}"] = run_capacity(trace, capacity, cost_model)
        print(f"{name} @ {fraction:g} ({capacity} blocks): {summary(entry, fraction)}")
    speed_capacity = max(1, round(fractions[0] * distinct))
    entry["lru_replay_refs_per_s"] = round(
        lru_speed(trace, speed_capacity, cost_model, speed_repeats)
    )
    return entry


def parameters(args: argparse.Namespace, fractions, cost_model: CostModel) -> dict[str, Any]:
    return {
        "capacities_frac_of_distinct_blocks": fractions,
        "tier": "host (pinned)",
        "cost_model": cost_model.describe(),
        "generated_sessions": args.sessions,
        "seed": args.seed,
        "native_options": list(NATIVE),
        "policies": [*policy_names(), "lru+st2"],
        "hyperparameters": {
            name: build(name, 8, _tiny(), cost_model).hyperparameters() for name in policy_names()
        },
    }


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    started = time.perf_counter()
    cost_model = CostModel.default(profile=HardwareProfile.load(args.profile))
    fractions = [float(f) for f in args.capacities.split(",")]
    results = {
        name: run_workload(name, trace, fractions, cost_model, args.speed_repeats)
        for name, trace in workloads(args).items()
    }
    speed_source = "mooncake" if "mooncake" in results else next(iter(results))
    report = {
        "lru_replay_refs_per_s": results[speed_source]["lru_replay_refs_per_s"],
        "lru_replay_speed_goal_refs_per_s": 300_000,
        "workloads": results,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    command = " ".join(["python -m bench.policies", *(sys.argv[1:] if argv is None else argv)])
    out = save_results(
        args.out,
        report,
        generated_by=command,
        parameters=parameters(args, fractions, cost_model),
        machine=machine(),
    )
    print(
        f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB) in {report['elapsed_s']} s; "
        f"lru replays {report['lru_replay_refs_per_s']:,} refs/s"
    )


def _tiny() -> Trace:
    from hkv.sim.trace import Request

    return Trace((Request(0, 512, 1, (0,)),), 512)


def summary(entry: dict[str, Any], fraction: float) -> str:
    cap = entry["capacities"][f"{fraction:g}"]
    rates = ", ".join(f"{n} {r['block_hit_rate']:.4f}" for n, r in cap["policies"].items())
    target = cap["target"]
    return (
        f"{rates}; best online {target['best_online']} closes "
        f"{target['native_to_belady_gap_closed']} of the native->belady gap"
    )


if __name__ == "__main__":
    main()
