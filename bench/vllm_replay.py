"""Replay a Mooncake-format trace through vLLM's own CPU offloading manager.

For each request, in file order, `hkv.integrations.vllm.replay.drive` calls vLLM's
`CPUOffloadingManager` as the OffloadingConnector's scheduler does: `lookup` of the prompt's
blocks (the hits are the longest resident prefix), `prepare_load`/`complete_load` of the hits,
`prepare_store`/`complete_store` of the whole prompt (vLLM stores what is missing), then
`on_request_finished`. Policies: vLLM's `lru` and `arc`, `lru` with `store_threshold` 2, and
every online hkv policy through `hkv.integrations.vllm`. The same trace and capacity go through
`hkv.sim.simulate`, so the table says how faithfully the simulator models vLLM's tier.

    python -m bench.vllm_replay --trace ../shared/traces/mooncake/synthetic_trace.jsonl
    python -m bench.vllm_replay --limit 400 --out data/results/vllm_replay_cpu.json   # CI size
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from hkv.report import save_results

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"


def vllm_configs(hkv_policies: list[str]) -> list[dict]:
    """(label, vLLM policy name, module path, store threshold, the simulator's counterpart)."""
    configs = [
        {"label": "vllm:lru", "policy": "lru", "module": None, "threshold": 1, "sim": "lru"},
        {"label": "vllm:arc", "policy": "arc", "module": None, "threshold": 1, "sim": "arc"},
        {"label": "vllm:lru+st2", "policy": "lru", "module": None, "threshold": 2, "sim": "lru"},
    ]
    for name in hkv_policies:
        configs.append(
            {
                "label": f"hkv:{name}",
                "policy": f"hkv_{name}",
                "module": "hkv.integrations.vllm",
                "threshold": 1,
                "sim": name,
            }
        )
    return configs


def replay_in_vllm(trace, config: dict, capacity: int) -> dict:
    """Hit counts of `trace` through vLLM's manager with one policy configuration."""
    from hkv.integrations.vllm.replay import drive, native_manager

    manager = native_manager(
        config["policy"], capacity, module=config["module"], threshold=config["threshold"]
    )
    return drive(trace, manager)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.vllm_replay", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--capacities", type=float, nargs="+", default=[0.01, 0.05])
    parser.add_argument("--limit", type=int, default=None, help="first N requests only")
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/vllm_replay.json")
    return parser.parse_args(argv)


def compare_row(trace, config: dict, fraction: float, capacity: int) -> dict:
    """One policy configuration at one capacity: vLLM's manager against both simulator modes."""
    from hkv.sim import simulate

    in_vllm = replay_in_vllm(trace, config, capacity)
    sim = {
        store: simulate(
            trace, [config["sim"]], capacity, store_threshold=config["threshold"], store=store,
        )[0].block_hit_rate
        for store in ("per_block", "per_request")
    }  # fmt: skip
    return {
        "label": config["label"],
        "capacity_frac": fraction,
        "capacity_blocks": capacity,
        "vllm_block_hit_rate": in_vllm["block_hit_rate"],
        "sim_policy": config["sim"] + ("+st2" if config["threshold"] == 2 else ""),
        "sim_block_hit_rate": sim["per_request"],
        "diff_points": 100 * (in_vllm["block_hit_rate"] - sim["per_request"]),
        "sim_per_block_hit_rate": sim["per_block"],
        "diff_points_per_block": 100 * (in_vllm["block_hit_rate"] - sim["per_block"]),
        "vllm_prefix_token_hit_frac": in_vllm["prefix_token_hit_frac"],
        "failed_stores": in_vllm["failed_stores"],
        "vllm_refs_per_s": in_vllm["refs_per_s"],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from hkv.policies import policy_names
    from hkv.sim import load_trace
    from hkv.sim.trace import trace_from_requests

    trace = load_trace(args.trace)
    os.environ["HKV_BLOCK_TOKENS"] = str(trace.block_tokens)  # the adapter's block size
    if args.limit:
        trace = trace_from_requests(trace.requests[: args.limit], block_tokens=trace.block_tokens)
    distinct = trace.distinct_blocks()
    rows = []
    for fraction in args.capacities:
        capacity = max(1, round(distinct * fraction))
        for config in vllm_configs(policy_names(online_only=True)):
            row = compare_row(trace, config, fraction, capacity)
            rows.append(row)
            print(
                f"{fraction:>5.0%} {row['label']:<22} vllm {row['vllm_block_hit_rate']:.4f}  "
                f"sim(per_request) {row['sim_block_hit_rate']:.4f} {row['diff_points']:+z.2f} pts"
                f"  sim(per_block) {row['sim_per_block_hit_rate']:.4f} "
                f"{row['diff_points_per_block']:+z.2f} pts",
                flush=True,
            )
    results = {
        "trace": {
            "file": args.trace.name,
            "requests": len(trace.requests),
            "block_refs": trace.num_block_refs,
            "distinct_blocks": distinct,
            "block_tokens": trace.block_tokens,
        },
        "rows": rows,
    }
    parameters = {"trace": args.trace.name, "capacities": args.capacities, "limit": args.limit}
    save_results(args.out, results, generated_by="python -m bench.vllm_replay",
                 parameters=parameters, packages=("hkv", "vllm"))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
