"""Uniformly random eviction: the control every other policy must beat."""

from __future__ import annotations

import random as _random
from collections.abc import Collection
from dataclasses import dataclass

from hkv.blocks import BlockMeta
from hkv.policies.base import EMPTY, EvictionPolicy, Key, check_int


@dataclass(eq=False)
class RandomPolicy(EvictionPolicy):
    """Evicts resident blocks chosen uniformly at random (seeded); admits everything.

    Keys sit in a list with a key -> index map, so insert, remove and a random pick are O(1).
    """

    seed: int = 0
    name = "random"
    reads_meta = False

    def validate(self) -> None:
        check_int(self.name, "seed", self.seed, 0)

    def reset(self) -> None:
        self._keys: list[Key] = []
        self._metas: list[BlockMeta] = []
        self._index: dict[Key, int] = {}
        self._resident = self._index
        self._rng = _random.Random(self.seed)

    def insert(self, key: Key, meta: BlockMeta) -> None:
        self._check_insert(key, len(self._keys), key in self._index)
        self._index[key] = len(self._keys)
        self._keys.append(key)
        self._metas.append(meta)

    def touch(self, key: Key) -> None:
        """References carry no information for a random policy."""

    def remove(self, key: Key) -> None:
        index = self._index.pop(key, None)
        if index is None:
            return
        last_key, last_meta = self._keys.pop(), self._metas.pop()
        if index < len(self._keys):
            self._keys[index], self._metas[index] = last_key, last_meta
            self._index[last_key] = index

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        if n <= 0:
            return []
        rng_state = self._rng.getstate()
        chosen = self._sample(n, protected)
        if chosen is None:
            self._rng.setstate(rng_state)  # None means no state change, the RNG's included
            return None
        for key in chosen:
            self.remove(key)
        return chosen

    def _sample(self, n: int, protected: Collection[Key]) -> list[Key] | None:
        keys, metas = self._keys, self._metas
        chosen: dict[Key, None] = {}
        for _ in range(4 * n + 8):  # random probes first: cheap when few blocks are off-limits
            index = self._rng.randrange(len(keys)) if keys else None
            if index is None:
                break
            key = keys[index]
            if key not in protected and not metas[index].pinned:
                chosen[key] = None
                if len(chosen) == n:
                    return list(chosen)
        candidates = [
            k
            for k, m in zip(keys, metas, strict=True)
            if k not in protected and not m.pinned and k not in chosen
        ]
        if len(chosen) + len(candidates) < n:
            return None
        return list(chosen) + self._rng.sample(candidates, n - len(chosen))
