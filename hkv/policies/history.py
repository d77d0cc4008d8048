"""`History`: the last requests a sampled `auto` keeps to rebuild a new leader from."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from itertools import islice
from operator import itemgetter

from hkv.blocks import BlockMeta
from hkv.policies.base import Key
from hkv.policies.shadow import merged

Pairs = list[tuple[Key, BlockMeta]]
Columns = tuple[tuple, tuple]  # a request's keys and metas, as two tuples
NONE: Columns = ((), ())
_KEY, _META = itemgetter(0), itemgetter(1)


def columns(pairs: Pairs) -> Columns:
    """`(key, meta)` pairs as a tuple of keys and one of metas (two passes of `map`: `zip(*)`
    would make an iterator, an object for the collector, per pair)."""
    return (tuple(map(_KEY, pairs)), tuple(map(_META, pairs))) if pairs else NONE


def pairs(kept: Columns) -> Pairs:
    """Columns back as `(key, meta)` pairs, made only when a rebuild reads them."""
    return list(zip(*kept, strict=True))


class History:
    """The last requests, `limit` block references of them (the oldest forgotten first), each
    kept as it came (its misses and the hits found) and merged into prefix order (`merged`)
    only when a rebuild first reads it, once: a request's bookkeeping costs nothing more on
    its way in, and switches a few requests apart merge each request once between them.

    A request is kept as columns (a tuple of its keys, one of its metas), not as its pairs:
    kept, the pairs would be a tier or two of small objects outliving their request, and each
    request's would set off collections of Python's cyclic garbage collector while the engine
    waits (`bench.adapter_overhead` counts them: `gc_collections`, `gc_ms`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.remembered = 0  # requests ever kept: the next one's number
        self._entries: deque[list] = deque()  # [misses, hits found or None once merged, refs]
        self._refs = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def oldest(self) -> int:
        """The number of the oldest request kept."""
        return self.remembered - len(self._entries)

    def remember(self, misses: Pairs, found: Pairs) -> None:
        """Keep one request (its misses noted, its hits found), forgetting the oldest past
        `limit` references."""
        refs = len(misses) + len(found)
        entries = self._entries
        entries.append([columns(misses), columns(found), refs])
        self.remembered += 1
        self._refs += refs
        while self._refs - entries[0][2] >= self.limit:
            self._refs -= entries.popleft()[2]

    def kept(self) -> Iterator[Pairs | tuple[Pairs, Pairs]]:
        """Every request kept, as it is kept: merged already (its pairs in prefix order), or
        its misses and hits found (a tuple, `merged` left to the reader: `rebuilt_in_c`)."""
        for misses, found, _ in self._entries:
            yield pairs(misses) if found is None else (pairs(misses), pairs(found))

    def whole(self, since: int | None = None) -> Iterator[Pairs]:
        """The requests kept from request number `since` on (all of them without), each
        merged into prefix order."""
        start = 0 if since is None else max(0, since - self.oldest)
        for entry in islice(self._entries, start, None):
            if entry[1] is not None:
                entry[0], entry[1] = columns(merged(pairs(entry[0]), pairs(entry[1]))), None
            yield pairs(entry[0])
