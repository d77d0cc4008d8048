"""vLLM 0.26 stand-ins: its request context, what its CPU offloading manager asks of a
`CachePolicy`, and its OrderedDict `lru`, for driving policies on CPU the way the H200 run did.

`python -m bench.adapter_overhead` times policies under these calls, and the tests
(tests/test_vllm_gpu_bench.py) check that hkv's adapter decides exactly as recorded under them.
The call order (`Manager026`), per request:

1. `touch(prompt_keys, ctx)` at lookup, `ctx` without `get_offload_key_position` (0.26);
2. lookup: `get` along the prompt until the first absent or not-ready chunk;
3. load of those hits: `get` each, pin (`mark_non_evictable`), and unpin when the load
   completes, before the request computes;
4. stores of `store_blocks` keys a step (512 = 8,192 tokens, the rig's `max_num_batched_tokens`):
   the previous step's store completes (`get`, ready, `mark_evictable`: one store is in flight),
   `get` drops resident keys, `evict(n, set(step_keys))` makes room (a store is refused when too
   few chunks are evictable or evict says None), `insert(key, chunk)` without context, then
   `touch(prompt_keys, ctx)` again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from hkv.sim.anchor import block_hash_chain, request_sequence

STORE_BLOCKS = 512
"""Blocks stored per step: 8,192 tokens, the rig's `max_num_batched_tokens`, in 16-token blocks."""


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

    sessions, requests = request_sequence(workload)
    chains = [
        [make_offload_key(i.to_bytes(8, "big"), 0) for i in block_hash_chain(s.tokens, 16)]
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
