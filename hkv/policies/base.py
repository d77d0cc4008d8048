"""One eviction-policy interface for the simulator, the block manager and the vLLM adapter.

A policy tracks which blocks are resident in one tier of `capacity_blocks` slots and, when asked,
names the blocks to give up. Keys are opaque and hashable (trace hash ids, `BlockId`s, vLLM's
bytes keys); what a policy may know about a block is its `BlockMeta` (tokens, position in its
sequence, modality, tier, pinned).

The caller owns the protocol, the same in all three users:

    if key in policy:                       # a reference to a resident block
        policy.touch(key)
    elif policy.admit(key, meta):           # a miss the cache offers to store
        if len(policy) == policy.capacity_blocks:
            victims = policy.evict(1, protected)   # exactly 1 key, or None: do not store
        policy.insert(key, meta)
    policy.after_request(stored_keys, reused_keys)   # where a tier stores per request (vLLM)

Policies never evict on their own: `insert` on a full policy is a bug and raises.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import filterfalse, islice
from operator import attrgetter
from typing import Any, ClassVar

from hkv.blocks import BlockMeta
from hkv.errors import HkvError, is_number

Key = Hashable
EMPTY: frozenset[Key] = frozenset()


_PINNED = attrgetter("pinned")


def unprotected(keys: Iterable[Key], n: int, protected: Collection[Key]) -> list[Key]:
    """The first `n` (or fewer) of `keys` not in `protected`, in order.

    The skipping runs in C (`filterfalse` over the collection's own `__contains__`): a caller
    such as vLLM's adapter protects every chunk in flight, often the first thousands of keys
    in eviction order, and each skipped key must cost a hash lookup and no Python bytecode."""
    return list(islice(filterfalse(protected.__contains__, keys), n))


def any_pinned(queue: dict[Key, BlockMeta], keys: Iterable[Key]) -> bool:
    """Whether the meta of any of `keys` in `queue` (key -> meta) is pinned (in C)."""
    return any(map(_PINNED, map(queue.__getitem__, keys)))


def check_int(owner: str, field: str, value: Any, low: int, high: int | None = None) -> int:
    """Return `value` if it is an integer in [low, high]; else raise `HkvError` naming it."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        accepted = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise HkvError(f"{owner}.{field}: got {value!r}; expected {accepted}")
    return value


def check_float(
    owner: str, field: str, value: Any, low: float, high: float = math.inf, *, open_low=False
) -> float:
    """Return `value` as a float if it is a finite number in [low, high] (or (low, high])."""
    ok = is_number(value) and math.isfinite(value)
    if not ok or value < low or value > high or (open_low and value == low):
        bracket = "(" if open_low else "["
        accepted = f"a number in {bracket}{low}, {high}]"
        if high == math.inf:
            accepted = f"a number {'>' if open_low else '>='} {low}"
        raise HkvError(f"{owner}.{field}: got {value!r}; expected {accepted}")
    return float(value)


@dataclass(eq=False)
class EvictionPolicy(ABC):
    """Which resident blocks to give up, one tier of `capacity_blocks` slots at a time.

    Contracts every policy keeps (tested across the registry in tests/test_policies.py):
    - `evict(n, protected)` returns exactly `n` distinct resident keys, none in `protected` and
      none whose meta is pinned, and forgets them; or returns None and changes nothing.
    - at most `capacity_blocks` keys are resident; `insert` into a full policy raises.
    - `touch` and `remove` of a key that is not resident are ignored.

    Subclasses are dataclasses: their fields after `capacity_blocks` are hyperparameters,
    validated in `validate()`; `reset()` builds the (empty) state and is what `clear()` calls.
    """

    capacity_blocks: int
    name: ClassVar[str] = "?"

    def __post_init__(self) -> None:
        # 0 is a tier too small for one block, as vLLM sizes its CPU tier from bytes: it holds
        # nothing and refuses every store (vLLM's own policies accept it the same way)
        check_int(self.name, "capacity_blocks", self.capacity_blocks, 0)
        self.validate()
        self.reset()

    def validate(self) -> None:  # noqa: B027 (an optional hook: most policies have no fields)
        """Check hyperparameters; raise `HkvError` naming field, value and accepted range."""

    @abstractmethod
    def reset(self) -> None:
        """Build empty state (called at construction and by `clear`)."""

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        """Whether to store `key` on a miss (admission control); called once per miss offered.

        The default admits everything. A policy that declines documents why in its docstring.
        """
        return True

    @abstractmethod
    def insert(self, key: Key, meta: BlockMeta) -> None:
        """Make `key` resident; it must be absent and the policy must have a free slot."""

    @abstractmethod
    def touch(self, key: Key) -> None:
        """Record a reference to resident `key` (ignored if absent)."""

    def touch_all(self, keys: Iterable[Key]) -> None:
        """`touch` each key in order: one call for the keys of a request (vLLM's adapter).
        Policies on vLLM's hot path override it with the loop inlined."""
        touch = self.touch
        for key in keys:
            touch(key)

    def insert_all(self, keys: Sequence[Key], meta: BlockMeta) -> Any:
        """`insert` each key in order, all with `meta`: vLLM's adapter hands a policy the
        chunks stored since its last decision in one call. What `insert_each` returns (a
        `NativeLeader`: the keys it refused)."""
        return self.insert_each(keys, [meta] * len(keys))

    def insert_each(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> None:
        """`insert` each key in order with its meta (`insert_all` with one meta each).
        Policies on vLLM's hot path override it with the containers' bulk operations."""
        insert = self.insert
        for key, meta in zip(keys, metas, strict=True):
            insert(key, meta)

    def admit_each(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> list[bool]:
        """`admit` of each key in order with its meta, the verdicts in a list (one call for a
        request's misses: `auto` led from C answers them in one C call)."""
        return list(map(self.admit, keys, metas))

    @property
    def admits_everything(self) -> bool:
        """True when `admit` always says yes and records nothing, so a caller on a hot path
        may skip calling it (the default `admit`; `dip`/`bip` pinned to one mode)."""
        return type(self).admit is EvictionPolicy.admit

    @property
    def admits_now(self) -> bool:
        """True when `admit` would say yes to any block now and record nothing: a caller may
        then skip asking it for the blocks at hand (`admits_everything`, unless the policy's
        admission changes as it runs: `auto` admits as its leader does)."""
        return self.admits_everything

    @abstractmethod
    def remove(self, key: Key) -> None:
        """Forget `key` without counting an eviction (ignored if absent)."""

    @abstractmethod
    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        """Evict exactly `n` keys, none protected or pinned; or return None and change nothing."""

    def clear(self) -> None:
        """Forget every block and all learned state."""
        self.reset()

    # The resident keys are those of `self._resident` (a dict or set that `reset` builds), unless
    # a policy keeps them otherwise and overrides these three (`QueuePolicy`'s queues).
    def __len__(self) -> int:
        return len(self._resident)

    def __contains__(self, key: object) -> bool:
        return key in self._resident

    def __iter__(self) -> Iterator[Key]:
        """The resident keys, in no promised order."""
        return iter(self._resident)

    def hyperparameters(self) -> dict[str, Any]:
        """The policy's configuration as plain values (for results JSON)."""
        skip = {"capacity_blocks", *self.context_fields}
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.init and f.name not in skip and not f.name.startswith("_")
        }

    context_fields: ClassVar[tuple[str, ...]] = ()
    """Fields filled from the run's context by `make_policy` (cost model, config, future)."""

    reads_meta: ClassVar[bool] = True
    """False when no decision of the policy reads a `BlockMeta` field but `pinned` (recency-
    and frequency-only policies): a caller on a hot path may then pass one shared meta instead
    of working out each block's position and modality (vLLM's adapter does)."""

    offline: ClassVar[bool] = False
    """True for yardsticks that need the future requests (`belady`): no server can run them."""

    def note_misses(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> None:  # noqa: B027
        """A request's blocks that are absent from the tier, `keys` and their `metas` (one list
        each, of one length), before its store (vLLM's `on_store_miss`, which names them all
        even when the store then fails; `admit` hears only of those stored). The lists are the
        policy's to keep. Optional: the default ignores them (`auto` replays them in its shadow
        tiers)."""

    @property
    def notes_misses(self) -> bool:
        """Whether `note_misses` does anything (callers on a hot path skip it otherwise)."""
        return type(self).note_misses is not EvictionPolicy.note_misses

    def evict_chains(
        self, n: int, protected: Collection[Key], stand_in: Callable[[Key, Collection[Key]], Key]
    ) -> list[Key] | None:
        """`evict`, where some resident blocks belong to chains still being stored (a running
        request's blocks in vLLM 0.33): when the eviction order reaches a block `key`, the block
        given up is `stand_in(key, taken)` (`taken`: those chosen so far), the deepest evictable
        block of `key`'s chain, until `key` itself is; so a chain leaves tail first, at the rank
        of its first block in the eviction order (vLLM's lru ranks a running request's blocks
        as one group, deepest first). Optional: the default ignores chains, and the order of a
        request's blocks is then set when it ends (`after_request`)."""
        return self.evict(n, protected)

    @property
    def ranks_chains(self) -> bool:
        """Whether `evict_chains` ranks chains (callers skip keeping them otherwise)."""
        return type(self).evict_chains is not EvictionPolicy.evict_chains

    def refresh_all(self, keys: Iterable[Key]) -> None:  # noqa: B027 (optional: see below)
        """Re-rank resident `keys`, in order, as if just stored, without counting a reference
        (absent keys are ignored): the last one given is the last of them to be evicted. Used
        by `after_request` to give up a request's new chain from its tail. The default does
        nothing (policies whose eviction order never depends on insertion order: `random`)."""

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key]) -> None:
        """A request is done (vLLM's CPU tier reports it when it finishes; hkv's replay with
        `store="per_request"` after the request's store): `stored` are the blocks it inserted,
        `reused` the ones it found resident, each in prefix order.

        A prefix cache serves a block only when every block before it is served, so a chain
        must be given up from its tail, as vLLM's own `lru` and `arc` do (they re-rank a
        request's blocks tail to head). The default does the same: the stored blocks are
        re-ranked tail first (`refresh_all`), then the reused ones touched tail first, so that
        the head of each chain, which every later request sharing any of it needs, is the most
        recent. A policy that orders chains its own way (the prefix-capped value policies)
        overrides it."""
        if stored:
            self.refresh_all(stored[::-1])
        if reused:
            self.touch_all(reused[::-1])

    def _check_insert(self, key: Key, size: int, resident: bool) -> None:
        """What every `insert` checks first: room (`size` blocks held) and a new key."""
        if size >= self.capacity_blocks:
            raise RuntimeError(
                f"{self.name}: insert({key!r}) into a full policy ({self.capacity_blocks} blocks); "
                "call evict() first"
            )
        if resident:
            raise KeyError(f"{self.name}: {key!r} is already resident")


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector held off for a burst of allocations that make no cycles
    (a switch builds a tier's worth of entries: in a process holding a large heap, the
    collections they would trigger cost four times the building; 21.5 ms against 4.6 ms for a
    16,384-block leader in `bench.sim.two_tier`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
