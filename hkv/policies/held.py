"""`Held`: the meta of every block `auto`'s tier holds, oldest first.

`auto` keeps each held block's meta for its shadows (the reused blocks' columns, where the caller
gives none: `known`) and for a switch (the new leader is fitted to the blocks the tier holds, and
those it gives up are kept aside, evicted oldest first). Kept as a Python dict, that is a dict
insert for every block stored and a pop for every block evicted, a share of `auto`'s time on
vLLM's hot path (docs/policies.md gives what moving it saved). Where the leader is a
`NativeLeader` and nothing is aside, the leader keeps them instead, in C beside each key (stored
as it inserts, dropped as it evicts, in the order the keys came in: `NativeLeader.held_metas`),
and this keeps none; with anything aside (after a switch, or a key refused for another key's id)
it is a dict again until the aside is empty, when the leader takes the dict's order and metas
over. Either way the order is the dict's: the one the blocks came into the tier in, a block the
leader takes back from aside keeping its place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hkv.blocks import BlockMeta
from hkv.policies.base import EvictionPolicy, Key
from hkv.policies.leader import NativeLeader
from hkv.policies.native import Columns, known


class Held:
    """The metas of a tier's blocks, `metas` (a dict) or, where that is None, its leader's."""

    __slots__ = ("metas", "ordered")

    def __init__(self) -> None:
        self.metas: dict[Key, BlockMeta] | None = {}
        self.ordered = True  # a leader in C holds its keys in `metas`' order, with its metas

    def of(self, live: EvictionPolicy) -> dict[Key, BlockMeta]:
        """Every held key's meta, oldest first (a dict the caller may keep)."""
        return self.metas if self.metas is not None else live.held_metas()

    def known(self, keys: list, declined: dict, live: EvictionPolicy) -> Columns:
        """Of `keys`, those held or else `declined`, with their metas, in order."""
        if self.metas is None:
            return live.known(keys, declined)
        return known(keys, self.metas, declined)

    def add(self, keys: Sequence[Key], metas: Sequence[BlockMeta], live, refused) -> None:
        """`keys` came in, in order; `refused`: those the leader refused (set aside)."""
        if self.metas is None:
            if not refused:
                return
            held = live.held_metas()  # a dict again, the batch in its order at the end
            for key in keys:
                held.pop(key, None)
            self.metas, self.ordered = held, True
        self.metas.update(zip(keys, metas, strict=True))

    def drop(self, keys: Iterable[Key], live: EvictionPolicy, aside: dict) -> None:
        """`keys` left the tier (the leader or `aside`)."""
        if self.metas is not None:
            pop = self.metas.pop
            for key in keys:
                pop(key, None)
            self.settle(live, aside)

    def fit(self, live: EvictionPolicy, held: dict, aside: dict, ordered: bool) -> None:
        """`live` runs the tier from now on, holding keys of `held`, which this keeps (a leader
        in C keeps their metas too, from now on; the order the tier's: `settle`); `ordered`: it
        was built from `held`, its keys in that order with those metas already."""
        self.metas, self.ordered = held, ordered
        if isinstance(live, NativeLeader):
            live.keeping_metas()
            self.settle(live, aside)

    def settle(self, live: EvictionPolicy, aside: dict) -> None:
        """With nothing aside and a leader in C, the leader keeps the metas from now on, each
        key's and in the tier's order (a key it took back from aside kept its place here)."""
        if self.metas is None or aside or not isinstance(live, NativeLeader):
            return
        if live.keeping and len(live) == len(self.metas):  # (then `metas` has its every key)
            if not self.ordered:
                live.reorder(self.metas)
            self.metas = None

    def taken_back(self) -> None:
        """A key went from aside into the leader: it keeps its place here, not there."""
        self.ordered = False


class Owed:
    """What a switch left the new leader owed: the keys its shadow tier held that the tier did
    not.

    Its shadow would hit each of them when next asked, as long as it still holds it; the tier
    has to store it again. As one is stored while the shadow still holds it, the leader takes it
    as its shadow takes that hit, referenced (`touch_all`, the request's tail first); stored once
    the shadow has let it go, it is owed no more. Without this a leader that keeps what it met
    first and puts each new block where it goes first (`lip`), switched to after others ran the
    tier, keeps what it inherited for good and falls far below its own shadow, whose hits chose
    it (docs/policies.md, "What a switch owes")."""

    __slots__ = ("i", "keys", "shadows", "stored")

    def __init__(self) -> None:
        self.keys: set[Key] = set()
        self.shadows, self.i = None, 0  # the shadow set and its expert whose tier is owed
        self.stored: list[Key] = []  # owed keys stored one at a time, not yet settled

    def owe(self, shadows, i: int, held: dict) -> None:
        """A switch to expert `i` of `shadows` (a `ShadowSet`; None: a tier whose shadows list
        nothing, a sampled one's, and nothing is owed); the tier holds `held`."""
        self.shadows, self.i, self.stored = shadows, i, []
        self.keys = set(shadows.unheld(i, held)) if shadows is not None else set()

    def settle(self, keys: Sequence[Key], live: EvictionPolicy) -> None:
        """`keys` were just stored in `live` in one call (a request's, or none), after those
        stored one at a time since the last settle (`stored`): those owed and still in the
        shadow tier are referenced there, tail first. So a request's owed blocks are referenced
        alike whether the caller inserts them in one call or one by one (vLLM 0.33 inserts each
        with its request; `auto` settles those before its next eviction or request end)."""
        if self.stored:
            keys, self.stored = [*self.stored, *keys], []
        if self.keys:
            back = [key for key in keys if key in self.keys]
            if back:
                self.keys.difference_update(back)
                kept = self.shadows.holding(self.i, back)  # (a copy's: its own shadow set's)
                if kept:
                    live.touch_all(kept[::-1])
