"""Eviction policies: the registry, the contracts every policy keeps, and one scenario each."""

from __future__ import annotations

import copy
import hashlib
import random

import pytest

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.errors import HkvError
from hkv.policies import get_policy_class, make_policy, native, policy_names, register_policy
from hkv.policies.admission import StoreThreshold
from hkv.policies.auto import DEFAULT_EXPERTS
from hkv.policies.shadow import make_expert
from hkv.sim.replay import replay
from hkv.sim.trace import Request, Trace
from hkv.sim.workload import WorkloadSpec, generate

BLOCK = 512


def meta(index: int = 0, modality: Modality = Modality.TEXT, **kw) -> BlockMeta:
    return BlockMeta(tokens=BLOCK, position=index * BLOCK, modality=modality, **kw)


def trace_of(*requests: list[int], modalities: dict[int, Modality] | None = None) -> Trace:
    """A trace whose requests are the given hash-id lists (full 512-token blocks)."""
    out = []
    for time_ms, ids in enumerate(requests):
        labels = None
        if modalities:
            labels = tuple(modalities.get(k, Modality.TEXT) for k in ids)
        out.append(Request(time_ms, len(ids) * BLOCK, 1, tuple(ids), labels))
    return Trace(tuple(out), BLOCK)


def random_prefix_trace(seed: int, num_requests: int = 60) -> Trace:
    """Requests that walk a small random prefix tree: shared heads, divergent tails."""
    rng = random.Random(seed)
    children: dict[tuple, int] = {}
    requests = []
    for _ in range(num_requests):
        ids, node = [], ()
        for _ in range(rng.randint(1, 8)):
            branch = rng.choice([0, 0, 0, 1, 2])
            key = (node, branch)
            if key not in children:
                children[key] = len(children)
            node = key
            ids.append(children[key])
        requests.append(ids)
    return trace_of(*requests)


def build(name: str, capacity: int, trace: Trace | None = None, **params):
    future = trace.reference_stream() if trace is not None else [[0]]
    return make_policy(name, capacity, future=future, **params)


# --- registry ---------------------------------------------------------------------------


def test_registry_lists_the_issue_policies():
    expected = {"lru", "arc", "s3fifo", "gdsf", "cost_aware", "modality_aware", "belady", "random"}
    assert expected <= set(policy_names())


def test_unknown_policy_lists_valid_names():
    with pytest.raises(HkvError, match="unknown policy 'lfu'.*lru.*belady"):
        get_policy_class("lfu")


def test_duplicate_registration_raises():
    with pytest.raises(HkvError, match="already registered"):
        register_policy("lru", "hkv.policies.lru", "LRUPolicy")


def test_unknown_hyperparameter_names_the_valid_ones():
    with pytest.raises(HkvError, match="s3fifo: unknown hyperparameter 'ghost'.*small_fraction"):
        make_policy("s3fifo", 4, ghost=2)


@pytest.mark.parametrize("capacity", [-3, 2.5, True])
def test_negative_or_non_integer_capacity_is_refused(capacity):
    with pytest.raises(HkvError, match=r"lru.capacity_blocks: got .*expected an integer >= 0"):
        make_policy("lru", capacity)


@pytest.mark.parametrize("name", policy_names())
def test_capacity_zero_holds_nothing_and_refuses_every_insert(name):
    """A tier too small for one block (vLLM sizes its tier from bytes) is not an error."""
    policy = make_policy(name, 0, future=[[1]])
    assert len(policy) == 0 and 1 not in policy and list(policy) == []
    assert policy.evict(1) is None and policy.evict(0) == []
    with pytest.raises(RuntimeError, match="full policy"):
        policy.insert(1, BlockMeta(tokens=16))


def test_bad_hyperparameter_names_field_value_and_range():
    with pytest.raises(HkvError, match=r"s3fifo.small_fraction: got 1.5; expected a number in"):
        make_policy("s3fifo", 8, small_fraction=1.5)


# --- contracts, once across the registry ------------------------------------------------


class Driver:
    """Drives a policy by the replay protocol while checking every contract."""

    def __init__(self, policy, capacity: int, rng: random.Random):
        self.policy, self.capacity, self.rng = policy, capacity, rng
        self.resident: set[int] = set()
        self.metas: dict[int, BlockMeta] = {}

    def check_victims(self, victims, n, protected):
        assert victims is not None and len(victims) == n and len(set(victims)) == n
        for key in victims:
            assert key in self.resident, "evicted a block that was not resident"
            assert key not in protected, "evicted a protected block"
            assert not self.metas[key].pinned, "evicted a pinned block"
            assert key not in self.policy
        self.resident.difference_update(victims)

    def check_refusal_changes_nothing(self, protected):
        """An impossible eviction returns None and leaves the policy as it was."""
        twin = copy.deepcopy(self.policy)
        evictable = [k for k in self.resident if k not in protected and not self.metas[k].pinned]
        assert self.policy.evict(len(evictable) + 1, protected) is None
        assert set(self.policy) == self.resident
        for _ in range(min(3, len(evictable))):
            assert self.policy.evict(1, protected) == twin.evict(1, protected)
        # keep the twin's state: the probes above evicted the same blocks from both
        self.resident = set(self.policy)

    def request(self, ids, request: Request):
        protected = frozenset(ids)
        for index, key in enumerate(ids):
            if key in self.resident:
                self.policy.touch(key)
                continue
            block = self.metas.setdefault(key, request.block_meta(index, BLOCK))
            if not self.policy.admit(key, block):
                continue
            if len(self.resident) >= self.capacity:
                victims = self.policy.evict(1, protected)
                if victims is None:
                    continue
                self.check_victims(victims, 1, protected)
            self.policy.insert(key, block)
            self.resident.add(key)
            assert len(self.policy) <= self.capacity
            assert set(self.policy) == self.resident
        self.poke(protected)

    def poke(self, protected):
        """Between requests: pin/unpin, multi-block evictions, refused evictions."""
        rng = self.rng
        for key in rng.sample(sorted(self.resident), min(2, len(self.resident))):
            self.metas[key].pinned = not self.metas[key].pinned
        if rng.random() < 0.3 and len(self.resident) > 2:
            n = rng.randint(2, 3)
            victims = self.policy.evict(n, protected)
            evictable = [
                k for k in self.resident if k not in protected and not self.metas[k].pinned
            ]
            if len(evictable) >= n:
                self.check_victims(victims, n, protected)
            else:
                assert victims is None
        if rng.random() < 0.2:
            self.check_refusal_changes_nothing(protected)


