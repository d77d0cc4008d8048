"""S3-FIFO: three static FIFO queues."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from itertools import islice

from hkv.blocks import BlockMeta
from hkv.policies.base import EMPTY, EvictionPolicy, Key, check_float, check_int


@dataclass(eq=False)
class S3FIFOPolicy(EvictionPolicy):
    """A small FIFO filters one-hit wonders; a main FIFO with lazy promotion keeps the rest.

    Yang et al., "FIFO queues are all you need for cache eviction", SOSP 2023.
    New blocks enter the small queue S (`small_fraction` of the capacity) unless their key is in
    the ghost queue G, in which case they enter the main queue M. A reference only bumps a 2-bit
    counter (capped at 3). Evicting from S (while S holds at least its share): the oldest block
    moves to M if it was referenced at least `promote_hits` times, else it leaves and its key
    enters G. Evicting from M: the oldest block with a non-zero counter is reinserted at M's head
    with the counter decremented; one with zero leaves. G remembers as many keys as M holds.
    Admits everything. Protected and pinned blocks are passed over and keep their place.
    """

    small_fraction: float = 0.1
    promote_hits: int = 1
    name = "s3fifo"
    reads_meta = False

    def validate(self) -> None:
        check_float(self.name, "small_fraction", self.small_fraction, 0.0, 1.0, open_low=True)
        check_int(self.name, "promote_hits", self.promote_hits, 1, 3)

    def reset(self) -> None:
        self._small: deque[Key] = deque()
        self._main: deque[Key] = deque()
        self._ghost: OrderedDict[Key, None] = OrderedDict()
        self._state: dict[Key, list] = {}  # key -> [meta, hits, in_main]
        self._resident = self._state
        self._small_target = max(1, round(self.small_fraction * self.capacity_blocks))
        self._ghost_blocks = max(1, self.capacity_blocks - self._small_target)

    def restore_queues(self, state: dict, keys: dict, metas: dict) -> None:
        """Take the state this policy reached in C (`Shadows.queues_state`: "small" and "main",
        key ids oldest first with their hits, and "ghost"; `keys` and `metas` map the ids)."""
        key = keys.__getitem__
        self._ghost = OrderedDict.fromkeys(map(key, state["ghost"][0]))
        self._state.clear()  # `_resident` is the same dict
        for name, in_main in (("small", False), ("main", True)):
            ids, hits = state[name]
            resident = list(map(key, ids))
            setattr(self, f"_{name}", deque(resident))
            self._state.update(
                (k, [metas[i], h, in_main]) for k, i, h in zip(resident, ids, hits, strict=True)
            )

    def insert(self, key: Key, meta: BlockMeta) -> None:
        self._check_insert(key, len(self._state), key in self._state)
        if key in self._ghost:
            del self._ghost[key]
            self._state[key] = [meta, 0, True]
            self._main.append(key)
        else:
            self._state[key] = [meta, 0, False]
            self._small.append(key)

    def touch(self, key: Key) -> None:
        state = self._state.get(key)
        if state is not None and state[1] < 3:
            state[1] += 1

    def refresh_all(self, keys: Iterable[Key]) -> None:
        """The given keys, where they are the newest of their FIFO (a request's new blocks),
        re-queued in the given order (a key given twice: where first given); elsewhere the FIFO
        order stands."""
        keys = list(dict.fromkeys(k for k in keys if k in self._state))
        for queue, in_main in ((self._small, False), (self._main, True)):
            mine = [k for k in keys if self._state[k][2] is in_main]
            newest = list(islice(reversed(queue), len(mine)))
            if mine and set(newest) == set(mine):
                for _ in mine:
                    queue.pop()
                queue.extend(mine)

    def remove(self, key: Key) -> None:
        state = self._state.pop(key, None)
        if state is not None:  # O(capacity), but only failed stores are removed
            (self._main if state[2] else self._small).remove(key)

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        if n <= 0:
            return []
        if not self._has_evictable(n, protected):
            return None
        victims: list[Key] = []
        passed_small: list[Key] = []
        passed_main: list[Key] = []
        while len(victims) < n:
            victim = None
            if len(self._small) + len(passed_small) >= self._small_target or not self._main:
                victim = self._evict_small(protected, passed_small)
            if victim is None:
                victim = self._evict_main(protected, passed_main)
            if victim is None:
                victim = self._evict_small(protected, passed_small)
            if victim is None:  # S moved its last candidates to M: they go from there
                victim = self._evict_main(protected, passed_main)
            if victim is None:
                raise RuntimeError("s3fifo: eviction found fewer blocks than it counted")
            victims.append(victim)
        self._small.extendleft(reversed(passed_small))
        self._main.extendleft(reversed(passed_main))
        return victims

    def _has_evictable(self, n: int, protected: Collection[Key]) -> bool:
        """Whether `n` blocks are neither protected nor pinned (oldest first: usually quick)."""
        found = 0
        for key, state in self._state.items():
            if key not in protected and not state[0].pinned:
                found += 1
                if found == n:
                    return True
        return False

    def _evict_small(self, protected: Collection[Key], passed: list[Key]) -> Key | None:
        """Pop S until a block leaves (returned) or moves to M; None when S has no candidate."""
        while self._small:
            key = self._small.popleft()
            state = self._state.get(key)
            if state is None or state[2]:
                continue  # removed, or already moved
            if key in protected or state[0].pinned:
                passed.append(key)
                continue
            if state[1] >= self.promote_hits:
                state[1], state[2] = 0, True
                self._main.append(key)
                continue
            del self._state[key]
            self._ghost[key] = None
            while len(self._ghost) > self._ghost_blocks:
                self._ghost.popitem(last=False)
            return key
        return None

    def _evict_main(self, protected: Collection[Key], passed: list[Key]) -> Key | None:
        """Pop M until a block with a zero counter leaves; None when M has no candidate."""
        rounds = 4 * len(self._main) + 4  # every pass decrements a counter, so this terminates
        while self._main and rounds:
            rounds -= 1
            key = self._main.popleft()
            state = self._state.get(key)
            if state is None or not state[2]:
                continue
            if key in protected or state[0].pinned:
                passed.append(key)
                continue
            if state[1] > 0:
                state[1] -= 1
                self._main.append(key)
                continue
            del self._state[key]
            return key
        return None
