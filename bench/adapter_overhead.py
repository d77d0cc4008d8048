"""The vLLM adapter's own time per request, on CPU: hkv's policies next to vLLM's, same calls.

Replays bench/vllm_gpu.py's anchor workload (its `request_sequence` and `block_hash_chain`: the
same 128 requests in submission order, 16-token blocks, vLLM-style chained keys) through one
`CachePolicy` at a time, driven the way vLLM 0.26's `CPUOffloadingManager` and scheduler drive it
on the H200 (a simplified manager, one request after another, no GPU prefix cache):

1. `touch(prompt_keys, ctx)` at lookup, `ctx` without `get_offload_key_position` (0.26);
2. lookup: `get` along the prompt until the first absent or not-ready chunk;
3. load of those hits: `get` each, pin (`mark_non_evictable`), and unpin when the load
   completes, before the request computes;
4. stores of `store_blocks` keys a step (512 = 8,192 tokens, the rig's `max_num_batched_tokens`):
   the previous step's store completes (`get`, ready, `mark_evictable`: one store is in flight),
   `get` drops resident keys, `evict(n, set(step_keys))` makes room (a store is refused when too
   few chunks are evictable or evict says None), `insert(key, chunk)` without context, then
   `touch(prompt_keys, ctx)` again.

Capacity: the 8 GiB CPU tier in 512 KiB blocks (16 tokens x 32 KiB of the rig's 8-layer
MiniMax-M2.5 KV per token), 16,384 blocks, the `cpu_blocks` vLLM reported on the H200
(data/results/vllm_h200.json), about half of the workload's 33,314 distinct blocks.

Every policy method is timed by bench/vllm_gpu.py's own `PolicyTimer`, so the numbers compare
with the H200 run's `policy_s`; the timer's cost per call is measured in this process and
subtracted (`*_net`). A second, untimed pass gives the whole replay's wall time per request
(driver included, the same for every policy). Each number is the best of `--repeats` passes.

    python bench/adapter_overhead.py                     # data/results/adapter_overhead_cpu.json
    python bench/adapter_overhead.py --profile hkv_bip   # cProfile of one policy's replay
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import importlib.util
import os
import platform
import pstats
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VLLM_POLICIES = ("lru", "arc")
DEFAULT_POLICIES = ("lru", "arc", "lru026", "hkv_lru", "hkv_bip", "hkv_arc", "hkv_cost_aware")
STORE_BLOCKS = 512
"""Blocks stored per step: 8,192 tokens, the rig's `max_num_batched_tokens`, in 16-token blocks."""


def _sibling(name: str):
    """bench/<name>.py (bench/ is scripts, not a package), loaded once under its own name."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@dataclass(slots=True)
class OldReqContext:
    """vLLM 0.26's `ReqContext`: a request id and its transfer params, no key positions."""

    req_id: str
    kv_transfer_params: dict | None = None


@dataclass(frozen=True)
class Prompt:
    """One request of the sequence: its context and its prompt's offload keys, prefix order."""

    ctx: OldReqContext
    keys: list[bytes]


