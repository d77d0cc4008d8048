"""What `auto`'s full-tier shadows cost in C: each expert's shadow alone, and all of them at once.

`auto` replays every request through one shadow tier per expert (`hkv.policies.native`, in C
where built). This bench times that work alone, without vLLM or the adapter: Mooncake's trace
(`--trace`), its requests as whole text blocks (keys the replay's 8 big-endian bytes, positions
every `block_tokens`, cost_aware's worth of each), replayed through a native `Shadows` of each
expert and of all the default experts together, at each capacity (a share of the trace's
distinct blocks), on one core; each time the best of `--repeats` passes. Beside
`bench.replay_speed --through vllm` it says how much of `auto`'s time there the shadows take.

    python -m bench.shadow_cost --out data/results/shadow_cost_cpu.json

With `--through-vllm` it says instead what the shadows leave of `auto`'s budget inside vLLM's own
manager: in rounds on one core, a pass of the trace through vLLM's manager with vLLM's `lru`,
with hkv's `lru` and with hkv's `auto` (its adapter), and `auto`'s shadows alone replaying the
request ends that pass gave them (recorded, then replayed through a fresh `ShadowSet` of its
experts, as `auto` replays them: one C call a request, its registry of ids kept). What `auto`
may spend beyond hkv's `lru` and still run as fast as vLLM's `lru` is the gap between those
two passes; the shadows' share of it says whether anything else could close it. Replayed back to
back, though, the shadows find their data in the CPU's caches; inside `auto`'s pass vLLM's own
calls run between them. So each round also runs hkv's `lru` through the manager with the same
request ends replayed by a fresh `ShadowSet` at each request's end (`with_shadows`): what that
adds to the `lru` pass is the shadows' cost where `auto` runs them. Passes of their
own, after the rounds, time the adapter's calls for hkv's `lru` and `auto` and `auto`'s request end
inside them (`ADAPTER_PARTS`, `AUTO_PARTS`): where the rest of `auto`'s time goes. The heap
is frozen first, as vLLM's engine freezes it (`replay_speed.frozen_heap`).

    python -m bench.shadow_cost --through-vllm --capacities 0.01 0.02 0.05 0.1 --repeats 9 \
        --out data/results/auto_cpu_budget.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.policy_suite import DEFAULT_TRACE
from bench.replay_speed import frozen_heap, one_core, through_vllm, workloads
from hkv.report import save_results
from hkv.sim.suite import capacity_for


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake's trace")
    parser.add_argument("--capacities", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--through-vllm", action="store_true", help="auto's budget inside vLLM's manager"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: expected a whole number of 1 or more")
    bad = [f for f in args.capacities if not 0 < f <= 1]
    if bad:
        parser.error(f"--capacities {bad[0]}: expected a share of the distinct blocks in (0, 1]")
    return args


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


def request_ends(trace, capacity: int) -> tuple[list, dict]:
    """Each request end `auto`'s shadows replay in a pass of `trace` through vLLM's manager
    (`(misses, hits)` columns, copied), and their context (an untimed pass)."""
    from hkv.integrations.vllm.replay import drive, hkv_manager

    manager = hkv_manager("auto", trace, capacity)
    shadows = manager._policy.policy._shadows  # vLLM's manager -> hkv's adapter -> auto
    ends, replay = [], shadows.replay_columns

    def recording(misses, hits, threshold=None, *, deferred=False):
        ends.append(((list(misses[0]), list(misses[1])), (list(hits[0]), list(hits[1]))))
        return replay(misses, hits, threshold, deferred=deferred)

    shadows.replay_columns = recording
    drive(trace, manager)
    return ends, shadows._context


PASSES = ("vllm:lru", "lru", "auto", "shadows", "lru+shadows", "shadows_in_pass")
"""`budget`'s passes a round: vLLM's lru, hkv's lru and `auto` through vLLM's manager, `auto`'s
shadows alone on its recorded request ends, back to back, and a pass of hkv's lru with those
request ends replayed at each request's end (`with_shadows`), and the shadows' own time in it."""
ADAPTER_PARTS = ("on_store_miss", "on_request_finished", "evict", "sync")
"""vLLM 0.32's calls into hkv's adapter a request makes (besides `get`, `insert` and the `mark_*`
of each block, the containers' own methods), none inside another but `sync` (the inserts handed
to the policy, inside the others)."""
AUTO_PARTS = ("after_request", "replay_columns", "_score")
"""`auto`'s request end (inside `on_request_finished`), of which its shadows' replay and their
scores (a switch included)."""


def timed_parts(trace, name: str, capacity: int) -> dict[str, list]:
    """One pass through vLLM's manager run by hkv's `name` (`lru` or `auto`), each of
    `ADAPTER_PARTS` and, for `auto`, `AUTO_PARTS` timed (the wrapper's own cost, some 0.1 us a
    call, included): part -> [seconds, calls]."""
    from bench.vllm_gpu.timers import PolicyTimer
    from hkv.integrations.vllm.replay import drive, hkv_manager

    manager = hkv_manager(name, trace, capacity)
    adapter = manager._policy
    owners = dict.fromkeys(ADAPTER_PARTS, adapter)
    if name == "auto":
        owners |= dict.fromkeys(AUTO_PARTS, adapter.policy)
        owners["replay_columns"] = adapter.policy._shadows
    cells = {}
    for part, owner in owners.items():
        cells[part] = [0.0, 0]
        setattr(owner, part, PolicyTimer._timed(getattr(owner, part), cells[part]))
    drive(trace, manager)
    return cells


def with_shadows(
    trace, capacity: int, ends: list, context: dict, out: list | None = None
) -> tuple[float, float]:
    """A pass of `trace` through vLLM's manager run by hkv's `lru`, where every request's end also
    replays `auto`'s recorded request end through a fresh `ShadowSet` of its experts, as `auto`
    does at that point: (the pass's seconds, the shadows' seconds inside it). The shadows then
    run where `auto` runs them, between vLLM's own calls, which leave other data in the CPU's
    caches than a loop of request ends replayed back to back does. `out` (a list) gets each
    replay's result, in order."""
    from hkv.integrations.vllm.replay import drive, hkv_manager
    from hkv.policies.auto import DEFAULT_EXPERTS
    from hkv.policies.shadow import ShadowSet

    manager = hkv_manager("lru", trace, capacity)
    adapter = manager._policy
    shadows = ShadowSet(list(DEFAULT_EXPERTS), capacity, context, native=True, keys=True)
    finished, pending, spent = adapter.on_request_finished, iter(ends), [0.0]

    def on_request_finished(*args, **kwargs):
        result = finished(*args, **kwargs)
        request = next(pending, None)
        if request is not None:
            start = time.perf_counter()
            hits = shadows.replay_columns(*request)
            spent[0] += time.perf_counter() - start
            if out is not None:
                out.append(hits)
        return result

    adapter.on_request_finished = on_request_finished
    seconds = trace.num_block_refs / drive(trace, manager)["refs_per_s"]
    return seconds, spent[0]


