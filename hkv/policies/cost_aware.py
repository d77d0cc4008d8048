"""Cost-aware eviction: keep the blocks whose hits save the most time per slot."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.errors import HkvError
from hkv.policies.prefix import PrefixValuePolicy


@dataclass(eq=False)
class CostAwarePolicy(PrefixValuePolicy):
    """The article's policy: recency x per-modality weight x load-versus-recompute cost.

    A block's worth per hit is what a hit saves in the tier it sits in: its recompute time
    (prefill FLOPs at its position, plus the encoder for vision/audio; `hkv.cost.CostModel`)
    minus its load time, and nothing when recomputing is cheaper than loading (a block on a slow
    disk at a short position). That is GDSF's cost term measured in seconds, and Marconi's
    FLOP efficiency (Pan et al., "Marconi: Prefix Caching for the Era of Hybrid LLMs",
    MLSys 2025): FLOPs saved per slot held. It is multiplied by a per-modality weight
    (`modality_weights`, else the config's `cost_weights`, else 1) and normalised by the saving of
    a full text block at position 0, so a plain block is worth 1.

    Recency and frequency come from `PrefixValuePolicy`: priority `L + count x worth`, with
    GDSF aging `L`, a history count that outlives residency, a prefix cap (a block is never worth
    more than its parent) and bypass of misses that would be the next victim.

    Costs: `cost_model` (the simulator passes its own; default MiniMax-M2.5 on the H200 profile).
    Without a cost model but with a `HybridKVCacheConfig`, the config's relative
    `cost_model_params` are used: worth = computation_cost_per_block - transfer_cost_cpu_to_gpu.
    """

    modality_weights: dict[str, float] | None = None
    name = "cost_aware"

    def validate(self) -> None:
        super().validate()
        weights = self.modality_weights
        if weights is None and self.config is not None:
            weights = getattr(self.config, "cost_weights", None)
        self._weights = {m: 1.0 for m in Modality}
        if weights is not None and not isinstance(weights, Mapping):
            raise HkvError(
                f"cost_aware.modality_weights: got {weights!r}; expected an object of weights "
                'by modality, e.g. {"vision": 2.0}'
            )
        for name, weight in (weights or {}).items():
            modality = Modality.parse(name, field="cost_aware.modality_weights")
            if (
                isinstance(weight, bool)
                or not isinstance(weight, int | float)
                or not 0 <= weight < math.inf
            ):
                raise HkvError(
                    f"cost_aware.modality_weights[{name!r}]: got {weight!r}; expected a number >= 0"
                )
            self._weights[modality] = float(weight)
        if self.cost_model is None and self.config is None:
            from hkv.cost import CostModel

            self.cost_model = CostModel.default()
        self._loads: dict[tuple, float] = {}  # load seconds by (tokens, tier): no position in it
        self._reference_saving = self._saving(BlockMeta(tokens=512, position=0, tier=Tier.HOST))
        if self._reference_saving <= 0:
            self._reference_saving = 1.0

    def _saving(self, meta: BlockMeta) -> float:
        """`cost_model.decide(meta).saved_s`, its load time (the same at every position) kept."""
        if self.cost_model is not None:
            load = self._loads.get((meta.tokens, meta.tier))
            if load is None:
                load = self._loads[meta.tokens, meta.tier] = self.cost_model.load_s(meta)
            return max(0.0, self.cost_model.recompute_s(meta) - load)
        params = self.config.cost_model_params
        return max(0.0, params.computation_cost_per_block - params.transfer_cost_cpu_to_gpu)

    def value(self, meta: BlockMeta) -> float:
        """Remembered per (tokens, position, modality, tier) by `PrefixValuePolicy._observe`."""
        return self._saving(meta) / self._reference_saving * self._weights[meta.modality]