def prompts(workload) -> list[Prompt]:
    """The anchor workload's requests as vLLM offload keys (`make_offload_key`, group 0)."""
    from vllm.v1.kv_offload.base import make_offload_key

    bench = _sibling("vllm_gpu")
    sessions, requests = bench.request_sequence(workload)
    chains = [
        [make_offload_key(i.to_bytes(8, "big"), 0) for i in bench.block_hash_chain(s.tokens, 16)]
        for s in sessions
    ]
    out = []
    for r in requests:
        params = {"hkv_modalities": [list(s) for s in r.spans]} if r.spans else None
        keys = chains[r.session][: r.prompt_len // workload.block_tokens]
        out.append(Prompt(OldReqContext(f"req-{r.index}", params), keys))
    return out


class Manager026:
    """What vLLM 0.26's CPU offloading manager asks of its `CachePolicy`, per request.

    Chunk bookkeeping follows vLLM's manager (`ref_cnt` -1 while written, >0 while read; free
    and evictable counts); see the module docstring for the call order. `evictions` records
    every evicted key in order, so two implementations can be shown to decide alike.
    """

    def __init__(self, policy, capacity: int, store_blocks: int = STORE_BLOCKS):
        from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

        self.policy, self.capacity, self.store_blocks = policy, capacity, store_blocks
        self.new_chunk = ChunkStatus
        self.free_ids = list(range(capacity - 1, -1, -1))
        self.evictable = 0
        self.in_flight: list[bytes] = []
        self.evictions: list[bytes] = []
        self.loaded = self.stored = self.refused = 0

    def request(self, prompt: Prompt) -> None:
        p, keys, ctx = self.policy, prompt.keys, prompt.ctx
        p.touch(keys, ctx)
        hits = 0
        for key in keys:
            chunk = p.get(key)
            if chunk is None or chunk.ref_cnt < 0:
                break
            hits += 1
        self._load(keys[:hits])
        for start in range(hits, len(keys), self.store_blocks):
            self._complete_store()
            self._store(keys[start : start + self.store_blocks])
            p.touch(keys, ctx)

    def finish(self) -> None:
        self._complete_store()

    def _load(self, keys: list[bytes]) -> None:
        p = self.policy
        chunks = [p.get(key) for key in keys]
        for key, chunk in zip(keys, chunks, strict=True):
            if chunk.ref_cnt == 0:
                p.mark_non_evictable(key)
                self.evictable -= 1
            chunk.ref_cnt += 1
        for key in keys:
            chunk = p.get(key)
            chunk.ref_cnt -= 1
            if chunk.ref_cnt == 0:
                self.evictable += 1
                p.mark_evictable(key)
        self.loaded += len(keys)

    def _store(self, keys: list[bytes]) -> None:
        p = self.policy
        missing = [key for key in keys if p.get(key) is None]
        if not missing:
            return
        short = len(missing) - len(self.free_ids)
        if short > 0:
            if short > self.evictable:
                self.refused += 1
                return
            evicted = p.evict(short, set(keys))
            if evicted is None:
                self.refused += 1
                return
            self.evictable -= len(evicted)
            for key, chunk in evicted:
                self.free_ids.append(chunk.chunk_id)
                self.evictions.append(key)
        for key in missing:
            p.insert(key, self.new_chunk(self.free_ids.pop()))
        self.in_flight = missing
        self.stored += len(missing)

    def _complete_store(self) -> None:
        p = self.policy
        for key in self.in_flight:
            chunk = p.get(key)
            if chunk is not None and chunk.ref_cnt < 0:
                chunk.ref_cnt = 0
                self.evictable += 1
                p.mark_evictable(key)
        self.in_flight = []


class OrderedDictLRU:
    """vLLM's `lru` before its lazy-heap rewrite, as 0.26 runs it (written here, not vLLM's code).

    One `OrderedDict` in recency order; `touch` moves the keys to the recent end, last key last.
    The installed vLLM's `LRUCachePolicy` is a heap built for 0.32's once-per-request
    `on_request_finished`; under 0.26's whole-prompt touches it does far more work per call than
    the `lru` the H200 run measured, so this sketch is the closer yardstick for that run.
    """

    def __init__(self, cache_capacity: int):
        self.chunks: OrderedDict[bytes, Any] = OrderedDict()

    def get(self, key):
        return self.chunks.get(key)

    def insert(self, key, chunk) -> None:
        self.chunks[key] = chunk

    def remove(self, key) -> None:
        del self.chunks[key]

    def touch(self, keys, req_context=None) -> None:
        chunks = self.chunks
        for key in reversed(list(keys)):
            if key in chunks:
                chunks.move_to_end(key)

    def evict(self, n: int, protected):
        if n == 0:
            return []
        candidates = []
        for key, chunk in self.chunks.items():
            if chunk.ref_cnt == 0 and key not in protected:
                candidates.append((key, chunk))
                if len(candidates) == n:
                    break
        if len(candidates) < n:
            return None
        for key, _ in candidates:
            del self.chunks[key]
        return candidates

    def clear(self) -> None:
        self.chunks.clear()

    def mark_evictable(self, key) -> None:
        return

    def mark_non_evictable(self, key) -> None:
        return


def describe(name: str) -> str:
    """What runs under `name` in this benchmark."""
    if name in VLLM_POLICIES:
        return f"vLLM's own {name} CachePolicy, as installed here"
    if name == "lru026":
        return "OrderedDictLRU: vLLM 0.26-style lru, reconstructed in this file"
    return f"hkv's vLLM adapter (HkvCachePolicy) around hkv policy {name.removeprefix('hkv_')!r}"


def make_cache_policy(name: str, capacity: int):
    """vLLM's own `lru`/`arc`, the 0.26-style `lru026` sketch, or hkv's `hkv_<policy>`."""
    if name == "lru026":
        return OrderedDictLRU(capacity)
    if name == "lru":
        from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

        return LRUCachePolicy(cache_capacity=capacity)
    if name == "arc":
        from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy

        return ARCCachePolicy(cache_capacity=capacity)
    from hkv.integrations.vllm.policy import policy_class

    return policy_class(name)(cache_capacity=capacity, block_tokens=16)


def replay(
    name: str, requests: list[Prompt], capacity: int, timed: bool, store_blocks: int = STORE_BLOCKS
) -> dict[str, Any]:
    """One pass of `requests` through a fresh policy; wall time, timer totals, outcome."""
    policy = make_cache_policy(name, capacity)
    timer = _sibling("vllm_gpu").PolicyTimer(policy) if timed else None
    manager = Manager026(policy, capacity, store_blocks)
    start = time.perf_counter()
    for prompt in requests:
        manager.request(prompt)
    manager.finish()
    out = {
        "wall_s": time.perf_counter() - start,
        "loaded_blocks": manager.loaded,
        "stored_blocks": manager.stored,
        "evicted_blocks": len(manager.evictions),
        "refused_stores": manager.refused,
        "evictions_sha256": hashlib.sha256(b"".join(manager.evictions)).hexdigest(),
    }
    if timer is not None:
        out |= {"policy_s": timer.seconds, "policy_calls": timer.calls}
        out["by_method"] = {m: {"s": s, "calls": c} for m, (s, c) in timer.per_method.items()}
    return out


def measure(name: str, requests: list[Prompt], capacity: int, repeats: int, overhead_s: float):
    """Best-of-`repeats` timed and untimed passes of one policy, per request and per call."""
    passes = [replay(name, requests, capacity, True) for _ in range(repeats)]
    timed = min(passes, key=lambda r: r["policy_s"])
    wall_s = min(replay(name, requests, capacity, False)["wall_s"] for _ in range(repeats))
    n, calls = len(requests), timed["policy_calls"]
    net_s = max(0.0, timed["policy_s"] - calls * overhead_s)
    return {
        "policy": name,
        "implementation": describe(name),
        "us_per_request": 1e6 * timed["policy_s"] / n,
        "us_per_request_net": 1e6 * net_s / n,
        "us_per_call": 1e6 * timed["policy_s"] / calls,
        "us_per_call_net": 1e6 * net_s / calls,
        "calls_per_request": calls / n,
        "replay_wall_us_per_request": 1e6 * wall_s / n,
        "by_method_us_per_request": {
            m: round(1e6 * v["s"] / n, 2) for m, v in timed["by_method"].items() if v["calls"]
        },
        "calls_by_method_per_request": {
            m: round(v["calls"] / n, 2) for m, v in timed["by_method"].items() if v["calls"]
        },
        **{k: timed[k] for k in ("loaded_blocks", "stored_blocks", "evicted_blocks")},
        **{k: timed[k] for k in ("refused_stores", "evictions_sha256")},
    }


RATIO_FIELDS = (
    ("us_per_request_net", "net"),
    ("us_per_request", "raw"),
    ("replay_wall_us_per_request", "wall"),
)


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row's time relative to vLLM's installed `lru` and to the 0.26-style `lru026` in the
    same run (net, raw and whole-replay wall time), where those ran."""
    for base_name, label in (("lru", "vllm_lru"), ("lru026", "lru026")):
        base = next((r for r in rows if r["policy"] == base_name), None)
        if base is None:
            continue
        for row in rows:
            for field, suffix in RATIO_FIELDS:
                row[f"ratio_to_{label}_{suffix}"] = row[field] / base[field]
    return rows


def versions() -> dict[str, str]:
    import vllm

    import hkv

    return {
        "python": platform.python_version(),
        "vllm": vllm.__version__,
        "hkv": getattr(hkv, "__version__", "?"),
    }


def setup(policies: list[str], workload) -> list[Prompt]:
    """The requests, every policy's imports done, and the heap frozen for the garbage collector.

    vLLM freezes its heap after engine init (`freeze_gc_heap`), so collections during serving
    scan only what was allocated since; the same here, or the collector's passes over vLLM's
    and torch's import-time objects would be charged to whichever policy happens to run.
    """
    requests = prompts(workload)
    for name in policies:
        make_cache_policy(name, 16)
    gc.collect()
    gc.freeze()
    return requests


def run(args) -> dict:
    bench, sim = _sibling("vllm_gpu"), _sibling("vllm_gpu_sim")
    workload = bench.Workload()
    capacity = sim.blocks_for_gib(args.cpu_gib)
    t0 = time.perf_counter()
    requests = setup(args.policies, workload)
    build_s = time.perf_counter() - t0
    overhead = bench.PolicyTimer.measure_overhead()
    rows = [
        measure(p, requests, capacity, args.repeats, overhead["recorded_s"]) for p in args.policies
    ]
    with_ratios(rows)
    return {
        "generated_by": " ".join(["python bench/adapter_overhead.py", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpus": os.cpu_count(),
        },
        "versions": versions(),
        "call_pattern": "vLLM 0.26 (whole-prompt touch at lookup and after every store)",
        "workload": bench.workload_summary(workload),
        "cpu_gib": args.cpu_gib,
        "capacity_blocks": capacity,
        "store_blocks": STORE_BLOCKS,
        "repeats": args.repeats,
        "requests": len(requests),
        "request_keys": sum(len(r.keys) for r in requests),
        "workload_build_s": build_s,
        "timer_overhead_s_per_call": overhead["recorded_s"],
        "timer_wrapper_s_per_call": overhead["added_s"],
        "notes": [
            "Per request: the policy's own time over one pass of the anchor workload's 128 "
            "requests, best of `repeats`; *_net subtracts timer_overhead_s_per_call per call "
            "(what bench/vllm_gpu.py's PolicyTimer records around a no-op, measured here).",
            "lru and arc are the installed vLLM's heap-based policies, built for 0.32's "
            "once-per-request hook; under 0.26's whole-prompt touches they do more work than "
            "the lru of the H200 run. lru026 is the closer yardstick for that run.",
            "No GPU prefix cache and one request at a time: the call mix (calls per request, "
            "evictions, stores) is close to the H200 run's, the hit counts are not.",
        ],
        "policies": rows,
    }


def profile(name: str, args, top: int = 30) -> None:
    """cProfile one untimed replay of `name`, hottest functions by own time."""
    bench, sim = _sibling("vllm_gpu"), _sibling("vllm_gpu_sim")
    requests = setup([name], bench.Workload())
    capacity = sim.blocks_for_gib(args.cpu_gib)
    profiler = cProfile.Profile()
    profiler.runcall(replay, name, requests, capacity, False)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def summary_line(row: dict) -> str:
    """One policy's numbers on one line (ratios are net, to each yardstick that ran)."""
    vllm_lru = row.get("ratio_to_vllm_lru_net", float("nan"))
    lru026 = row.get("ratio_to_lru026_net", float("nan"))
    return (
        f"{row['policy']:>15} {row['us_per_request_net']:6.0f} us/request net "
        f"({row['us_per_request']:5.0f} raw), {row['us_per_call_net']:5.3f} us/call net, "
        f"{row['calls_per_request']:5.0f} calls/request; x{vllm_lru:.2f} vllm lru, "
        f"x{lru026:.2f} lru026"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES))
    parser.add_argument("--cpu-gib", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", metavar="POLICY", help="cProfile one policy, write nothing")
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/adapter_overhead_cpu.json")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if args.profile:
        profile(args.profile, args)
        return 0
    result = run(args)
    for row in result["policies"]:
        print(summary_line(row))
    if not args.no_write:
        _sibling("vllm_gpu").write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
