"""`PriorityPolicy`: the one evictor of policies that are just a priority function.

SGLang's habit: a policy says how much a resident block is worth keeping (`priority(entry)`);
a min-heap of `(priority, seq, key)` with lazy invalidation gives up the lowest first.
`pop_first` is the heap's selection step, shared with the offline `belady`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from operator import attrgetter, itemgetter

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
ENTRY_PRIORITY = attrgetter("priority")
_SEQ = attrgetter("seq")
_KEY = itemgetter(2)


@dataclass(eq=False)
class PriorityPolicy(EvictionPolicy):
    """Evicts the resident block whose `priority()` is lowest; a policy is its priority function.

    One evictor serves every priority policy (SGLang's habit): a min-heap of
    `(priority, seq, key)` with lazy invalidation. A key's priority is recomputed when it is
    inserted or touched; older heap entries of the key become stale and are skipped, and the
    heap is rebuilt from the entries when it outgrows twice the capacity (which heap items are
    stale never changes a decision). Equal priorities go oldest-first (`seq`).
    `_on_evicted(entries)` lets a policy learn from its victims (GDSF's inflation clock).
    """

    def reset(self) -> None:
        self._entries: dict[Key, PriorityEntry] = {}
        self._resident = self._entries
        self._heap: list[tuple[float, int, Key]] = []
        self._seq = 0
        self._heap_limit = 2 * self.capacity_blocks + 64  # then `_compact`

    @abstractmethod
    def priority(self, entry: PriorityEntry) -> float:
        """Keep-worthiness of a resident block; the lowest is evicted first."""

    def insert(self, key: Key, meta: BlockMeta) -> None:
        entries = self._entries
        if key in entries or len(entries) >= self.capacity_blocks:
            self._check_insert(key, len(entries), key in entries)  # raises
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
        self._seq = entry.seq = seq = self._seq + 1
        entry.priority = priority = self.priority(entry)
        heap = self._heap
        heappush(heap, (priority, seq, key))
        if len(heap) > self._heap_limit:
            self._compact()

    def _compact(self) -> None:
        """The heap rebuilt from the entries: one item a resident key, none stale (in C)."""
        entries = self._entries
        values = list(entries.values())
        priorities, seqs = map(ENTRY_PRIORITY, values), map(_SEQ, values)
        self._heap = list(zip(priorities, seqs, entries, strict=True))
        heapify(self._heap)

    def _on_evicted(self, entries: list[PriorityEntry]) -> None:
        """Hook: learn from the victims of one eviction (their entries, in eviction order)."""

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
        entries, heap = self._entries, self._heap
        chosen: list[tuple[float, int, Key]] = []
        skipped: list[tuple[float, int, Key]] = []
        while heap and len(chosen) < n:
            item = heappop(heap)
            _, seq, key = item
            entry = entries.get(key)
            if entry is None or entry.seq != seq:
                continue  # stale: the key was touched, removed or evicted since
            if key in protected or entry.meta.pinned or (accept and not accept(entry)):
                skipped.append(item)
            else:
                chosen.append(item)
        if skipped:
            self._pass_over(skipped, protected)
        return _restore(heap, chosen, (), n)

    def _pass_over(self, skipped: list[tuple[float, int, Key]], protected: Collection[Key]):
        """The heap items `_select` passed over (protected, pinned or not accepted), back."""
        heap = self._heap
        for item in skipped:
            heappush(heap, item)

    def _commit(self, chosen: list[tuple[float, int, Key]]) -> list[Key]:
        """Forget the selected keys (telling `_on_evicted` of their entries) and return them."""
        victims = list(map(_KEY, chosen))
        self._on_evicted(list(map(self._entries.pop, victims)))
        return victims


def inflated(inflation: float, victims: list[PriorityEntry]) -> float:
    """GreedyDual's inflation value `L` after an eviction: the highest of `inflation` and the
    victims' priorities (max() folds left to right, as one max() per victim would)."""
    return max(inflation, *map(ENTRY_PRIORITY, victims)) if victims else inflation


def pop_first(heap: list[tuple], n: int, verdict: Callable[[tuple], bool | None]) -> list | None:
    """Pop the first `n` heap items whose `verdict` is True; None (and the heap as it was,
    less stale items) when there are fewer. `verdict` None marks a stale item, dropped for good;
    False an item that must stay, pushed back afterwards. The shared evictor's selection step."""
    chosen: list[tuple] = []
    skipped: list[tuple] = []
    while heap and len(chosen) < n:
        item = heappop(heap)
        ok = verdict(item)
        if ok is None:
            continue
        (chosen if ok else skipped).append(item)
    return _restore(heap, chosen, skipped, n)


def _restore(heap: list[tuple], chosen: list, skipped: Iterable, n: int) -> list | None:
    """Push back the items passed over, and the chosen ones too when fewer than `n`."""
    for item in skipped:
        heappush(heap, item)
    if len(chosen) < n:
        for item in chosen:
            heappush(heap, item)
        return None
    return chosen
