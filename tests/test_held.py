"""`auto`'s held metas (`hkv.policies.held`): kept by a leader in C while nothing is aside, in
the order the tier's blocks came in, and the same decisions as the Python dict's."""

from __future__ import annotations

import copy

import pytest

from hkv.blocks import BlockMeta
from hkv.policies import make_policy, native
from hkv.policies.leader import NativeLeader
from tests.test_native_shadows import TOKENS, sessions

pytestmark = pytest.mark.skipif(not native.built(), reason="hkv's C extension is not built")


EXPERTS = ("lip", "lru", "cost_aware", "depth_lfu")


def meta(position: int) -> BlockMeta:
    return BlockMeta(tokens=TOKENS, position=position * TOKENS)


def lru_leader(capacity: int) -> NativeLeader:
    shadows = native.shadows(["lru"], capacity)
    return NativeLeader("lru", capacity, native.leader(shadows, {}), shadows=shadows)


def test_a_leader_keeping_metas_holds_them_in_the_order_its_keys_came_in():
    leader = lru_leader(8).keeping_metas()
    metas = {key: meta(key) for key in range(6)}
    assert leader.insert_each([0, 1, 2], [metas[0], metas[1], metas[2]]) == []
    leader.insert(3, metas[3])
    leader.touch_all([0])  # recency is the expert's: the order held is the order they came in
    assert leader.evict(1, frozenset()) == [1]
    leader.insert(1, metas[1])
    assert list(leader.held_metas().items()) == [(k, metas[k]) for k in (0, 2, 3, 1)]
    assert leader.keeps_metas
    assert leader.known([2, 5, 9, 1], {5: metas[5], 2: "not first"}) == (
        [2, 5, 1],
        [metas[2], metas[5], metas[1]],
    )
    leader.reorder({3: metas[4], 0: metas[0], 7: metas[5]})  # held keys only, newest, its metas
    assert list(leader.held_metas().items()) == [
        (2, metas[2]),
        (1, metas[1]),
        (3, metas[4]),
        (0, metas[0]),
    ]
    twin = copy.deepcopy(leader)
    assert list(twin.held_metas().items()) == list(leader.held_metas().items())
    assert twin.evict(4, frozenset()) == leader.evict(4, frozenset())


def test_a_leader_not_keeping_metas_says_so():
    leader = lru_leader(4)
    leader.insert_each([0, 1], [meta(0), meta(1)])
    assert leader.held_metas() == {0: None, 1: None} and not leader.keeps_metas
    leader.keeping_metas().insert(2, meta(2))
    assert not leader.keeps_metas  # 0 and 1 came in without theirs


def noted_run(native_shadows, requests, capacity, sampled, with_metas, experts=EXPERTS):
    """`auto` driven as vLLM's adapter drives it (misses noted, admitted at once, room made,
    inserted, the request's end): each request's hits, leader, switches and victims, and how
    many request ends found the metas kept in C."""
    extra = {"sample_blocks": 64, "sample_above": 64} if sampled else {}
    policy = make_policy(
        "auto",
        capacity,
        native=native_shadows,
        experts=experts,
        margin_rebuild=0.005,
        evidence_rebuild=0.0,
        margin=0.002,
        **extra,
    )
    log, in_c = [], 0
    for request in requests:
        keys = [k for k, _ in request]
        hits = next((i for i, k in enumerate(keys) if k not in policy), len(keys))
        reused = [(k, m) for k, m in request if k in policy]
        misses = list({k: m for k, m in request if k not in policy}.items())
        miss_keys, miss_metas = [k for k, _ in misses], [m for _, m in misses]
        policy.note_misses(miss_keys, miss_metas)
        verdicts = policy.admit_each(miss_keys, miss_metas)
        taken = [pair for pair, ok in zip(misses, verdicts, strict=True) if ok]
        room = len(policy) + len(taken) - capacity
        victims = policy.evict(room, frozenset(keys)) if room > 0 else []
        if victims is not None:
            policy.insert_each([k for k, _ in taken], [m for _, m in taken])
        metas = [m for _, m in reused] if with_metas else None
        policy.after_request([k for k, _ in taken], [k for k, _ in reused], metas)
        in_c += policy._held.metas is None
        log.append((hits, policy.leader, policy.switches, victims))
    return log, in_c


