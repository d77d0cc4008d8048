"""`PriorityPolicy`: the one evictor of policies that are just a priority function.

SGLang's habit: a policy says how much a resident block is worth keeping (`priority(entry)`);
a min-heap of `(priority, seq, key)` with lazy invalidation gives up the lowest first.
`pop_first` is the heap's selection step, shared with the offline `belady`.
"""

from __future__ import annotations

import heapq
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from hkv.blocks import BlockMeta
from hkv.policies.base import EMPTY, EvictionPolicy, Key


@dataclass(slots=True, eq=False)
class PriorityEntry:
    """A resident block of a `PriorityPolicy`: its meta, reference count and heap version."""

    meta: BlockMeta
    hits: int
    seq: int
    priority: float


Accept = Callable[[PriorityEntry], bool]


@dataclass(eq=False)
class PriorityPolicy(EvictionPolicy):
    """Evicts the resident block whose `priority()` is lowest; a policy is its priority function.

    One evictor serves every priority policy (SGLang's habit): a min-heap of
    `(priority, seq, key)` with lazy invalidation. A key's priority is recomputed when it is
    inserted or touched; older heap entries of the key become stale and are skipped. Equal
    priorities go oldest-first (`seq`). `_on_evict(entry)` lets a policy learn from its victims
    (GDSF's inflation clock).
    """

    def reset(self) -> None:
        self._entries: dict[Key, PriorityEntry] = {}
        self._resident = self._entries
        self._heap: list[tuple[float, int, Key]] = []
        self._seq = 0

    @abstractmethod
    def priority(self, entry: PriorityEntry) -> float:
        """Keep-worthiness of a resident block; the lowest is evicted first."""

    def insert(self, key: Key, meta: BlockMeta) -> None:
        entries = self._entries
        self._check_insert(key, len(entries), key in entries)
        entry = entries[key] = PriorityEntry(meta, 0, 0, 0.0)
        self._push(key, entry)

    def touch(self, key: Key) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            entry.hits += 1
            self._push(key, entry)

    def refresh_all(self, keys: Iterable[Key]) -> None:
        """A fresh heap entry (a new `seq`) for each resident key, in order: at equal priority
        the last one given is the last to go."""
        entries = self._entries
        for key in keys:
            entry = entries.get(key)
            if entry is not None:
                self._push(key, entry)

    def remove(self, key: Key) -> None:
        self._entries.pop(key, None)

    def _push(self, key: Key, entry: PriorityEntry) -> None:
        self._seq = seq = self._seq + 1
        entry.seq = seq
        entry.priority = priority = self.priority(entry)
        heap = self._heap
        heapq.heappush(heap, (priority, seq, key))
        if len(heap) > 2 * len(self._entries) + 64:
            self._compact()

    def _compact(self) -> None:
        self._heap = [(e.priority, e.seq, k) for k, e in self._entries.items()]
        heapq.heapify(self._heap)

    def _on_evict(self, entry: PriorityEntry) -> None:
        """Hook: learn from a victim (called once per evicted block, in eviction order)."""

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        if n <= 0:
            return []
        chosen = self._select(n, protected)
        return None if chosen is None else self._commit(chosen)

    def _select(
        self,
        n: int,
        protected: Collection[Key],
        accept: Callable[[PriorityEntry], bool] | None = None,
    ) -> list[tuple[float, int, Key]] | None:
        """Pop the `n` lowest-priority evictable entries (that `accept`), or restore and say None.

        The chosen heap items are left out of the heap: pass them to `_commit`. This is
        `pop_first` with its verdict inlined: a call per heap item is most of an eviction's cost.
        """
        entries, heap, heappop = self._entries, self._heap, heapq.heappop
        chosen: list[tuple[float, int, Key]] = []
        skipped: list[tuple[float, int, Key]] = []
        while heap and len(chosen) < n:
            item = heappop(heap)
            entry = entries.get(item[2])
            if entry is None or entry.seq != item[1]:
                continue  # stale: the key was touched, removed or evicted since
            if item[2] in protected or entry.meta.pinned or (accept and not accept(entry)):
                skipped.append(item)
            else:
                chosen.append(item)
        return _restore(heap, chosen, skipped, n)

    def _commit(self, chosen: list[tuple[float, int, Key]]) -> list[Key]:
        """Forget the selected keys (calling `_on_evict` for each) and return them."""
        entries, on_evict = self._entries, self._on_evict
        victims = [item[2] for item in chosen]
        for key in victims:
            on_evict(entries.pop(key))
        return victims


def pop_first(heap: list[tuple], n: int, verdict: Callable[[tuple], bool | None]) -> list | None:
    """Pop the first `n` heap items whose `verdict` is True; None (and the heap as it was,
    less stale items) when there are fewer. `verdict` None marks a stale item, dropped for good;
    False an item that must stay, pushed back afterwards. The shared evictor's selection step."""
    chosen: list[tuple] = []
    skipped: list[tuple] = []
    while heap and len(chosen) < n:
        item = heapq.heappop(heap)
        ok = verdict(item)
        if ok is None:
            continue
        (chosen if ok else skipped).append(item)
    return _restore(heap, chosen, skipped, n)


def _restore(heap: list[tuple], chosen: list, skipped: list, n: int) -> list | None:
    """Push back the items passed over, and the chosen ones too when fewer than `n`."""
    heappush = heapq.heappush
    for item in skipped:
        heappush(heap, item)
    if len(chosen) < n:
        for item in chosen:
            heappush(heap, item)
        return None
    return chosen