@pytest.mark.parametrize("name", policy_names())
@pytest.mark.parametrize("seed", [0, 1])
def test_contracts_hold_for_every_policy(name, seed):
    trace = random_prefix_trace(seed)
    capacity = 6
    driver = Driver(build(name, capacity, trace), capacity, random.Random(seed))
    for request in trace.requests:
        driver.request(list(request.hash_ids), request)


@pytest.mark.parametrize("name", policy_names())
def test_insert_into_a_full_policy_raises(name):
    trace = trace_of([1, 2, 3])
    policy = build(name, 2, trace)
    for index, key in enumerate([1, 2]):
        if key in policy:
            policy.touch(key)
        else:
            policy.admit(key, meta(index))
            policy.insert(key, meta(index))
    policy.admit(3, meta(2))
    with pytest.raises(RuntimeError, match="full"):
        policy.insert(3, meta(2))


@pytest.mark.parametrize("name", policy_names())
def test_clear_forgets_everything(name):
    trace = random_prefix_trace(3, num_requests=10)
    policy = build(name, 5, trace)
    replay(trace, policy)
    assert len(policy) > 0
    policy.clear()
    assert len(policy) == 0 and list(policy) == []


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_beats_nothing_and_belady_beats_every_policy(name):
    trace = generate(WorkloadSpec(seed=7, num_sessions=80))
    capacity = 40
    result = replay(trace, build(name, capacity, trace))
    optimum = replay(trace, build("belady", capacity, trace))
    assert 0 < result.block_hit_rate <= optimum.block_hit_rate


# --- brute-force references ---------------------------------------------------------------


def brute_force_hits(trace: Trace, capacity: int, choose_victim) -> int:
    """Replay semantics with a plain list as the cache and `choose_victim` deciding misses."""
    flat = [k for r in trace.requests for k in r.hash_ids]
    cache: list[int] = []
    hits = 0
    position = 0
    for request in trace.requests:
        ids = list(request.hash_ids)
        for key in ids:
            if key not in cache:
                break
            hits += 1
        for key in ids:
            if key in cache:
                cache.remove(key)
                cache.append(key)  # most recent at the end
            elif len(cache) < capacity:
                cache.append(key)
            else:
                victim = choose_victim(cache, key, set(ids), flat, position)
                if victim is not None and victim != key:
                    cache.remove(victim)
                    cache.append(key)
            position += 1
    return hits


def lru_victim(cache, key, protected, flat, position):
    return next((k for k in cache if k not in protected), None)


def belady_victim(cache, key, protected, flat, position):
    def next_use(k):
        for i in range(position + 1, len(flat)):
            if flat[i] == k:
                return i
        return float("inf")

    candidates = [k for k in cache if k not in protected] + [key]
    return max(candidates, key=next_use)  # the incoming block on a tie: both never come back


def small_traces():
    yield generate(WorkloadSpec(seed=11, num_sessions=40))
    yield generate(WorkloadSpec.preset("doc_qa", seed=12, num_sessions=30))
    yield random_prefix_trace(13, num_requests=80)


@pytest.mark.parametrize("trace", list(small_traces()), ids=["chat", "doc_qa", "tree"])
@pytest.mark.parametrize("capacity", [5, 23])
def test_lru_equals_brute_force(trace, capacity):
    expected = brute_force_hits(trace, capacity, lru_victim)
    assert replay(trace, build("lru", capacity)).block_hits == expected


@pytest.mark.parametrize("trace", list(small_traces()), ids=["chat", "doc_qa", "tree"])
@pytest.mark.parametrize("capacity", [5, 23])
def test_belady_equals_brute_force(trace, capacity):
    expected = brute_force_hits(trace, capacity, belady_victim)
    assert replay(trace, build("belady", capacity, trace)).block_hits == expected


# --- one scenario per policy --------------------------------------------------------------


def fill(policy, keys):
    for i, key in enumerate(keys):
        assert policy.admit(key, meta(i))
        policy.insert(key, meta(i))


def test_lru_evicts_least_recently_used():
    policy = make_policy("lru", 3)
    fill(policy, [1, 2, 3])
    policy.touch(1)
    assert policy.evict(1) == [2]
    assert policy.evict(1, protected={3}) == [1]


def test_arc_keeps_reused_blocks_over_new_ones():
    policy = make_policy("arc", 3)
    fill(policy, [1, 2, 3])
    policy.touch(1)  # 1 moves to T2 (frequent); 2 and 3 stay in T1
    assert policy.evict(2) == [2, 3]
    assert policy.admit(2, meta(1))  # a ghost hit in B1 raises the T1 target
    assert policy.target_t1_blocks == 1


def test_arc_touch_of_a_ghost_adapts_its_target_but_a_finished_request_does_not():
    """As vLLM's arc: `touch` of a key remembered in B1 raises the T1 target (an absent key
    otherwise changes nothing); a request's reused block evicted before it finished is passed
    over by `after_request`."""
    policy = make_policy("arc", 3)
    fill(policy, [1, 2, 3])
    assert policy.evict(1) == [1]  # 1 -> B1
    policy.touch(99)  # never seen: nothing
    assert policy.target_t1_blocks == 0
    policy.after_request([], [1])  # reused, then evicted before the request finished
    assert policy.target_t1_blocks == 0
    policy.touch(1)
    assert policy.target_t1_blocks == 1 and 1 not in policy


