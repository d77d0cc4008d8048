"""2. `sessions` and `sessions_lockstep`: many conversations served turn by turn, their KV
parked in host RAM between turns (hkv) or kept on the GPU (DynamicCache)."""

from __future__ import annotations

import gc
import json
import statistics
import time
from typing import Any

import torch
from transformers import DynamicCache

from bench.e2e.model import (
    SESSION_HOT_FRACTIONS,
    Memory,
    blocks_of,
    forward,
    saved_share,
    sync,
    tokens,
)
from hkv.integrations.transformers import HkvCacheSettings, HkvSessionStore


def run_sessions(run: Sessions, rounds: int) -> tuple[float, Memory, list[int]]:
    """Prefill every session of `run` (untimed), then `rounds` rounds of turns (timed, memory
    sampled). Returns (seconds, memory, last token of each turn)."""
    with Memory() as memory:
        run.setup()
        memory.resident()
        with memory.timed():
            turns = [run.turn(r, s) for r in range(rounds) for s in range(run.spec["count"])]
    return sum(seconds for seconds, _ in turns), memory, [last for _, last in turns]


def sessions_bench(model, num_layers, params, args, device) -> dict[str, Any]:
    """Each hot fraction: a DynamicCache run, then an hkv run right after it (a pair)."""
    spec, b = params["sessions"], params["block_tokens"]
    turn = spec["turn_tokens"] + spec["decode_tokens"]
    end_tokens = spec["context"] + args.rounds * turn
    sizes = {
        "total_blocks": spec["count"] * blocks_of(end_tokens, b) * num_layers,
        "generated": spec["count"] * args.rounds * (spec["decode_tokens"] + 1),
        "kv_bytes_per_block": (
            2
            * b
            * params["dims"]["num_kv_heads"]
            * params["dims"]["head_dim"]
            * (torch.finfo(params["dtype"]).bits // 8)
        ),
    }

    def dynamic_run():
        return run_sessions(dynamic_sessions(model, spec, device), args.rounds)

    dynamic_run()  # untimed: warms the kernels for these shapes
    rows = []
    for fraction in SESSION_HOT_FRACTIONS:
        # A dynamic run right before each hkv run: the host's speed drifts over minutes (the
        # decode is bound by Python and kernel launches), so each ratio is within one pair.
        seconds, memory, base_tokens = dynamic_run()
        base = {
            "cache": "dynamic",
            "pair": fraction,
            "seconds": round(seconds, 4),
            "tokens_per_s": round(sizes["generated"] / seconds, 3),
            **memory.fields("kv"),
        }
        rows.append(base)
        print(json.dumps(rows[-1]), flush=True)
        pair = (fraction, base, base_tokens)
        rows.append(hkv_sessions_row(model, num_layers, params, args, device, pair, sizes))
        print(json.dumps(rows[-1]), flush=True)
    return {
        **spec,
        "rounds": args.rounds,
        "tokens_generated": sizes["generated"],
        "kv_bytes_total_at_end": sizes["total_blocks"] * sizes["kv_bytes_per_block"],
        "rows": rows,
    }


def hkv_sessions_row(model, num_layers, params, args, device, pair, sizes) -> dict[str, Any]:
    """The hkv run of one pair: `pair` is (hot fraction, the DynamicCache row, its tokens)."""
    fraction, base, base_tokens = pair
    spec, b = params["sessions"], params["block_tokens"]
    total_blocks = sizes["total_blocks"]
    hot = max(round(fraction * total_blocks), 3 * num_layers + 1)
    settings = HkvCacheSettings(block_tokens=b, hot_blocks=hot, host_blocks=total_blocks + 64)
    store, decisions, *hooks = session_hooks(num_layers, settings, spec["count"])
    run = Sessions(model, spec, device, *hooks)
    seconds, memory, hkv_tokens = run_sessions(run, args.rounds)
    stats = store._manager.stats
    same = sum(x == y for x, y in zip(hkv_tokens, base_tokens, strict=True))
    return {
        "cache": "hkv",
        "hot_fraction": fraction,
        "hot_blocks": hot,
        "blocks_total": total_blocks,
        "pool_bytes": hot * sizes["kv_bytes_per_block"],
        "seconds": round(seconds, 4),
        "tokens_per_s": round(sizes["generated"] / seconds, 3),
        "dynamic_seconds_same_pair": base["seconds"],
        "slowdown_vs_dynamic": round(seconds / base["seconds"] - 1, 4),
        "open_cache_s": round(run.open_s, 4),
        **memory.fields("kv"),
        "kv_vram_saved": saved_share(memory.peak_bytes, base["kv_peak_bytes"]),
        "kv_vram_saved_nvitop": saved_share(memory.peak_nvitop_bytes, base["kv_peak_nvitop_bytes"]),
        "kv_resident_saved": saved_share(memory.resident_bytes, base["kv_resident_bytes"]),
        "restores": decisions.count("load"),
        "last_tokens_equal_dynamic": f"{same}/{len(base_tokens)}",
        "bytes_moved": dict(stats.to_dict()["bytes_moved"]),
        "demoted_clean": stats.demoted_clean,
        "host_hits": stats.hits["host"],
    }


class Sessions:
    """One run of the sessions workload, turn by turn, so that two runs can alternate turns."""

    def __init__(self, model, spec, device, open_cache, start_turn, end_turn):
        self.model, self.spec = model, spec
        self.open_cache, self.start_turn, self.end_turn = open_cache, start_turn, end_turn
        self.ids = {s: tokens(spec["context"], device, seed=100 + s) for s in range(spec["count"])}
        self.device = device
        self.open_s = 0.0  # time in open_cache and start_turn, over all timed turns

    @torch.no_grad()
    def setup(self) -> None:
        for s, ids in self.ids.items():
            cache = self.open_cache(s, ids)
            forward(self.model, ids, cache)
            self.end_turn(s, cache, ids)
        sync()

    @torch.no_grad()
    def turn(self, r: int, s: int) -> tuple[float, int]:
        """One timed turn (synchronized at both ends): seconds, last token."""
        spec = self.spec
        new = tokens(spec["turn_tokens"], self.device, seed=1000 + r * spec["count"] + s)
        sync()
        start = time.perf_counter()
        self.ids[s] = torch.cat([self.ids[s], new], dim=1)
        cache = self.open_cache(s, self.ids[s])
        self.start_turn(s)
        self.open_s += time.perf_counter() - start
        fed, next_id = [], forward(self.model, new, cache)
        for _ in range(spec["decode_tokens"]):
            fed.append(next_id)
            next_id = forward(self.model, next_id, cache)
        self.ids[s] = torch.cat([self.ids[s], *fed], dim=1)
        self.end_turn(s, cache, self.ids[s])
        last = int(next_id.item())
        return time.perf_counter() - start, last


def dynamic_sessions(model, spec, device) -> Sessions:
    """The sessions workload on DynamicCaches, every one kept on the GPU."""
    caches: dict[int, DynamicCache] = {}
    return Sessions(
        model,
        spec,
        device,
        lambda s, ids: caches.setdefault(s, DynamicCache()),
        lambda s: None,
        lambda s, cache, ids: None,
    )


def session_hooks(num_layers, settings, count):
    """An `HkvSessionStore`, the list of its `cache_for` decisions, and the `open_cache`,
    `start_turn` (prefetch the next session) and `end_turn` hooks over it."""
    store = HkvSessionStore(num_layers, settings)
    decisions: list[str] = []

    def open_cache(s, ids):
        cache = store.cache_for(str(s), ids)
        decisions.append(store.last_decision["action"])
        return cache

    def start_turn(s):
        store.prefetch(str((s + 1) % count))

    def end_turn(s, cache, ids):
        store.finish_turn(str(s), cache, ids)

    return store, decisions, open_cache, start_turn, end_turn


def sessions_lockstep_bench(model, num_layers, params, args, device) -> dict[str, Any]:
    """The sessions workload for DynamicCache and hkv side by side, alternating turn by turn
    (which one goes first alternates too), so that both see the same host speed: the
    slowdown is sum(hkv turns) / sum(dynamic turns) - 1 over the same turns. Resident KV of
    each is measured after its setup (the peaks are in `sessions`, where each runs alone)."""
    spec, b = params["sessions"], params["block_tokens"]
    end_tokens = spec["context"] + args.rounds * (spec["turn_tokens"] + spec["decode_tokens"])
    total_blocks = spec["count"] * blocks_of(end_tokens, b) * num_layers
    rows = []
    for fraction in SESSION_HOT_FRACTIONS:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        dynamic = dynamic_sessions(model, spec, device)
        hot = max(round(fraction * total_blocks), 3 * num_layers + 1)
        settings = HkvCacheSettings(block_tokens=b, hot_blocks=hot, host_blocks=total_blocks + 64)
        store, _, *hooks = session_hooks(num_layers, settings, spec["count"])
        hkv = Sessions(model, spec, device, *hooks)
        resident = {}
        for name, run in (("dynamic", dynamic), ("hkv", hkv)):
            before = torch.cuda.memory_allocated() if device.type == "cuda" else None
            run.setup()
            if before is not None:
                resident[name] = torch.cuda.memory_allocated() - before
        seconds, same = lockstep_turns(dynamic, hkv, args.rounds, spec["count"])
        ratios = sorted(h / d for h, d in zip(seconds["hkv"], seconds["dynamic"], strict=True))
        stats = store._manager.stats
        rows.append(
            {
                "hot_fraction": fraction,
                "hot_blocks": hot,
                "blocks_total": total_blocks,
                "turns": len(ratios),
                "dynamic_s": round(sum(seconds["dynamic"]), 4),
                "hkv_s": round(sum(seconds["hkv"]), 4),
                "slowdown_vs_dynamic": round(sum(seconds["hkv"]) / sum(seconds["dynamic"]) - 1, 4),
                "turn_ratio_median": round(statistics.median(ratios), 4),
                "turn_ratio_p10_p90": [
                    round(ratios[len(ratios) // 10], 4),
                    round(ratios[(9 * len(ratios)) // 10], 4),
                ],
                "dynamic_resident_bytes": resident.get("dynamic"),
                "hkv_resident_bytes": resident.get("hkv"),
                "kv_resident_saved": saved_share(resident.get("hkv"), resident.get("dynamic")),
                "last_tokens_equal": f"{same}/{len(ratios)}",
                "bytes_moved": dict(stats.to_dict()["bytes_moved"]),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        del dynamic, hkv, store, hooks  # freed before the next pair
    return {**spec, "rounds": args.rounds, "rows": rows}


def lockstep_turns(dynamic: Sessions, hkv: Sessions, rounds: int, count: int):
    """Every turn of both runs, alternating which goes first: the seconds of each run's turns,
    and how many turns ended on the same token."""
    seconds: dict[str, list[float]] = {"dynamic": [], "hkv": []}
    same = 0
    for r in range(rounds):
        for s in range(count):
            order = [("dynamic", dynamic), ("hkv", hkv)]
            if (r * count + s) % 2:
                order.reverse()
            last = {}
            for name, run in order:
                took, last[name] = run.turn(r, s)
                seconds[name].append(took)
            same += last["dynamic"] == last["hkv"]
    return seconds, same
