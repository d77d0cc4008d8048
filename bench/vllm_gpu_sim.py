"""Predict the GPU benchmark's cached shares with hkv's simulator, on the same request sequence.

The model (`bench.sim.two_tier`): the GPU prefix cache as hkv's `lru` in front of a CPU tier run by
the policy under test, both with vLLM's per-request stores, replayed request by request on the
anchor workload (`hkv.sim.anchor`) that `python -m bench.vllm_gpu` serves. vLLM's own `lru` and
`arc` are predicted with hkv's `lru` and `arc`; the measured shares, when the GPU results file
is there, are paired with the predictions (`measured_vs_predicted`).

    python -m bench.vllm_gpu_sim                     # writes data/results/vllm_h200_sim.json
    python -m bench.vllm_gpu_sim --cpu-gib 8 --policies lru cost_aware --no-write
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from bench.sim.two_tier import (
    KV_BYTES_PER_TOKEN,
    blocks_for_gib,
    compare,
    gpu_only,
    predict,
    yardstick,
)
from hkv.policies import policy_names
from hkv.report import save_results
from hkv.sim.anchor import Workload, trace_requests

ROOT = Path(__file__).resolve().parent.parent


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.vllm_gpu_sim", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--cpu-gib", type=float, nargs="+", default=[8.0, 12.0, 16.0])
    parser.add_argument("--gpu-kv-gib", type=float, default=4.0)
    parser.add_argument("--policies", nargs="+", default=None, help="default: every online one")
    parser.add_argument("--variants", nargs="+", default=["text", "mm"], choices=("text", "mm"))
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/vllm_h200_sim.json")
    parser.add_argument(
        "--measured",
        type=Path,
        default=ROOT / "data/results/vllm_h200.json",
        help="the GPU benchmark's results, compared with the predictions when present",
    )
    parser.add_argument("--no-write", action="store_true")
    return parser.parse_args(argv)


def run_variant(variant: str, names: list[str], cpu_gib: list[float], gpu_blocks: int):
    """One variant's summary and its prediction rows, policy by policy and tier by tier."""
    requests, turn_requests = trace_requests(images=variant == "mm")
    summary = {
        "requests": len(requests),
        "distinct_blocks": len({k for r in requests for k in r.hash_ids}),
        "gpu_only_cached_frac": gpu_only(gpu_blocks, requests, turn_requests),
        "belady_cpu_only_hit_frac": {str(gib): yardstick(gib, requests) for gib in cpu_gib},
    }
    rows = []
    for gib in cpu_gib:
        for name in names:
            row = predict(name, blocks_for_gib(gib), gpu_blocks, requests, turn_requests)
            row |= {"variant": variant, "cpu_gib": gib}
            rows.append(row)
            print(
                f"{variant:<4} {gib:>4.0f} GiB {name:<15} cached {row['cached_frac']:6.1%}  "
                f"prefill left {row['prefill_frac']:6.1%}  "
                f"later turns {row['turn_gt0_cached_frac']:6.1%}  "
                f"stored {row['store_gb']:5.1f} GB  failed {row['store_failed']}",
                flush=True,
            )
    return summary, rows


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    names = args.policies or policy_names(online_only=True)
    gpu_blocks = blocks_for_gib(args.gpu_kv_gib)
    rows = []
    summary = {}
    for variant in args.variants:
        summary[variant], variant_rows = run_variant(variant, names, args.cpu_gib, gpu_blocks)
        rows += variant_rows
    if args.no_write:
        return 0
    parameters = {
        "cpu_gib": args.cpu_gib,
        "gpu_kv_gib": args.gpu_kv_gib,
        "policies": names,
        "variants": args.variants,
    }
    results = {
        "model": {
            "gpu_tier": "lru, per_request",
            "cpu_tier": "policy, per_request",
            "block_tokens": 16,
            "kv_bytes_per_block": KV_BYTES_PER_TOKEN * 16,
            "gpu_blocks": gpu_blocks,
            "cost_model": "CostModel.default()",
        },
        "workload": {"text": asdict(Workload()), "summary": summary},
        "rows": rows,
        "measured_vs_predicted": compare(rows, args.measured),
    }
    save_results(
        args.out, results, generated_by="python -m bench.vllm_gpu_sim", parameters=parameters
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