@pytest.mark.parametrize(
    "sampled,with_metas,seed,experts",
    [
        (True, False, 5, EXPERTS),
        (True, True, 6, EXPERTS),
        (False, False, 7, EXPERTS),
        (True, False, 1, ("lip", "lru")),  # flips back: resumed leaders
        (True, True, 2, ("lip", "cost_aware")),
    ],
)
def test_auto_with_metas_kept_in_c_decides_as_with_the_python_dict(
    sampled, with_metas, seed, experts
):
    """Every request's hits, leader, switch count and victims (those aside first, oldest
    first) as with Python leaders, which keep the metas in a dict, through many switches (to
    leaders rebuilt, copied and resumed)."""
    requests = sessions(seed, 600, sessions=60)
    got, in_c = noted_run(True, requests, 300, sampled, with_metas, experts)
    expected, python_in_c = noted_run(False, requests, 300, sampled, with_metas, experts)
    assert got[-1][2] >= 3 and in_c > len(requests) // 4 and python_in_c == 0
    assert got == expected


def test_a_leader_built_from_the_keys_held_hands_back_what_it_left_out_once():
    """Built from a dict of held keys (`keys` None), a leader keeps those its expert holds, in
    the dict's order with its metas, and `left_out` gives the others' items, in order, once
    (what `held_aside` sets aside without looking each held key up again)."""
    from hkv.policies.leader import held_aside

    shadows = native.shadows(["lru"], 4)
    shadows.replay(native.key_ids([1, 2, 3]), [0, 16, 32], [16] * 3, [0.0] * 3)
    held = {9: meta(9), 3: meta(3), 7: meta(7), 1: meta(1)}
    c = native.leader(shadows, None, held)
    assert list(c.held().items()) == [(3, held[3]), (1, held[1])]  # 2: not held, removed
    assert list(c.left_out().items()) == [(9, held[9]), (7, held[7])]
    assert c.left_out() is None and native.leader(native.shadows(["lru"], 4), {}).left_out() is None
    leader = NativeLeader("lru", 4, native.leader(shadows.cloned(0), None, held), shadows=shadows)
    assert list(held_aside(leader, held)) == [9, 7]


def test_a_key_refused_for_anothers_id_stays_aside_when_wanted_again():
    """The leader in C refuses a key whose id another resident key has: `auto` keeps it aside
    (the metas a dict again, in the order they came), and when a request reuses it the leader
    refuses it again and it stays aside; once it is evicted the leader keeps the metas."""
    auto = make_policy("auto", 8)
    leader = lru_leader(8)
    auto._live = leader
    auto._held.fit(leader, {}, auto._aside, True)
    first, twin = b"12345678" + b"a" * 24, b"12345678" + b"b" * 24
    auto.insert_each([first], [meta(0)])
    assert auto._held.metas is None
    auto.insert_each([twin, 5], [meta(0), meta(1)])
    assert list(auto._held.metas) == [first, twin, 5] and list(auto._aside) == [twin]
    auto.after_request([], [twin])
    assert twin in auto._aside and twin not in leader and len(auto) == 3
    assert auto.evict(1) == [twin] and auto._held.metas is None
    assert list(leader.held_metas()) == [first, 5]


# -- what a switch owes (`held.Owed`) ---------------------------------------------------------
def test_a_switch_owes_what_the_shadow_held_and_settles_it_only_while_the_shadow_still_does():
    """A key the new leader's shadow held and the tier did not is referenced as the shadow's hit
    when stored again (for `lip`: into the queue it keeps, not the one it evicts first), as long
    as the shadow still holds it; stored after the shadow let it go, it is owed no more."""
    from hkv.policies.held import Owed
    from hkv.policies.shadow import make_expert

    live = make_expert("lip", 8)
    for key in (10, 11):
        live.insert(key, meta(key))
    shadow = {1, 2, 3, 10}  # what the leader's shadow tier holds

    class Shadows:  # the shadow set, expert 0's tier `shadow`
        def unheld(self, i: int, held: dict) -> list:
            return [key for key in shadow if key not in held]

        def holding(self, i: int, keys) -> list:
            return [key for key in keys if key in shadow]

    owed = Owed()
    owed.owe(Shadows(), 0, {10: meta(10), 11: meta(11)})
    assert owed.keys == {1, 2, 3}
    shadow.discard(2)  # the shadow lets 2 go before it is stored again
    for key in (1, 2, 4):
        live.insert(key, meta(key))
    owed.settle([1, 2, 4], live)
    assert owed.keys == {3}
    assert 1 in live._warm and 2 in live._cold and 4 in live._cold  # 2, 4: new blocks, as lip has
    owed.owe(None, 0, {})  # a sampled tier's switch: its shadows list nothing, nothing is owed
    assert owed.keys == set()