def test_s3fifo_filters_one_hit_wonders():
    policy = make_policy("s3fifo", 4, small_fraction=0.5)
    fill(policy, [1, 2, 3, 4])
    policy.touch(1)
    # S holds all four; 1 was referenced so it moves to M instead of leaving.
    assert policy.evict(1) == [2]
    assert 1 in policy
    policy.remove(3)
    policy.insert(2, meta(0))  # 2 comes back from the ghost queue straight into M
    policy.touch(2)
    # S (just 4) is below its share, so M gives: 1 (counter reset on promotion) leaves,
    # 2 is referenced so it goes round once with its counter decremented.
    assert policy.evict(1) == [1]
    assert policy.evict(1) == [2]
    assert list(policy) == [4]


def test_gdsf_keeps_the_frequent_block():
    policy = make_policy("gdsf", 2)
    fill(policy, [1, 2])
    policy.touch(1)
    assert policy.evict(1) == [2]
    assert policy.inflation > 0


def test_belady_bypasses_a_block_used_later_than_every_resident():
    trace = trace_of([1], [2], [3], [1], [2], [3])
    policy = make_policy("belady", 2, future=trace.reference_stream())
    result = replay(trace, policy)
    assert result.declined == 2  # 3 is needed after 1 and 2, and then never again
    assert result.block_hits == 2


def test_belady_refuses_to_be_driven_off_its_trace():
    policy = make_policy("belady", 2, future=[[1, 2]])
    with pytest.raises(RuntimeError, match="reference #0 is 5"):
        policy.admit(5, meta())


def test_belady_needs_the_future():
    with pytest.raises(HkvError, match="belady: needs `future`"):
        make_policy("belady", 2)


def test_random_is_reproducible_by_seed():
    runs = []
    for _ in range(2):
        policy = make_policy("random", 10, seed=3)
        fill(policy, range(10))
        runs.append(policy.evict(4))
    assert runs[0] == runs[1]


def test_cost_aware_keeps_the_block_that_is_dear_to_recompute():
    policy = make_policy("cost_aware", 2, bypass=False)
    early = BlockMeta(tokens=BLOCK, position=0)
    late = BlockMeta(tokens=BLOCK, position=100 * BLOCK)  # attention makes it ~4x dearer
    policy.admit(1, late)
    policy.insert(1, late)
    policy.admit(2, early)  # position drops: a new request
    policy.insert(2, early)
    assert policy.evict(1) == [2]


def test_cost_aware_drops_blocks_cheaper_to_recompute_than_to_load():
    policy = make_policy("cost_aware", 1)
    on_disk = BlockMeta(tokens=BLOCK, position=0, tier=Tier.DISK)  # ~120 ms load vs ~26 ms
    assert policy.value(on_disk) == 0
    fill(policy, [1])
    assert not policy.admit(2, on_disk)


def test_cost_aware_caps_a_block_at_its_parents_worth():
    policy = make_policy("cost_aware", 3, bypass=False)
    for index, key in enumerate([1, 2, 3]):
        policy.admit(key, meta(index))
        policy.insert(key, meta(index))
    # One request, in prefix order: deeper blocks cost more but never outrank their parent.
    assert policy.evict(3) == [3, 2, 1]


def test_modality_aware_sends_the_eager_modality_first():
    policy = make_policy("modality_aware", 2, bypass=False)  # article: vision 0.8, text 0.3
    policy.admit(1, meta(0))
    policy.insert(1, meta(0))
    image = meta(0, Modality.VISION)
    policy.admit(2, image)
    policy.insert(2, image)
    assert policy.evict(1) == [2]


def test_modality_aware_enforces_max_keep_blocks_at_eviction():
    from hkv.planning.config import HybridKVCacheConfig

    config = HybridKVCacheConfig(
        modality_configs={"vision": {"offload_priority": 0.0, "max_keep_blocks": 1}}
    )
    policy = make_policy("modality_aware", 4, config=config, bypass=False)
    for key, modality in [(1, Modality.VISION), (2, Modality.VISION), (3, Modality.TEXT)]:
        block = meta(0, modality)
        policy.admit(key, block)
        policy.insert(key, block)
    assert policy.excess_blocks() == {Modality.VISION: 1}
    assert policy.evict(1) == [1]  # the older vision block, although text is worth less
    assert policy.excess_blocks() == {}


def test_store_threshold_admits_on_the_second_offer():
    policy = StoreThreshold(4, inner=make_policy("lru", 4), threshold=2)
    assert not policy.admit(1, meta())
    assert policy.admit(1, meta())
    policy.insert(1, meta())
    assert 1 in policy and len(policy) == 1


def test_store_threshold_replays_like_vllm():
    trace = trace_of([1, 2], [1, 2], [1, 2])
    policy = StoreThreshold(4, inner=make_policy("lru", 4), threshold=2)
    result = replay(trace, policy, label="lru+st2")
    assert (result.declined, result.inserts, result.block_hits) == (2, 2, 2)


def test_prefix_policies_count_a_batch_of_admits_once_each():
    for name in ("cost_aware", "modality_aware"):
        policy = make_policy(name, 8)
        metas = {k: BlockMeta(tokens=16, position=16 * k) for k in range(3)}
        assert all(policy.admit(k, metas[k]) for k in range(3))  # vLLM admits a request at once
        for k in range(3):
            policy.insert(k, metas[k])
        assert all(policy._entries[k].hits == 1 for k in range(3))


def test_bip_keeps_a_cycle_larger_than_the_cache_where_lru_keeps_nothing():
    # three requests of 2 blocks each, cycled; 4 slots: LRU evicts each block before its reuse
    cycle = [[1, 2], [3, 4], [5, 6]] * 4
    trace = Trace([Request(float(i), 2 * 512, 1, tuple(ids)) for i, ids in enumerate(cycle)], 512)
    lru = replay(trace, make_policy("lru", 4))
    bip = replay(trace, make_policy("bip", 4, bip_every=0))
    assert lru.block_hits == 0
    # the first request stays cached and hits in every later round; the other two share the
    # remaining slots and churn (LRU, for comparison, hits nothing at all)
    assert bip.block_hits == 2 * 3


