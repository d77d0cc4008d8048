"""How hkv policies inside vLLM get their settings: through the spec that builds them (hkv's
tiering spec, by `spec_module_path`), never through the environment for hkv's own code; the
settings' rules fail at engine start."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm.v1.kv_offload.tiering.spec")

from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

import hkv.integrations.vllm as adapter
from hkv.errors import HkvError
from hkv.integrations.vllm.settings import connector_extra_config
from hkv.integrations.vllm.spec import HkvOffloadingSpec, HkvTieringOffloadingSpec

BIP = {
    "cpu_bytes_to_use": 1 << 20,
    "eviction_policy": "hkv_bip",
    "cache_policy_module_path": "hkv.integrations.vllm",
    "hkv_policy_params": {"tail_first": False},
}


def bare_spec(cls: type, extra: dict) -> object:
    """An offloading spec of class `cls` holding `extra`, its GPU-sized `__init__` skipped: a
    CPU tier of 8 chunks of one page, blocks of 16 tokens, 2 blocks a chunk."""
    spec = object.__new__(cls)
    spec.extra_config = extra
    spec.num_chunks, spec._manager, spec._scheduler_mmap = 8, None, None
    spec.kv_bytes_per_chunk = spec.cpu_page_size_per_worker = 4096
    spec._engine_id = f"hkv-test-{os.getpid()}-{cls.__name__}"
    spec.eviction_policy = extra["eviction_policy"]
    spec.cache_policy_module_path = extra.get("cache_policy_module_path")
    spec.kv_events_config = SimpleNamespace(enable_kv_cache_events=False)
    spec.secondary_tier_configs = []
    spec.tokens_per_block, spec.blocks_per_chunk = (16,), 2
    spec.cpu_info = None  # vLLM 0.33's manager takes the tier's facts for its metrics
    spec.tier_poll_interval_s = 0.0  # vLLM 0.33: no thread polling the tiers
    return spec


def cpu_policy(spec) -> object:
    """The CPU tier's policy of the manager `spec` builds (the tiering manager's primary)."""
    manager = spec.get_manager()
    try:
        return getattr(manager, "primary_tier", manager)._policy
    finally:
        manager.shutdown()


def test_hkvs_tiering_spec_hands_the_cpu_tiers_policy_its_settings():
    """vLLM's tiering spec overrides `get_manager`; hkv's (the one `hkv flags` names for a disk
    tier behind an hkv policy) builds it where the policy reads the connector config, and the
    block size is the spec's chunk, 2 x 16 tokens, with no `block_size` and no environment."""
    adapter.register()
    policy = cpu_policy(bare_spec(HkvTieringOffloadingSpec, BIP))
    assert policy.policy.hyperparameters()["tail_first"] is False
    assert policy.block_tokens == 32
    policy = cpu_policy(bare_spec(HkvOffloadingSpec, BIP | {"block_size": 64}))
    assert policy.policy.hyperparameters()["tail_first"] is False and policy.block_tokens == 64


def test_vllms_own_tiering_spec_hands_the_policy_nothing():
    """Why `hkv flags` names hkv's tiering spec: vLLM's builds the CPU tier's policy with its
    capacity alone. Fails when vLLM passes the connector config itself; hkv's spec can go then."""
    adapter.register()
    policy = cpu_policy(bare_spec(TieringOffloadingSpec, BIP))
    assert policy.policy.hyperparameters()["tail_first"] is True  # the default, not the config


def test_vllms_own_cpu_spec_needs_the_plugins_wrapper():
    """The wrapper `register` puts on vLLM's `CPUOffloadingSpec.get_manager` (for commands that
    name vLLM's CPU spec or none, written by hand) is still needed: unwrapped,
    vLLM hands the policy nothing. Fails when vLLM passes the config itself."""
    adapter.register()
    wrapped = CPUOffloadingSpec.get_manager
    assert getattr(wrapped, "_hkv_passes_extra_config", False)
    spec = bare_spec(CPUOffloadingSpec, BIP)
    assert wrapped.__wrapped__(spec)._policy.policy.hyperparameters()["tail_first"] is True
    spec._manager = None
    assert spec.get_manager()._policy.policy.hyperparameters()["tail_first"] is False


def test_two_policies_in_one_connector_config_fail_at_engine_start():
    adapter.register()
    extra = BIP | {"hkv_config": {"offload_strategy": "cost_aware"}}
    with pytest.raises(HkvError, match="offload_strategy 'cost_aware' and eviction_policy"):
        cpu_policy(bare_spec(HkvTieringOffloadingSpec, extra))
    extra = BIP | {"hkv_config": {"offload_strategy": "bip", "cpu_offload_bytes": 1}}
    with pytest.raises(HkvError, match="cpu_offload_bytes 1 but cpu_bytes_to_use"):
        cpu_policy(bare_spec(HkvTieringOffloadingSpec, extra))


def test_a_script_gives_the_block_size_in_a_connector_config_not_the_environment(monkeypatch):
    """The connector config wins over `HKV_BLOCK_TOKENS`, which only scripts that build vLLM's
    manager without one still set."""
    from hkv.integrations.vllm.policy import policy_class

    monkeypatch.setenv("HKV_BLOCK_TOKENS", "48")
    with connector_extra_config({"block_size": 32}):
        assert policy_class("hkv_lru")(cache_capacity=4).block_tokens == 32
    assert policy_class("hkv_lru")(cache_capacity=4).block_tokens == 48
    monkeypatch.delenv("HKV_BLOCK_TOKENS")
    assert policy_class("hkv_lru")(cache_capacity=4).block_tokens == 16


def test_hkv_flags_names_hkvs_cpu_spec_and_vllm_resolves_it():
    """A CPU tier alone behind an hkv policy: `hkv flags` names `HkvOffloadingSpec` by
    `spec_name` and `spec_module_path` (vLLM's extension point for specs), vLLM's factory finds
    it, and the manager it builds hands the policy its settings, with no wrapper needed."""
    import json

    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    from hkv.planning.flags import translate

    args = translate(["--model", "minimax-m2.5", "--hybrid-kv-cache-cpu-offload-size", "8",
                      "--hybrid-kv-cache-policy", "bip"], cpu_ram_gib=512).vllm_args  # fmt: skip
    extra = json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]
    assert (extra["spec_name"], extra["spec_module_path"]) == (
        "HkvOffloadingSpec", "hkv.integrations.vllm.spec"
    )  # fmt: skip
    assert OffloadingSpecFactory.get_spec_cls(extra) is HkvOffloadingSpec
    adapter.register()
    params = {"cpu_bytes_to_use": 1 << 20, "hkv_policy_params": {"tail_first": False}}
    policy = cpu_policy(bare_spec(HkvOffloadingSpec, extra | params))
    assert policy.policy.hyperparameters()["tail_first"] is False
