"""`depth_lfu`: reference count per slot, discounted by depth in the prefix chain."""

from __future__ import annotations

from dataclasses import dataclass

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.policies.prefix import PrefixValuePolicy


@dataclass(eq=False)
class DepthLFUPolicy(PrefixValuePolicy):
    """Keeps the blocks referenced most often per unit of depth: worth `1 / (depth + 1)`.

    The ranking of the published Marconi offload policy for vLLM's CPU tier (reuse count over
    depth + 1; vllm-marconi-offload 0.2.2, after Pan et al., "Marconi", MLSys 2025), on hkv's
    prefix-value machinery (`PrefixValuePolicy`: history counts that outlive residency, the
    prefix cap, bypass of misses that would be the next victim). `depth` is the block's index
    in its chain (`position // tokens`): a shared system prompt's head outranks the tail of
    one session. With `aging` (the default) GreedyDual's inflation value lets blocks nobody
    wants any more fall behind new ones; without it the ranking is static frequency, which
    holds the hottest heads through any burst of one-off traffic, and keeps them after the
    traffic has moved on (the price).
    """

    aging: bool = True
    name = "depth_lfu"

    def validate(self) -> None:
        super().validate()
        if not isinstance(self.aging, bool):
            raise HkvError(f"depth_lfu.aging: got {self.aging!r}; expected true or false")

    def value(self, meta: BlockMeta) -> float:
        return 1.0 / (1 + meta.position // max(meta.tokens, 1))

    def _on_evicted(self, entries) -> None:
        if self.aging:
            super()._on_evicted(entries)
