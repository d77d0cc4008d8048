"""1. `decode`: one long sequence, DynamicCache against HkvCache at several hot fractions; and
the `--profile` tables of a few decode steps."""

from __future__ import annotations

import json
import time
from typing import Any

import torch
from transformers import DynamicCache

from bench.e2e.model import HOT_FRACTIONS, Memory, blocks_of, forward, ratio_of, sync, tokens
from hkv.integrations.transformers import HkvCache, HkvCacheSettings
from hkv.integrations.transformers.kv_blocks import hot_blocks_for


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
    for context in args.contexts or params["contexts"]:
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
                    "peak_decode_vs_dynamic": ratio_of(row["kv_peak_bytes"], base["kv_peak_bytes"]),
                    "resident_vs_dynamic": ratio_of(
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
