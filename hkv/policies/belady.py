"""Belady's MIN: the offline optimum for unit-cost, single-block caching."""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.policies.base import EMPTY, EvictionPolicy, Key
from hkv.policies.priority import pop_first

NEVER = math.inf


@dataclass(eq=False)
class BeladyPolicy(EvictionPolicy):
    """Evicts the resident block whose next reference is farthest ahead; bypasses when the
    incoming block's next reference is farther than every evictable resident's.

    Belady, "A study of replacement algorithms for a virtual-storage computer", IBM Syst. J. 1966.

    It needs the future: `future` is the reference stream it will be driven with, one sequence of
    keys per request (`Trace.reference_stream()`; `hkv.sim` passes it). Next-use indices are
    precomputed in one backward pass. The policy follows the stream itself: every `touch` and
    `admit` consumes the next reference and must name the key the stream expects (the replay's
    protocol calls exactly one of them per reference); a mismatch raises. The blocks of the
    current request are protected in the bypass decision, as the replay protects them in `evict`.
    A heap entry of the current request's own block is therefore no candidate until the request
    ends: a selection that meets one parks it and the request's end pushes it back, so each entry
    is passed over once a request, not once per missing block (a request meeting its resident
    blocks in a new order would scan them all for every block it stores: quadratic).

    Under prefix caching (a block only hits when all blocks before it do) this is the yardstick,
    not the optimum: a block-level oracle may keep a block whose prefix it let go.
    """

    future: Sequence[Sequence[Hashable]] = field(default=(), repr=False)
    name = "belady"
    context_fields = ("future",)
    offline = True

    def validate(self) -> None:
        if not self.future:
            raise HkvError(
                "belady: needs `future`, the reference stream it will see (one list of keys per "
                "request, e.g. Trace.reference_stream()); hkv simulate passes it"
            )

    def reset(self) -> None:
        flat = [key for request in self.future for key in request]
        next_use: list[float] = [NEVER] * len(flat)
        seen: dict[Hashable, int] = {}
        for index in range(len(flat) - 1, -1, -1):
            next_use[index] = seen.get(flat[index], NEVER)
            seen[flat[index]] = index
        ends, total = [], 0
        for request in self.future:
            total += len(request)
            ends.append(total)
        self._flat, self._next_use, self._ends = flat, next_use, ends
        self._cursor = 0
        self._request_end = 0
        self._request_keys: frozenset[Hashable] = frozenset()
        self._parked: list[tuple[float, int, Key]] = []  # the current request's own entries
        self._parks_for: Collection[Key] | None = None  # a `protected` known to hold them all
        self._resident: dict[Key, tuple[float, BlockMeta]] = {}
        self._heap: list[tuple[float, int, Key]] = []  # (-next_use, seq, key), lazily invalidated
        self._seq = 0
        self._pending: tuple[Key, float] | None = None

    def _consume(self, key: Key) -> float:
        """Advance past the reference to `key`; return the index of its next reference."""
        index = self._cursor
        if index >= len(self._flat) or self._flat[index] != key:
            expected = self._flat[index] if index < len(self._flat) else "end of trace"
            raise RuntimeError(
                f"belady: reference #{index} is {key!r} but the future it was given has "
                f"{expected!r}; drive it with exactly the trace it was built from"
            )
        self._cursor = index + 1
        if index >= self._request_end:
            request = bisect.bisect_right(self._ends, index)
            start = self._ends[request - 1] if request else 0
            self._request_end = self._ends[request]
            self._request_keys = frozenset(self._flat[start : self._request_end])
            self._parks_for = None
            self._unpark()
        return self._next_use[index]

    def _unpark(self) -> None:
        """The parked entries back into the heap (they are candidates again)."""
        for item in self._parked:
            heapq.heappush(self._heap, item)
        self._parked.clear()

    def _push(self, key: Key, next_use: float, meta: BlockMeta) -> None:
        self._resident[key] = (next_use, meta)
        self._seq += 1
        heapq.heappush(self._heap, (-next_use, self._seq, key))
        if len(self._heap) > 2 * len(self._resident) + 64:
            items = enumerate(self._resident.items())
            self._heap = [(-nu, seq, k) for seq, (k, (nu, _)) in items]
            heapq.heapify(self._heap)
            self._parked.clear()  # the rebuilt heap holds every resident entry

    def _pop_farthest(self, n: int, protected: Collection[Key]) -> list[tuple] | None:
        """Pop the `n` evictable entries of farthest next use, or restore the heap and say None.
        The current request's own entries are parked when `protected` holds all of them."""
        resident, own, parked = self._resident, self._request_keys, self._parked
        if protected is not own and protected is not self._parks_for:
            if not own.issubset(protected):  # once per `protected` (one a request in the replay)
                self._unpark()
                own = frozenset()
            else:
                self._parks_for = protected

        def verdict(item: tuple) -> bool | None:
            key = item[2]
            state = resident.get(key)
            if state is None or state[0] != -item[0]:
                return None
            if key in own:
                parked.append(item)
                return None  # dropped from the heap for now: parked
            return key not in protected and not state[1].pinned

        return pop_first(self._heap, n, verdict)

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        next_use = self._consume(key)
        self._pending = (key, next_use)
        if len(self._resident) < self.capacity_blocks:
            return True
        farthest = self._pop_farthest(1, self._request_keys)
        if farthest is None:
            return False
        heapq.heappush(self._heap, farthest[0])
        return next_use < -farthest[0][0]

    def insert(self, key: Key, meta: BlockMeta) -> None:
        self._check_insert(key, len(self._resident), resident=False)
        pending, self._pending = self._pending, None
        if pending is None or pending[0] != key:
            raise RuntimeError(f"belady: insert({key!r}) without a preceding admit({key!r})")
        self._push(key, pending[1], meta)

    def touch(self, key: Key) -> None:
        next_use = self._consume(key)
        state = self._resident.get(key)
        if state is not None:
            self._push(key, next_use, state[1])

    def remove(self, key: Key) -> None:
        self._resident.pop(key, None)

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        if n <= 0:
            return []
        chosen = self._pop_farthest(n, protected)
        if chosen is None:
            return None
        for item in chosen:
            del self._resident[item[2]]
        return [item[2] for item in chosen]
