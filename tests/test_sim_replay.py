"""Replay semantics of docs/design.md §2, on hand-made traces with small block ids."""

from __future__ import annotations

import pytest

from hkv.blocks import Modality, Tier
from hkv.cost import CostModel
from hkv.errors import HkvError
from hkv.policies import make_policy, policy_names
from hkv.policies.lru import LRUPolicy
from hkv.sim.replay import replay, simulate
from hkv.sim.trace import Request, Trace

BLOCK = 512


def trace_of(*requests: list[int], input_lengths: list[int] | None = None) -> Trace:
    out = []
    for i, ids in enumerate(requests):
        length = input_lengths[i] if input_lengths else len(ids) * BLOCK
        out.append(Request(i, length, 1, tuple(ids)))
    return Trace(tuple(out), BLOCK)


def test_hits_are_the_longest_resident_prefix():
    # 2 is evicted by 4 (LRU), so request 3 hits only block 1 although 3 is resident.
    trace = trace_of([1, 2, 3], [1, 4], [1, 2, 3])
    result = replay(trace, make_policy("lru", 3))
    assert result.block_hits == 1 + 1
    assert result.block_refs == 8
    assert result.block_hit_rate == pytest.approx(2 / 8)


def test_prefix_token_hit_fraction_caps_at_the_input_length():
    trace = trace_of([1, 2], [1, 2], input_lengths=[700, 700])
    result = replay(trace, make_policy("lru", 4))
    assert result.prefix_token_hit_frac == pytest.approx(700 / 1400)


def test_a_request_never_evicts_its_own_blocks():
    trace = trace_of([1, 2, 3, 4])
    result = replay(trace, make_policy("lru", 2))
    assert result.store_failed == 2 and result.evictions == 0


@pytest.mark.parametrize("name", policy_names(online_only=True))
def test_a_request_longer_than_the_tier_fails_its_overflow_without_a_scan(name):
    """Once every resident block is the request's own, the rest of it fails to store without
    asking the policy for a victim (which would scan them all for none)."""
    policy = make_policy(name, 4, cost_model=CostModel.default())
    futile, evict = [], policy.evict

    def spy(n, protected=frozenset()):
        futile.append(set(policy) <= set(protected))
        return evict(n, protected)

    policy.evict = spy
    result = replay(trace_of([10, 11], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4]), policy)
    assert futile and not any(futile)
    if name == "lru":  # 10 and 11 make room for 3 and 4; 5 and 6 find only the request's own
        assert (result.evictions, result.store_failed, result.block_hits) == (2, 2, 4)


def test_hits_save_recompute_time_and_spend_load_time():
    cost_model = CostModel.default()
    trace = trace_of([1, 2], [1, 2])
    host = replay(trace, make_policy("lru", 4), cost_model=cost_model, tier=Tier.HOST)
    assert host.recompute_s_saved > 10 * host.load_s > 0
    assert host.bytes_loaded == 2 * 124 * 2**20
    disk = replay(trace, make_policy("lru", 4), cost_model=cost_model, tier=Tier.DISK)
    assert disk.block_hits == 2 and disk.hits_recomputed == 2 and disk.recompute_s_saved == 0


def test_a_block_keeps_the_modality_of_its_first_appearance():
    labels = (Modality.VISION, Modality.TEXT)
    trace = Trace(
        (
            Request(0, 1024, 1, (1, 2), labels),
            Request(1, 1024, 1, (1, 2)),
            Request(2, 1024, 1, (1, 2)),
        ),
        BLOCK,
    )
    cost_model = CostModel.default()
    text_only = Trace(tuple(Request(i, 1024, 1, (1, 2)) for i in range(3)), BLOCK)
    with_image = replay(trace, make_policy("lru", 4), cost_model=cost_model)
    plain = replay(text_only, make_policy("lru", 4), cost_model=cost_model)
    assert with_image.recompute_s_saved > plain.recompute_s_saved


