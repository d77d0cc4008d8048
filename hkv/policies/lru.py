"""Least recently used."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat

from hkv.blocks import BlockMeta
from hkv.policies.base import EMPTY, EvictionPolicy, Key, any_pinned, unprotected


@dataclass(eq=False)
class LRUPolicy(EvictionPolicy):
    """Evicts the block referenced longest ago; admits everything.

    Its priority is the time of last reference. Because a reference always makes that priority
    the largest, an `OrderedDict` in reference order is the whole evictor: O(1) per reference
    instead of a heap push, which is what lets the simulator replay >300k references/s.
    Same behaviour as vLLM's `lru` policy, except that hkv's replay touches a request's blocks
    in prefix order (DESIGN §2), so the last block of a request is the most recent.
    """

    name = "lru"
    reads_meta = False

    def reset(self) -> None:
        self._order: OrderedDict[Key, BlockMeta] = OrderedDict()

    def insert(self, key: Key, meta: BlockMeta) -> None:
        self._check_insert(key, len(self._order), key in self._order)
        self._order[key] = meta

    def insert_all(self, keys: Sequence[Key], meta: BlockMeta) -> None:
        order = self._order
        if len(order) + len(keys) > self.capacity_blocks or not order.keys().isdisjoint(keys):
            super().insert_all(keys, meta)  # raises at the first key that does not fit
            return
        size = len(order)
        order.update(zip(keys, repeat(meta)))
        if len(order) != size + len(keys):
            raise KeyError(f"{self.name}: insert_all got a key twice")

    def touch(self, key: Key) -> None:
        # try/except costs nothing when no exception is raised; contextlib.suppress would add a
        # context manager to every reference on the simulator's hot path.
        try:  # noqa: SIM105
            self._order.move_to_end(key)
        except KeyError:
            pass

    def touch_all(self, keys: Iterable[Key]) -> None:
        order = self._order  # the resident keys, each moved to the end in order (in C)
        deque(map(order.move_to_end, filter(order.__contains__, keys)), maxlen=0)

    def remove(self, key: Key) -> None:
        self._order.pop(key, None)

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        if n <= 0:
            return []
        order = self._order
        victims = unprotected(order, n, protected)
        if len(victims) < n:
            return None
        if any_pinned(order, victims):
            return self._evict_unpinned(n, protected)
        deque(map(order.__delitem__, victims), maxlen=0)
        return victims

    def _evict_unpinned(self, n: int, protected: Collection[Key]) -> list[Key] | None:
        """`evict` when a candidate is pinned (the block manager pins; vLLM never does)."""
        victims = []
        for key, meta in self._order.items():
            if key not in protected and not meta.pinned:
                victims.append(key)
                if len(victims) == n:
                    break
        else:
            return None
        for key in victims:
            del self._order[key]
        return victims

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: object) -> bool:
        return key in self._order

    def __iter__(self) -> Iterator[Key]:
        return iter(self._order)
