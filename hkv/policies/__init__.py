"""Eviction policies behind one interface (`EvictionPolicy`), found by name in a lazy registry.

    from hkv.policies import make_policy, policy_names
    policy = make_policy("s3fifo", capacity_blocks=1024)

- `base`: the interface and the contracts every policy keeps
- `queue`: `QueuePolicy`, the base of policies kept in ordered queues (lru, arc, dip/bip)
- `priority`: `PriorityPolicy`, the one heap evictor of priority-function policies
  (gdsf, cost_aware, modality_aware through `prefix`)
- `registry`: names -> classes, `make_policy`, the online/offline check
- one module per policy (`predictive`, learned online, is experimental); `auto` runs the
  best lately of several expert policies, each replayed in a `shadow` tier;
  `admission` wraps any policy with vLLM's `store_threshold`

Each policy lives in its own module and is imported on first use. `make_policy` offers run
context (`cost_model=`, `config=`, `future=`) to every policy; each takes what it declares.
"""

from hkv.policies.base import EvictionPolicy
from hkv.policies.priority import PriorityPolicy
from hkv.policies.registry import (
    get_policy_class,
    make_policy,
    online_policy_class,
    policy_names,
    register_policy,
)

__all__ = [
    "EvictionPolicy",
    "PriorityPolicy",
    "get_policy_class",
    "make_policy",
    "online_policy_class",
    "policy_names",
    "register_policy",
]

for _name, _module, _cls in (
    ("lru", "lru", "LRUPolicy"),
    ("arc", "arc", "ARCPolicy"),
    ("s3fifo", "s3fifo", "S3FIFOPolicy"),
    ("gdsf", "gdsf", "GDSFPolicy"),
    ("dip", "dip", "DIPPolicy"),
    ("bip", "dip", "BIPPolicy"),
    ("cost_aware", "cost_aware", "CostAwarePolicy"),
    ("depth_lfu", "depth_lfu", "DepthLFUPolicy"),
    ("modality_aware", "modality_aware", "ModalityAwarePolicy"),
    ("predictive", "predictive", "PredictivePolicy"),
    ("auto", "auto", "AutoPolicy"),
    ("belady", "belady", "BeladyPolicy"),
    ("random", "random", "RandomPolicy"),
):
    register_policy(_name, f"hkv.policies.{_module}", _cls)
