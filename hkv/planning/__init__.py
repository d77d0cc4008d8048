"""Planning: from a model's `config.json` and a machine to a memory plan and real vLLM flags.

- `config`: `HybridKVCacheConfig`, the article's configuration object, loaded from .py/.json/.yaml
- `plan`: `plan()` -> `MemoryPlan`: weights, GPU KV budget, sequences, offload, vLLM arguments
- `offload_spec`: `OffloadSpec`, the one description of the tiers (CPU and disk sizes, block
  size, policies), its defaults and sizing rules, and vLLM's connector config from it and back
- `flags`: the article's flags translated into real vLLM arguments (`translate`)
- `vllm_flags`: the real vLLM flags in such a command and the checks they need

`ModelSpec` (what a model's KV cache costs) is `hkv.models`', re-exported here. Only the
standard library and numpy are imported.
"""

from hkv.models.model_spec import LayerGroup, LayerKind, ModelSpec
from hkv.planning.config import CostModelParams, HybridKVCacheConfig, ModalityConfig
from hkv.planning.flags import Translation, translate, try_translate
from hkv.planning.offload_spec import DiskTierSpec, OffloadSpec
from hkv.planning.plan import MemoryPlan, PlanInputs, plan

__all__ = [
    "CostModelParams",
    "DiskTierSpec",
    "HybridKVCacheConfig",
    "LayerGroup",
    "LayerKind",
    "MemoryPlan",
    "ModalityConfig",
    "ModelSpec",
    "OffloadSpec",
    "PlanInputs",
    "Translation",
    "plan",
    "translate",
    "try_translate",
]