def test_predictive_learns_that_one_off_blocks_do_not_return():
    """Sessions whose first block comes back every round and whose other blocks never do: once
    labelled, the one-off blocks go to the averse queue and are evicted first."""
    requests = [[0, 1000 + i] for i in range(400)]  # block 0 returns, 1000+i never does
    policy = make_policy("predictive", 8, update_every=16, min_samples=4)
    replay(trace_of(*requests), policy, store="per_request")
    assert 0 in policy
    assert set(policy._averse) and 0 not in policy._averse


@pytest.mark.parametrize("expert", ["arc", "cost_aware", "depth_lfu_static"])
def test_auto_led_by_one_expert_decides_exactly_as_that_expert_alone(expert):
    """The tier is its leader's whole policy, admission included: with the lead never changing
    (one expert, or a margin no score can pass) `auto` hits exactly what the expert hits.
    (Not `lru+st2`: vLLM's `store_threshold` refuses stores in its manager, before any policy;
    led by it, `auto` can only decline, and vLLM then stores the block aside.)"""
    chat = generate(WorkloadSpec.multimodal(seed=7, num_sessions=60))
    alone = replay(chat, make_expert(expert, 40), store="per_request")
    experts = sorted({*DEFAULT_EXPERTS, expert})  # (arc: an expert, not a default one)
    for params in ({"experts": [expert], "first": expert},
                   {"experts": experts, "first": expert, "margin": 1.0}):  # fmt: skip
        policy = make_policy("auto", 40, **params)
        led = replay(chat, policy, store="per_request")
        assert policy.switches == 0 and policy.leader == expert
        assert led.block_hits == alone.block_hits and led.inserts == alone.inserts


def test_auto_hands_the_tier_to_the_expert_that_hits_and_then_hits_like_it():
    """Sessions of 4 blocks revisited round by round through a tier too small for all of them:
    LRU evicts every block before its turn comes; a static frequency ranking keeps some heads.
    Started on LRU, `auto` switches once its shadow scores show it, keeps nearly all of the
    better expert's hits and stays there."""
    sessions = [[100 * s + b for b in range(4)] for s in range(6)]
    trace = trace_of(*(sessions * 40))
    lru = replay(trace, make_policy("lru", 12), store="per_request").block_hits
    static = replay(trace, make_policy("depth_lfu", 12, aging=False), store="per_request")
    policy = make_policy("auto", 12, experts=["lru", "depth_lfu_static"], first="lru")
    hits = replay(trace, policy, store="per_request").block_hits
    assert lru == 0 < static.block_hits
    assert policy.leader == "depth_lfu_static" and policy.switches == 1
    assert hits >= 0.9 * static.block_hits
    scores = policy.scores()
    assert scores["depth_lfu_static"] > scores["lru"] == 0.0


def test_auto_on_vllm_026s_order_sees_each_request_when_the_next_one_is_looked_up():
    """vLLM 0.26 reports a request's hits at lookup, before its stores, and never its end: with
    `request_end_reported` False the shadows still replay whole requests (one request late)."""
    chat = generate(WorkloadSpec(seed=3, num_sessions=30))
    per_request = make_policy("auto", 30)
    replay(chat, per_request, store="per_request")
    late = make_policy("auto", 30)
    late.request_end_reported = False
    resident = set()
    for request in chat.requests:  # the 0.26 order: the hits at lookup, then the stores
        ids = request.hash_ids
        late.after_request((), [key for key in ids if key in resident])
        new = []
        for index, key in enumerate(ids):
            meta = request.block_meta(index, chat.block_tokens, Tier.HOST)
            if key not in resident and key not in new and late.admit(key, meta):
                new.append(key)
        room = len(late) + len(new) - 30
        if room > 0:
            victims = late.evict(room, frozenset(ids))
            resident.difference_update(victims or ())
            new = new if victims is not None else []
        for key in new:
            late.insert(key, request.block_meta(ids.index(key), chat.block_tokens, Tier.HOST))
        resident.update(new)
    late.after_request((), [])  # the last request's stores reach the shadows
    assert late._refs == pytest.approx(per_request._refs, rel=0.05)
    assert max(late.scores().values()) > 0


def test_auto_samples_its_shadows_above_sample_blocks_and_still_finds_the_leader():
    """The revisited sessions above, 100 times as many and a tier 100 times as large: with
    shadows of 120 blocks that see a tenth of the keys, `auto` hands the tier to the static
    ranking as soon as with full shadows and hits as much; its shadows replay about a tenth of
    the references (all with no `evidence_rebuild`). With it, the rebuild waits for a lead seen
    over 0.35 x 120 sampled references (about 100 requests of 4 blocks here), and hits a little
    less. At or below `sample_above` blocks nothing is sampled."""
    sessions = [[100 * s + b for b in range(4)] for s in range(600)]
    trace = trace_of(*(sessions * 6))
    runs = {}
    sampled_params = {"sample_blocks": 120, "sample_above": 120}
    for sampling in (sampled_params | {"evidence_rebuild": 0.0}, {"sample_above": 2048},
                     sampled_params):  # fmt: skip
        params = {"experts": ["lru", "depth_lfu_static"], "first": "lru", **sampling}
        policy = make_policy("auto", 1200, **params)
        runs[len(runs)] = policy, replay(trace, policy, store="per_request").block_hits
    (sampled, hits), (full, full_hits), (waited, waited_hits) = runs[0], runs[1], runs[2]
    assert sampled._sampled and sampled._shadows.blocks == 120
    assert not full._sampled
    assert sampled.leader == full.leader == waited.leader == "depth_lfu_static"
    assert sampled.switches == full.switches == waited.switches == 1
    assert hits >= 0.98 * full_hits > 0
    assert 0.95 * full_hits <= waited_hits < hits
    assert 0.05 * full._refs < sampled._refs < 0.2 * full._refs


