"""2. `sessions` and `sessions_lockstep`: many conversations served turn by turn, their KV
parked in host RAM between turns (hkv) or kept on the GPU (DynamicCache); and
`sessions_lockstep_graphed`, the lock-step comparison with the model's feed-forward blocks
replayed from CUDA graphs for every cache."""

from __future__ import annotations

import gc
import json
import statistics
import time
from typing import Any

import torch
from transformers import DynamicCache, StaticCache

from bench.e2e.model import (
    SESSION_HOT_FRACTIONS,
    Memory,
    blocks_of,
    forward,
    saved_share,
    sync,
    tokens,
)
from hkv.integrations.transformers import HkvCacheSettings, HkvSessionStore, StaticBlockGraphs


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


def static_sessions(model, spec, device, rounds: int) -> Sessions:
    """The sessions workload on StaticCaches (the preallocated baseline), one per session, each
    sized for the session's last token."""
    caches: dict[int, StaticCache] = {}
    length = spec["context"] + rounds * (spec["turn_tokens"] + spec["decode_tokens"]) + 1

    def open_cache(s, ids):
        if s not in caches:
            caches[s] = StaticCache(config=model.config, max_cache_len=length)
        return caches[s]

    return Sessions(model, spec, device, open_cache, lambda s: None, lambda s, cache, ids: None)


def lockstep_runs(model, num_layers, params, args, device) -> dict[str, tuple[Sessions, Any]]:
    """Fresh runs of every cache of the lock-step comparison: DynamicCache, StaticCache and hkv
    at each hot fraction (name -> (run, its HkvSessionStore or None))."""
    spec, b = params["sessions"], params["block_tokens"]
    end_tokens = spec["context"] + args.rounds * (spec["turn_tokens"] + spec["decode_tokens"])
    total_blocks = spec["count"] * blocks_of(end_tokens, b) * num_layers
    runs = {
        "dynamic": (dynamic_sessions(model, spec, device), None),
        "static": (static_sessions(model, spec, device, args.rounds), None),
    }
    for fraction in args.hot_fractions or SESSION_HOT_FRACTIONS:
        hot = max(round(fraction * total_blocks), 3 * num_layers + 1)
        settings = HkvCacheSettings(block_tokens=b, hot_blocks=hot, host_blocks=total_blocks + 64)
        store, _, *hooks = session_hooks(num_layers, settings, spec["count"])
        runs[f"hkv {fraction}"] = (Sessions(model, spec, device, *hooks), store)
    return runs


