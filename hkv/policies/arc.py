"""ARC, the adaptive replacement cache."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from hkv.blocks import BlockMeta
from hkv.policies.base import EMPTY, Key
from hkv.policies.queue import QueuePolicy


@dataclass(eq=False)
class ARCPolicy(QueuePolicy):
    """Balances recency (T1: seen once) and frequency (T2: seen again) with ghost lists B1/B2.

    Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST 2003; written to
    behave like vLLM's `arc` policy (0.32, 0.33): a miss offered for storage that hits a ghost
    list adapts the T1 target (vLLM's `on_store_miss`; here in `admit`, which admits
    everything); inserts go to T1; a reference to a resident block moves it to T2's MRU end;
    eviction takes T1's LRU block while T1 is at or above its target, else T2's, falling back to
    the other list; evicted keys enter the matching ghost list, each ghost list bounded by the
    capacity.

    `touch` of a key in a ghost list adapts the target too, as vLLM's `touch` does (the one
    departure from `EvictionPolicy`'s "a touch of an absent key is ignored": the key is absent
    but remembered). `after_request` therefore touches only the reused blocks still resident, as
    vLLM's `on_request_finished` ignores the others. The rest of vLLM's `touch` lives in the
    adapter (`HkvCachePolicy.touch`): keys are touched tail first, so the head of a request ends
    the most recent, and a chunk still being written is re-ranked in T1 (`refresh_all`), not
    promoted to T2.
    """

    name = "arc"
    reads_meta = False

    def reset(self) -> None:
        self.target_t1_blocks = 0.0
        self._t1: OrderedDict[Key, BlockMeta] = OrderedDict()
        self._t2: OrderedDict[Key, BlockMeta] = OrderedDict()
        self._b1: OrderedDict[Key, None] = OrderedDict()
        self._b2: OrderedDict[Key, None] = OrderedDict()
        self._queues = (self._t1, self._t2)

    def restore_queues(self, state: dict, keys: dict, metas: dict) -> None:
        """Take the state this policy reached in C (`Shadows.queues_state`: "t1", "t2", "b1",
        "b2", key ids LRU first, and the T1 "target"; `keys` and `metas` map the ids)."""
        key, meta = keys.__getitem__, metas.__getitem__
        t1, t2, b1, b2 = (state[name][0] for name in ("t1", "t2", "b1", "b2"))
        self._t1 = OrderedDict(zip(map(key, t1), map(meta, t1), strict=True))
        self._t2 = OrderedDict(zip(map(key, t2), map(meta, t2), strict=True))
        self._b1, self._b2 = OrderedDict.fromkeys(map(key, b1)), OrderedDict.fromkeys(map(key, b2))
        self._queues = (self._t1, self._t2)
        self.target_t1_blocks = state["target"]

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        """Adapt the T1 target on a ghost hit; always admit."""
        self._adapt_to_ghost_hit(key)
        return True

    def _adapt_to_ghost_hit(self, key: Key) -> None:
        """A key remembered in B1 raises the T1 target, one in B2 lowers it (vLLM's arc)."""
        if key in self._b1:
            delta = max(1.0, len(self._b2) / len(self._b1))
            self.target_t1_blocks = min(self.target_t1_blocks + delta, self.capacity_blocks)
            self._b1.move_to_end(key)
        elif key in self._b2:
            delta = max(1.0, len(self._b1) / len(self._b2))
            self.target_t1_blocks = max(self.target_t1_blocks - delta, 0.0)
            self._b2.move_to_end(key)

    def insert(self, key: Key, meta: BlockMeta) -> None:
        t1, t2 = self._t1, self._t2
        self._check_insert(key, len(t1) + len(t2), key in t1 or key in t2)
        t1[key] = meta
        self._b1.pop(key, None)
        self._b2.pop(key, None)

    def touch(self, key: Key) -> None:
        """A reference: T1 -> T2's MRU end, T2 -> its MRU end; a ghost hit adapts the target."""
        meta = self._t1.pop(key, None)
        if meta is not None:
            self._t2[key] = meta
        elif key in self._t2:
            self._t2.move_to_end(key)
        else:
            self._adapt_to_ghost_hit(key)

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key]) -> None:
        """The base's tail-first re-ranking; a reused block evicted since is not a ghost hit
        (vLLM's `on_request_finished` passes it over)."""
        super().after_request(stored, [key for key in reused if key in self])

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        return self.evict_chains(n, protected, None)

    def evict_chains(
        self, n: int, protected: Collection[Key], stand_in: Callable[[Key, Collection[Key]], Key]
    ) -> list[Key] | None:
        """`evict` with chains (`EvictionPolicy.evict_chains`; None: plain `evict`): a block of
        a chain stays the candidate until its chain's deeper blocks are taken and it is taken
        itself, whichever list the target would draw from meanwhile (vLLM's arc has no chains:
        its running requests' blocks leave T1 in insertion order, head first)."""
        if n <= 0:
            return []
        chosen: dict[Key, bool] = {}  # key -> from_t1
        t1_left = _evictable(self._t1, protected, chosen)
        t2_left = _evictable(self._t2, protected, chosen)
        t1_size = len(self._t1)
        held = None  # a chain's block whose deeper blocks are still being given up
        for _ in range(n):
            key = held
            if key is None and t1_size >= int(self.target_t1_blocks):
                key = next(t1_left, None)
            if key is None:
                key = next(t2_left, None)
            if key is None:
                key = next(t1_left, None)
            if key is None:
                return None
            victim = key if stand_in is None else stand_in(key, chosen)
            held = key if victim != key else None
            from_t1 = victim in self._t1
            t1_size -= from_t1
            chosen[victim] = from_t1
        for key, from_t1 in chosen.items():
            if from_t1:
                del self._t1[key]
                self._b1[key] = None
            else:
                del self._t2[key]
                self._b2[key] = None
        for ghost in (self._b1, self._b2):
            while len(ghost) > self.capacity_blocks:
                ghost.popitem(last=False)
        return list(chosen)


def _evictable(
    queue: OrderedDict[Key, BlockMeta], protected: Collection[Key], chosen: dict[Key, bool]
) -> Iterator[Key]:
    """Keys of `queue` from its LRU end that are neither protected, pinned nor chosen."""
    return (
        k for k, meta in queue.items() if k not in protected and k not in chosen and not meta.pinned
    )
