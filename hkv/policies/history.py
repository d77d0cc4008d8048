"""`History`: the last requests a sampled `auto` keeps to rebuild a new leader from; `Recent`:
the latest keys of a kind it keeps (the misses its leader declined)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from itertools import islice

from hkv.blocks import BlockMeta
from hkv.policies.base import Key
from hkv.policies.native import NO_BLOCKS, Columns, columns, merged

Pairs = list[tuple[Key, BlockMeta]]


class History:
    """The last requests, `limit` block references of them (the oldest forgotten first), each
    kept as it came (its misses and the hits found) and merged into prefix order (`merged`)
    only when a rebuild first reads it, once: a request's bookkeeping costs nothing more on
    its way in, and switches a few requests apart merge each request once between them.

    A request is kept as the columns it came in (`(keys, metas)`, two lists), not as pairs:
    kept, pairs would be a tier or two of small objects outliving their request, and each
    request's would set off collections of Python's cyclic garbage collector while the engine
    waits (`bench.adapter_overhead` counts them: `gc_collections`, `gc_ms`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.remembered = 0  # requests ever kept: the next one's number
        self._entries: deque[list] = deque()  # [misses, hits found (NO_BLOCKS once merged), refs]
        self._refs = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def oldest(self) -> int:
        """The number of the oldest request kept."""
        return self.remembered - len(self._entries)

    def remember(self, misses: Columns, found: Columns) -> None:
        """Keep one request (its misses noted, its hits found, each `(keys, metas)`, kept as
        given: the caller hands them over), forgetting the oldest past `limit` references."""
        refs = len(misses[0]) + len(found[0])
        entries = self._entries
        entries.append([misses, found, refs])
        self.remembered += 1
        self._refs += refs
        while self._refs - entries[0][2] >= self.limit:
            self._refs -= entries.popleft()[2]

    def kept(self) -> Iterator[tuple[Columns, Columns]]:
        """Every request kept, as it is kept: its misses and hits found, each `(keys, metas)`
        (a merged one: its blocks in prefix order and no hits), the merge left to the reader
        (`rebuilt_in_c`)."""
        return iter(kept(self._entries))

    def whole(self, since: int | None = None) -> Iterator[Pairs]:
        """The requests kept from request number `since` on (all of them without), each
        merged into prefix order."""
        return map(whole, self.entries(since))

    def entries(self, since: int | None = None) -> list[list]:
        """The requests kept from request number `since` on (all of them without), as kept: a
        caller may hold them past their stay here and read each with `whole`, or as `kept` does
        (its first two items)."""
        start = 0 if since is None else max(0, since - self.oldest)
        return list(islice(self._entries, start, None))


def kept(entries: list[list]) -> list[tuple[Columns, Columns]]:
    """Requests `History` kept (`entries`), each as its misses and hits found (`History.kept`)."""
    return [(entry[0], entry[1]) for entry in entries]


def whole(entry: list) -> Pairs:
    """A request `History` kept (one of `entries`), merged into prefix order (once: kept so)."""
    if entry[1] is not NO_BLOCKS:
        entry[0], entry[1] = columns(merged(entry[0], entry[1])), NO_BLOCKS
    return list(zip(*entry[0], strict=True))


class Recent(OrderedDict):
    """A dict of the latest `bound` keys set (insertion order): past it, the oldest goes. An
    `OrderedDict`, whose oldest goes in one step: a plain dict's first key is found by walking
    past the slots its earlier deletions left, which grows with `bound` (a bound of 2,260, what
    `auto` keeps on Mooncake's trace at 5 %: 1.1 us a key set, against 0.27 us here)."""

    def __init__(self, bound: int = 0) -> None:  # (0: as a copy makes it, `bound` set after)
        super().__init__()
        self.bound = bound

    def keep(self, pairs) -> None:
        """Set each `(key, value)` in order, each forgetting the oldest key past `bound`."""
        for key, value in pairs:
            self[key] = value
            if len(self) > self.bound:
                self.popitem(last=False)
