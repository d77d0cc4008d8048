"""The experts `auto` shadows: each a policy (with its hyperparameters and vLLM's store filter).

`auto` runs each in a shadow tier (`hkv.policies.tier.VllmTier`, holding keys only), which
stores a request as vLLM's CPU tier does and as hkv's `store="per_request"` replay does, so an
expert's shadow hits exactly what the expert alone would hit on the same requests.
"""

from __future__ import annotations

from typing import Any

from hkv.errors import HkvError
from hkv.policies.admission import StoreThreshold
from hkv.policies.base import EvictionPolicy
from hkv.policies.registry import make_policy

EXPERTS: dict[str, tuple[str, dict[str, Any], int]] = {
    "lru": ("lru", {}, 1),
    "lru+st2": ("lru", {}, 2),
    "arc": ("arc", {}, 1),
    "s3fifo": ("s3fifo", {}, 1),
    "cost_aware": ("cost_aware", {}, 1),
    "depth_lfu": ("depth_lfu", {"bypass": False}, 1),
    "depth_lfu_static": ("depth_lfu", {"aging": False, "bypass": False}, 1),
    "predictive": ("predictive", {}, 1),
    "lip": ("bip", {"bip_every": 0}, 1),
}
"""Expert label -> (registered policy, its hyperparameters, store threshold): vLLM's `lru`,
`lru` with `store_threshold` 2 and (hkv's) `arc`, and hkv's own policies, the learned
`predictive` among them. `lip` is `bip` with no insert ever at the recent end: LRU insertion
(LIP, Qureshi et al., ISCA 2007), a new block placed where it is the next to go, so a tier
that sessions cycle through keeps the first of them whole instead of the heads of all."""


def make_expert(label: str, capacity_blocks: int, **context: Any) -> EvictionPolicy:
    """The policy an expert label names, with the run's context (`cost_model`, `config`)."""
    if label not in EXPERTS:
        raise HkvError(f"auto.experts: unknown expert {label!r}; valid: {', '.join(EXPERTS)}")
    name, params, threshold = EXPERTS[label]
    policy = make_policy(name, capacity_blocks, **context, **params)
    if threshold > 1:
        policy = StoreThreshold(capacity_blocks, inner=policy, threshold=threshold)
    return policy