def test_simulate_all_runs_every_registered_policy():
    trace = trace_of([1, 2, 3], [1, 2, 5], [1, 2, 3], [6], [1, 2, 3])
    results = simulate(trace, "all", 4)
    assert [r.policy for r in results] == policy_names()
    keys = {
        "policy",
        "capacity_blocks",
        "requests",
        "block_refs",
        "block_hit_rate",
        "prefix_token_hit_frac",
        "recompute_s_saved",
        "load_s",
        "bytes_loaded",
        "evictions",
    }
    assert keys <= set(results[0].to_dict())


def test_simulate_with_store_threshold_labels_the_wrapper():
    trace = trace_of([1, 2], [1, 2], [1, 2])
    (result,) = simulate(trace, "lru", 4, store_threshold=2)
    assert result.policy == "lru+st2" and result.block_hits == 2


def test_simulate_refuses_bad_input_before_working():
    trace = trace_of([1])
    with pytest.raises(HkvError, match="unknown policy 'nope'; valid: lru"):
        simulate(trace, ["lru", "nope"], 4)
    for capacity in (0, -1):
        with pytest.raises(HkvError, match="capacity_blocks: got"):
            simulate(trace, "lru", capacity)


def test_per_request_store_evicts_once_and_stores_all_or_nothing():
    policy = make_policy("lru", 3)
    result = replay(trace_of([1, 2, 3], [4, 5], [6, 7, 8, 9]), policy, store="per_request")
    # request 2 needs 2 slots: the chain 1, 2, 3 gives up its tail (3, then 2, as
    # vLLM's lru) in one eviction and 4, 5 are stored; request 3 needs 4 slots in a 3-slot
    # tier: none of its blocks is stored
    assert result.evictions == 2
    assert result.store_failed == 4
    assert sorted(policy) == [1, 4, 5]


TAIL_FIRST = [n for n in policy_names(online_only=True) if n != "random"]  # random: no order


@pytest.mark.parametrize("name", TAIL_FIRST)
@pytest.mark.parametrize("second", [[5], [1, 2, 3]], ids=["stored", "reused"])
def test_per_request_gives_chains_up_from_the_tail(name, second):
    """A chain 1, 2, 3 stored by one request, then either another request or the same chain
    again: the tail goes first, whether the chain was just stored or just reused."""
    policy = make_policy(name, 4)
    replay(trace_of([1, 2, 3], second), policy, store="per_request")
    assert policy.evict(1, frozenset({5})) == [3], name  # 5: the other chain


def test_bip_without_tail_first_keeps_the_prefix_order():
    """`tail_first=False` (the committed H200 results of `hkv_bip`): reused blocks touched in
    prefix order, so the head of the chain is the oldest and goes first."""
    policy = make_policy("bip", 3, bip_every=0, tail_first=False)
    replay(trace_of([1, 2, 3], [1, 2, 3]), policy, store="per_request")
    assert policy.evict(1, frozenset()) == [1]


def test_store_mode_is_validated():
    with pytest.raises(HkvError, match="expected per_block or per_request"):
        replay(trace_of([1]), make_policy("lru", 2), store="batch")


@pytest.mark.parametrize("store", ["per_block", "per_request"])
def test_replay_continues_on_a_warm_policy(store):
    policy = make_policy("lru", 4)
    replay(trace_of([1, 2]), policy, store=store)
    warm = replay(trace_of([1, 2, 3]), policy, store=store)
    assert warm.block_hits == 2


