"""`VllmTier`: a policy run the way vLLM's CPU tier runs it, one request at a time.

The one model of vLLM's `CPUOffloadingManager` with an hkv policy behind hkv's adapter, shared by
the simulator's `store="per_request"` replay and by `auto`'s shadow tiers:

- a request's blocks absent from the tier are offered to the policy (`admit`) in order, before
  any eviction, as the adapter asks at vLLM's store miss;
- vLLM stores every block it was asked to store: one the policy declines is still stored, but
  outside the policy (`aside`), and is the first to be evicted (oldest first), as the adapter's
  bypassed blocks are; until then a lookup finds it. The exception is vLLM's own admission filter,
  `store_threshold` (`StoreThreshold`, `refuses_stores`): what it declines is not stored at all;
- the room all the new blocks need is evicted in one call, blocks aside first, or none of them is
  stored (vLLM's `prepare_store` fails);
- the blocks the policy took go in with one `insert_each`, in prefix order, as the adapter hands
  over what vLLM inserted for a request (`handover.hand_over_noted`): `auto` settles what a switch
  owes per call, so key by key it would decide otherwise than inside vLLM;
- then the policy hears of the request (`after_request`): the blocks it took, the ones reused.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import takewhile

from hkv.blocks import BlockMeta
from hkv.policies.base import EvictionPolicy, Key, unprotected


class VllmTier:
    """`policy` plus the blocks vLLM stored that it declined (`aside`); see the module doc."""

    def __init__(self, policy: EvictionPolicy, *, refuses: bool | None = None):
        self.policy = policy
        self.capacity_blocks = policy.capacity_blocks
        self.aside: dict[Key, BlockMeta] = {}  # insertion order: the oldest is evicted first
        if refuses is None:  # vLLM's own store filter refuses; a policy's decline does not
            refuses = bool(getattr(policy, "refuses_stores", False))
        self.refuses = refuses

    def __contains__(self, key: object) -> bool:
        return key in self.policy or key in self.aside

    def __len__(self) -> int:
        return len(self.policy) + len(self.aside)

    def __iter__(self) -> Iterator[Key]:
        yield from self.aside
        yield from self.policy

    def hits(self, keys: Sequence[Key]) -> int:
        """The request's prefix hits: its keys before the first one not held."""
        return sum(1 for _ in takewhile(self.__contains__, keys))

    def store(self, request: Sequence[tuple[Key, BlockMeta]]) -> tuple[list[Key], int, int, int]:
        """Store one request (its `(key, meta)` pairs in prefix order); returns (the keys the
        policy took, declined, evicted, failed: blocks vLLM could not store)."""
        policy, aside = self.policy, self.aside
        keys = [key for key, _ in request]
        held = self.__contains__
        reused: list[Key] = []
        taken: dict[Key, BlockMeta] = {}
        declined: dict[Key, BlockMeta] = {}
        for key, meta in request:  # one membership test a block
            if held(key):
                reused.append(key)
            elif key in taken or key in declined:
                continue
            elif policy.admit(key, meta):
                taken[key] = meta
            else:
                declined[key] = meta
        kept_aside = {} if self.refuses else declined
        room = len(self) + len(taken) + len(kept_aside) - self.capacity_blocks
        evicted = 0
        if room > 0:
            evicted = self._evict(room, frozenset(keys))
            if evicted is None:
                policy.after_request([], reused)
                return [], len(declined), 0, len(taken) + len(kept_aside)
        if taken:  # in one call, as the adapter hands a request's inserts over (`insert_each`)
            policy.insert_each(list(taken), list(taken.values()))
        aside.update(kept_aside)
        stored = list(taken)
        policy.after_request(stored, reused)
        return stored, len(declined), evicted, 0

    def _evict(self, n: int, protected: frozenset) -> int | None:
        """Make room for `n` blocks: the ones aside first, then the policy's victims."""
        aside = self.aside
        first = unprotected(aside, n, protected) if aside else []
        if len(first) < n and self.policy.evict(n - len(first), protected) is None:
            return None
        for key in first:
            del aside[key]
        return n


def replay_request(tier: VllmTier, request: Sequence[tuple[Key, BlockMeta]]) -> int:
    """Store one request in `tier` and return its prefix hits there (before the store)."""
    hits = tier.hits([key for key, _ in request])
    tier.store(request)
    return hits