def test_auto_admits_now_as_its_leader_once_misses_are_noted():
    """A caller may skip `admit` while `auto`'s leader admits everything, but only where misses
    are noted (otherwise `admit` is how `auto` hears of them)."""
    meta = BlockMeta(tokens=16, position=0)
    policy = make_policy("auto", 64, first="lip")
    assert not policy.admits_everything and not policy.admits_now
    policy.note_misses([1], [meta])
    assert policy.admits_now
    declining = make_policy("auto", 64, first="lru+st2")
    declining.note_misses([1], [meta])
    assert not declining.admits_now and not declining.admit(1, meta)
    assert make_policy("lru", 8).admits_now and not make_policy("cost_aware", 8).admits_now


def _switched(policy, best: int | None = None) -> None:
    """A sampled `auto`'s switch to `best` (if given) begun, then finished as the next score
    finishes it first."""
    if best is not None:
        policy._switch(best)
    if policy._coming is not None:
        policy._switch(*policy._coming)


def test_a_sampled_switch_builds_the_new_leader_from_the_last_requests():
    """A sampled shadow cannot become the tier: the new leader is the expert replayed over the
    last requests, then fitted to what the tier holds; begun at one request's end, it leads
    from the next. Led by `lru` it then gives up the blocks used longest ago, each chain from
    its tail, as `lru` alone would have."""
    trace = trace_of([1, 2, 3], [4, 5], [1, 2, 3, 6])
    sampling = {"sample_blocks": 64, "sample_above": 64}
    policy = make_policy("auto", 4096, experts=["cost_aware", "lru"], **sampling)
    replay(trace, policy, store="per_request")
    alone = make_policy("lru", 4096)
    replay(trace, alone, store="per_request")
    held = set(policy)
    policy._switch(policy.experts.index("lru"))
    assert policy.leader == "cost_aware" and policy.switches == 0  # begun, not leading yet
    _switched(policy)
    assert policy.leader == "lru" and policy.switches == 1
    assert set(policy) == held and not policy._aside
    assert policy.evict(3) == alone.evict(3) == [5, 4, 6]


def test_a_sampled_leader_switched_back_to_resumes_as_its_retired_instance():
    """Flipping back to a leader that ran the tier within the history kept does not replay
    the whole history again: its last live instance resumes, caught up on the requests since
    and fitted to what the tier holds."""
    sampling = {"sample_blocks": 64, "sample_above": 64}
    policy = make_policy("auto", 4096, experts=["cost_aware", "lru"], **sampling)
    replay(trace_of([1, 2, 3], [4, 5], [1, 2, 3, 6]), policy, store="per_request")
    first = policy._live
    policy._switch(policy.experts.index("lru"))
    replay(trace_of([1, 2, 7], [4, 5, 8]), policy, store="per_request")
    held = set(policy)
    policy._switch(policy.experts.index("cost_aware"))
    assert policy._live is first and policy.leader == "cost_aware"
    assert set(policy) == held and set(first) | set(policy._aside) == held
    assert {7, 8} <= set(first)  # caught up: it has seen the requests it missed


def test_a_leader_retired_beyond_the_history_is_rebuilt_and_forgotten():
    """A retired instance older than the history kept could not be caught up: it is freed at
    the next switch, and the expert, when it leads again, is replayed over the history afresh."""
    sampling = {"sample_blocks": 64, "sample_above": 64}
    policy = make_policy("auto", 128, experts=["cost_aware", "lru", "arc"], **sampling)
    index = policy.experts.index
    replay(trace_of([1, 2, 3], [4, 5]), policy, store="per_request")
    first = policy._live
    _switched(policy, index("lru"))
    assert policy._retired[index("cost_aware")][0] is first
    many = [[1000 + 10 * i + j for j in range(10)] for i in range(40)]  # 400 refs > 2 x 128
    replay(trace_of(*many), policy, store="per_request")
    _switched(policy, index("arc"))
    assert list(policy._retired) == [index("lru")]  # cost_aware's, beyond the history: freed
    _switched(policy, index("cost_aware"))
    assert policy._live is not first and policy.leader == "cost_aware"
    assert set(policy._live) | set(policy._aside) == set(policy)


@pytest.mark.parametrize("wait", [1, 2])
def test_a_sampled_tier_rebuilds_a_leader_only_for_a_lead_that_holds(wait):
    """A switch that must rebuild its leader (a sampled tier, an expert not retired within
    the history) waits until the lead has held `confirm_rebuild` requests in a row; a lead of
    one request that is gone at the next sets none off, and is begun, leading from the next
    request. A switch back to a retired leader resumes it and happens at once."""
    sampling = {"sample_blocks": 64, "sample_above": 64}
    policy = make_policy("auto", 4096, experts=["lru", "cost_aware"], first="lru",
                         confirm_rebuild=wait, evidence_rebuild=0.0, **sampling)  # fmt: skip
    hits = iter([[0, 10], [20, 0], [0, 30], [0, 10], [0, 10], [100, 0]])  # each expert's
    leaders = []
    for _ in range(6):
        policy._score(next(hits), 10)  # a request of 10 blocks
        leaders.append(policy.leader)
    if wait == 1:  # every lead switches: the rebuild a request later, back and forth at once
        assert leaders == ["lru", "lru", "cost_aware", "cost_aware", "cost_aware", "lru"]
    else:  # the one-request lead is ignored; the held one rebuilds; the way back resumes
        assert leaders == ["lru", "lru", "lru", "lru", "cost_aware", "lru"]
    assert policy.switches == (4 if wait == 1 else 2)


