"""`NativeLeader`: an expert running `auto`'s tier from C.

A leader `auto` rebuilds in C (`rebuild.rebuilt_in_c`) used to be handed to a fresh Python
policy: a tier's worth of entries made at the switch, and then a Python heap push for every
block a request reuses, its priority below all others (a chain's priorities decrease), so each
push climbs to the root (1.3-1.5 us a block on the H200 host, against 0.07-0.2 us for the queue
experts). A prefix-value expert (`cost_aware`, `depth_lfu`, `depth_lfu_static`) now stays in
C as the live leader: this class is its `EvictionPolicy`, the decisions its Python policy's
(`PrefixValuePolicy`), which tests/test_native_leader.py checks call by call. So do the queue
experts (`QUEUE_EXPERTS`): `lip`, `auto`'s first leader, `lru`, the one it most often switches to
on the engine's workloads, `lru+st2`, whose tracker of 64,000 offers a switch no longer
hands to Python, and `s3fifo`, which led a third to two fifths of the requests on Mooncake's
trace at 2 % and 10 % of its blocks as a Python policy (its eviction moves blocks between its
FIFOs as it goes, so it is no walk of the queues: s3fifo.c answers for it). In Python their
queues are C containers already, but each call still makes a Python key per block moved, and
a switch to one made a tier's worth of `OrderedDict` entries
(on the vLLM 0.26 stand-in, `bench.adapter_overhead`'s skewed variant at 8 GiB, the leaders'
own calls were about a quarter of `auto`'s time before they ran here).

Keys: the C side works on 64-bit ids (`native.key_bits`) and keeps each resident id's key; a
key whose id another resident key has is not resident here and `insert` returns it (refused),
where `auto` keeps it outside the leader, evicted first. No block is pinned where `auto` runs a
leader here: vLLM never pins, and hkv's block manager, which does, reports no request's end, so
`auto` never switches there.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.policies import native
from hkv.policies.base import EMPTY, EvictionPolicy, Key

PREFIX_EXPERTS = frozenset({"cost_aware", "depth_lfu", "depth_lfu_static"})
QUEUE_EXPERTS = frozenset({"lip", "lru", "lru+st2", "s3fifo"})
LIVE_IN_C = PREFIX_EXPERTS | QUEUE_EXPERTS
"""The experts that run as a `NativeLeader` where `auto` leads from C (vLLM notes its misses):
a switch's rebuild or copy in C, and a queue expert as the first leader (`native_first`)."""
_NAMES = {"lip": "bip", "lru+st2": "store_threshold"}  # as `make_expert` names them