def budget(trace, fraction: float, repeats: int) -> dict[str, Any]:
    """vLLM's lru, hkv's lru and auto through vLLM's manager, and auto's shadows alone on the
    request ends it gave them, in `repeats` rounds (one pass of each a round)."""
    from hkv.policies.auto import DEFAULT_EXPERTS
    from hkv.policies.shadow import ShadowSet

    capacity = capacity_for(trace, fraction)
    ends, context = request_ends(trace, capacity)
    passes: dict[str, list[float]] = {name: [] for name in PASSES}
    for _ in range(repeats):
        for name in ("vllm:lru", "lru", "auto"):  # replay_speed's passes (`vllm:lru`: its baseline)
            passes[name].append(trace.num_block_refs / through_vllm(trace, name, capacity))
        shadows = ShadowSet(list(DEFAULT_EXPERTS), capacity, context, native=True, keys=True)
        start = time.perf_counter()
        for misses, hits in ends:
            shadows.replay_columns(misses, hits)
        passes["shadows"].append(time.perf_counter() - start)
        both, inside = with_shadows(trace, capacity, ends, context)
        passes["lru+shadows"].append(both)
        passes["shadows_in_pass"].append(inside)
    parts = {name: [timed_parts(trace, name, capacity) for _ in range(repeats)]
             for name in ("lru", "auto")}  # fmt: skip
    median = {name: statistics.median(times) for name, times in passes.items()}
    gaps = [v - h for v, h in zip(passes["vllm:lru"], passes["lru"], strict=True)]
    allowance = statistics.median(gaps)
    row = {
        "capacity_frac": fraction,
        "capacity_blocks": capacity,
        "block_refs": trace.num_block_refs,
        "request_ends": len(ends),
        "pass_s_median": {name: round(t, 4) for name, t in median.items()},
        "pass_s_best": {name: round(min(t), 4) for name, t in passes.items()},
        "auto_vs_vllm_lru_speed": round(median["vllm:lru"] / median["auto"], 3),
        "allowance_s": round(allowance, 4),
        "auto_beyond_lru_s": round(median["auto"] - median["lru"], 4),
        "shadows_share_of_allowance": round(median["shadows"] / allowance, 2)
        if allowance > 0
        else None,  # (hkv's lru no faster than vLLM's: no allowance to share)
        # what the shadows add to a pass where they run between vLLM's calls (`with_shadows`)
        "shadows_added_s": round(median["lru+shadows"] - median["lru"], 4),
        "shadows_added_share_of_allowance": round(
            (median["lru+shadows"] - median["lru"]) / allowance, 2
        )
        if allowance > 0
        else None,
        "parts_s_median": {  # (timed passes of their own after the rounds, one a repeat)
            name: {part: round(statistics.median(p[part][0] for p in runs), 4) for part in runs[0]}
            for name, runs in parts.items()
        },
        "parts_calls": {
            name: {part: cell[1] for part, cell in runs[0].items()} for name, runs in parts.items()
        },
    }
    print(f"{fraction:4.0%} ({capacity} blocks): vLLM lru {median['vllm:lru']:.3f} s, hkv lru "
          f"{median['lru']:.3f}, auto {median['auto']:.3f} (x{row['auto_vs_vllm_lru_speed']:.2f} "
          f"vLLM lru's speed); allowance {allowance:.3f} s, auto's shadows alone "
          f"{median['shadows']:.3f} s, {median['shadows_in_pass']:.3f} s inside a pass, which they "
          f"slow by {median['lru+shadows'] - median['lru']:.3f} s", flush=True)  # fmt: skip
    return row


def main(argv: list[str] | None = None) -> int:
    from hkv.policies import native

    args = parse(argv)
    if not native.built():
        sys.exit("hkv's C extension is not built here: `pip install -e .` builds it")
    trace = workloads(args.trace, "full", ["mooncake"])["mooncake"]
    if args.through_vllm:
        with one_core() as core, frozen_heap(trace):
            cells = [budget(trace, f, args.repeats) for f in args.capacities]
    else:
        requests = columns(trace)
        with one_core() as core, frozen_heap():
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
                "through_vllm": args.through_vllm,
                "pinned_core": core,
            },
            packages=("hkv", "vllm") if args.through_vllm else ("hkv",),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
