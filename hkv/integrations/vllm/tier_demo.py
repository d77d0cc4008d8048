"""`HkvDiskTier` inside vLLM's own `TieringOffloadingManager` on CPU, for notebook 07.

The spec and the manager are vLLM's (`OffloadingSpecFactory.create_spec` on a
`TieringOffloadingSpec` config, the tier loaded by `module_path`), driven through the calls
vLLM's scheduler makes, as `tests/test_vllm_tier.py` drives them; host memory stands in for the
GPU's blocks: a "GPU store" writes a chunk's bytes into the CPU tier's row that `prepare_store`
gives, as vLLM's worker would. Chunk `i` is `chunk_bytes` random bytes seeded by `i`, so what
comes back can be compared with what went in.

vLLM is imported inside the functions: importing this module needs only hkv and numpy.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hkv.errors import HkvError
from hkv.storage.disk_store import FILE_NAME, digest

MODEL = "minimax-m2.5"
"""The model vLLM's config names: the tier's cost model is the shipped spec of that name."""


@dataclass(frozen=True)
class TierDemo:
    """The demo's sizes: a CPU tier of `cpu_chunks` chunks of `chunk_bytes` (one block of
    `block_tokens` tokens each), a disk bound of `disk_chunks` chunks, and a workload of
    `num_requests` requests of `chunks_per_request` new chunks each."""

    chunk_bytes: int = 16 * 1024
    block_tokens: int = 16
    cpu_chunks: int = 8
    disk_chunks: int = 24
    num_requests: int = 16
    chunks_per_request: int = 8

    def __post_init__(self) -> None:
        for name in ("chunk_bytes", "block_tokens", "cpu_chunks", "disk_chunks"):
            if getattr(self, name) <= 0:
                raise HkvError(f"TierDemo.{name}: got {getattr(self, name)}; must be > 0")
        if not 0 < self.chunks_per_request <= self.cpu_chunks:
            raise HkvError(
                f"TierDemo.chunks_per_request: got {self.chunks_per_request}; must be in "
                f"[1, cpu_chunks={self.cpu_chunks}] (a request's chunks must fit the CPU tier)"
            )
        if self.num_requests <= 0:
            raise HkvError(f"TierDemo.num_requests: got {self.num_requests}; must be > 0")

    @property
    def bound_bytes(self) -> int:
        """The tier file's bound: `disk_chunks` slots (a 4 KiB header page each) and the
        file's own header pages."""
        return self.disk_chunks * (self.chunk_bytes + 4096) + 8192

    def request_ids(self, r: int) -> list[int]:
        """The chunk ids of request `r` of the workload."""
        return list(range(r * self.chunks_per_request, (r + 1) * self.chunks_per_request))


def hkv_tier(path: Path, demo: TierDemo, **settings: Any) -> dict[str, Any]:
    """The `secondary_tiers` entry of hkv's tier in `path`, bounded by `demo.bound_bytes`."""
    tier = {"type": "HkvDiskTier", "module_path": "hkv.integrations.vllm.tier", "path": str(path)}
    return tier | {"disk_bytes": demo.bound_bytes, "admission": "all"} | settings


def fs_tier(path: Path) -> dict[str, Any]:
    """The `secondary_tiers` entry of vLLM's own `fs` tier in `path`."""
    return {"type": "fs", "root_dir": str(path)}


