"""Modality-aware eviction driven by a `HybridKVCacheConfig`."""

from __future__ import annotations

import heapq
from collections.abc import Collection
from dataclasses import dataclass

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.cost import CostModel
from hkv.errors import HkvError
from hkv.modalities import article_modalities
from hkv.policies.base import EMPTY, Key
from hkv.policies.prefix import PrefixValuePolicy
from hkv.policies.priority import PriorityEntry


@dataclass(eq=False)
class ModalityAwarePolicy(PrefixValuePolicy):
    """Per-modality treatment from the config's `modality_configs`, on the cost-aware priority.

    For each modality (text / vision / audio) the config gives:
    - `offload_priority` in [0, 1] (1 leaves first): a block's worth is multiplied by
      `1 - offload_priority`, so at equal recency and cost the eager modality goes first, and a
      modality at 1 always goes before any other;
    - `quantization`: the block's format in cold tiers; its worth is what a hit saves when the
      block is loaded in that format (q8/q6/q4 move fewer bytes,
      `hkv.formats.cold_bits_per_value`);
    - `max_keep_blocks`: when this tier must give up blocks, a modality holding more than its
      cap gives first (enforced at eviction time: a policy never evicts on its own; the block
      manager may call `excess_blocks()` to demote early).

    `config` (a `HybridKVCacheConfig`, or anything with its `modality(m)`) defaults to the
    article's settings (`hkv.modalities.ARTICLE_MODALITY_CONFIGS`, those of
    `HybridKVCacheConfig.article_example()`); costs come from `cost_model`
    (default MiniMax-M2.5 on the H200 profile). Recency, frequency, the prefix cap and bypass are
    `PrefixValuePolicy`'s.
    """

    name = "modality_aware"

    def validate(self) -> None:
        super().validate()
        if self.config is None:
            self._settings = article_modalities()
        elif callable(getattr(self.config, "modality", None)):
            self._settings = {m: self.config.modality(m) for m in Modality}
        else:
            raise HkvError(
                f"modality_aware.config: got {type(self.config).__name__}; "
                "expected a HybridKVCacheConfig"
            )
        if self.cost_model is None:
            self.cost_model = CostModel.default()
        self._caps = {m: s.max_keep_blocks for m, s in self._settings.items()}
        reference = BlockMeta(tokens=512, position=0, tier=Tier.HOST)
        self._reference_saving = self.cost_model.decide(reference).saved_s or 1.0

    def reset(self) -> None:
        super().reset()
        self._resident_by_modality = {m: 0 for m in Modality}

    def value(self, meta: BlockMeta) -> float:
        """Remembered per (tokens, position, modality, tier) by `PrefixValuePolicy._observe`."""
        settings = self._settings[meta.modality]
        saving = self.cost_model.decide(meta, cold_format=settings.quantization).saved_s
        return (1.0 - settings.offload_priority) * saving / self._reference_saving

    def excess_blocks(self) -> dict[Modality, int]:
        """Resident blocks above each modality's `max_keep_blocks` (only modalities over it)."""
        return {
            m: count - cap
            for m, count in self._resident_by_modality.items()
            if (cap := self._caps[m]) is not None and count > cap
        }

    def insert(self, key: Key, meta: BlockMeta) -> None:
        super().insert(key, meta)
        self._resident_by_modality[meta.modality] += 1

    def remove(self, key: Key) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            self._resident_by_modality[entry.meta.modality] -= 1
        super().remove(key)

    def _on_evicted(self, entries: list[PriorityEntry]) -> None:
        super()._on_evicted(entries)
        resident = self._resident_by_modality
        for entry in entries:
            resident[entry.meta.modality] -= 1

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        excess = self.excess_blocks()
        if not excess or n <= 0:
            return super().evict(n, protected)
        # Over-cap modalities give first, lowest priority first, as many as they are over.
        forced_n = min(n, sum(excess.values()))
        forced = self._select_over_cap(forced_n, protected, excess)
        if forced is None:
            return super().evict(n, protected)
        rest = self._select(n - len(forced), protected) if len(forced) < n else []
        if rest is None:
            for item in forced:
                heapq.heappush(self._heap, item)
            return None
        return self._commit(forced + rest)

    def _select_over_cap(self, n, protected, excess):
        """Up to `n` evictable entries from over-cap modalities (fewer if not enough exist)."""
        budget = dict(excess)

        def accept(entry: PriorityEntry) -> bool:
            left = budget.get(entry.meta.modality, 0)
            if left <= 0:
                return False
            budget[entry.meta.modality] = left - 1
            return True

        while n > 0:
            chosen = self._select(n, protected, accept)
            if chosen is not None:
                return chosen
            n -= 1
            budget = dict(excess)
        return None
