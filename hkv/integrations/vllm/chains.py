"""Running requests' chains: a request's blocks ranked by token position while it runs.

vLLM 0.33 passes the storing request to `insert`, with every key's token position, and its lru
ranks a running request's blocks as one group: all at the rank the request took when first seen,
deepest first (`(request_rank, -position)`), whatever order the stores come in (batches, a
sliding window's backfill, a retry after a failed store). A prefix cache serves a block only
when every block before it is served, so the head of a prefix still being stored must outlive
its tail: evicted head first, the rest of the prefix would be stored for nothing.

hkv's policies rank blocks their own way (queues, priorities), so the adapter keeps, for every
running request, its resident blocks sorted by position (`Chain`). A policy that supports it
(`EvictionPolicy.evict_chains`) asks, whenever its eviction order reaches a block of a running
request, which block to give up in its place (`Chains.stand_ins`): that request's deepest
evictable block. The request's blocks thus leave deepest first, at the rank of its oldest block,
as vLLM's lru orders them. A chain the eviction order went through whole (every evictable
block given up) stands for a request older than anything the policy still ranks: its later
blocks are evicted first (`stale`), as vLLM's lru evicts them at the request's old rank. When
the request finishes, `after_request` ranks its blocks for good and the chain is dropped.

Cost: a store's blocks join their chain in O(log n) each (positions usually grow: an append);
an eviction scans each chain it meets once, from the tail; a request's end walks its chain once.
No store re-reads the request's prefix.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterable
from typing import Any

Key = Any
StandIn = Callable[[Key, Collection[Key]], Key]


class Chain:
    """One running request's resident blocks, head first: `keys[i]` ends at token `ends[i]`.

    `rank` orders requests by when the adapter first saw them (a later one is more recent);
    `generation` is the adapter's cache generation it was made in (a reset orphans it)."""

    __slots__ = ("end_of", "ends", "generation", "keys", "rank")

    def __init__(self, rank: int, generation: int) -> None:
        self.ends: list[int] = []
        self.keys: list[Key] = []
        self.end_of: dict[Key, int] = {}
        self.rank = rank
        self.generation = generation

    def add(self, key: Key, end: int) -> None:
        """`key`, ending at token `end`, joins the chain (after any block ending there)."""
        ends = self.ends
        if not ends or end >= ends[-1]:
            ends.append(end)
            self.keys.append(key)
        else:
            at = bisect.bisect_right(ends, end)
            ends.insert(at, end)
            self.keys.insert(at, key)
        self.end_of[key] = end

    def discard(self, key: Key) -> None:
        end = self.end_of.pop(key)
        keys = self.keys
        at = bisect.bisect_left(self.ends, end)
        while keys[at] != key:  # blocks of several KV-cache groups can end at one position
            at += 1
        del self.ends[at], keys[at]


class _ChainsOf(dict):
    """A request's chains, one per adapter (a tiering manager runs several), in its
    `ReqContext` state: they go when the request does."""


class Chains:
    """Which running request's chain each resident block belongs to (`chain_of`).

    `unevictable` is the adapter's set of blocks no eviction may take (being written or read,
    and, during an eviction, vLLM's protected ones)."""

    def __init__(self, unevictable: Collection[Key]) -> None:
        self.unevictable = unevictable
        self.chain_of: dict[Key, Chain] = {}
        self.stale: dict[Chain, None] = {}  # gone through whole by an eviction, oldest first
        self.last_context: Any = None  # the request `last_chain` belongs to (a cache)
        self.last_chain: Chain | None = None
        self.next_rank = 0
        self.generation = 0

    def of_request(self, req_context: Any) -> Chain | None:
        """The request's chain (made on first use); None for a context without state."""
        get_state = getattr(req_context, "get_state", None)
        if get_state is None:
            return None
        chains = get_state(_ChainsOf)
        if chains is None:
            chains = _ChainsOf()
            req_context.set_state(chains)
        chain = chains.get(self)
        if chain is None or chain.generation != self.generation:
            self.next_rank += 1
            chain = chains[self] = Chain(self.next_rank, self.generation)
        return chain

    def join(self, key: Key, end: int, chain: Chain) -> bool:
        """`key` moves into `chain` unless it is in a chain as recent or more (vLLM's lru never
        lowers a rank); whether it moved."""
        old = self.chain_of.get(key)
        if old is not None:
            if old.rank >= chain.rank:
                return False
            old.discard(key)
        chain.add(key, end)
        self.chain_of[key] = chain
        return True

    def leave(self, keys: Iterable[Key]) -> None:
        """The blocks leave their chains (evicted, removed, or ranked on their own)."""
        chain_of = self.chain_of
        for key in keys:
            chain = chain_of.pop(key, None)
            if chain is not None:
                chain.discard(key)

    def finish(self, req_context: Any) -> None:
        """The request finished: its blocks are ranked for good, its chain goes."""
        get_state = getattr(req_context, "get_state", None)
        chains = get_state(_ChainsOf) if get_state is not None else None
        chain = chains.pop(self, None) if chains is not None else None
        if chain is None:
            return
        self.stale.pop(chain, None)
        self.last_context = self.last_chain = None
        chain_of = self.chain_of
        for key in chain.keys:
            if chain_of.get(key) is chain:
                del chain_of[key]
        chain.keys.clear()
        chain.ends.clear()
        chain.end_of.clear()

    def evicted(self, victims: list[Key]) -> None:
        """The policy evicted `victims`: they leave their chains, and a chain left with no
        evictable block is stale (its request's rank is now the oldest)."""
        chain_of, unevictable = self.chain_of, self.unevictable
        hit = {chain_of[key]: None for key in victims if key in chain_of}
        self.leave(victims)
        for chain in hit:
            if all(key in unevictable for key in reversed(chain.keys)):
                self.stale[chain] = None

    def stale_victims(self, n: int) -> list[Key]:
        """Up to `n` evictable blocks of stale chains: older requests first, deepest first."""
        victims: list[Key] = []
        unevictable = self.unevictable
        for chain in self.stale:
            for key in reversed(chain.keys):
                if key not in unevictable:
                    victims.append(key)
                    if len(victims) == n:
                        return victims
        return victims

    def clear(self) -> None:
        self.chain_of.clear()
        self.stale.clear()
        self.last_context = self.last_chain = None
        self.generation += 1

    def stand_ins(self) -> StandIn:
        """The `stand_in(key, taken)` of one eviction: the block to give up in `key`'s place,
        the deepest block of `key`'s chain that is neither unevictable nor in `taken` (`key`
        itself when no deeper one is; `key` when it is in no chain). Within one eviction each
        chain is scanned once from its tail: `unevictable` and `taken` only grow."""
        chain_of, unevictable = self.chain_of, self.unevictable
        scanned: dict[Chain, int] = {}  # chain -> index of the last block it gave

        def stand_in(key: Key, taken: Collection[Key]) -> Key:
            chain = chain_of.get(key)
            if chain is None:
                return key
            keys = chain.keys
            at = scanned.get(chain, len(keys))
            while at:
                at -= 1
                deeper = keys[at]
                if deeper not in unevictable and deeper not in taken:
                    scanned[chain] = at
                    return deeper
            return key

        return stand_in
