"""vLLM's `store_threshold` admission filter, as a wrapper around any policy."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.policies.base import EMPTY, EvictionPolicy, Key, check_int


@dataclass(eq=False)
class StoreThreshold(EvictionPolicy):
    """Admit a block only on its `threshold`-th offer; everything else is `inner`'s.

    Mirrors vLLM 0.32's `CPUOffloadingManager` with `store_threshold` (kv_connector_extra_config):
    every offer of a key (a miss offered for storage, or a reference while resident) counts in a
    bounded tracker (LRU, `max_tracker_size` keys); a miss is stored once its count reaches the
    threshold. The inner policy's own `admit` is always consulted first, so offline policies still
    see every reference.
    """

    inner: EvictionPolicy | None = None
    threshold: int = 2
    max_tracker_size: int = 64_000
    name = "store_threshold"
    refuses_stores = True  # vLLM's manager filters before it allocates: a decline stores nothing

    def validate(self) -> None:
        if not isinstance(self.inner, EvictionPolicy):
            raise HkvError(f"store_threshold.inner: got {self.inner!r}; expected a policy")
        if self.inner.capacity_blocks != self.capacity_blocks:
            raise HkvError(
                f"store_threshold.capacity_blocks: got {self.capacity_blocks}; must equal the "
                f"inner policy's {self.inner.capacity_blocks}"
            )
        check_int(self.name, "threshold", self.threshold, 1)
        check_int(self.name, "max_tracker_size", self.max_tracker_size, 1)

    def reset(self) -> None:
        self._counts = OrderedDict()
        self._resident = self.inner  # resident is what the wrapped policy holds

    def clear(self) -> None:
        self.reset()
        self.inner.clear()

    def hyperparameters(self) -> dict:
        return {
            "inner": self.inner.name,
            "threshold": self.threshold,
            "max_tracker_size": self.max_tracker_size,
            **self.inner.hyperparameters(),
        }

    def _count(self, key: Key) -> int:
        counts = self._counts
        count = counts.get(key, 0) + 1
        counts[key] = count
        counts.move_to_end(key)
        if len(counts) > self.max_tracker_size:
            counts.popitem(last=False)
        return count

    def restore_queues(self, state: dict, keys: dict, metas: dict) -> None:
        """Take the state `lru+st2` reached in C (`Shadows.queues_state`: the tracker's
        "counts", ids least recent first with their offers; the inner policy's queues)."""
        tracked, counts = state["counts"]
        self._counts = OrderedDict(zip(map(keys.__getitem__, tracked), counts, strict=True))
        self.inner.restore_queues(state, keys, metas)

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        inner_ok = self.inner.admit(key, meta)
        return self._count(key) >= self.threshold and inner_ok

    def insert(self, key: Key, meta: BlockMeta) -> None:
        self.inner.insert(key, meta)

    def touch(self, key: Key) -> None:
        if key in self._counts:
            self._count(key)
        self.inner.touch(key)

    def refresh_all(self, keys: Iterable[Key]) -> None:
        self.inner.refresh_all(keys)

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key]) -> None:
        """The inner policy's order; each reused block also counts as an offer."""
        for key in reused:
            if key in self._counts:
                self._count(key)
        self.inner.after_request(stored, reused)

    def remove(self, key: Key) -> None:
        self.inner.remove(key)

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        return self.inner.evict(n, protected)
