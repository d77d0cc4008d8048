"""vLLM's offloading specs, building their manager where hkv policies can read the config.

vLLM builds the CPU tier's cache policy with nothing but its capacity. These specs are vLLM's
own, unchanged, except that `get_manager` runs inside `settings.spec_settings(self)`, so an hkv
policy of the CPU tier reads the connector's extra config (`hkv_config`, `hkv_policy_params`,
the block size). vLLM loads them through its extension point for out-of-tree specs, which
vLLM 0.26, 0.32 and 0.33 all have:

    "kv_connector_extra_config": {"spec_name": "HkvTieringOffloadingSpec",
      "spec_module_path": "hkv.integrations.vllm.spec", "cpu_bytes_to_use": ...,
      "eviction_policy": "hkv_cost_aware", "cache_policy_module_path": "hkv.integrations.vllm",
      "secondary_tiers": [{"type": "HkvDiskTier", "module_path": "hkv.integrations.vllm.tier",
                           ...}]}

`hkv flags` writes that (`hkv.planning.offload_spec`) when a disk tier sits behind an hkv
policy. `HkvOffloadingSpec` is the same for a CPU tier alone.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

from hkv.integrations.vllm import compat026
from hkv.integrations.vllm.settings import spec_settings


class HkvOffloadingSpec(CPUOffloadingSpec):
    """vLLM's `CPUOffloadingSpec`, its manager built where hkv policies read its config."""

    def get_manager(self) -> Any:
        with spec_settings(self):
            return super().get_manager()


class HkvTieringOffloadingSpec(TieringOffloadingSpec):
    """vLLM's `TieringOffloadingSpec` (a CPU primary tier and secondary tiers), its manager
    built where the hkv policy of the CPU tier reads its config; on vLLM 0.26 its manager also
    survives the store a request makes after it finished (`compat026.guard_late_stores`)."""

    def get_manager(self) -> Any:
        with spec_settings(self):
            manager = super().get_manager()
        if compat026.needs_late_store_guard():
            compat026.guard_late_stores(manager)
        return manager