def lockstep_repeat(runs, rounds: int, count: int, shift: int) -> dict[str, dict[str, Any]]:
    """One repeat: every run set up (resident KV measured), then every turn of every run, the
    order rotating from turn to turn. Per run: seconds, last tokens, resident bytes, the most
    memory one turn took above what was allocated before it."""
    cuda = torch.cuda.is_available()
    out = {name: {"seconds": 0.0, "last": [], "turn_peak_bytes": 0} for name in runs}
    for name, (run, _) in runs.items():
        before = torch.cuda.memory_allocated() if cuda else 0
        run.setup()
        out[name]["resident_bytes"] = torch.cuda.memory_allocated() - before if cuda else None
    names = list(runs)
    for turn in range(rounds * count):
        k = (turn + shift) % len(names)
        for name in names[k:] + names[:k]:
            if cuda:
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            took, last = runs[name][0].turn(turn // count, turn % count)
            out[name]["seconds"] += took
            out[name]["last"].append(last)
            if cuda:
                peak = torch.cuda.max_memory_allocated() - before
                out[name]["turn_peak_bytes"] = max(out[name]["turn_peak_bytes"], peak)
    return out


def sessions_lockstep_bench(model, num_layers, params, args, device) -> dict[str, Any]:
    """The sessions workload for DynamicCache, StaticCache and hkv at each hot fraction side by
    side, turn by turn, the order rotating each turn so that all see the same host speed;
    `--repeats` repeats, each with fresh caches. Per hkv row: the median over repeats of its
    time against DynamicCache's, StaticCache's and the faster of the two in the same repeat,
    with the spread (min, max)."""
    spec = params["sessions"]
    repeats = []
    for r in range(args.repeats):
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        runs = lockstep_runs(model, num_layers, params, args, device)
        repeats.append(lockstep_repeat(runs, args.rounds, spec["count"], shift=r))
        stores = {name: store for name, (_, store) in runs.items() if store is not None}
        for name, store in stores.items():
            repeats[-1][name]["bytes_moved"] = dict(store._manager.stats.to_dict()["bytes_moved"])
        print(json.dumps({k: round(v["seconds"], 3) for k, v in repeats[-1].items()}), flush=True)
        del runs, stores
    rows = [lockstep_row(repeats, name) for name in repeats[0] if name.startswith("hkv")]
    for row in rows:
        print(json.dumps(row), flush=True)
    return {
        **spec,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "baselines": lockstep_baselines(repeats),
        "rows": rows,
    }


def sessions_lockstep_graphed_bench(model, num_layers, params, args, device) -> dict[str, Any]:
    """`sessions_lockstep` with every cache's feed-forward blocks replayed from CUDA graphs at
    one token (decode steps) and at the turn's tokens (`StaticBlockGraphs`; attention and the
    caches stay eager): what each cache's own per-step work weighs once the model's launches no
    longer set the pace. Needs CUDA; on CPU the section says so."""
    if device.type != "cuda":
        return {"skipped": "CUDA graphs need a CUDA device"}
    counts = (1, params["sessions"]["turn_tokens"])
    with StaticBlockGraphs(model, token_counts=counts):
        result = sessions_lockstep_bench(model, num_layers, params, args, device)
    return result | {"graphed_token_counts": list(counts)}


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def _same_tokens(repeats: list[dict[str, dict[str, Any]]], name: str) -> str:
    """How many of `name`'s turns ended on DynamicCache's last token, over all repeats."""
    pairs = [
        pair
        for rep in repeats
        for pair in zip(rep[name]["last"], rep["dynamic"]["last"], strict=True)
    ]
    return f"{sum(a == b for a, b in pairs)}/{len(pairs)}"


def lockstep_baselines(repeats: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """DynamicCache and StaticCache per repeat: seconds, resident KV, the most one turn took,
    StaticCache's time against DynamicCache's and how many of its last tokens equal them."""
    out = {}
    for name in ("dynamic", "static"):
        out[name] = {
            "seconds": [round(rep[name]["seconds"], 4) for rep in repeats],
            "resident_bytes": repeats[0][name]["resident_bytes"],
            "turn_peak_bytes": max(rep[name]["turn_peak_bytes"] for rep in repeats),
        }
    ratios = [rep["static"]["seconds"] / rep["dynamic"]["seconds"] for rep in repeats]
    out["static_over_dynamic"] = _spread(ratios)
    out["static_last_tokens_equal_dynamic"] = _same_tokens(repeats, "static")
    return out


def lockstep_row(repeats: list[dict[str, dict[str, Any]]], name: str) -> dict[str, Any]:
    """One hkv run's row: its ratios to the baselines (median and spread over repeats), resident
    KV saved, the most one turn took (the working copy and activations), tokens, bytes moved."""
    dyn = [rep[name]["seconds"] / rep["dynamic"]["seconds"] for rep in repeats]
    static = [rep[name]["seconds"] / rep["static"]["seconds"] for rep in repeats]
    faster = [
        rep[name]["seconds"] / min(rep["dynamic"]["seconds"], rep["static"]["seconds"])
        for rep in repeats
    ]
    first = repeats[0]
    resident, base = first[name]["resident_bytes"], first["dynamic"]["resident_bytes"]
    peak = None if resident is None else resident + max(r[name]["turn_peak_bytes"] for r in repeats)
    base_peak = None if base is None else base + first["dynamic"]["turn_peak_bytes"]
    return {
        "hot_fraction": float(name.split()[1]),
        "turns": len(first[name]["last"]),
        "hkv_s": [round(rep[name]["seconds"], 4) for rep in repeats],
        "slowdown_vs_dynamic": round(statistics.median(dyn) - 1, 4),
        "vs_dynamic": _spread(dyn),
        "vs_static": _spread(static),
        "vs_faster_baseline": _spread(faster),
        "turn_ratio_median": round(statistics.median(dyn), 4),
        "hkv_resident_bytes": resident,
        "dynamic_resident_bytes": base,
        "kv_resident_saved": saved_share(resident, base),
        "kv_peak_saved": saved_share(peak, base_peak),
        "last_tokens_equal": _same_tokens(repeats, name),
        "bytes_moved": first[name]["bytes_moved"],
    }
