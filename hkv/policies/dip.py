"""Adaptive insertion (DIP): LRU, or bimodal insertion when the working set outgrows the cache."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.policies.base import EvictionPolicy, Key
from hkv.policies.queue import QueuePolicy

_PSEL_MAX = 1023


@dataclass(eq=False)
class DIPPolicy(QueuePolicy):
    """LRU that switches to bimodal insertion (BIP) when the workload thrashes LRU.

    Qureshi, Jaleel, Patt, Yen, Steely, Emer, "Adaptive Insertion Policies for High Performance
    Caching", ISCA 2007. Under LRU, blocks that come back cyclically but together exceed the
    cache miss every time: each is evicted just before its reuse. Multi-turn sessions that all
    return once per round are exactly that. BIP inserts a new block at the eviction end,
    so blocks already cached stay until they are reused and the cache keeps a stable share of
    the sessions whole; one insert in `bip_every` still goes to the recently-used end, so the
    kept set turns over. BIP loses where recency works (Mooncake's trace), so the policy duels:
    one request in `groups` always uses LRU insertion, another always BIP, a saturating counter
    counts which of the two leader groups misses more, and the other requests follow the winner.
    Leaders are whole requests, not blocks, because a prefix cache serves a block only when every
    block before it is cached too: one fragile block in a chain costs the rest of the chain. A new
    request is recognised by its block positions starting over (`meta.position`). `mode="lru"` or
    `"bip"` pins the choice. Admits everything.

    The eviction order is two queues, not a priority heap: blocks inserted at the eviction end and
    not referenced since (`_cold`) leave newest first, ahead of every other block (`_warm`, in
    LRU order). A priority of `-insert_time` for the first and `top + reference_time` for the
    second gives the same order, but costs a heap push per reference; the queues make insert,
    reference and each victim O(1), which is what vLLM's scheduler needs from a policy called on
    every block of every request.
    """

    mode: str = "adaptive"
    bip_every: int = 32
    groups: int = 4
    tail_first: bool = True
    name = "dip"
    # Running requests' chains not ranked (vLLM 0.33): the cold queue leaves newest first, so a
    # chain's first block in that order is its newest; a request's blocks are ordered when it
    # ends.
    evict_chains = EvictionPolicy.evict_chains

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key]) -> None:
        """`tail_first` (the default, as for every policy): a request's chains
        are given up from the tail (`EvictionPolicy.after_request`; blocks inserted at the
        eviction end already leave newest, i.e. tail, first). False touches the reused blocks in
        prefix order and leaves new ones as inserted, the behaviour behind the committed H200
        results of `hkv_bip` (`data/results/vllm_h200*.json`; `hkv_bip+tail_first` there is
        this default; the README gives what it changed there)."""
        if self.tail_first:
            super().after_request(stored, reused)
        elif reused:
            self.touch_all(reused)

    def _recent_ends(self):
        return (self._warm,)  # the cold queue leaves newest first: its tail blocks go first

    def refresh_all(self, keys: Iterable[Key]) -> None:
        """The warm queue as every queue policy re-ranks it; in the cold queue, which leaves
        newest first, the keys are put back at the newest end in the reverse of the given
        order, so the last one given still goes last. A request's blocks are the newest there
        in insertion order already, unless they come from several KV-cache groups (stored group
        by group): then this interleaves the groups' chains by position, tails first."""
        if not isinstance(keys, list | tuple):
            keys = list(keys)
        super().refresh_all(keys)
        cold = self._cold
        if cold:
            mine = [key for key in reversed(keys) if key in cold]
            cold.update(zip(mine, map(cold.pop, mine), strict=True))

    def validate(self) -> None:
        if self.mode not in ("adaptive", "lru", "bip"):
            raise HkvError(f"{self.name}.mode: got {self.mode!r}; expected adaptive, lru or bip")
        if not isinstance(self.tail_first, bool):
            raise HkvError(f"{self.name}.tail_first: got {self.tail_first!r}; expected a bool")
        for field in ("bip_every", "groups"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise HkvError(f"{self.name}.{field}: got {value!r}; expected an integer >= 0")
        if self.groups < 3:
            raise HkvError(f"{self.name}.groups: got {self.groups}; expected an integer >= 3")

    def reset(self) -> None:
        # oldest first, newest leaves: a plain dict (insertion order, `reversed`, O(1) delete)
        # costs half an OrderedDict's insert; only the warm queue needs `move_to_end`
        self._cold: dict[Key, BlockMeta] = {}
        self._warm: OrderedDict[Key, BlockMeta] = OrderedDict()  # least recently used first
        self._queues = (self._cold, self._warm)
        self._inserts = self._requests = 0
        self._last_position = -1
        self._psel = _PSEL_MAX // 2  # above the middle: LRU's leaders miss more -> BIP

    def restore_queues(self, state: dict, keys: dict, metas: dict) -> None:
        """Take the queues `lip` (bip, `bip_every` 0) reached in C (`Shadows.queues_state`:
        "cold" and "warm", key ids front first; `keys` and `metas` give each id's key and
        meta). The insert counter stays as it is: with `bip_every` 0 no decision reads it."""
        if self.mode != "bip" or self.bip_every:
            raise HkvError(f"{self.name}: only bip with bip_every 0 is rebuilt in C")
        cold, warm = state["cold"][0], state["warm"][0]
        key, meta = keys.__getitem__, metas.__getitem__
        self._cold = dict(zip(map(key, cold), map(meta, cold), strict=True))
        self._warm = OrderedDict(zip(map(key, warm), map(meta, warm), strict=True))
        self._queues = (self._cold, self._warm)

    def admit(self, key, meta) -> bool:
        """Every admit is a miss: it moves the duel's counter when a leader request misses."""
        if self.mode != "adaptive":
            return True  # no duel to keep
        if meta.position <= self._last_position:
            self._requests += 1
        self._last_position = meta.position
        group = self._requests % self.groups
        if group == 0:
            self._psel = min(self._psel + 1, _PSEL_MAX)
        elif group == 1:
            self._psel = max(self._psel - 1, 0)
        return True

    @property
    def admits_everything(self) -> bool:
        return self.mode != "adaptive"  # only the duel counts misses in `admit`

    @property
    def reads_meta(self) -> bool:
        return self.mode == "adaptive"  # the duel tells requests apart by `meta.position`

    def insert(self, key, meta) -> None:
        cold_queue, warm_queue = self._cold, self._warm
        size = len(cold_queue) + len(warm_queue)
        if size >= self.capacity_blocks or key in cold_queue or key in warm_queue:
            self._check_insert(key, size, key in cold_queue or key in warm_queue)  # raises
        self._inserts = inserts = self._inserts + 1
        every = self.bip_every
        if every and not inserts % every:
            warm_queue[key] = meta  # one in `every` goes to the recent end whatever the mode
        elif self.mode == "bip" or (self.mode == "adaptive" and self._uses_bip()):
            cold_queue[key] = meta
        else:
            warm_queue[key] = meta

    def insert_each(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> None:
        """Same placement as `insert` key by key; for a pinned mode, in runs of the containers'
        bulk `update` between the one-in-`bip_every` inserts that go to the recent end."""
        cold, warm = self._cold, self._warm
        if self.mode == "adaptive" or not self._bulk_fits(keys):  # adaptive: each asks the duel
            super().insert_each(keys, metas)  # raises at the first key that does not fit
            return
        every, done, size = self.bip_every, self._inserts, len(cold) + len(warm)
        self._inserts = done + len(keys)
        main = cold if self.mode == "bip" else warm
        start = 0
        if every:
            for recent in range(-(done + 1) % every, len(keys), every):  # insert count % every == 0
                main.update(zip(keys[start:recent], metas[start:recent], strict=True))
                warm[keys[recent]] = metas[recent]
                start = recent + 1
        main.update(zip(keys[start:], metas[start:], strict=True))
        self._check_bulk(size, keys)

    def _uses_bip(self) -> bool:
        if self.mode != "adaptive":
            return self.mode == "bip"
        group = self._requests % self.groups
        if group <= 1:
            return group == 1
        return self._psel > _PSEL_MAX // 2

    def touch(self, key) -> None:
        meta = self._cold.pop(key, None)
        if meta is not None:
            self._warm[key] = meta
            return
        # try/except costs nothing when no exception is raised (see LRUPolicy.touch)
        try:  # noqa: SIM105
            self._warm.move_to_end(key)
        except KeyError:
            pass

    def touch_all(self, keys: Iterable[Key]) -> None:
        """Each key's `touch`, in order, as three passes in C: cold keys join the warm queue,
        then every resident key moves to the recent end in the given order, which leaves the
        warm queue as touching them one by one would."""
        cold, warm = self._cold, self._warm
        if not isinstance(keys, list | tuple):
            keys = list(keys)
        if cold:
            moved = list(dict.fromkeys(filter(cold.__contains__, keys)))
            warm.update(zip(moved, map(cold.pop, moved), strict=True))
        try:  # every key resident (what vLLM's adapter passes): one pass
            deque(map(warm.move_to_end, keys), maxlen=0)
        except KeyError:  # moving them all again in order leaves the same order
            deque(map(warm.move_to_end, filter(warm.__contains__, keys)), maxlen=0)

    def _eviction_order(self):
        """Cold blocks newest first (inserted at the eviction end, never referenced since),
        then warm ones from the least recently used."""
        return ((self._cold, reversed(self._cold)), (self._warm, self._warm))


@dataclass(eq=False)
class BIPPolicy(DIPPolicy):
    """`dip` pinned to bimodal insertion: for workloads known to cycle through more sessions
    than the tier holds (multi-turn chat at a fraction of its working set). Loses to LRU where
    recency works; `dip` chooses between the two by itself, at the cost of its duel."""

    mode: str = "bip"
    name = "bip"
