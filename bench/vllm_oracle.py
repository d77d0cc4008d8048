"""A yardstick inside vLLM 0.26: the CPU tier's eviction policy that knows the workload's future.

No server can run it: it reads the benchmark's request order, which only the GPU benchmark
(`python -m bench.vllm_gpu`) knows. It bounds what any eviction policy could make of the anchor
workload in the real engine, the way `belady` does in hkv's simulator (`vllm_h200_sim.json`), but
measured: its wall time is the fastest the engine runs this workload with a CPU tier of that
size and any policy.

Each request carries its `[session, turn]` in `kv_transfer_params["hkv_oracle"]`; the first touch
of a request tags its keys with their session and block index and moves its session's next use
to the session's next turn in `schedule` (submission order). Every block of a session is next
used by the session's next request (prompts only grow), so Belady's rule -- give up the block
used furthest in the future -- orders sessions by their next request, and within the session
whose next request is furthest, blocks go from the tail, so that what stays is a usable prefix.
Blocks of no tagged request (outputs, warm-up prompts) are never used again and go first.
Chunks being written or read (`ref_cnt != 0`) and `protected` keys are never offered.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import islice
from typing import Any, ClassVar

from vllm.v1.kv_offload.cpu.policies.base import CachePolicy

NAME = "oracle"
PARAM = "hkv_oracle"
UNTAGGED = -1


class SessionOracle(CachePolicy):
    """vLLM 0.26's `CachePolicy` interface, with the future of the anchor workload."""

    schedule: ClassVar[list[tuple[int, int]]] = []
    """(session, turn) of every request in submission order; set before the engine runs."""

    def __init__(self, cache_capacity: int, **_: Any):
        super().__init__(cache_capacity)
        self.cache_capacity = cache_capacity
        self.turn_at = {request: index for index, request in enumerate(self.schedule)}
        self.clear()

    def get(self, key):
        return self.chunks.get(key)

    def clear(self) -> None:
        self.chunks: dict[Any, Any] = {}
        self.get = self.chunks.get  # the dict's own: vLLM calls it for every key
        self.tags: dict[Any, tuple[int, int]] = {}  # key -> (session, block index), from touches
        self.place: dict[Any, tuple[int, int]] = {}  # resident key -> (session, block index)
        self.blocks: dict[int, dict[int, Any]] = {}  # session -> block index -> resident key
        self.next_use: dict[int, float] = {UNTAGGED: math.inf}
        self.seen: dict[str, int] = {}  # request id -> keys tagged so far
        self.untagged = 0

    def insert(self, key, chunk, req_context=None) -> None:
        self.chunks[key] = chunk
        place = self.tags.get(key)
        if place is None:
            self.untagged -= 1
            place = (UNTAGGED, self.untagged)
        self.place[key] = place
        self.blocks.setdefault(place[0], {})[place[1]] = key

    def remove(self, key) -> None:
        self.chunks.pop(key, None)
        place = self.place.pop(key, None)
        if place is not None:
            del self.blocks[place[0]][place[1]]

    def touch(self, keys: Iterable[Any], req_context=None) -> None:
        params = getattr(req_context, "kv_transfer_params", None) or {}
        tag = params.get(PARAM)
        if tag is None:
            return
        session, turn = tag
        keys = keys if isinstance(keys, list | tuple) else list(keys)
        done = self.seen.get(req_context.req_id)
        if done is None:  # the request's first touch: its session's next use moves on
            done = 0
            self.next_use[session] = self.turn_at.get((session, turn + 1), math.inf)
        for index in range(done, len(keys)):
            self.tags.setdefault(keys[index], (session, index))
        self.seen[req_context.req_id] = len(keys)

    def evict(self, n: int, protected) -> list[tuple[Any, Any]] | None:
        if n <= 0:
            return []
        chunks, blocks = self.chunks, self.blocks

        def candidates():
            by_next_use = sorted(blocks, key=lambda s: self.next_use.get(s, math.inf))
            for session in reversed(by_next_use):  # furthest next use first
                keys = blocks[session]
                for index in sorted(keys, reverse=True):  # the tail of the chain first
                    key = keys[index]
                    if key not in protected and chunks[key].ref_cnt == 0:
                        yield key

        victims = list(islice(candidates(), n))
        if len(victims) < n:
            return None
        out = [(key, chunks[key]) for key in victims]
        for key in victims:
            self.remove(key)
        return out

    def mark_evictable(self, key) -> None:
        """Nothing to do: `evict` reads each chunk's `ref_cnt`."""

    def mark_non_evictable(self, key) -> None:
        """Nothing to do: `evict` reads each chunk's `ref_cnt`."""


def install(schedule: list[tuple[int, int]]) -> None:
    """Make `oracle` a policy name vLLM 0.26's offloading manager knows, with this future."""
    from vllm.v1.kv_offload.cpu import manager

    SessionOracle.schedule = list(schedule)
    manager._CACHE_POLICIES[NAME] = SessionOracle
