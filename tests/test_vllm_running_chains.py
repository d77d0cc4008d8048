"""A running request's blocks inside vLLM's manager: the head of a prefix still being stored
outlives its tail (vLLM 0.33 passes the request and its key positions to `insert`).

Each scenario drives vLLM's own `CPUOffloadingManager` the way its scheduler does, once with
vLLM's `lru` (the reference: it ranks a running request's blocks by token position at insert)
and once per hkv policy that ranks chains. `hkv_lru` must evict exactly the blocks vLLM's lru
evicts; the others must keep every running request's head (their order among requests is their
own). On a vLLM whose `insert` takes no request (0.26 to 0.32) the order is set when a request
ends, and these scenarios are skipped; `make test-vllm033` runs them.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

from hkv.integrations.vllm.policy import _insert_takes_no_context, policy_class
from hkv.policies import make_policy, policy_names

pytestmark = pytest.mark.skipif(
    _insert_takes_no_context(),
    reason="this vLLM inserts without the request: a request's order is set when it ends",
)
CHAINED = [p for p in policy_names(online_only=True) if make_policy(p, 4).ranks_chains]
REFERENCE = "lru"  # vLLM's own


def key(i: int) -> bytes:
    return make_offload_key(i.to_bytes(8, "big"), 0)


def ids(keys) -> list[int]:
    return [int.from_bytes(k[:8], "big") for k in keys]


def manager(policy: str, chunks: int) -> CPUOffloadingManager:
    """vLLM's manager with its own `policy` or, for `hkv_*`, hkv's."""
    module = "hkv.integrations.vllm" if policy.startswith("hkv_") else None
    return CPUOffloadingManager(
        num_chunks=chunks, cache_policy=policy, cache_policy_module_path=module
    )


def request(m: CPUOffloadingManager, req_id: str, blocks: list[int]) -> ReqContext:
    """A new request whose prompt is `blocks`, block i ending at token 16 * (i + 1)."""
    ctx = ReqContext(req_id=req_id)
    for index, block in enumerate(blocks):
        ctx.set_offload_key_position(key(block), 16 * (index + 1))
    m.on_new_request(ctx)
    return ctx


def store(m: CPUOffloadingManager, ctx: ReqContext, blocks: list[int], success: bool = True):
    """One store batch; the evicted block ids (None: refused)."""
    out = m.prepare_store([key(b) for b in blocks], ctx)
    if out is None:
        return None
    m.complete_store(out.keys_to_store, ctx, success=success)
    return ids(out.evicted_keys)


def resident(m: CPUOffloadingManager, blocks: list[int]) -> list[int]:
    probe = ReqContext(req_id="probe")
    return [b for b in blocks if m.lookup(key(b), probe) == LookupResult.HIT]


def assert_keeps_heads(policy: str, reference: list, got: list, survivors: list[list[int]]):
    """hkv_lru evicts as vLLM's lru; every chained policy keeps each running request's
    resident blocks a prefix (`survivors`: the resident blocks, as offsets into the prompt)."""
    if policy == f"hkv_{REFERENCE}":
        assert got == reference
    for blocks in survivors:
        assert blocks == list(range(len(blocks))), survivors


def batches_scenario(policy: str, batch: int, concurrent: bool) -> tuple[list, list]:
    """A 12-block prompt (0..11) stored in batches of `batch` into an 8-chunk tier, each batch
    written before the next; with `concurrent`, a second running request (100..111) stores its
    own batches in between and a third one (200..203) comes and goes. Evictions per store, and
    each running request's resident blocks outside its last batch at the end."""
    m = manager(policy, 8)
    first = list(range(12))
    a = request(m, "a", first)
    if concurrent:
        second = list(range(100, 112))
        b = request(m, "b", second)
    log = []
    for start in range(0, 12, batch):
        log.append(store(m, a, first[start : start + batch]))
        if concurrent:
            log.append(store(m, b, second[start : start + batch]))
            if start == 4:
                done = request(m, "c", list(range(200, 204)))
                log.append(store(m, done, list(range(200, 204))))
                m.on_request_finished(done)
    last = 12 - (12 % batch or batch)
    survivors = [[x for x in resident(m, first) if x < last]]
    if concurrent:
        survivors.append([x - 100 for x in resident(m, second) if x - 100 < last])
    return log, survivors


@pytest.mark.parametrize("concurrent", [False, True], ids=["alone", "concurrent"])
@pytest.mark.parametrize("batch", [1, 2, 3])
@pytest.mark.parametrize("policy", [f"hkv_{p}" for p in CHAINED])
def test_a_running_prefix_keeps_its_head_under_pressure_across_store_batches(
    policy, batch, concurrent
):
    """Stored in batches under pressure, a running request gives up its deepest
    blocks, not its head, which would make the rest useless."""
    reference, _ = batches_scenario(REFERENCE, batch, concurrent)
    got, survivors = batches_scenario(policy, batch, concurrent)
    assert_keeps_heads(policy, reference, got, survivors)
    assert survivors[-1][:1] == [0]  # the younger request's, when the older one's went whole