@pytest.mark.parametrize("evidence", [0.0, 1.0])
def test_a_sampled_tier_rebuilds_only_for_a_lead_seen_over_enough_references(evidence):
    """With `evidence_rebuild` x `sample_blocks` (64 here) sampled block references, a rebuild
    waits until the challenger has led by `margin` over that many references since its lead
    began: two requests of 10 do not suffice, a lapse starts the count afresh, seven requests
    after it do. Without it (0), two requests rebuild, and the way back resumes at once. A
    rebuild leads from the request after the one that began it."""
    sampling = {"sample_blocks": 64, "sample_above": 64}
    policy = make_policy("auto", 4096, experts=["lru", "cost_aware"], first="lru",
                         evidence_rebuild=evidence, **sampling)  # fmt: skip
    leaders = []
    for hits in [[0, 10]] * 3 + [[40, 0]] + [[0, 10]] * 10:  # each expert's, per request of 10
        policy._score(hits, 10)
        leaders.append(policy.leader)
    if evidence:  # 30 references, lapsed; then a tie, then 7 x 10 >= 64 after it
        assert leaders == ["lru"] * 12 + ["cost_aware"] * 2 and policy.switches == 1
    else:
        assert leaders[:5] == ["lru", "lru", "cost_aware", "lru", "lru"]
        assert leaders[5:] == ["cost_aware"] * 9 and policy.switches == 3


@pytest.mark.parametrize("key", [7, 2**70, b"\x01" * 32, ("h", 3)])
def test_auto_samples_a_key_by_the_same_bits_every_time(key):
    from hkv.policies.native import key_bits

    assert 0 <= key_bits(key) < 2**64 and key_bits(key) == key_bits(key)


def test_auto_hyperparameters_are_checked_by_name():
    bad = (
        ("experts", ["lru", "nope"]),
        ("experts", "lru"),
        ("experts", []),
        ("half_life", 0),
        ("margin", 1.5),
        ("first", "arc"),
        ("sample_blocks", 16),
        ("sample_above", 100),
        ("confirm_rebuild", 0),
        ("evidence_rebuild", -1.0),
        ("native", "yes"),
    )
    for field, value in bad:
        params = {field: value} if field != "first" else {"experts": ["lru"], "first": value}
        with pytest.raises(HkvError, match=rf"auto\.{field}: "):
            make_policy("auto", 8, **params)


def test_auto_starts_as_lip_or_else_its_first_expert():
    """Unset, `first` is `lip` among the default experts (`predictive` and `depth_lfu_static`
    among them), and the first expert given where they leave it out."""
    policy = make_policy("auto", 64)
    assert policy.leader == policy.first == "lip"
    assert "depth_lfu_static" in policy.experts
    assert "predictive" in policy.experts and policy.hyperparameters()["first"] == policy.first
    assert make_policy("auto", 64, experts=["arc", "lru"]).leader == "arc"


def test_auto_lean_is_its_three_experts_by_name():
    """`experts="lean"`: lru, lru + store_threshold 2 and `lip` (first), deciding as that list
    given by hand; another name is refused with the choices."""
    from hkv.policies.auto import LEAN_EXPERTS

    lean = make_policy("auto", 40, experts="lean")
    assert lean.experts == LEAN_EXPERTS == ("lru", "lru+st2", "lip") and lean.leader == "lip"
    listed = make_policy("auto", 40, experts=list(LEAN_EXPERTS))
    trace = generate(WorkloadSpec.multimodal(seed=3, num_sessions=30))
    runs = [replay(trace, policy, store="per_request") for policy in (lean, listed)]
    assert runs[0].block_hit_rate == runs[1].block_hit_rate and lean.scores() == listed.scores()
    assert set(lean.scores()) == set(LEAN_EXPERTS)
    with pytest.raises(HkvError, match='expected "lean" or a list'):
        make_policy("auto", 40, experts="slim")


def test_a_sampled_auto_runs_no_shadow_of_predictive():
    """`predictive` learns from absolute label counts, so it has no sampled shadow: it is
    scored (and may lead) only where the shadows hold the whole tier."""
    sampling = {"sample_blocks": 64, "sample_above": 64}
    trace = trace_of(*[[i, i + 1, i + 2] for i in range(0, 600, 3)] * 2)
    sampled = make_policy("auto", 4096, **sampling)
    replay(trace, sampled, store="per_request")
    assert "predictive" not in sampled.scores() and set(sampled.scores()) < set(sampled.experts)
    assert sampled.leader != "predictive"
    whole = make_policy("auto", 64, **sampling)
    replay(trace, whole, store="per_request")
    assert set(whole.scores()) == set(whole.experts)


def test_depth_lfu_keeps_shared_heads_over_deep_tails_and_static_keeps_them_through_a_burst():
    """Two blocks with the same count: the shallower stays. A burst of one-off requests: the
    aged ranking lets them in and the hot head goes; the static one keeps the head."""
    policy = make_policy("depth_lfu", 2, bypass=False)
    policy.insert("deep", meta(5))
    policy.insert("head", meta(0))
    assert policy.evict(1) == ["deep"]
    hot = [[0, 1]] * 8
    burst = [[1000 + i] for i in range(40)]
    trace = trace_of(*hot, *burst, [0, 1])
    aged = replay(trace, make_policy("depth_lfu", 4), store="per_request")
    static = replay(trace, make_policy("depth_lfu", 4, aging=False), store="per_request")
    assert static.block_hits == aged.block_hits + 2
    with pytest.raises(HkvError, match=r"depth_lfu\.aging: got"):
        make_policy("depth_lfu", 4, aging="no")


def test_dip_follows_lru_on_a_recency_friendly_stream():
    trace = Trace([Request(float(i), 512, 1, (i % 3,)) for i in range(60)], 512)
    assert replay(trace, make_policy("dip", 4)).block_hits == 57


# --- decisions stay as recorded -----------------------------------------------------------