class NativeLeader(EvictionPolicy):
    """Expert `label` (of `LIVE_IN_C`) in C (`leader`, a `_shadows.Leader` of expert 0 of
    the native `shadows`, which a copy clones); `value`: cost_aware's `value(meta)` (None for
    the depth experts, whose worth C works out), its memo by shape `worths` shared with the
    shadows'."""

    def __init__(self, label: str, capacity_blocks: int, leader: Any, value=None, worths=None,
                 shadows: Any = None):  # fmt: skip
        self.capacity_blocks = capacity_blocks
        self.label = label
        self.name = "depth_lfu" if label.startswith("depth_lfu") else _NAMES.get(label, label)
        self._queue = label in QUEUE_EXPERTS  # reads no meta
        self._all = self._queue and label != "lru+st2"  # and admits everything
        self._c = leader
        self._shadows = shadows
        self._value = value
        self._worths: dict[tuple, float] = {} if worths is None else worths
        self._keep = False  # each insert's meta kept beside its key (`keeping_metas`)

    def reset(self) -> None:
        """Forget every block and all learned state: a fresh expert in C."""
        self._shadows = native.shadows([self.label], self.capacity_blocks)
        self._c = native.leader(self._shadows, {})

    def __deepcopy__(self, memo: dict) -> NativeLeader:
        """A copy that decides alike: the expert cloned in C, holding the same keys."""
        if self._shadows is None:
            raise HkvError("NativeLeader: a leader made without its shadows cannot be copied")
        twin = copy.copy(self)
        memo[id(self)] = twin
        twin._shadows = self._shadows.cloned(0)
        held = self._c.held()  # the keys, oldest first, with the metas kept
        twin._c = native.leader(twin._shadows, {native.key_bits(k): k for k in held}, held)
        twin._c.reorder(held)
        twin._worths = dict(self._worths)
        return twin

    def _worth(self, meta: BlockMeta) -> float:
        """cost_aware's value of `meta`, by shape as `PrefixValuePolicy._observe` keeps it."""
        if self._value is None:
            return 0.0
        shape = (meta.tokens, meta.position, meta.modality, meta.tier)
        worth = self._worths.get(shape)
        if worth is None:
            worth = self._worths[shape] = self._value(meta)
        return worth

    def keeping_metas(self) -> NativeLeader:
        """This leader, from now on keeping each inserted key's meta beside it in C (`auto`'s
        tier: `held.Held`); a prefix-value expert's `insert_each` keeps them anyway."""
        self._keep = True
        return self

    @property
    def keeping(self) -> bool:
        """Whether it keeps the metas of the keys inserted (`keeping_metas`)."""
        return self._keep

    @property
    def keeps_metas(self) -> bool:
        """Whether it keeps metas and has every resident key's."""
        return self._keep and self._c.metas_kept()

    def held_metas(self) -> dict[Key, BlockMeta | None]:
        """Each resident key's meta kept (None: none), oldest first (in the order they came)."""
        return self._c.held()

    def known(self, keys: list, second: dict) -> tuple[list, list]:
        """Of `keys`, those resident with a meta kept, else in `second`, with it, in order."""
        return self._c.known(keys, second)

    def reorder(self, held: dict) -> None:
        """The resident keys of `held` made the newest, in its order, with its metas."""
        self._c.reorder(held)

    def __len__(self) -> int:
        return len(self._c)

    def __contains__(self, key: object) -> bool:
        return key in self._c

    def __iter__(self) -> Iterator[Key]:
        return iter(self._c.keys())

    @property
    def admits_everything(self) -> bool:
        return self._all

    @property
    def reads_meta(self) -> bool:
        return not self._queue

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        if self._queue:
            return self._all or self._c.admit(key, 0, 0, 0.0)
        return self._c.admit(key, meta.position, meta.tokens, self._worth(meta))

    def admit_each(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> list[bool]:
        """`admit` of each key in order, in one C call."""
        keys, metas = list(keys), list(metas)
        if len(keys) != len(metas):
            raise ValueError(f"admit_each: {len(keys)} keys, {len(metas)} metas")
        if self._all:
            return [True] * len(keys)
        if self._queue:
            return self._c.admit_each(keys, None, None, None)
        return self._c.admit_metas(keys, metas, self._value, self._worths)

    def insert(self, key: Key, meta: BlockMeta) -> bool:
        """Insert `key`; True where it is refused (its id is another resident key's)."""
        kept = meta if self._keep else None
        if self._queue:
            return self._c.insert_one(key, 0, 0, 0.0, kept)
        return self._c.insert_one(key, meta.position, meta.tokens, self._worth(meta), kept)

    def insert_each(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> list[Key]:
        """Insert in order; the keys refused for an id another key holds are returned."""
        keys, metas = _listed(keys), _listed(metas)
        if len(keys) != len(metas):
            raise ValueError(f"insert_each: {len(keys)} keys, {len(metas)} metas")
        if self._queue:
            return self._c.insert(keys, None, None, None, metas if self._keep else None)
        return self._c.insert_metas(keys, metas, self._value, self._worths)

    def touch(self, key: Key) -> None:
        self._c.touch([key], False)

    def touch_all(self, keys: Iterable[Key]) -> None:
        self._c.touch(_listed(keys), False)

    def refresh_all(self, keys: Iterable[Key]) -> None:
        self._c.touch(_listed(keys), True)

    def remove(self, key: Key) -> None:
        self._c.remove(key)

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        return self._c.evict(n, protected)

    @property
    def ranks_chains(self) -> bool:
        return self.label == "lru"  # as `LRUPolicy` (`QueuePolicy.evict_chains`) does

    def evict_chains(self, n: int, protected: Collection[Key], stand_in) -> list[Key] | None:
        """`QueuePolicy.evict_chains` for `lru`, in C (`stand_in` must leave this policy be);
        the others rank no chain: `evict`."""
        if self.label != "lru":
            return self.evict(n, protected)
        return self._c.evict_chains(n, protected, stand_in)

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key]) -> None:
        # (a prefix-value expert reads only the reused blocks)
        self._c.after_request(_listed(stored) if self._queue else [], _listed(reused))

    def hyperparameters(self) -> dict[str, Any]:
        return {} if self.label == "lru" else {"expert": self.label}  # (`LRUPolicy` has none)


def _listed(keys: Iterable[Key]) -> list[Key]:
    return keys if isinstance(keys, list) else list(keys)


def held_aside(live: EvictionPolicy, held: dict[Key, BlockMeta]) -> dict[Key, BlockMeta]:
    """What `auto` keeps aside after a switch to `live`: the keys of `held` it does not hold,
    with their metas, once the keys it holds that `held` has not are removed from it (a resumed
    leader's); found in C where `live` is a `NativeLeader` that holds only keys of `held` (as one
    built with `held` does)."""
    if isinstance(live, NativeLeader):
        left = live._c.left_out()  # built from `held` just now: what it left out, from C
        if left is not None and len(live) + len(left) == len(held):
            return left
        missing = live._c.missing(held)
        if len(live) + len(missing) == len(held):
            return {key: held[key] for key in missing}
    resident = list(live)
    for key in [key for key in resident if key not in held]:
        live.remove(key)
    kept = held.keys() & resident  # what `live` holds now, as a set
    return {key: meta for key, meta in held.items() if key not in kept}


def native_first(policy: EvictionPolicy, label: str, capacity_blocks: int) -> EvictionPolicy:
    """`auto`'s first leader, `policy` (expert `label`, holding nothing yet), as a
    `NativeLeader` where it is one of `QUEUE_EXPERTS` and the extension is built; else itself."""
    if label not in QUEUE_EXPERTS or len(policy) or capacity_blocks < 1 or not native.built():
        return policy
    shadows = native.shadows([label], capacity_blocks)
    return NativeLeader(label, capacity_blocks, native.leader(shadows, {}), shadows=shadows)


def vllms_lru(policy: EvictionPolicy) -> EvictionPolicy:
    """What vLLM's adapter runs for hkv's `lru`: a fresh `LRUPolicy` as a `NativeLeader` of it
    where the extension is built (nothing is pinned in vLLM; the same decisions, call by call,
    `evict_chains` included), else, like any other policy, `policy` itself."""
    from hkv.policies.lru import LRUPolicy

    capacity = policy.capacity_blocks
    if type(policy) is not LRUPolicy or len(policy) or capacity < 1 or not native.built():
        return policy
    shadows = native.shadows(["lru"], capacity)
    return NativeLeader("lru", capacity, native.leader(shadows, {}), shadows=shadows)
