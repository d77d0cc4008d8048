"""`auto` (experimental): cost-aware GreedyDual, with bimodal insertion when it pays."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import takewhile

from hkv.blocks import BlockMeta
from hkv.policies.base import EvictionPolicy, Key, check_float, check_int
from hkv.policies.cost_aware import CostAwarePolicy
from hkv.policies.dip import BIPPolicy
from hkv.policies.lru import LRUPolicy


@dataclass(eq=False)
class AutoPolicy(CostAwarePolicy):
    """`cost_aware`, whose new blocks enter at the eviction end when the traffic cycles.

    The core is `cost_aware` unchanged: GreedyDual priority `L + count x worth` with
    long-history (TinyLFU) counts, the prefix cap, and bypass admission. What `auto` adds is
    where a request's new blocks enter:

    - normal insertion: at their GreedyDual priority, as in `cost_aware`;
    - bimodal insertion (BIP, Qureshi et al., "Adaptive Insertion Policies for High Performance
      Caching", ISCA 2007): below every GreedyDual priority (all are >= the inflation floor
      `L` >= 0), the newest lowest, so a new block is the next victim unless referenced first (a
      reference promotes it to its normal priority); one insert in `bip_every` enters normally,
      so the kept set turns over. Where sessions come back round after round but together
      outgrow the tier, normal insertion makes each new block evict one that is due soon and
      every session loses its tail; bimodal insertion keeps a stable share of them whole.

    Which one, the duel decides (DIP's set dueling, with its leader sets made shadows): every
    request is replayed, as vLLM's tier stores it, in two shadow tiers of the same capacity that
    hold keys only, one inserting at the recent end (`lru`) and one bimodally (`bip`). A
    saturating counter moves up by the first's prefix misses and down by the second's, within
    `[-psel_max, psel_max]`; the tier inserts bimodally while it is above `margin` x `psel_max`.
    Leader groups inside the tier itself (DIP's way, and this policy's first version) do not
    work for a prefix tier: the tier is one fully associative cache, so a bimodal leader's new
    blocks are the first victims of every follower's insert and bimodal never wins (the anchor
    workload at 60 % of its blocks: bip 46 %, cost_aware 15 %, the duel never switched), and
    sessions that share a system prompt share a chain head, so one leader group can hold half
    the traffic (Zipf sessions at 10 %: 7.5 points lost). The shadows cost two queue policies'
    bookkeeping per block, in C containers, and no hit.

    Requests are told apart as `cost_aware` does (positions starting over); a request's side is
    applied when it ends (`after_request`, right after its store in the replay and in vLLM's
    manager).
    """

    bip_every: int = 32
    psel_max: int = 2048
    margin: float = 0.25
    name = "auto"

    def validate(self) -> None:
        super().validate()
        check_int(self.name, "bip_every", self.bip_every, 0)
        check_int(self.name, "psel_max", self.psel_max, 1)
        check_float(self.name, "margin", self.margin, 0.0, 1.0)

    def reset(self) -> None:
        super().reset()
        capacity = self.capacity_blocks
        self._shadows = (LRUPolicy(capacity), BIPPolicy(capacity, bip_every=self.bip_every))
        self._psel = 0  # > margin x psel_max: the recent-end shadow misses more -> bimodal
        self._misses: list[tuple[int, Key]] = []  # (position, key) offered since the last end
        self._cold = 0  # bimodal inserts so far: each goes below the one before
        self._inserts = 0

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        """Notes the miss for the shadows, then `cost_aware`'s admission (bypass)."""
        if len(self._misses) > 4 * self.capacity_blocks + 1024:
            self._misses.clear()  # no end of request was reported (vLLM 0.26): keep it bounded
        self._misses.append((meta.position, key))
        return super().admit(key, meta)

    @property
    def bimodal_now(self) -> bool:
        """Whether new blocks go in bimodally (the duel's current verdict)."""
        return self._psel > self.margin * self.psel_max

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key]) -> None:
        """Replay the request in the shadows, place its new blocks, then `cost_aware`'s
        touches of the reused ones."""
        if self.capacity_blocks:
            self._duel(self._request_keys(reused))
        if stored and self.bimodal_now:
            self._insert_at_eviction_end(stored)
        super().after_request(stored, reused)

    def _request_keys(self, reused: Sequence[Key]) -> list[Key]:
        """The request's keys in prefix order: its misses and its reused blocks."""
        entries, misses = self._entries, self._misses
        self._misses = []
        found = [(e.meta.position, k) for k in reused if (e := entries.get(k)) is not None]
        return [key for _, key in sorted(misses + found, key=_position)]

    def _duel(self, keys: list[Key]) -> None:
        recent, bimodal = (_replay_in(shadow, keys) for shadow in self._shadows)
        psel = self._psel + recent - bimodal
        self._psel = max(-self.psel_max, min(self.psel_max, psel))

    def _insert_at_eviction_end(self, stored: Sequence[Key]) -> None:
        """BIP: the request's new blocks below every GreedyDual priority, the last stored (the
        chain's tail) lowest; one in `bip_every` stays where `cost_aware` put it."""
        entries, every = self._entries, self.bip_every
        for key in stored:
            entry = entries.get(key)
            if entry is None:
                continue
            self._inserts += 1
            if every and not self._inserts % every:
                continue
            self._cold += 1
            self._push_with(key, entry, -float(self._cold))


def _position(item: tuple[int, Key]) -> int:
    return item[0]


_SHADOW_META = BlockMeta(tokens=1)


def _replay_in(shadow: EvictionPolicy, keys: list[Key]) -> int:
    """Store a request in a shadow tier as vLLM does (one eviction for all its misses, then
    `after_request`) and return its prefix misses there: the keys after its longest resident
    prefix."""
    hits = sum(1 for _ in takewhile(shadow.__contains__, keys))
    reused = [key for key in keys if key in shadow]
    new = list(dict.fromkeys(key for key in keys if key not in shadow))
    room = len(shadow) + len(new) - shadow.capacity_blocks
    if room > 0 and shadow.evict(room, frozenset(keys)) is None:
        new = []
    shadow.insert_all(new, _SHADOW_META)
    shadow.after_request(new, reused)
    return len(keys) - hits