def decision_log(
    name: str, trace: Trace, capacity: int, seed: int, per_request: bool, **params
) -> list:
    """Every decision `name` makes on `trace`: victims (or None) and declined keys, in order.

    The replay protocol, per block or vLLM's per request (a request's misses stored at once,
    after one eviction that makes room for all), with what vLLM and the manager add: the
    request's blocks protected, blocks pinned and unpinned, multi-block evictions, removals.
    """
    policy = build(name, capacity, trace, **params)
    online = not type(policy).offline
    rng = random.Random(seed)
    metas: dict[int, BlockMeta] = {}
    log: list = []
    for request in trace.requests:
        ids = list(request.hash_ids)
        protected = frozenset(ids)
        misses, reused = [], []
        for index, key in enumerate(ids):
            if key in policy:
                if per_request:
                    reused.append(key)  # vLLM reports the request's accesses when it ends
                else:
                    policy.touch(key)
                continue
            block = metas.setdefault(key, request.block_meta(index, BLOCK))
            if not policy.admit(key, block):
                log.append(("declined", key))
            elif per_request:
                misses.append((key, block))
            elif len(policy) < capacity or log_append(log, policy.evict(1, protected)):
                policy.insert(key, block)
        short = len(policy) + len(misses) - capacity
        if misses and (short <= 0 or log_append(log, policy.evict(short, protected))):
            for key, block in misses:
                policy.insert(key, block)
        else:
            misses = []
        if per_request:
            policy.after_request([key for key, _ in misses], reused)
        if len(policy) and rng.random() < 0.5:
            pinned = metas[rng.choice(sorted(policy))]
            pinned.pinned = not pinned.pinned
        if rng.random() < 0.3:
            log.append(policy.evict(rng.randint(2, 3), protected))
        if online and rng.random() < 0.1 and len(policy):
            policy.remove(rng.choice(sorted(policy)))
    return log


def log_append(log: list, victims: list | None) -> bool:
    log.append(victims)
    return victims is not None


def decision_runs():
    """(label, trace, capacity, per_request) of the recorded runs."""
    chat = generate(WorkloadSpec.multimodal(seed=7, num_sessions=60))
    yield "tree", random_prefix_trace(21, num_requests=150), 6, False
    yield "chat_per_block", chat, 40, False
    yield "chat_per_request", chat, 40, True


RECORDED_DECISIONS = {
    "lru": "343eae7f01f2b6caf7ae3355f3c9ee919445c80db582648865c7bbeb6fa0bc7a",
    "arc": "0b025fe96097ac7f0905b475254955b0b7240b73fea7c71647b6161e6fa7c080",
    "s3fifo": "ecef7119cac82a3c11e444b3e2f6d4d5f0b3b6e9ff1a60a30e0b19a65ee74880",
    "gdsf": "88e707f20ccac1e834e5aaf87b36ef4a71048f83b443823aaf8945db2b52c211",
    "dip": "94331a025a19d8dac4f5336ddd8ff2789f4fb10caba2ea608f5473cfbf3dcad6",
    "bip": "37533728c98db9498201d16df0ab6b2605c8466c58f41f22a5d9dda5efb58640",
    "cost_aware": "5c0413e853866686dec131e00bb8b28415f443bef32c5c96fff99c2a32b853e8",
    "depth_lfu": "9001bec031c40827e3cc917f2dc120a71e554816e7a2d60d134af070d8645a15",
    "modality_aware": "947f61b9a15a23946f1d6268aaea6098db591cda5a4c5fe88d6d49213fee9cd0",
    "predictive": "e1ecbd3a058759c02a7c9b1d055cef0ef63f90e836e22641a8be32efbbb911c0",
    "auto": "fe71dcac285bbb93b2863a8898be3248c351a564ca32ba7ce763e00d6463f136",
    "belady": "65bbb4cf98595c631550ba84148a36ca32ca9bb49ae273d4754596aa3ab464d6",
    "random": "3d2aa6cec829221c308503962787c8070d0c592fe3f96a3eb6bb53d72619b1ac",
}
"""sha256 of each policy's decision logs (`decision_runs`), recorded from the policies as they
were before their hot paths were optimised: a faster policy must decide exactly alike.

Re-recorded once, deliberately, when chains began to be given up from the tail: the per-request
run now reports a request's accesses after its store (`after_request`, as vLLM does when a
request finishes) instead of touching inline, and the queue and priority policies re-rank a
request's stored blocks tail first. That moved every online policy but `random` (whose victims
ignore order); the per-block runs and `belady` are unchanged. `predictive` and `auto` were
recorded when they were added; `auto` again each time it was rebuilt, when it became the leader
of shadowed experts, when `predictive` joined its experts and `depth_lfu_static` became its
first, when `lip` joined them and became its first (its per-block runs, where no
request's end is reported and `depth_lfu_static` still runs the tier, decide as before), and
last when its full-tier shadows moved to C, which never see a pin: its Python shadows now hold
unpinned metas too (main's code with only that change gives the new digest), and when a
switch began to settle what it owes (`held.Owed`, C and Python shadows alike);
`depth_lfu` when it was added."""


@pytest.mark.skipif(not native.built(), reason="hkv's native shadows are not built")
def test_auto_decides_alike_with_native_or_python_shadows_in_the_recorded_runs():
    """The recorded runs pin and unpin blocks, remove some and evict others out of turn: `auto`
    with its shadows in C (the recorded digest) and in Python makes every decision alike."""
    for _, trace, capacity, per_request in decision_runs():
        logs = [
            decision_log("auto", trace, capacity, 5, per_request, native=native_shadows)
            for native_shadows in (True, False)
        ]
        assert logs[0] == logs[1]


@pytest.mark.parametrize("name", policy_names())
def test_decisions_match_the_recorded_reference(name):
    digest = hashlib.sha256()
    for _, trace, capacity, per_request in decision_runs():
        if per_request and get_policy_class(name).offline:
            continue
        digest.update(repr(decision_log(name, trace, capacity, 5, per_request)).encode())
    assert digest.hexdigest() == RECORDED_DECISIONS[name]


