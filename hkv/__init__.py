"""hkv: hot/cold KV-cache offloading for hybrid and multimodal LLMs on vLLM.

The core (config, model_spec, plan, flags, cost, policies, sim) needs only the standard library
and numpy; torch, transformers and vLLM are imported inside the adapters that use them.
"""

from hkv.blocks import BlockId, BlockMeta, Modality, Tier
from hkv.cost import CostModel, HardwareProfile
from hkv.errors import ConfigError, FlagConflict, HkvError
from hkv.models.model_spec import LayerGroup, LayerKind, ModelSpec
from hkv.planning.config import CostModelParams, HybridKVCacheConfig, ModalityConfig
from hkv.planning.flags import Translation, translate, try_translate
from hkv.planning.plan import MemoryPlan, PlanInputs, plan
from hkv.policies import EvictionPolicy, make_policy, policy_names
from hkv.sim import ReplayResult, WorkloadSpec, generate, load_trace, replay, simulate

__version__ = "0.1.0"

__all__ = [
    "BlockId",
    "BlockMeta",
    "ConfigError",
    "CostModel",
    "CostModelParams",
    "EvictionPolicy",
    "FlagConflict",
    "HardwareProfile",
    "HkvError",
    "HybridKVCacheConfig",
    "LayerGroup",
    "LayerKind",
    "MemoryPlan",
    "Modality",
    "ModalityConfig",
    "ModelSpec",
    "PlanInputs",
    "ReplayResult",
    "Tier",
    "Translation",
    "WorkloadSpec",
    "generate",
    "load_trace",
    "make_policy",
    "plan",
    "policy_names",
    "replay",
    "simulate",
    "translate",
    "try_translate",
]