def test_per_request_stores_what_a_policy_declines_aside_as_vllm_does():
    """vLLM stores every block it is asked to: one the policy declines sits outside the policy,
    is found by a lookup, and is the first to be evicted; only vLLM's `store_threshold` refuses
    a store (`VllmTier`)."""
    from hkv.blocks import BlockMeta
    from hkv.policies.admission import StoreThreshold
    from hkv.policies.tier import VllmTier

    class Picky(LRUPolicy):  # declines odd keys
        def admit(self, key, meta):
            return key % 2 == 0

    tier = VllmTier(Picky(4))
    meta = BlockMeta(tokens=512)
    assert tier.store([(k, meta) for k in (0, 1, 2)]) == ([0, 2], 1, 0, 0)
    assert 1 in tier and 1 not in tier.policy and tier.hits([0, 1, 2]) == 3
    # two evictions for three new blocks: the one aside first, then the policy's least recent
    # (a chain is given up from its tail: 2 before 0)
    assert tier.store([(k, meta) for k in (4, 6, 8)])[2] == 2
    assert 1 not in tier and 2 not in tier and set(tier.policy) == {0, 4, 6, 8}
    refusing = VllmTier(StoreThreshold(4, inner=LRUPolicy(4), threshold=2))
    stored, declined, _, _ = refusing.store([(k, meta) for k in (0, 1)])
    assert stored == [] and declined == 2 and len(refusing) == 0  # first offers: not stored


class CountedKey(int):
    """A block key that counts the hashes taken of it: every set or dict operation on a key
    (a membership test, a protected key skipped by `evict`) costs one."""

    hashes = 0

    def __hash__(self) -> int:
        CountedKey.hashes += 1
        return int.__hash__(self)


def hashes_to_replay_reversed(name: str, num_blocks: int, store: str) -> int:
    """Key hashes a replay takes for one request of `num_blocks` blocks, then the same blocks
    in reversed order, at a tier a quarter smaller."""
    ids = [CountedKey(i) for i in range(num_blocks)]
    trace = trace_of(ids, ids[::-1])
    CountedKey.hashes = 0
    simulate(trace, name, num_blocks - num_blocks // 4, store=store)
    return CountedKey.hashes


@pytest.mark.parametrize(
    ("name", "store"),
    [(name, "per_block") for name in policy_names()]  # offline `belady` stores per block only
    + [(name, "per_request") for name in policy_names(online_only=True)],
)
def test_a_request_met_in_reversed_order_costs_linear_work(name, store):
    """Eviction costs no more than linear in the request's length whatever the order of its
    blocks: each doubling at most 2.5x the key operations (a scan of the protected set once
    per missing block made it 4x: the reversed request's resident blocks are all its own).
    `belady` too: its bypass decision passed over the request's own blocks once per block it
    stored (86 s for `hkv simulate --policy belady` on one reversed 65,536-block request)."""
    counts = [hashes_to_replay_reversed(name, n, store) for n in (400, 800, 1600)]
    assert counts[1] <= 2.5 * counts[0] and counts[2] <= 2.5 * counts[1], counts


def test_simulate_checks_its_run_settings():
    """A misspelt policy name in `hyperparameters` ran the defaults unsaid; `store_threshold` 0,
    -1 or NaN ran plain lru; a tier given as "disk" was read as host RAM."""
    trace = trace_of([1, 2, 3], [1, 2, 3, 4])
    with pytest.raises(HkvError, match="hyperparameters: 's3-fifo' is not a policy of this run"):
        simulate(trace, "s3fifo", 4, hyperparameters={"s3-fifo": {"small_fraction": 0.5}})
    with pytest.raises(HkvError, match=r"hyperparameters\['s3fifo'\]: got 0.2"):
        simulate(trace, "s3fifo", 4, hyperparameters={"s3fifo": 0.2})
    for bad in (0, -1, float("nan"), "2", True):
        with pytest.raises(HkvError, match="store_threshold: got"):
            simulate(trace, "lru", 4, store_threshold=bad)
    cost = CostModel.default()
    by_name = simulate(trace, "lru", 4, cost_model=cost, tier="disk")[0]
    by_member = simulate(trace, "lru", 4, cost_model=cost, tier=Tier.DISK)[0]
    assert by_name.tier == "disk" and by_name.bytes_loaded == by_member.bytes_loaded
    with pytest.raises(HkvError, match="unknown tier 'ssd'"):
        simulate(trace, "lru", 4, tier="ssd")


def test_an_empty_trace_is_named_as_such():
    """(It failed in belady, "needs `future` ... hkv simulate passes it", which it had.)"""
    with pytest.raises(HkvError, match="trace: it holds no requests"):
        simulate(Trace((), 16), "all", 4)
