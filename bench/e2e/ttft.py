"""3. `multi_turn_ttft`: the next turn's first token, restoring the parked prefix from host RAM
or disk against recomputing it; and the link's bandwidth.

On a GPU each repeat also times the host restore, the recompute and the resident floor with the
model's feed-forward blocks replayed from CUDA graphs at the turn's token count
(`StaticBlockGraphs`, as vLLM runs a model: attention and the cache stay eager), in the `graphed`
part of each row: the eager 64-token forward is bound by the host launching kernels."""

from __future__ import annotations

import gc
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

from bench.e2e.model import blocks_of, forward, sync, tokens
from hkv.blocks import BlockMeta, Tier
from hkv.cost import CostModel
from hkv.integrations.transformers import HkvCacheSettings, HkvSessionStore, StaticBlockGraphs


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
    store.park("s")  # to host RAM (and disk) now: the pool would keep it
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
    graphs = None
    if device.type == "cuda":
        graphs = StaticBlockGraphs(model, token_counts=(args.turn_tokens,))
    try:
        for prefix in args.prefixes or params["prefixes"]:
            try:
                rows.append(
                    ttft_case(model, num_layers, params, args, device, prefix, cost, b, graphs)
                )
            except torch.cuda.OutOfMemoryError as exc:  # the rows before it stay
                rows.append({"prefix": prefix, "error": f"OutOfMemoryError: {exc}"[:400]})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if graphs is not None:
            graphs.remove()
    return rows


@torch.no_grad()
def ttft_case(model, num_layers, params, args, device, prefix, cost, b, graphs) -> dict[str, Any]:
    """One prefix: medians of restore from host, from disk, recompute, and resident; with
    `graphs` (`StaticBlockGraphs`), the same without disk with graphs on, in each repeat."""
    new = tokens(args.turn_tokens, device, seed=1)
    turn1 = tokens(prefix, device)
    blocks = blocks_of(prefix + args.turn_tokens, b) * num_layers
    in_host = HkvCacheSettings(block_tokens=b, hot_blocks=blocks + 8, host_blocks=blocks + 8)
    times: dict[str, list[float]] = {"host": [], "disk": [], "recompute": [], "resident": []}
    graphed: dict[str, list[float]] = {"host": [], "recompute": [], "resident": []}
    with tempfile.TemporaryDirectory(dir=args.disk_dir) as folder:
        on_disk = HkvCacheSettings(
            block_tokens=b,
            hot_blocks=blocks + 8,
            host_blocks=4 * num_layers,
            disk_blocks=blocks + 8,
            disk_path=str(Path(folder) / "kv.bin"),
        )
        for _ in range(args.repeats + 1):  # the first round warms the kernels, untimed
            if graphs is not None:
                graphs.enabled = False
            times["disk"].append(restore_s(model, on_disk, num_layers, turn1, new, True))
            three_ways(times, model, in_host, num_layers, turn1, new)
            if graphs is not None:
                graphs.enabled = True
                three_ways(graphed, model, in_host, num_layers, turn1, new)
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
        "per_repeat": per_repeat(times),
        "graphed": None if graphs is None else graphed_fields(graphed, args.turn_tokens),
        "cost_model_minimax_m25": {
            "load_s": round(sum(d.load_s for d in estimate), 5),
            "recompute_s": round(sum(d.recompute_s for d in estimate), 5),
        },
    }


def three_ways(times: dict[str, list[float]], model, settings, num_layers, turn1, new) -> None:
    """One repeat's restore from host, recompute and resident floor, appended to `times`."""
    times["host"].append(restore_s(model, settings, num_layers, turn1, new, False))
    full = torch.cat([turn1, new], dim=1)
    gc.collect()
    times["recompute"].append(first_token_s(model, full, DynamicCache()))
    kept = DynamicCache()  # the KV never left the GPU: the floor of any restore
    forward(model, turn1, kept)
    times["resident"].append(first_token_s(model, new, kept))


def per_repeat(times: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Ratios within each timed repeat, against the same minute's recompute and resident
    floor: a shared host's speed drifts between minutes, and the floor (a CPU-bound forward)
    with it."""
    pairs = list(zip(times["recompute"][1:], times["host"][1:], times["resident"][1:], strict=True))
    return {
        "recompute_over_restore": _spread([r / h for r, h, _ in pairs]),
        "restore_over_resident": _spread([h / f for _, h, f in pairs]),
        "recompute_over_resident": _spread([r / f for r, _, f in pairs]),
    }


def graphed_fields(times: dict[str, list[float]], turn_tokens: int) -> dict[str, Any]:
    """The `graphed` part of a row: medians and per-repeat ratios with the feed-forward blocks
    replayed from CUDA graphs (the recompute's 8K-token forward runs them eagerly: no graph
    was captured at its size)."""
    host, recompute, resident = (statistics.median(t[1:]) for t in times.values())
    return {
        "graphed_token_counts": [turn_tokens],
        "restore_ttft_s": round(host, 5),
        "recompute_ttft_s": round(recompute, 5),
        "resident_ttft_s": round(resident, 5),
        "recompute_over_restore": round(recompute / host, 3),
        "per_repeat": per_repeat(times),
    }


def _spread(values: list[float]) -> dict[str, Any]:
    """Median and range of per-repeat ratios."""
    return {
        "median": round(statistics.median(values), 3),
        "range": [round(min(values), 3), round(max(values), 3)],
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
