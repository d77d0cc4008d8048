"""The priority shared by the value-aware policies: aged history frequency x value, prefix-capped.

Not a registered policy: `cost_aware` and `modality_aware` are this machinery with their own
`value()` (what one hit on a block is worth per slot it occupies).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.policies.base import Key, check_float
from hkv.policies.priority import PriorityEntry, PriorityPolicy

POSITION_TIE_BREAK = 1e-12
"""Priority given up per token of position: at equal worth, the deeper block goes first."""


@dataclass(eq=False)
class PrefixValuePolicy(PriorityPolicy):
    """GreedyDual-style priority `L + count x value(meta)`, made for prefix caching.

    - `count` is the block's reference count over a long history that outlives residency
      (TinyLFU's idea: Einziger et al., "TinyLFU", ACM TOS 2017): a block evicted before its
      reuse still remembers how often it was wanted. Counts halve every
      `history_factor x capacity_blocks` references (aging).
    - `L` is GreedyDual's inflation value (the priority of the last victim), read once per access
      epoch, so all blocks of one request are judged against the same `L`.
    - Prefix cap: a block only hits when every block before it does, so it is never worth more
      than its parent. Callers reference a request's blocks in prefix order (the simulator, the
      block manager and the vLLM adapter all do); a reference whose position does not exceed the
      previous one starts a new epoch, and within an epoch each block's priority is capped by
      the previous block's. At equal priority the deeper block goes first, so chains shrink from
      the tail, like the leaves of SGLang's radix cache.
    - Admission: with `bypass`, a miss is declined when the cache is full and its priority is
      below every evictable resident's (it would be the next victim anyway).
    """

    history_factor: float = 32.0
    bypass: bool = True
    cost_model: Any = field(default=None, repr=False)  # a CostModel: what a hit saves
    config: Any = field(default=None, repr=False)  # a HybridKVCacheConfig (modality settings)
    context_fields = ("cost_model", "config")

    def validate(self) -> None:
        check_float(self.name, "history_factor", self.history_factor, 0.0, open_low=True)
        if not isinstance(self.bypass, bool):
            raise HkvError(f"{self.name}.bypass: got {self.bypass!r}; expected true or false")

    def reset(self) -> None:
        super().reset()
        self.inflation = 0.0
        self._epoch_inflation = 0.0
        self._counts: dict[Key, int] = {}
        self._refs_until_halving = self._history_refs()
        self._last_position = -1
        self._chain_cap = math.inf
        self._epoch_keys: set[Key] = set()
        self._pending: dict[Key, tuple[int, float]] = {}  # admitted, not yet inserted
        # heap items of this epoch's keys, taken out of the heap by `_lowest_evictable` until
        # the epoch ends (see there); `_parked_keys` are their keys
        self._parked: list[tuple[float, int, Key]] = []
        self._parked_keys: set[Key] = set()

    def _history_refs(self) -> int:
        return max(64, int(self.history_factor * self.capacity_blocks))

    def value(self, meta: BlockMeta) -> float:
        """Worth of one hit on `meta`'s block per slot it holds; 1 for every block by default."""
        return 1.0

    def _observe(self, key: Key, meta: BlockMeta) -> tuple[int, float]:
        """Count a reference and return (count, priority) for it, in prefix order."""
        position = meta.position
        if position <= self._last_position:
            self._epoch_inflation = self.inflation
            self._chain_cap = math.inf
            self._epoch_keys = set()
            if self._parked:
                self._unpark()
        self._last_position = position
        self._epoch_keys.add(key)
        counts = self._counts
        count = counts[key] = counts.get(key, 0) + 1
        self._refs_until_halving -= 1
        if self._refs_until_halving <= 0:
            self._halve_counts()
        raw = self._epoch_inflation + count * self.value(meta)
        cap = self._chain_cap
        priority = self._chain_cap = cap if cap < raw else raw  # min(raw, cap), without a call
        return count, priority - position * POSITION_TIE_BREAK

    def _halve_counts(self) -> None:
        self._refs_until_halving = self._history_refs()
        self._counts = {k: c >> 1 for k, c in self._counts.items() if c > 1}

    def priority(self, entry: PriorityEntry) -> float:
        return entry.priority  # set by _observe before each push

    def _push_with(self, key: Key, entry: PriorityEntry, priority: float) -> None:
        self._seq = seq = self._seq + 1
        entry.seq = seq
        entry.priority = priority
        heap = self._heap
        heapq.heappush(heap, (priority, seq, key))
        if len(heap) > 2 * len(self._entries) + 64:
            self._compact()

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        count, priority = self._observe(key, meta)
        if len(self._pending) > self.capacity_blocks:
            self._pending.clear()  # admitted keys whose store never happened
        admitted = not self.bypass or len(self._entries) < self.capacity_blocks
        if not admitted:
            lowest = self._lowest_evictable()
            admitted = lowest is not None and priority >= lowest
        if admitted:
            self._pending[key] = (count, priority)
        return admitted

    def _lowest_evictable(self) -> float | None:
        """Priority of the block `evict` would take now (current request protected).

        The current request's own blocks are never the answer, and with their chain-capped
        priorities they gather at the top of the heap: instead of stepping over them again at
        every admission of the request (quadratic in its length), their heap items are parked
        outside the heap until the request's epoch ends (`_unpark`). `_select` sees the heap
        as if they were in it (`_select` below), so every decision is the same."""
        heap, entries, skipped = self._heap, self._entries, []
        epoch, parked, parked_keys = self._epoch_keys, self._parked, self._parked_keys
        lowest = None
        while heap:
            priority, seq, key = heap[0]
            entry = entries.get(key)
            if entry is None or entry.seq != seq:
                heapq.heappop(heap)
            elif key in epoch:
                parked.append(heapq.heappop(heap))
                parked_keys.add(key)
            elif entry.meta.pinned:
                skipped.append(heapq.heappop(heap))
            else:
                lowest = priority
                break
        for item in skipped:
            heapq.heappush(heap, item)
        return lowest

    def _unpark(self) -> None:
        """The parked heap items back into the heap."""
        heap, heappush = self._heap, heapq.heappush
        for item in self._parked:
            heappush(heap, item)
        self._parked.clear()
        self._parked_keys.clear()

    def _select(self, n, protected, accept=None):
        """`PriorityPolicy._select` over the heap and the parked items: when every parked key
        is protected (a request's own blocks, as the replay and the block manager protect
        them) they would be passed over, so they stay parked; otherwise they go back first."""
        if self._parked and not all(map(protected.__contains__, self._parked_keys)):
            self._unpark()
        return super()._select(n, protected, accept)

    def _compact(self) -> None:
        """The heap rebuilt from the entries holds the parked keys' items again."""
        self._parked.clear()
        self._parked_keys.clear()
        super()._compact()

    def insert(self, key: Key, meta: BlockMeta) -> None:
        entries = self._entries
        self._check_insert(key, len(entries), key in entries)
        pending = self._pending.pop(key, None)
        if pending is None:
            count, priority = self._observe(key, meta)  # inserted without an admit() first
        else:
            count, priority = pending
        entry = entries[key] = PriorityEntry(meta, count, 0, priority)
        self._push_with(key, entry, priority)

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key]) -> None:
        """The reused blocks touched in prefix order: the prefix cap (each block worth at most
        its parent, the deeper going first at equal worth) already gives chains up from the
        tail, and it reads a request's references head to tail."""
        self.touch_all(reused)

    def touch(self, key: Key) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            entry.hits, priority = self._observe(key, entry.meta)
            self._push_with(key, entry, priority)

    def _on_evict(self, entry: PriorityEntry) -> None:
        self.inflation = max(self.inflation, entry.priority)
