"""Least recently used."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hkv.blocks import BlockMeta
from hkv.policies.base import Key
from hkv.policies.queue import QueuePolicy


@dataclass(eq=False)
class LRUPolicy(QueuePolicy):
    """Evicts the block referenced longest ago; admits everything.

    Its priority is the time of last reference. Because a reference always makes that priority
    the largest, an `OrderedDict` in reference order is the whole evictor: O(1) per reference
    instead of a heap push, which is what keeps the simulator's replay fast.
    Same behaviour as vLLM's `lru` policy, except that hkv's replay touches a request's blocks
    in prefix order (docs/design.md §2), so the last block of a request is the most recent.
    """

    name = "lru"
    reads_meta = False

    def reset(self) -> None:
        self._order: OrderedDict[Key, BlockMeta] = OrderedDict()
        self._queues = (self._order,)

    def insert(self, key: Key, meta: BlockMeta) -> None:
        order = self._order
        if len(order) >= self.capacity_blocks or key in order:
            self._check_insert(key, len(order), key in order)  # raises
        order[key] = meta

    def insert_each(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> None:
        if not self._bulk_fits(keys):
            super().insert_each(keys, metas)  # raises at the first key that does not fit
            return
        size = len(self._order)
        self._order.update(zip(keys, metas, strict=True))
        self._check_bulk(size, keys)

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

    def restore_queues(self, state: dict, keys: dict, metas: dict) -> None:
        """Take the queue this policy reached in C (`Shadows.queues_state`: "order", key ids
        least recent first; `keys` and `metas` give each id's key and meta)."""
        ids = state["order"][0]
        key, meta = keys.__getitem__, metas.__getitem__
        self._order = OrderedDict(zip(map(key, ids), map(meta, ids), strict=True))
        self._queues = (self._order,)

    # One queue: length and membership without the base's loop (both on the replay's hot path).
    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: object) -> bool:
        return key in self._order
