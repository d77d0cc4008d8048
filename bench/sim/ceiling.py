"""What a perfect reuse predictor could buy: `lru` behind an admission oracle.

A learned admission policy (`predictive`, vLLM's `store_threshold`, the article's "ML-predicted
offload") guesses, when a block is stored, whether it will be wanted again before the tier
forgets it. Its best case is a guess that is never wrong. `admission_ceiling` replays a trace
through vLLM's CPU tier (`store="per_request"`, `hkv.policies.tier.VllmTier`) with `lru`
eviction behind such an oracle: a block is stored only when its next reference comes within
`horizon` block references of the request that offers it (read from the trace's own future),
and is otherwise not stored at all. The horizon that suits a tier is not known in advance, so
the replay runs at several (multiples of the tier's size, and "ever") and reports the best,
chosen in hindsight.

It is a yardstick, not a policy: no online predictor of reuse, with `lru` eviction, can beat
it at the horizon it aims for. Where even the ceiling stays far below Belady, the remaining gap
is about eviction order (when, not whether, a block returns), which admission cannot close.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.policies.base import Key, check_float
from hkv.policies.lru import LRUPolicy
from hkv.sim.replay import replay
from hkv.sim.trace import Trace

NEVER = math.inf
HORIZON_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, NEVER)
"""Horizons tried, in multiples of the tier's size in blocks (`inf`: returns at all)."""


def next_uses(future: Sequence[Sequence[Hashable]]) -> list[tuple[int, dict[Hashable, float]]]:
    """Per request: the index of its first block reference in the whole stream, and, per key,
    the stream index of the key's next reference in a later request (`inf`: none)."""
    starts, total = [], 0
    for request in future:
        starts.append(total)
        total += len(request)
    later: dict[Hashable, float] = {}
    out: list[tuple[int, dict[Hashable, float]]] = [(0, {})] * len(future)
    for index in range(len(future) - 1, -1, -1):
        request, start = future[index], starts[index]
        out[index] = (start, {key: later.get(key, NEVER) for key in request})
        for offset in range(len(request) - 1, -1, -1):
            later[request[offset]] = start + offset
    return out


@dataclass(eq=False)
class _OracleAdmission(LRUPolicy):
    """`lru` that stores a block only when its next reference is within `horizon` references.

    Driven only by `VllmTier` (one `after_request` per request, in trace order), which is how
    it knows which request it is in; it refuses stores as vLLM's `store_threshold` does.
    """

    future: Sequence[Sequence[Hashable]] = field(default=(), repr=False)
    horizon: float = NEVER
    name = "admission_oracle"
    context_fields = ("future",)
    refuses_stores = True

    def validate(self) -> None:
        if self.horizon != NEVER:
            check_float(self.name, "horizon", self.horizon, 0.0)

    def reset(self) -> None:
        super().reset()
        self._next = next_uses(self.future)
        self._request = 0

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        if self._request >= len(self._next):
            raise HkvError("admission oracle: driven past the end of the future it was given")
        start, uses = self._next[self._request]
        use = uses.get(key, NEVER)
        return use != NEVER and use - start <= self.horizon

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key]) -> None:
        super().after_request(stored, reused)
        self._request += 1


def admission_ceiling(
    trace: Trace, capacity_blocks: int, factors: Sequence[float] = HORIZON_FACTORS
) -> dict[str, Any]:
    """The best block hit rate of `lru` behind an admission oracle, over horizons of `factors`
    x `capacity_blocks` references; every horizon's rate beside it (keys: the factors as
    text, `"inf"` for never)."""
    bad = isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, int)
    if bad or capacity_blocks < 1:
        raise HkvError(f"capacity_blocks: got {capacity_blocks!r}; expected an integer >= 1")
    if not factors or any(not isinstance(f, int | float) or f <= 0 for f in factors):
        raise HkvError(f"factors: got {factors!r}; expected positive horizon multiples")
    future = trace.reference_stream()
    rates: dict[str, float] = {}
    for factor in factors:
        oracle = _OracleAdmission(capacity_blocks, future=future, horizon=factor * capacity_blocks)
        result = replay(trace, oracle, label=oracle.name, store="per_request")
        rates[_label(factor)] = result.block_hit_rate
    best = max(rates, key=rates.__getitem__)
    return {"block_hit_rate": rates[best], "best_horizon_factor": best, "by_horizon": rates}


def _label(factor: float) -> str:
    return "inf" if factor == NEVER else f"{factor:.3g}"
