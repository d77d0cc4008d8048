"""End to end in transformers: `HkvCache` against `DynamicCache` on one GPU.

    PYTHONPATH=. python bench/e2e.py --out data/results/e2e_h200.json      # on an H200 host
    PYTHONPATH=. python bench/e2e.py --quick --out /tmp/e2e_cpu.json       # CPU-sized smoke run

Model: MiniMax-M2.5's architecture with its attention dimensions (hidden 3072, 48 query heads,
8 KV heads, head_dim 128, partial RoPE, qk-norm) and its per-token expert compute (8 experts
active per token, intermediate 1536), but `--layers` layers (default 8) and 16 routed experts
instead of 256 (memory), random bf16 weights. KV per token per layer is the real model's
(4 KiB), and so is the compute per token per layer, so per-layer ratios of transfer to compute
are the real ones; a 62-layer model moves and computes 62/layers times more per token.

1. `decode`, one long sequence: prefill `context` random tokens, then time `--decode-steps`
   greedy steps. DynamicCache, then HkvCache with 100/50/32/10 % of the KV blocks hot (lossless
   cold blocks in pinned host RAM, LRU, 1 sink + 2 recent blocks pinned per layer, the next
   layer's cold blocks prefetched while a layer computes). Every step attends over the whole
   context, so every cold block crosses the host link once per token: the PCIe-bound case.
2. `sessions`, many conversations: `count` sessions of `context` tokens each, served turn by
   turn (batch 1, sessions in a fixed order, `rounds` rounds); a turn sends `turn_tokens` new
   tokens and decodes `decode_tokens`. DynamicCache keeps every session's KV on the GPU; hkv's
   `HkvSessionStore` keeps a GPU pool of a fraction of all sessions' KV, parks a session's
   blocks in host RAM when its turn ends and prefetches the next session's blocks on the copy
   streams while the current one decodes. KV is read once per turn, not once per token. Each
   hkv run is paired with a DynamicCache run just before it, and its slowdown is against that
   run (the host's speed drifts over minutes, and this decode is bound by Python and launches).
3. `multi_turn_ttft`: turn 1 prefills a `prefix`-token prompt and ends (`finish_turn` parks the
   KV); turn 2 adds `--turn-tokens` new tokens. `restore_ttft_s`: from host RAM; `restore_disk_
   ttft_s`: from the disk tier (host arena of a few blocks, the file's page cache dropped
   first); `recompute_ttft_s`: a fresh DynamicCache prefills prefix + new tokens. Median of
   `--repeats` after one untimed round; the cost model's estimate for real MiniMax-M2.5 beside.

Memory is measured, never computed, over each case's start (weights loaded, earlier cases
collected, PyTorch's cache emptied): the allocator's view (`torch.cuda.memory_allocated` when
the KV is in place, `max_memory_allocated` during the timed phase) and the driver's view
(nvitop's device memory used, with PyTorch's cache; its peak sampled every 5 ms on a thread).
`kv_resident_*`: what the KV holds between steps (DynamicCache: all of it; hkv: the GPU pool
and the tails); `kv_peak_*`: the most the timed phase needed (plus activations, assembled
layers, the dynamic cache's concatenation copies).

`--profile CONTEXT` prints torch.profiler tables of a few decode steps (DynamicCache and an
all-hot HkvCache) instead of running the benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import DynamicCache

from hkv.blocks import BlockMeta, Tier
from hkv.cost import CostModel
from hkv.integrations.transformers import (
    HkvCache,
    HkvCacheSettings,
    HkvSessionStore,
    hot_blocks_for,
)
from hkv.monitor import GpuPeakSampler, package_versions

HOT_FRACTIONS = (1.0, 0.5, 0.32, 0.1)
SESSION_HOT_FRACTIONS = (1.0, 0.5, 0.32, 0.25, 0.1)
"""The sessions workload adds a point between 32 % and 10 % to its frontier."""
FULL = {
    "layers": 8,
    "contexts": (8192, 32768, 131072),
    "prefixes": (2048, 8192, 32768, 65536),
    "sessions": {"count": 16, "context": 8192, "turn_tokens": 64, "decode_tokens": 32},
    "dims": {"hidden_size": 3072, "num_attention_heads": 48, "num_kv_heads": 8, "head_dim": 128},
    "experts": {"num_experts": 16, "num_experts_per_tok": 8, "intermediate_size": 1536},
    "block_tokens": 256,
    "dtype": torch.bfloat16,
}
QUICK = {
    "layers": 2,
    "contexts": (512, 1024),
    "prefixes": (256, 512),
    "sessions": {"count": 4, "context": 256, "turn_tokens": 16, "decode_tokens": 4},
    "dims": {"hidden_size": 128, "num_attention_heads": 4, "num_kv_heads": 2, "head_dim": 32},
    "experts": {"num_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 64},
    "block_tokens": 32,
    "dtype": torch.float32,
}
VOCAB = 512


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Memory:
    """GPU memory of one case, measured over the case's start (weights and nothing else):
    `resident()` after the KV is in place (allocator bytes, and nvitop's device bytes with
    PyTorch's cache emptied), `timed()` around the timed phase (peaks of both)."""

    def __enter__(self) -> Memory:
        self.resident_bytes = self.resident_nvitop_bytes = None
        self.peak_bytes = self.peak_nvitop_bytes = None
        gc.collect()  # earlier cases' caches must be gone, not waiting for the collector
        if torch.cuda.is_available():
            sync()
            torch.cuda.empty_cache()
            self.base = torch.cuda.memory_allocated()
        self.sampler = GpuPeakSampler().__enter__()
        self.base_nvitop = self.sampler.peak_bytes
        return self

    def __exit__(self, *exc: object) -> None:
        self.sampler.__exit__(*exc)

    def _over(self, value: int | None, base: int | None) -> int | None:
        return None if value is None or base is None else value - base

    def resident(self) -> None:
        if torch.cuda.is_available():
            sync()
            self.resident_bytes = torch.cuda.memory_allocated() - self.base
            torch.cuda.empty_cache()
            self.resident_nvitop_bytes = self._over(self.sampler.now(), self.base_nvitop)

    @contextlib.contextmanager
    def timed(self):
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self.sampler.restart()
        yield
        sync()
        if torch.cuda.is_available():
            self.peak_bytes = torch.cuda.max_memory_allocated() - self.base
        self.peak_nvitop_bytes = self._over(self.sampler.now(peak=True), self.base_nvitop)

    def fields(self, prefix: str) -> dict[str, Any]:
        return {
            f"{prefix}_resident_bytes": self.resident_bytes,
            f"{prefix}_resident_nvitop_bytes": self.resident_nvitop_bytes,
            f"{prefix}_peak_bytes": self.peak_bytes,
            f"{prefix}_peak_nvitop_bytes": self.peak_nvitop_bytes,
        }


def build_model(num_layers: int, params: dict[str, Any], device: torch.device) -> tuple[Any, str]:
    """MiniMax-M2 (or, lacking it, Llama) with the given dims and random weights."""
    try:
        from transformers import MiniMaxM2ForCausalLM

        from hkv.tiny_model import TinyMiniMaxSettings, tiny_config

        tokenizer = type(
            "Tok", (), {"__len__": lambda s: VOCAB, "bos_token_id": 1, "eos_token_id": 2}
        )
        settings = TinyMiniMaxSettings(
            num_layers=num_layers,
            max_position_embeddings=262144,
            **params["dims"],
            **params["experts"],
        )
        config, cls, name = tiny_config(settings, tokenizer()), MiniMaxM2ForCausalLM, "minimax_m2"
    except ImportError:
        from transformers import LlamaConfig, LlamaForCausalLM

        d = params["dims"]
        config = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=d["hidden_size"],
            intermediate_size=params["experts"]["intermediate_size"],
            num_hidden_layers=num_layers,
            num_attention_heads=d["num_attention_heads"],
            num_key_value_heads=d["num_kv_heads"],
            head_dim=d["head_dim"],
            max_position_embeddings=262144,
        )
        cls, name = LlamaForCausalLM, "llama (MiniMaxM2 missing in this transformers)"
    torch.manual_seed(0)
    with torch.device(device):
        model = cls(config).to(params["dtype"]).eval()
    return model, name