BULK_PARAMS = {"dip": {"bip_every": 5}, "bip": {"bip_every": 5}}


@pytest.mark.parametrize("name", [n for n in policy_names() if not get_policy_class(n).offline])
def test_bulk_calls_leave_a_policy_as_one_call_per_key_would(name):
    """`insert_all`, `insert_each` and `touch_all` (vLLM's adapter hands a policy its inserts
    and a request's touches in one call each) decide exactly as `insert` and `touch` key by
    key: one meta for a batch or one a key, touch lists with absent and repeated keys, pinned
    blocks, protected keys, one-in-`bip_every` inserts."""
    rng = random.Random(11)
    params = BULK_PARAMS.get(name, {})
    one, bulk = (make_policy(name, 48, **params) for _ in range(2))
    next_key, resident = 0, []
    for step in range(60):
        batch_meta = meta(step % 7, pinned=rng.random() < 0.1)
        keys = list(range(next_key, next_key + rng.randint(0, 12)))
        next_key += len(keys)
        room = len(one) + len(keys) - 48
        if room > 0:
            protected = set(rng.sample(resident, min(len(resident), 5)))
            victims = one.evict(room, protected)
            assert victims == bulk.evict(room, protected)
            if victims is None:
                continue
            resident = [k for k in resident if k not in set(victims)]
        if step % 2:  # a meta each (`auto`'s leader behind the adapter)
            metas = [meta((step + i) % 7, pinned=rng.random() < 0.1) for i in range(len(keys))]
            bulk.insert_each(keys, metas)
        else:
            metas = [batch_meta] * len(keys)
            bulk.insert_all(keys, batch_meta)
        for key, key_meta in zip(keys, metas, strict=True):
            one.insert(key, key_meta)
        resident += keys
        touched = [*rng.sample(resident, min(len(resident), 9)), next_key + 100]  # one absent
        touched += touched[:2]  # repeated keys
        rng.shuffle(touched)
        for key in touched:
            one.touch(key)
        bulk.touch_all(touched)
        assert list(one) == list(bulk)
    for _ in range(len(one) + 1):
        assert one.evict(1, frozenset()) == bulk.evict(1, frozenset())
    fresh = make_policy(name, 4, **params)
    with pytest.raises(KeyError):
        fresh.insert_all([1, 2, 1], meta())  # a key twice raises, as `insert` would
    with pytest.raises(KeyError, match="already resident"):
        fresh.insert_all([next(iter(fresh))], meta())
    with pytest.raises(RuntimeError, match="full"):
        fresh.insert_all([7, 8, 9], meta())


@pytest.mark.parametrize("name", ["cost_aware", "depth_lfu", "modality_aware"])
def test_parked_request_blocks_leave_every_decision_as_before(name):
    """The prefix-value policies park the current request's heap items outside the heap while
    they judge its admissions (`_lowest_evictable`): admissions and victims are those of the
    same policy that pushes them back at once. Each request is offered whole, then room is
    made in one eviction, as vLLM's tier does; that eviction protects the request's blocks (as
    the replay and the block manager do) or only a few others (vLLM's in-flight chunks), and
    some blocks are pinned while the request runs."""

    class PushedBack(type(make_policy(name, 4))):
        def _lowest_evictable(self):
            lowest = super()._lowest_evictable()
            self._unpark()
            return lowest

    rng = random.Random(5)
    capacity = 40
    parked, pushed = make_policy(name, capacity), PushedBack(capacity)
    sessions = [[1000 * s + i for i in range(60)] for s in range(6)]
    parked_seen = uncovered = 0
    for step in range(800):  # sessions round-robin, longer than the tier (the anchor's shape)
        keys = sessions[step % 6][: rng.randint(30, 60)]
        metas = [meta(i, pinned=rng.random() < 0.05) for i in range(len(keys))]
        offered = []
        for key, block in zip(keys, metas, strict=True):
            if key in parked:
                parked.touch(key)
                pushed.touch(key)
                continue
            admitted = parked.admit(key, block)
            assert pushed.admit(key, block) == admitted, step
            if admitted:
                offered.append((key, block))
        parked_seen += bool(parked._parked)
        room = len(parked) + len(offered) - capacity
        if room > 0:
            if rng.random() < 0.5:
                protected = frozenset(keys)
            else:  # a few in-flight chunks, not the request's blocks
                protected = frozenset(rng.sample(sorted(parked), min(5, len(parked))))
                uncovered += bool(parked._parked_keys - protected)
            victims = parked.evict(room, protected)
            assert pushed.evict(room, protected) == victims, step
            if victims is None:
                offered = []
        for key, block in offered:
            parked.insert(key, block)
            pushed.insert(key, block)
        for block in metas:
            block.pinned = False
        for policy in (parked, pushed):
            policy.after_request([], [])
    assert sorted(parked) == sorted(pushed)
    assert parked_seen > 10 and uncovered > 0  # parked, and evicted past unprotected items


def test_auto_without_request_ends_runs_depth_lfu_static():
    """A per-block caller (no `after_request`, no `note_misses`) never runs the shadows, so
    `auto` hands the tier to `depth_lfu_static` when a second request begins; a caller that
    reports request ends keeps `lip`, and a `first` given is kept."""
    trace = generate(WorkloadSpec.multimodal(seed=3, num_sessions=20))
    per_block = make_policy("auto", 64)
    replay(trace, per_block)
    assert per_block.leader == "depth_lfu_static" and per_block.switches == 0
    # margin 1: no lead is ever large enough to switch, so the leader is what the start left
    per_request = make_policy("auto", 64, experts=["lip", "depth_lfu_static"], margin=1.0)
    replay(trace, per_request, store="per_request")
    assert per_request.leader == "lip" and per_request.switches == 0
    given = make_policy("auto", 64, first="lip")
    replay(trace, given)
    assert given.leader == "lip"