@pytest.mark.parametrize(
    "label", ["lip", "lru+st2", "s3fifo", "arc", "cost_aware", "depth_lfu_static", "predictive"]
)
def test_a_native_shadow_tier_lists_and_holds_what_the_python_one_does(label):
    """`ShadowSet.unheld`, `holds` and `holding`: a native shadow tier's keys not in `held`
    (`Shadows.held_keys`, by the registry), whether it holds a key and which of many keys it
    holds, as the Python one's."""
    from hkv.policies.shadow import ShadowSet

    requests = sessions(3, 160)
    sets = [ShadowSet([label], 40, {}, native=fast, keys=True) for fast in (True, False)]
    for request in requests:
        for shadow_set in sets:
            shadow_set.replay(request)
    held = {key: None for request in requests[-3:] for key, _ in request}
    native_set, python_set = sets
    assert sorted(native_set.unheld(0, held)) == sorted(python_set.unheld(0, held)) != []
    every = sorted({key for request in requests for key, _ in request})
    holding = native_set.holding(0, every)  # one C call, the keys in the order given
    assert holding == python_set.holding(0, every) == [k for k in every if native_set.holds(0, k)]
    assert holding != [] and len(holding) < len(every)


def test_an_auto_copied_while_a_switch_is_owed_decides_as_the_original():
    """`copy.deepcopy` of an `auto` whose last switch still owes blocks (its shadows in C are
    copied into Python ones): the copy reads what it owes through its own shadows and decides
    as the original from there on."""
    from hkv.policies.tier import VllmTier

    requests = sessions(5, 400)
    policy = make_policy("auto", 60)
    tier = VllmTier(policy, refuses=False)
    at = 0
    while not (policy.switches and policy._owed.keys):
        tier.store(requests[at])
        at += 1
    assert policy._shadows.native
    twin = copy.deepcopy(policy)
    twin_tier = VllmTier(twin, refuses=False)
    later = requests[at : at + 150]
    assert [tier.store(r) for r in later] == [twin_tier.store(r) for r in later]
    assert twin.switches == policy.switches > 1 and twin._owed.keys == policy._owed.keys


@pytest.mark.parametrize("seed", range(4))
def test_auto_owes_and_decides_alike_with_native_or_python_shadows(seed):
    """What each switch owes, request by request, and every hit, with `predictive` among the
    experts (its resident keys listed in C as in Python)."""
    from hkv.policies.tier import VllmTier

    requests = sessions(seed, 400)
    runs = []
    for fast in (True, False):
        policy = make_policy("auto", 60, experts=["lip", "predictive", "lru"], native=fast)
        tier = VllmTier(policy, refuses=False)
        runs.append([(tier.store(r), sorted(policy._owed.keys)) for r in requests])
    assert runs[0] == runs[1] and any(owed for _, owed in runs[0])


@pytest.mark.parametrize(
    ("seed", "capacity", "experts"), [(0, 30, ["lru", "cost_aware"]), (7, 60, None)]
)
def test_owed_blocks_settle_alike_inserted_in_one_call_or_one_by_one(seed, capacity, experts):
    """vLLM 0.26-0.32's adapter hands a request's inserts to `auto` in one `insert_each`; 0.33
    inserts each block with its request. What a switch owes is settled alike either way (the
    blocks inserted one at a time before `auto`'s next eviction or request end, tail first with
    the rest): every request stored and every debt the same. (Settled as each was inserted, the
    first case stored otherwise.)"""
    from hkv.policies.tier import VllmTier

    params = {} if experts is None else {"experts": experts}
    runs = []
    for one_by_one in (False, True):
        policy = make_policy("auto", capacity, **params)
        if one_by_one:  # as the adapter under vLLM 0.33: `insert`, key by key

            def each(keys, metas, policy=policy):
                for key, meta_ in zip(keys, metas, strict=True):
                    policy.insert(key, meta_)

            policy.insert_each = each
        tier = VllmTier(policy, refuses=False)
        runs.append([(tier.store(r), sorted(policy._owed.keys)) for r in sessions(seed, 400)])
    assert runs[0] == runs[1] and any(owed for _, owed in runs[0])