def tokens(n: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, n), generator=gen).to(device)


@torch.no_grad()
def forward(model, ids: torch.Tensor, cache) -> torch.Tensor:
    """The next greedy token after `ids` (logits of the last position only), without autograd
    (with it, a long prefill keeps every layer's activations: the 64K TTFT case ran out of
    memory that way, in the untimed prefill of its "resident" cache)."""
    out = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1:].argmax(-1)


def blocks_of(tokens_: int, block_tokens: int) -> int:
    return -(-tokens_ // block_tokens)


# -- 1. one long sequence -----------------------------------------------------------------------
@torch.no_grad()
def decode_case(model, make_cache, context: int, steps: int, device) -> dict[str, Any]:
    """Prefill, then `steps` timed greedy steps. Memory over the case's start: resident after
    the prefill (the KV in place), peak during the decode."""
    ids = tokens(context, device)
    with Memory() as memory:
        cache = make_cache()
        start = time.perf_counter()
        next_id = forward(model, ids, cache)
        sync()
        prefill_s = time.perf_counter() - start
        memory.resident()
        with memory.timed():
            start = time.perf_counter()
            for _ in range(steps):
                next_id = forward(model, next_id, cache)
            sync()
            decode_s = time.perf_counter() - start
    return {
        "prefill_s": round(prefill_s, 4),
        "decode_tokens_per_s": round(steps / decode_s, 3),
        "peak_decode_bytes": memory.peak_bytes,
        **memory.fields("kv"),
        "last_token": int(next_id.item()),
        "cache_object": cache,
    }


def decode_bench(model, num_layers, params, args, device) -> list[dict[str, Any]]:
    rows = []
    b = params["block_tokens"]
    for context in params["contexts"]:
        # Untimed first pass: kernels pick and cache their plans per shape on first use, which
        # would otherwise be charged to whichever cache runs first.
        warm = decode_case(model, DynamicCache, context, args.decode_steps, device)
        base = decode_case(model, DynamicCache, context, args.decode_steps, device)
        base["repeat_same_last_token"] = warm["last_token"] == base["last_token"]
        del warm["cache_object"], base["cache_object"]
        rows.append({"context": context, "cache": "dynamic", **base})
        print(json.dumps(rows[-1]), flush=True)
        total = context + args.decode_steps + 1
        per_layer = blocks_of(total, b)
        for fraction in HOT_FRACTIONS:
            hot = hot_blocks_for(fraction, total, num_layers, HkvCacheSettings(block_tokens=b))
            settings = HkvCacheSettings(
                block_tokens=b, hot_blocks=hot, host_blocks=per_layer * num_layers + 8
            )
            row = decode_case(
                model,
                lambda s=settings: HkvCache(num_layers, s),
                context,
                args.decode_steps,
                device,
            )
            cache = row.pop("cache_object")
            stats = cache.manager.stats
            rows.append(
                {
                    "context": context,
                    "cache": "hkv",
                    "hot_fraction": fraction,
                    "hot_blocks": hot,
                    "blocks_total": per_layer * num_layers,
                    **row,
                    "same_last_token_as_dynamic": row["last_token"] == base["last_token"],
                    "tokens_per_s_vs_dynamic": round(
                        row["decode_tokens_per_s"] / base["decode_tokens_per_s"], 4
                    ),
                    "peak_decode_vs_dynamic": _ratio(row["kv_peak_bytes"], base["kv_peak_bytes"]),
                    "resident_vs_dynamic": _ratio(
                        row["kv_resident_bytes"], base["kv_resident_bytes"]
                    ),
                    "bytes_moved": dict(stats.to_dict()["bytes_moved"]),
                    "host_hits": stats.hits["host"],
                    "prefetched_blocks": cache.store.prefetched,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            del cache, row
    return rows


def _ratio(a: int | None, b: int | None) -> float | None:
    return None if a is None or not b else round(a / b, 4)


# -- 2. many sessions ---------------------------------------------------------------------------
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
    spec, b = params["sessions"], params["block_tokens"]
    turn = spec["turn_tokens"] + spec["decode_tokens"]
    end_tokens = spec["context"] + args.rounds * turn
    total_blocks = spec["count"] * blocks_of(end_tokens, b) * num_layers
    generated = spec["count"] * args.rounds * (spec["decode_tokens"] + 1)
    kv_bytes_per_block = (
        2
        * b
        * params["dims"]["num_kv_heads"]
        * params["dims"]["head_dim"]
        * (torch.finfo(params["dtype"]).bits // 8)
    )

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
            "tokens_per_s": round(generated / seconds, 3),
            **memory.fields("kv"),
        }
        rows.append(base)
        print(json.dumps(rows[-1]), flush=True)
        hot = max(round(fraction * total_blocks), 3 * num_layers + 1)
        settings = HkvCacheSettings(block_tokens=b, hot_blocks=hot, host_blocks=total_blocks + 64)
        store, decisions, *hooks = session_hooks(num_layers, settings, spec["count"])
        run = Sessions(model, spec, device, *hooks)
        seconds, memory, hkv_tokens = run_sessions(run, args.rounds)
        manager = store._manager
        stats = manager.stats
        same = sum(x == y for x, y in zip(hkv_tokens, base_tokens, strict=True))
        rows.append(
            {
                "cache": "hkv",
                "hot_fraction": fraction,
                "hot_blocks": hot,
                "blocks_total": total_blocks,
                "pool_bytes": hot * kv_bytes_per_block,
                "seconds": round(seconds, 4),
                "tokens_per_s": round(generated / seconds, 3),
                "dynamic_seconds_same_pair": base["seconds"],
                "slowdown_vs_dynamic": round(seconds / base["seconds"] - 1, 4),
                "open_cache_s": round(run.open_s, 4),
                **memory.fields("kv"),
                "kv_vram_saved": _saved(memory.peak_bytes, base["kv_peak_bytes"]),
                "kv_vram_saved_nvitop": _saved(
                    memory.peak_nvitop_bytes, base["kv_peak_nvitop_bytes"]
                ),
                "kv_resident_saved": _saved(memory.resident_bytes, base["kv_resident_bytes"]),
                "restores": decisions.count("load"),
                "last_tokens_equal_dynamic": f"{same}/{len(base_tokens)}",
                "bytes_moved": dict(stats.to_dict()["bytes_moved"]),
                "demoted_clean": stats.demoted_clean,
                "host_hits": stats.hits["host"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        del store, manager, run
    return {
        **spec,
        "rounds": args.rounds,
        "tokens_generated": generated,
        "kv_bytes_total_at_end": total_blocks * kv_bytes_per_block,
        "rows": rows,
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
        seconds = {"dynamic": [], "hkv": []}
        same = 0
        for r in range(args.rounds):
            for s in range(spec["count"]):
                order = [("dynamic", dynamic), ("hkv", hkv)]
                if (r * spec["count"] + s) % 2:
                    order.reverse()
                last = {}
                for name, run in order:
                    took, last[name] = run.turn(r, s)
                    seconds[name].append(took)
                same += last["dynamic"] == last["hkv"]
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
                "kv_resident_saved": _saved(resident.get("hkv"), resident.get("dynamic")),
                "last_tokens_equal": f"{same}/{len(ratios)}",
                "bytes_moved": dict(stats.to_dict()["bytes_moved"]),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        del dynamic, hkv, store, hooks  # freed before the next pair
    return {**spec, "rounds": args.rounds, "rows": rows}


def _saved(used: int | None, baseline: int | None) -> float | None:
    return None if used is None or not baseline else round(1 - used / baseline, 4)


# -- 3. multi-turn time to first token ----------------------------------------------------------
@torch.no_grad()
def first_token_s(model, ids: torch.Tensor, cache, before: Callable[[], Any] = lambda: None):
    sync()
    start = time.perf_counter()
    cache = before() or cache
    forward(model, ids, cache).item()
    return time.perf_counter() - start


@torch.no_grad()
def restore_s(model, settings, num_layers, turn1, new, drop_disk_cache: bool) -> float:
    """Turn 1, park, then time turn 2's first token restoring the prefix."""
    gc.collect()
    store = HkvSessionStore(num_layers, settings)
    cache = store.cache_for("s", turn1)
    forward(model, turn1, cache)
    store.finish_turn("s", cache, turn1)
    manager = store._manager
    if drop_disk_cache:
        assert manager.block_ids(Tier.DISK), "the disk case put nothing on disk"
        manager.disk.drop_cache()
    full = torch.cat([turn1, new], dim=1)
    seconds = first_token_s(model, new, None, lambda: store.cache_for("s", full))
    assert store.last_decision["action"] == "load", store.last_decision
    manager.close()
    return seconds


def ttft_bench(model, num_layers, params, args, device) -> list[dict[str, Any]]:
    rows = []
    cost = CostModel.default()
    b = params["block_tokens"]
    for prefix in args.prefixes or params["prefixes"]:
        try:
            rows.append(ttft_case(model, num_layers, params, args, device, prefix, cost, b))
        except torch.cuda.OutOfMemoryError as exc:  # the rows before it stay
            rows.append({"prefix": prefix, "error": f"OutOfMemoryError: {exc}"[:400]})
        print(json.dumps(rows[-1]), flush=True)
    return rows


@torch.no_grad()
def ttft_case(model, num_layers, params, args, device, prefix, cost, b) -> dict[str, Any]:
    """One prefix: medians of restore from host, from disk, recompute, and resident."""
    new = tokens(args.turn_tokens, device, seed=1)
    turn1 = tokens(prefix, device)
    blocks = blocks_of(prefix + args.turn_tokens, b) * num_layers
    in_host = HkvCacheSettings(block_tokens=b, hot_blocks=blocks + 8, host_blocks=blocks + 8)
    times: dict[str, list[float]] = {"host": [], "disk": [], "recompute": [], "resident": []}
    with tempfile.TemporaryDirectory(dir=args.disk_dir) as folder:
        on_disk = HkvCacheSettings(
            block_tokens=b,
            hot_blocks=blocks + 8,
            host_blocks=4 * num_layers,
            disk_blocks=blocks + 8,
            disk_path=str(Path(folder) / "kv.bin"),
        )
        for _ in range(args.repeats + 1):  # the first round warms the kernels, untimed
            times["host"].append(restore_s(model, in_host, num_layers, turn1, new, False))
            times["disk"].append(restore_s(model, on_disk, num_layers, turn1, new, True))
            full = torch.cat([turn1, new], dim=1)
            gc.collect()
            times["recompute"].append(first_token_s(model, full, DynamicCache()))
            kept = DynamicCache()  # the KV never left the GPU: the floor of any restore
            forward(model, turn1, kept)
            times["resident"].append(first_token_s(model, new, kept))
            del kept
    host, disk, recompute, resident = (statistics.median(t[1:]) for t in times.values())
    estimate = [
        cost.decide(BlockMeta(tokens=256, position=p, tier=Tier.HOST), Tier.HOST, "bf16")
        for p in range(0, prefix, 256)
    ]
    return {
        "prefix": prefix,
        "turn_tokens": args.turn_tokens,
        "restore_ttft_s": round(host, 5),
        "restore_disk_ttft_s": round(disk, 5),
        "recompute_ttft_s": round(recompute, 5),
        "resident_ttft_s": round(resident, 5),
        "recompute_over_restore": round(recompute / host, 3),
        "recompute_over_restore_disk": round(recompute / disk, 3),
        "cost_model_minimax_m25": {
            "load_s": round(sum(d.load_s for d in estimate), 5),
            "recompute_s": round(sum(d.recompute_s for d in estimate), 5),
        },
    }


def link_gbps(device: torch.device) -> float | None:
    """Pinned host -> GPU bulk copy of 1 GiB, measured in this run."""
    if device.type != "cuda":
        return None
    host = torch.empty(2**30, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty_like(host, device=device)
    gpu.copy_(host)
    sync()
    start = time.perf_counter()
    gpu.copy_(host, non_blocking=True)
    sync()
    return round(2**30 / (time.perf_counter() - start) / 1e9, 2)


@torch.no_grad()
def profile(model, num_layers, params, context: int, device, steps: int = 4) -> dict[str, Any]:
    """torch.profiler over `steps` decode steps at `context`: DynamicCache vs all-hot HkvCache
    (where the time of a step goes; printed, not written)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    b = params["block_tokens"]
    out = {}
    total = context + 2 * steps + 1
    hot = hot_blocks_for(1.0, total, num_layers, HkvCacheSettings(block_tokens=b))
    settings = HkvCacheSettings(block_tokens=b, hot_blocks=hot, host_blocks=8)
    for name, make in (("dynamic", DynamicCache), ("hkv", lambda: HkvCache(num_layers, settings))):
        cache = make()
        next_id = forward(model, tokens(context, device), cache)
        for _ in range(steps):
            next_id = forward(model, next_id, cache)
        sync()
        activities = [ProfilerActivity.CPU] + (
            [ProfilerActivity.CUDA] if device.type == "cuda" else []
        )
        with torch_profile(activities=activities) as prof:
            start = time.perf_counter()
            for _ in range(steps):
                next_id = forward(model, next_id, cache)
            sync()
            seconds = time.perf_counter() - start
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
        print(f"== {name}: {seconds / steps * 1e3:.2f} ms per step\n{table}", flush=True)
        if device.type == "cuda":
            cuda = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=8)
            print(cuda, flush=True)
        out[name] = round(seconds / steps, 5)
        del cache
    return out


BENCHES = {
    "decode": decode_bench,
    "sessions": sessions_bench,
    "sessions_lockstep": sessions_lockstep_bench,
    "multi_turn_ttft": ttft_bench,
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="CPU-sized dims and contexts")
    parser.add_argument("--layers", type=int, default=None, help="model layers (8; quick: 2)")
    parser.add_argument("--decode-steps", type=int, default=None, help="32; quick: 8")
    parser.add_argument("--turn-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the sessions workload")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--disk-dir", default=None, help="where the disk tier's file goes")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), default=None)
    parser.add_argument("--prefixes", type=int, nargs="*", default=None, help="TTFT prefixes")
    parser.add_argument(
        "--profile", type=int, default=None, metavar="CONTEXT", help="profile decode steps only"
    )
    args = parser.parse_args(argv)
    params = QUICK if args.quick else FULL
    num_layers = args.layers or params["layers"]
    args.decode_steps = args.decode_steps or (8 if args.quick else 32)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    if device.type == "cuda":
        # cuDNN's SDPA builds a plan per new sequence length (milliseconds of CPU per call here,
        # and a different plan may round differently): every decode step is a new length. Both
        # caches use PyTorch's flash / memory-efficient kernels instead.
        torch.backends.cuda.enable_cudnn_sdp(False)
    model, arch = build_model(num_layers, params, device)
    gc.collect()
    gc.freeze()  # as serving engines do: collections skip the model and the imports
    weights = torch.cuda.memory_allocated() if device.type == "cuda" else None
    if args.profile:
        result = profile(model, num_layers, params, args.profile, device)
        print(json.dumps(result, indent=1))
        return result
    started = time.time()
    result = {
        "bench": "e2e",
        "quick": args.quick,
        "machine": {
            "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
            "host_to_gpu_pinned_gbps": link_gbps(device),
            "platform": platform.platform(),
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "nvitop": package_versions(("nvitop",))["nvitop"],
        },
        "model": {
            "architecture": arch,
            "layers": num_layers,
            **params["dims"],
            **params["experts"],
            "experts_implementation": getattr(model.config, "_experts_implementation", None),
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
            "cudnn_sdpa": torch.backends.cuda.cudnn_sdp_enabled()
            if device.type == "cuda"
            else None,
            "dtype": str(params["dtype"]).removeprefix("torch."),
            "weights": "random",
            "weights_bytes": weights,
        },
        "params": {
            "block_tokens": params["block_tokens"],
            "decode_steps": args.decode_steps,
            "hot_fractions": list(HOT_FRACTIONS),
            "sink_blocks": 1,
            "recent_blocks": 2,
            "cold_format": "passthrough (lossless)",
            "policy": "lru",
            "prefetch": True,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.only and args.out.exists():  # a later process adds its sections to the same file
        earlier = json.loads(args.out.read_text())
        if earlier.get("model") != result["model"] or earlier.get("params") != result["params"]:
            raise SystemExit(f"{args.out}: written with another model or params; use a new --out")
        result = {**earlier, **result}
    for name, bench in BENCHES.items():
        if args.only is not None and name not in args.only:
            continue
        if device.type == "cuda":
            print(f"{name}: {torch.cuda.memory_allocated() / 2**30:.2f} GiB allocated", flush=True)
        try:
            result[name] = bench(model, num_layers, params, args, device)
        except Exception as exc:  # recorded in the results (one device run must say what broke)
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{name} failed: {exc!r}", file=sys.stderr)
        result.setdefault("wall_s", {})[name] = round(time.time() - started, 1)
        started = time.time()
        partial = args.out.with_suffix(".partial")
        partial.write_text(json.dumps(result, indent=2) + "\n")
        partial.replace(args.out)  # partial results survive a kill; never a torn file
    return result


if __name__ == "__main__":
    main()
