"""The priority shared by the value-aware policies: aged history frequency x value, prefix-capped.

Not a registered policy: `cost_aware` and `modality_aware` are this machinery with their own
`value()` (what one hit on a block is worth per slot it occupies).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush
from itertools import repeat
from typing import Any

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.policies.base import Key, check_float
from hkv.policies.priority import PriorityEntry, PriorityPolicy, inflated

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

    `value(meta)` must read only the meta's tokens, position, modality and tier: `_observe`
    computes it once per distinct tuple of them and remembers it.
    """

    history_factor: float = 32.0
    bypass: bool = True
    cost_model: Any = field(default=None, repr=False)  # a CostModel: what a hit saves
    config: Any = field(default=None, repr=False)  # a HybridKVCacheConfig (modality settings)
    context_fields = ("cost_model", "config")

    def validate(self) -> None:
        check_float(self.name, "history_factor", self.history_factor, 0.0, 1e6, open_low=True)
        if not isinstance(self.bypass, bool):
            raise HkvError(f"{self.name}.bypass: got {self.bypass!r}; expected true or false")

    def reset(self) -> None:
        super().reset()
        self.inflation = 0.0
        self._epoch_inflation = 0.0
        self._counts: dict[Key, int] = {}
        self._refs_until_halving = self._history_refs()
        self._last_position = -1
        self._one_request = False  # `after_request`: equal positions are other KV groups' keys
        self._chain_cap = math.inf
        self._epoch_keys: set[Key] = set()
        self._pending: dict[Key, tuple[int, float]] = {}  # admitted, not yet inserted
        # heap items of this epoch's keys, taken out of the heap by `_lowest_evictable` and
        # `_pass_over` until the epoch ends (see there); `_parked_keys` are their keys
        self._parked: list[tuple[float, int, Key]] = []
        self._parked_keys: set[Key] = set()
        self._worths: dict[tuple, float] = {}  # value() by (tokens, position, modality, tier)

    def _history_refs(self) -> int:
        return max(64, int(self.history_factor * self.capacity_blocks))

    def value(self, meta: BlockMeta) -> float:
        """Worth of one hit on `meta`'s block per slot it holds; 1 for every block by default."""
        return 1.0

    def _observe(self, key: Key, meta: BlockMeta) -> tuple[int, float]:
        """Count a reference and return (count, priority) for it, in prefix order."""
        position = meta.position
        last = self._last_position
        if position < last or (position == last and not self._one_request):
            self._start_epoch()
        self._last_position = position
        self._epoch_keys.add(key)
        counts = self._counts
        count = counts[key] = counts.get(key, 0) + 1
        self._refs_until_halving -= 1
        if self._refs_until_halving <= 0:
            self._halve_counts()
        shape = (meta.tokens, position, meta.modality, meta.tier)  # a literal: no call
        worth = self._worths.get(shape)
        if worth is None:
            worth = self._worths[shape] = self.value(meta)
        raw = self._epoch_inflation + count * worth
        cap = self._chain_cap
        priority = self._chain_cap = cap if cap < raw else raw  # min(raw, cap), without a call
        return count, priority - position * POSITION_TIE_BREAK

    def _start_epoch(self) -> None:
        """A new request: its blocks are judged against today's `L`, with no cap yet."""
        self._epoch_inflation = self.inflation
        self._chain_cap = math.inf
        self._epoch_keys = set()
        if self._parked:
            self._unpark()

    def _halve_counts(self) -> None:
        self._refs_until_halving = self._history_refs()
        self._counts = {k: c >> 1 for k, c in self._counts.items() if c > 1}

    def priority(self, entry: PriorityEntry) -> float:
        return entry.priority  # set by _observe before each push

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        observed = self._observe(key, meta)  # (count, priority), kept for `insert`
        pending = self._pending
        if len(pending) > self.capacity_blocks:
            pending.clear()  # admitted keys whose store never happened
        admitted = not self.bypass or len(self._entries) < self.capacity_blocks
        if not admitted:
            lowest = self._lowest_evictable()
            admitted = lowest is not None and observed[1] >= lowest
        if admitted:
            pending[key] = observed
        return admitted

    def _lowest_evictable(self) -> float | None:
        """Priority of the block `evict` would take now (current request protected).

        The current request's own blocks are never the answer, and with their chain-capped
        priorities they gather at the top of the heap: instead of stepping over them again at
        every admission of the request (quadratic in its length), their heap items are parked
        outside the heap until the request's epoch ends (`_unpark`); `_pass_over` parks those
        an eviction steps over. `_select` sees the heap as if they were in it (`_select`
        below), so every decision is the same."""
        heap, entries, epoch = self._heap, self._entries, self._epoch_keys
        skipped = []
        lowest = None
        while heap:
            priority, seq, key = heap[0]
            entry = entries.get(key)
            if entry is None or entry.seq != seq:
                heappop(heap)
            elif key in epoch:
                self._parked.append(heappop(heap))
                self._parked_keys.add(key)
            elif entry.meta.pinned:
                skipped.append(heappop(heap))
            else:
                lowest = priority
                break
        for item in skipped:
            heappush(heap, item)
        return lowest

    def _unpark(self) -> None:
        """The parked heap items back into the heap."""
        heap = self._heap
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

    def _pass_over(self, skipped, protected) -> None:
        """The current request's protected blocks that `_select` passed over are parked too:
        without `bypass`, nothing else takes the request's low-priority tail out of the way
        of its every eviction (quadratic in its length); `_lowest_evictable` never answers
        with them either. The other items go back into the heap."""
        heap, epoch = self._heap, self._epoch_keys
        for item in skipped:
            key = item[2]
            if key in protected and key in epoch:
                self._parked.append(item)
                self._parked_keys.add(key)
            else:
                heappush(heap, item)

    def _compact(self) -> None:
        """The heap rebuilt from the entries holds the parked keys' items again."""
        self._parked.clear()
        self._parked_keys.clear()
        super()._compact()

    def insert(self, key: Key, meta: BlockMeta) -> None:
        entries = self._entries
        if key in entries or len(entries) >= self.capacity_blocks:
            self._check_insert(key, len(entries), key in entries)  # raises
        # what admit() observed, or the reference now when inserted without an admit() first
        count, priority = self._pending.pop(key, None) or self._observe(key, meta)
        self._seq = seq = self._seq + 1
        entries[key] = PriorityEntry(meta, count, seq, priority)
        heap = self._heap
        heappush(heap, (priority, seq, key))
        if len(heap) > self._heap_limit:
            self._compact()

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key]) -> None:
        """The reused blocks touched in prefix order: the prefix cap (each block worth at most
        its parent, the deeper going first at equal worth) already gives chains up from the
        tail, and it reads a request's references head to tail.

        They are one request's: its epoch starts here, and a key at the same position as the
        one before it is another KV-cache group's block of that position (a hybrid model's
        chains, merged by token position), not the start of another request."""
        entries = self._entries
        first = next((entries[key] for key in reused if key in entries), None)
        if first is None:  # nothing resident: nothing observed
            self.touch_all(reused)
            return
        if first.meta.position <= self._last_position:
            self._start_epoch()  # what observing the first key would do
        self._last_position = -1
        self._one_request = True
        try:
            self.touch_all(reused)
        finally:
            self._one_request = False

    def touch(self, key: Key) -> None:
        self.touch_all((key,))

    def touch_all(self, keys: Iterable[Key]) -> None:
        """Each resident key's reference counted and its priority pushed, in order (one frame
        for a request's hits; the heap is bounded once, after them)."""
        entries, observe, heap = self._entries, self._observe, self._heap
        for key in keys:
            entry = entries.get(key)
            if entry is not None:
                entry.hits, entry.priority = observe(key, entry.meta)
                self._seq = entry.seq = seq = self._seq + 1
                heappush(heap, (entry.priority, seq, key))
        if len(heap) > self._heap_limit:
            self._compact()

    def restore(self, state: dict[str, Any], keys: dict[int, Key], metas: dict[int, BlockMeta]):
        """Take the state this policy reached in C (`Shadows.prefix_state`: keys as 64-bit
        ids; `keys` and `metas` give each id's key and meta): what `auto` does with a leader
        rebuilt there. Every field a decision reads is set as the Python policy would have it;
        the heap holds one item a resident key, nothing parked (neither changes a decision),
        and an entry's `hits` is its key's count now (no decision of these policies reads it)."""
        counts = dict(zip(state["count_keys"], state["count_values"], strict=True))
        ids, seqs = state["entry_keys"], state["entry_seqs"]
        priorities = state["entry_priorities"]
        resident = list(map(keys.__getitem__, ids))
        hits = map(counts.get, ids, repeat(0))
        made = map(PriorityEntry, map(metas.__getitem__, ids), hits, seqs, priorities)
        self._entries.clear()  # `_resident` is the same dict
        self._entries.update(zip(resident, made, strict=True))
        self._heap = list(zip(priorities, seqs, resident, strict=True))
        heapify(self._heap)
        self._counts = dict(zip(map(keys.__getitem__, counts), counts.values(), strict=True))
        self._epoch_keys = set(map(keys.__getitem__, state["epoch_keys"]))
        pending = zip(state["pending_keys"], state["pending_priorities"], strict=True)
        self._pending = {keys[i]: (counts.get(i, 0), priority) for i, priority in pending}
        self._parked, self._parked_keys = [], set()
        self._seq, self.inflation = state["seq"], state["inflation"]
        self._epoch_inflation, self._chain_cap = state["epoch_inflation"], state["chain_cap"]
        self._refs_until_halving = state["refs_until_halving"]
        self._last_position, self._one_request = state["last_position"], False

    def _on_evicted(self, entries: list[PriorityEntry]) -> None:
        self.inflation = inflated(self.inflation, entries)
