"""`QueuePolicy`: the shared base of policies whose resident blocks sit in a few ordered queues.

LRU keeps one queue, ARC two (T1, T2), DIP/BIP two (cold, warm). Each queue is a dict of key ->
`BlockMeta` whose iteration order (or its reverse) is an eviction order. This base owns what
such policies share: length, membership, iteration, `remove`, the generic `evict` over the
queues' eviction orders (the skipping of protected keys in C, with a slow path for pinned
blocks), and the checks of a bulk insert. A subclass sets `self._queues` in `reset` and says in
`_eviction_order()` which queue gives up blocks first, in which direction.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, filterfalse

from hkv.blocks import BlockMeta
from hkv.policies.base import EMPTY, EvictionPolicy, Key, any_pinned, unprotected

Queue = dict[Key, BlockMeta]


@dataclass(eq=False)
class QueuePolicy(EvictionPolicy):
    """Resident blocks in the dicts of `self._queues` (each key in exactly one of them), a
    tuple that `reset` builds (instance state, not a dataclass field)."""

    def _eviction_order(self) -> Iterable[tuple[Queue, Iterable[Key]]]:
        """Each queue with its keys in the order they are given up, first queue first."""
        # (queue, its order), in C; `strict` is moot for one tuple twice and a keyword would
        # cost zip its fast path, on every `evict`
        return zip(self._queues, self._queues)  # noqa: B905

    def _recent_ends(self) -> Iterable[Queue]:
        """The queues whose last key is the last to be evicted (`refresh_all` re-ranks there)."""
        return self._queues

    def refresh_all(self, keys: Iterable[Key]) -> None:
        """Each resident key to the recent end of its own queue, in the given order."""
        if not isinstance(keys, list | tuple):
            keys = list(keys)
        for queue in self._recent_ends():
            for key in filter(queue.__contains__, keys):
                queue[key] = queue.pop(key)

    def remove(self, key: Key) -> None:
        for queue in self._queues:
            if queue.pop(key, None) is not None:
                return

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        if n == 1:  # the replay's and the block manager's case, without the bookkeeping below
            skip = protected.__contains__  # the first unprotected key, skipped to in C
            for queue, order in self._eviction_order():
                for key in filterfalse(skip, order):
                    if queue[key].pinned:
                        return self._evict_unpinned(1, protected)
                    del queue[key]  # and the iteration ends here, before it sees the change
                    return [key]
            return None
        if n <= 0:
            return []
        picks: list[tuple[Queue, list[Key]]] = []
        needed = n
        for queue, order in self._eviction_order():
            # keys only, skipped in C: vLLM's adapter protects every chunk in flight, and a
            # skipped key should cost one set lookup and nothing more
            keys = unprotected(order, needed, protected)
            picks.append((queue, keys))
            needed -= len(keys)
            if not needed:
                break
        if needed:
            return None
        if any(any_pinned(queue, keys) for queue, keys in picks):
            return self._evict_unpinned(n, protected)
        for queue, keys in picks:
            deque(map(queue.__delitem__, keys), maxlen=0)
        return picks[0][1] if len(picks) == 1 else [key for _, keys in picks for key in keys]

    def evict_chains(
        self, n: int, protected: Collection[Key], stand_in: Callable[[Key, Collection[Key]], Key]
    ) -> list[Key] | None:
        """`evict` with chains (`EvictionPolicy.evict_chains`): a block of a chain stays the
        candidate until its chain's deeper blocks are taken and it is taken itself."""
        if n <= 0:
            return []
        taken: dict[Key, None] = {}
        orders = (order for _, order in self._eviction_order())
        for key in filterfalse(protected.__contains__, chain.from_iterable(orders)):
            while key not in taken:
                victim = stand_in(key, taken)
                if self._is_pinned(victim):
                    return self._evict_unpinned(n, protected)  # chains aside (vLLM never pins)
                taken[victim] = None
                if len(taken) == n:
                    deque(map(self.remove, taken), maxlen=0)
                    return list(taken)
        return None

    def _is_pinned(self, key: Key) -> bool:
        for queue in self._queues:
            meta = queue.get(key)
            if meta is not None:
                return meta.pinned
        raise KeyError(f"{self.name}: {key!r} is not resident")

    def _evict_unpinned(self, n: int, protected: Collection[Key]) -> list[Key] | None:
        """`evict` when a candidate is pinned (the block manager pins; vLLM never does)."""
        victims: list[tuple[Queue, Key]] = []
        for queue, order in self._eviction_order():
            for key in order:
                if key not in protected and not queue[key].pinned:
                    victims.append((queue, key))
                    if len(victims) == n:
                        break
            if len(victims) == n:
                break
        else:
            return None
        for queue, key in victims:
            del queue[key]
        return [key for _, key in victims]

    def _bulk_fits(self, keys: Sequence[Key]) -> bool:
        """Whether `keys` all fit and none is resident: then a bulk insert may skip the
        per-key checks. Otherwise the caller falls back to `insert` key by key, which raises
        at the first key that does not fit."""
        if len(self) + len(keys) > self.capacity_blocks:
            return False
        return all(queue.keys().isdisjoint(keys) for queue in self._queues)

    def _check_bulk(self, size_before: int, keys: Sequence[Key]) -> None:
        """After a bulk insert: a key given twice collapsed into one entry."""
        if len(self) != size_before + len(keys):
            raise KeyError(f"{self.name}: insert_all got a key twice")

    def __len__(self) -> int:
        return sum(map(len, self._queues))

    def __contains__(self, key: object) -> bool:
        # a plain loop, not any(genexpr): `key in policy` is on the replay's hot path
        for queue in self._queues:  # noqa: SIM110
            if key in queue:
                return True
        return False

    def __iter__(self) -> Iterator[Key]:
        return chain.from_iterable(self._queues)
