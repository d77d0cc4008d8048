"""What `auto`'s full-tier shadows cost in C: each expert's shadow alone, and all of them at once.

`auto` replays every request through one shadow tier per expert (`hkv.policies.native`, in C
where built). This bench times that work alone, without vLLM or the adapter: Mooncake's trace
(`--trace`), its requests as whole text blocks (keys the replay's 8 big-endian bytes, positions
every `block_tokens`, cost_aware's worth of each), replayed through a native `Shadows` of each
expert and of all the default experts together, at each capacity (a share of the trace's
distinct blocks), on one core; each time the best of `--repeats` passes. Beside
`bench.replay_speed --through vllm` it says how much of `auto`'s time there the shadows take.

    python -m bench.shadow_cost --out data/results/shadow_cost_cpu.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from bench.policy_suite import DEFAULT_TRACE
from bench.replay_speed import one_core, workloads
from hkv.report import save_results
from hkv.sim.suite import capacity_for


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake's trace")
    parser.add_argument("--capacities", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


def columns(trace) -> list[tuple]:
    """Each request's `Shadows.replay` arguments: ids, positions, tokens, worths, modalities."""
    from hkv.blocks import BlockMeta
    from hkv.policies import native
    from hkv.policies.shadow import make_expert

    value = make_expert("cost_aware", 1).value
    block = trace.block_tokens
    out = []
    for request in trace.requests:
        n = len(request.hash_ids)
        ids = native.key_ids([int(h).to_bytes(8, "big") for h in request.hash_ids])
        positions = [i * block for i in range(n)]
        worths = [value(BlockMeta(block, position)) for position in positions]
        out.append((ids, positions, [block] * n, worths, [0] * n))
    return out


def pass_s(labels: list[str], capacity: int, requests: list[tuple], repeats: int) -> float:
    """The best of `repeats` passes of `requests` through fresh native shadows of `labels`."""
    from hkv.policies import native

    best = float("inf")
    for _ in range(repeats):
        shadows = native.shadows(labels, capacity)
        start = time.perf_counter()
        for request in requests:
            shadows.replay(*request)
        best = min(best, time.perf_counter() - start)
    return best


def measure(trace, fraction: float, requests: list[tuple], repeats: int) -> dict[str, Any]:
    from hkv.policies.auto import DEFAULT_EXPERTS

    capacity = capacity_for(trace, fraction)
    refs = trace.num_block_refs
    rows = {}
    for label in DEFAULT_EXPERTS:
        seconds = pass_s([label], capacity, requests, repeats)
        rows[label] = {"pass_s": round(seconds, 4), "ns_per_ref": round(seconds / refs * 1e9)}
    together = pass_s(list(DEFAULT_EXPERTS), capacity, requests, repeats)
    line = "  ".join(f"{label} {row['ns_per_ref']}" for label, row in rows.items())
    print(f"{fraction:4.0%} ({capacity} blocks): all {together:.3f} s; ns/ref: {line}", flush=True)
    return {
        "capacity_frac": fraction,
        "capacity_blocks": capacity,
        "block_refs": refs,
        "experts": rows,
        "all_pass_s": round(together, 4),
        "all_us_per_ref": round(together / refs * 1e6, 2),
    }


def main(argv: list[str] | None = None) -> int:
    from hkv.policies import native

    args = parse(argv)
    if not native.built():
        sys.exit("hkv's C extension is not built here: `pip install -e .` builds it")
    trace = workloads(args.trace, "full", ["mooncake"])["mooncake"]
    requests = columns(trace)
    with one_core() as core:
        cells = [measure(trace, f, requests, args.repeats) for f in args.capacities]
    if args.out is not None:
        save_results(
            args.out,
            {"cells": cells},
            generated_by="python -m bench.shadow_cost " + " ".join(sys.argv[1:]),
            parameters={
                "trace": args.trace.name,
                "capacities": args.capacities,
                "repeats": args.repeats,
                "pinned_core": core,
            },
            packages=("hkv",),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