def make_manager(tier: dict[str, Any], demo: TierDemo):
    """vLLM's `TieringOffloadingManager`: a CPU tier of `demo.cpu_chunks` chunks and `tier`."""
    from vllm.v1.kv_offload.config import (
        OffloadingCacheConfig,
        OffloadingConfig,
        OffloadingGroupConfig,
        OffloadingModelConfig,
        OffloadingParallelConfig,
    )
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    extra = {
        "spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": demo.cpu_chunks * demo.chunk_bytes,
        "secondary_tiers": [tier],
    }
    config = OffloadingConfig(
        groups=(OffloadingGroupConfig(demo.block_tokens, ("layer0",), 0),),
        worker_kv_bytes_per_block=demo.chunk_bytes,
        enable_kv_cache_events=False,
        extra_config=extra,
        engine_id=uuid.uuid4().hex[:8],
        model=OffloadingModelConfig(MODEL, "bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=demo.block_tokens, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(0, 1, 1, 1, 1, 1, 0, 1, None, True),
    )
    return OffloadingSpecFactory.create_spec(config).get_manager()


def key(i: int) -> bytes:
    """Chunk `i`'s offload key (a block hash and a group index, as vLLM's)."""
    return i.to_bytes(32, "big") + (0).to_bytes(4, "big")


def payload(i: int, demo: TierDemo) -> np.ndarray:
    """Chunk `i`'s bytes: `[chunk_bytes]` uint8, seeded by `i`."""
    return np.random.default_rng(i).integers(0, 256, demo.chunk_bytes, dtype=np.uint8)


def settle(manager) -> None:
    """Step the scheduler until the tiers' jobs are done."""
    from vllm.v1.kv_offload.base import ScheduleEndContext

    step = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
    for _ in range(5000):
        manager.on_schedule_end(step)
        if not manager.has_pending_work():
            return
        time.sleep(0.001)
    raise HkvError("the tiers' jobs did not finish within 5,000 scheduler steps")


def _row(manager, row: int, demo: TierDemo) -> np.ndarray:
    view = np.frombuffer(manager.primary_tier.get_kv_memoryview(), dtype=np.uint8)
    return view[row * demo.chunk_bytes : (row + 1) * demo.chunk_bytes]


def store(manager, ids: Sequence[int], req: str, end_tokens: Sequence[int], demo: TierDemo):
    """A request computes chunks `ids` (ending at token `end_tokens` each) on the "GPU", and
    vLLM stores them in the CPU tier, which cascades them to the secondary tier."""
    from vllm.v1.kv_offload.base import ReqContext

    ctx = ReqContext(req_id=req)
    for i, end in zip(ids, end_tokens, strict=True):
        ctx.set_offload_key_position(key(i), end)
    manager.on_new_request(ctx)
    out = manager.prepare_store([key(i) for i in ids], ctx)
    if out is None:
        raise HkvError(f"vLLM's CPU tier had no room for request {req}'s {len(ids)} chunks")
    for k, row in zip(out.keys_to_store, out.store_spec.block_ids, strict=True):
        _row(manager, int(row), demo)[:] = payload(int.from_bytes(k[:32], "big"), demo)
    manager.complete_store(out.keys_to_store, ctx)
    manager.on_request_finished(ctx)
    settle(manager)


def fetch(manager, i: int, demo: TierDemo) -> tuple[str, np.ndarray | None]:
    """Where vLLM finds chunk `i` ("cpu", "disk" or "miss") and its bytes as the GPU would
    load them (None on a miss: vLLM recomputes it)."""
    from vllm.v1.kv_offload.base import LookupResult, ReqContext

    ctx = ReqContext(req_id=f"read-{i}-{uuid.uuid4().hex[:6]}")
    manager.on_new_request(ctx)
    result = manager.lookup(key(i), ctx)
    source = {LookupResult.HIT: "cpu", LookupResult.MISS: "miss"}.get(result, "disk")
    if source == "disk":  # promotion from the secondary tier started
        settle(manager)
        result = manager.lookup(key(i), ctx)
    data = None
    if result is LookupResult.HIT:
        spec = manager.prepare_load([key(i)], ctx)
        data = _row(manager, int(spec.block_ids[0]), demo).copy()
        manager.complete_load([key(i)], ctx)
    manager.on_request_finished(ctx)
    settle(manager)
    return (source if data is not None else "miss"), data


def tier_of(manager):
    """The manager's one secondary tier."""
    (tier,) = manager.secondary_tiers
    return tier


def directory_bytes(path: Path) -> int:
    """Bytes of all files under `path`."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def stream(directory: Path, demo: TierDemo) -> tuple[Any, list[dict[str, int]]]:
    """The workload through two managers, one with vLLM's `fs` tier and one with hkv's, side
    by side; returns hkv's manager (still open) and per request the bytes on disk of each tier
    (hkv's file is preallocated) and of the chunks hkv's holds. The `fs` manager is shut down."""
    fs = make_manager(fs_tier(directory / "fs"), demo)
    hkv = make_manager(hkv_tier(directory / "hkv", demo), demo)
    rows = []
    try:
        for r in range(demo.num_requests):
            ids = demo.request_ids(r)
            ends = [demo.block_tokens * (n + 1) for n in range(len(ids))]
            for manager in (fs, hkv):
                store(manager, ids, f"req{r}", ends, demo)
            rows.append(
                {
                    "requests": r + 1,
                    "fs_bytes": directory_bytes(directory / "fs"),
                    "hkv_file_bytes": os.path.getsize(directory / "hkv" / FILE_NAME),
                    "hkv_chunk_bytes": tier_of(hkv).stats()["resident_chunks"] * demo.chunk_bytes,
                }
            )
    except BaseException:
        hkv.shutdown()
        raise
    finally:
        fs.shutdown()
    return hkv, rows


def second_pass(manager, demo: TierDemo) -> dict[str, int]:
    """Every chunk of the workload looked up again, most recent request first: chunk lookups
    served by the CPU tier, by the disk tier, and missed (recomputed)."""
    hits = dict.fromkeys(("cpu", "disk", "miss"), 0)
    for r in reversed(range(demo.num_requests)):
        for i in demo.request_ids(r):
            source, data = fetch(manager, i, demo)
            if data is not None and not np.array_equal(data, payload(i, demo)):
                raise HkvError(f"chunk {i} came back from the {source} tier with other bytes")
            hits[source] += 1
    return hits | {"disk_tier": _tier_counts(tier_of(manager))}


def _tier_counts(tier) -> dict[str, int]:
    stats = tier.stats()
    keep = ("written", "evicted", "resident_chunks", "loads", "load_chunks", "lost")
    return {name: int(stats[name]) for name in keep}


def restart(manager, directory: Path, demo: TierDemo) -> dict[str, Any]:
    """Shut `manager` down, start a new one on the same directory, count the chunks its tier
    found in the file, and read the first of them back through vLLM."""
    resident = tier_of(manager).stats()["resident_chunks"]
    manager.shutdown()
    second = make_manager(hkv_tier(directory / "hkv", demo), demo)
    try:
        tier = tier_of(second)
        every = range(demo.num_requests * demo.chunks_per_request)
        chunk = next((i for i in every if digest(key(i)) in tier.store), None)
        source, data = ("miss", None) if chunk is None else fetch(second, chunk, demo)
        return {
            "resident_before": int(resident),
            "found": int(tier.stats()["restored"]),
            "chunk": chunk,
            "read_from": source,
            "bytes_equal": data is not None and bool(np.array_equal(data, payload(chunk, demo))),
        }
    finally:
        second.shutdown()


def admission(directory: Path, demo: TierDemo, prompt_tokens: Sequence[int]) -> dict[str, Any]:
    """Cost-model admission (`admission: cost`, the shipped H200 profile): one request per
    prompt length stores its last `demo.chunks_per_request` chunks (its prefix is cached
    already); per request, whether the tier wrote them, and the tier's crossover."""
    manager = make_manager(hkv_tier(directory / "cost", demo, admission="cost"), demo)
    try:
        tier, rows = tier_of(manager), []
        for r, tokens in enumerate(prompt_tokens):
            n = min(demo.chunks_per_request, tokens // demo.block_tokens)
            ids = [10_000_000 + r * demo.chunks_per_request + c for c in range(n)]
            ends = [tokens - demo.block_tokens * (n - 1 - c) for c in range(n)]
            written = tier.stats()["written"]
            store(manager, ids, f"prompt{tokens}", ends, demo)
            admitted = tier.stats()["written"] - written
            rows.append({"prompt_tokens": tokens, "chunks": n, "written": int(admitted)})
        stats = tier.stats()
        return {
            "crossover_tokens": tier.crossover_tokens,
            "refused": int(stats["refused_admission"]),
            "written": int(stats["written"]),
            "requests": rows,
        }
    finally:
        manager.shutdown()