def reuse_scenario(policy: str, via_load: bool) -> tuple[list, list[int]]:
    """Request `old` stores 0..2 and ends; `mid` stores 50..51 and ends; request `r` reuses
    0..2 (loaded, or offered again in its first store), stores 3..5, then 6..7 into the full
    6-chunk tier. Evictions per store; r's resident blocks at the end, besides 6..7."""
    m = manager(policy, 7)
    for req_id, blocks in (("old", [0, 1, 2]), ("mid", [50, 51])):
        done = request(m, req_id, blocks)
        store(m, done, blocks)
        m.on_request_finished(done)
    prompt = list(range(8))
    r = request(m, "r", prompt)
    if via_load:
        hits = [key(b) for b in (0, 1, 2)]
        assert [m.lookup(k, r) for k in hits] == [LookupResult.HIT] * 3
        m.prepare_load(hits, r)
        m.complete_load(hits, r)
    log = [store(m, r, prompt[:6] if not via_load else prompt[3:6]), store(m, r, prompt[6:])]
    return log, [b for b in resident(m, prompt) if b < 6]


@pytest.mark.parametrize("via_load", [True, False], ids=["loaded", "offered"])
@pytest.mark.parametrize("policy", [f"hkv_{p}" for p in CHAINED])
def test_a_reused_prefix_outlives_the_running_requests_new_tail(policy, via_load):
    """The prefix a running request reuses joins its chain: the new tail goes before it."""
    reference, _ = reuse_scenario(REFERENCE, via_load)
    got, survivors = reuse_scenario(policy, via_load)
    assert_keeps_heads(policy, reference, got, [survivors])
    assert survivors[:3] == [0, 1, 2]


def backfill_scenario(policy: str) -> tuple[list, list[int]]:
    """A sliding window's backfill: blocks 4..5 are stored before 0..3 (two batches), then a
    second running request's 6 blocks need room in the 8-chunk tier."""
    m = manager(policy, 8)
    prompt = list(range(6))
    r = request(m, "r", prompt)
    log = [store(m, r, [4, 5]), store(m, r, [0, 1]), store(m, r, [2, 3])]
    other = request(m, "other", list(range(100, 106)))
    log.append(store(m, other, list(range(100, 106))))
    return log, resident(m, prompt)


@pytest.mark.parametrize("policy", [f"hkv_{p}" for p in CHAINED])
def test_a_backfilled_prefix_is_ordered_by_token_position(policy):
    reference, _ = backfill_scenario(REFERENCE)
    got, survivors = backfill_scenario(policy)
    assert reference[-1] == [5, 4, 3, 2]
    assert_keeps_heads(policy, reference, got, [survivors])
    assert survivors == [0, 1]


def retry_scenario(policy: str) -> tuple[list, list[int]]:
    """Blocks 0..1 stored, 2..3 fail and are stored again, then 4 and 5 need room in the full
    4-chunk tier."""
    m = manager(policy, 4)
    prompt = list(range(6))
    r = request(m, "r", prompt)
    log = [store(m, r, [0, 1]), store(m, r, [2, 3], success=False), store(m, r, [2, 3])]
    log += [store(m, r, [4]), store(m, r, [5])]
    return log, [b for b in resident(m, prompt) if b < 5]


@pytest.mark.parametrize("policy", [f"hkv_{p}" for p in CHAINED])
def test_a_failed_store_retried_keeps_the_prefix_order(policy):
    reference, _ = retry_scenario(REFERENCE)
    got, survivors = retry_scenario(policy)
    assert reference[-2:] == [[3], [4]]
    assert_keeps_heads(policy, reference, got, [survivors])
    assert survivors == [0, 1, 2]


@pytest.mark.parametrize("ascending", [True, False], ids=["head_first", "tail_first"])
@pytest.mark.parametrize("policy", CHAINED)
def test_insert_alone_orders_positioned_chunks_with_no_access_after(policy, ascending):
    """The cache policy alone: chunks inserted with positions, no `on_request_access` or
    request end, leave deepest first, in either insertion order (vLLM's lru likewise)."""
    from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

    order = [1, 2, 3, 4] if ascending else [4, 3, 2, 1]
    victims = []
    for p in (LRUCachePolicy(cache_capacity=4), policy_class(f"hkv_{policy}")(cache_capacity=4)):
        ctx = ReqContext(req_id="r")
        for i in order:
            ctx.set_offload_key_position(key(i), 16 * i)
            chunk = ChunkStatus(i)
            p.insert(key(i), chunk, ctx)
            chunk.ref_cnt = 0
            p.mark_evictable(key(i))
        victims.append(ids(k for k, _ in p.evict(3, set())))
    assert victims == [[4, 3, 2]] * 2


class CountingContext(ReqContext):
    """A request that counts the position look-ups made on it."""

    lookups = 0

    def get_offload_key_position(self, key):
        CountingContext.lookups += 1
        return super().get_offload_key_position(key)


@pytest.mark.parametrize("policy", CHAINED)
def test_incremental_stores_cost_their_new_blocks_not_the_prefix(policy, monkeypatch):
    """A 2,000-block prompt stored one block a step into a 64-chunk tier: every store looks up
    only its own block's position and re-ranks nothing (no store re-reads the prefix), and the
    head stays."""
    m = manager(f"hkv_{policy}", 64)
    adapter = m._policy
    reranked = []
    for name in ("refresh_all", "touch_all"):
        monkeypatch.setattr(adapter.policy, name, reranked.extend)
    prompt = list(range(2000))
    ctx = CountingContext(req_id="long")
    for index, block in enumerate(prompt):
        ctx.set_offload_key_position(key(block), 16 * (index + 1))
    m.on_new_request(ctx)
    CountingContext.lookups = 0
    for block in prompt:
        assert store(m, ctx, [block]) is not None
    assert CountingContext.lookups <= 2 * len(prompt) and not reranked
    assert resident(m, prompt)[:63] == list(range(63))
