"""`NativeLeader` (hkv/policies/leader.py, hkv/policies/_native/leader.c): an expert (prefix-value,
`lru` or `lip`) running `auto`'s tier from C decides as its Python policy does, call by call, and
`auto` with it as with a Python leader."""

from __future__ import annotations

import random

import pytest

from hkv.blocks import BlockMeta, Modality
from hkv.errors import HkvError
from hkv.policies import make_policy, native
from hkv.policies.leader import LIVE_IN_C, PREFIX_EXPERTS, QUEUE_EXPERTS, NativeLeader
from hkv.policies.native import NO_BLOCKS
from hkv.policies.shadow import make_expert

pytestmark = pytest.mark.skipif(not native.built(), reason="hkv's native shadows are not built")

TOKENS = 16


def pair(label: str, capacity: int) -> tuple:
    """The Python policy of `label` and a fresh native leader of it."""
    python = make_expert(label, capacity)
    value = python.value if label == "cost_aware" else None
    leader = NativeLeader(label, capacity, native.leader(native.shadows([label], capacity), {}),
                          value)  # fmt: skip
    return python, leader


def meta(rng: random.Random, depth: int) -> BlockMeta:
    modality = rng.choice([Modality.TEXT, Modality.TEXT, Modality.VISION])
    return BlockMeta(tokens=TOKENS, position=depth * TOKENS, modality=modality)


def chain(rng: random.Random, keys: list, resident: list) -> list:
    """A request: a prefix of resident keys, then new ones, in prefix order."""
    head = resident[: rng.randint(0, len(resident))] if resident else []
    return head + [rng.choice(keys) for _ in range(rng.randint(1, 12))]


@pytest.mark.parametrize("label", sorted(LIVE_IN_C))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_native_leader_makes_its_python_policys_every_decision(label, seed):
    """Every call the tier makes (admit, insert_each, touch_all, refresh_all, after_request,
    remove, evict with a protected set, evict_chains), drawn at random, to both: the same
    answers, and the same keys held after each."""
    rng = random.Random(seed)
    capacity = 40
    python, leader = pair(label, capacity)
    keys = [rng.getrandbits(62) for _ in range(120)] + [bytes([i]) * 9 for i in range(40)]
    metas: dict = {}
    for step in range(2500):
        held = sorted(python, key=repr)
        request = chain(rng, keys, held)
        op = rng.random()
        if op < 0.3:  # a store: admission, room, inserts
            new = [k for k in dict.fromkeys(request) if k not in python]
            new_metas = [metas.setdefault(k, meta(rng, d)) for d, k in enumerate(new)]
            offers = list(zip(new, new_metas, strict=True))
            taken = [k for k, m in offers if python.admit(k, m)]
            if step % 2:  # a request's misses in one call (vLLM's adapter), else one by one
                verdicts = leader.admit_each(new, new_metas)
            else:
                verdicts = [leader.admit(k, m) for k, m in offers]
            assert taken == [k for k, v in zip(new, verdicts, strict=True) if v], step
            room = len(python) + len(taken) - capacity
            if room > 0:
                protected = frozenset(request)
                assert python.evict(room, protected) == leader.evict(room, protected), step
                if len(python) + len(taken) > capacity:
                    continue  # the eviction was refused: nothing stored
            python.insert_each(taken, [metas[k] for k in taken])
            assert leader.insert_each(taken, [metas[k] for k in taken]) == [], step
        elif op < 0.55:  # a request's end: some of its keys stored, the others reused
            held_now = [k for k in dict.fromkeys(request) if k in python]
            stored = [k for k in held_now if rng.random() < 0.4]
            reused = [k for k in held_now if k not in stored]
            python.after_request(stored, reused)
            leader.after_request(stored, reused)
        elif op < 0.7:
            python.touch_all(request)
            leader.touch_all(request)
        elif op < 0.8:
            python.refresh_all(request[::-1])
            leader.refresh_all(request[::-1])
        elif op < 0.85 and held:
            key = rng.choice(held + keys[:3])
            python.remove(key)
            leader.remove(key)
        elif op < 0.93:
            n = rng.randint(1, 6)
            protected = set(rng.sample(held, min(len(held), rng.randint(0, 30))))
            assert python.evict(n, protected) == leader.evict(n, protected), step
        else:  # vLLM 0.33's running chains: a chain gives up its deepest blocks first
            n = rng.randint(1, 6)
            protected = set(rng.sample(held, min(len(held), rng.randint(0, 20))))
            stand_in = chain_stand_in(held, protected)
            assert python.ranks_chains == leader.ranks_chains == (label == "lru"), step
            assert python.evict_chains(n, protected, stand_in) == leader.evict_chains(
                n, protected, stand_in
            ), step
        assert set(python) == set(leader) and len(python) == len(leader), step


def chain_stand_in(held: list, protected: set):
    """A `stand_in` as vLLM's adapter gives one (`Chains.stand_ins`): each held key's chain is
    the run of held keys after it (4 at most, as `held` orders them); the deepest of them not
    taken nor protected goes first, the key itself last."""
    chains = {key: held[i + 1 : i + 5] for i, key in enumerate(held)}

    def stand_in(key, taken):
        deeper = [k for k in chains.get(key, []) if k not in taken and k not in protected]
        return deeper[-1] if deeper else key

    return stand_in


def test_auto_asked_for_a_requests_misses_at_once_keeps_what_one_by_one_keeps():
    """`admit_each` where misses are noted: the leader's verdicts in one call, and the misses it
    declined kept (the latest `capacity + 64`) in the order `admit` keeps them."""
    rng = random.Random(5)
    autos = [make_policy("auto", 24, experts=("lip", "cost_aware")) for _ in range(2)]
    for auto in autos:
        auto.note_misses([], [])
        auto._switch(auto.experts.index("cost_aware"))
    keys = [rng.getrandbits(60) for _ in range(400)]
    for start in range(0, 400, 50):  # requests of 50 misses, more than the 88 kept over time
        batch = keys[start : start + 50]
        metas = [meta(rng, d) for d in range(len(batch))]
        one_by_one = [autos[0].admit(k, m) for k, m in zip(batch, metas, strict=True)]
        assert autos[1].admit_each(batch, metas) == one_by_one
        assert list(autos[0]._declined.items()) == list(autos[1]._declined.items())
        taken = [(k, m) for k, m, v in zip(batch, metas, one_by_one, strict=True) if v][-8:]
        for auto in autos:  # the tier fills: later misses are judged against what it holds
            room = len(auto) + len(taken) - 24
            if room > 0:
                auto.evict(room, frozenset(batch))
            auto.insert_each([k for k, _ in taken], [m for _, m in taken])
            for _ in range(3):  # reused: worth more than a miss seen once
                auto.touch_all(list(auto))
        assert set(autos[0]) == set(autos[1])
    assert len(autos[1]._declined) == 24 + 64 and not all(one_by_one)


def test_recent_keeps_the_latest_keys_set_and_copies_with_its_bound():
    import copy
    import pickle

    from hkv.policies.history import Recent

    recent = Recent(2)
    recent.keep([(1, "a"), (2, "b"), (1, "c"), (3, "d")])  # 1 set again keeps its place: oldest
    assert list(recent.items()) == [(2, "b"), (3, "d")]
    for twin in (copy.deepcopy(recent), pickle.loads(pickle.dumps(recent))):
        twin.keep([(4, "e")])
        assert list(twin.items()) == [(3, "d"), (4, "e")] and twin.bound == 2
    assert list(recent) == [2, 3]


def test_a_native_leaders_admit_each_names_what_was_wrong():
    _, leader = pair("cost_aware", 4)
    with pytest.raises(ValueError, match="2 keys, 1 metas"):
        leader.admit_each([1, 2], [BlockMeta(tokens=TOKENS, position=0)])
    with pytest.raises(ValueError, match="lists as long as keys"):
        leader._c.admit_each([1, 2], [0], None, None)
    for call in (leader._c.admit_metas, leader._c.insert_metas):
        with pytest.raises(ValueError, match="metas must be a list as long as keys"):
            call([1, 2], [BlockMeta(tokens=TOKENS, position=0)], None, {})
    assert len(leader) == 0  # nothing went in


def test_a_native_leader_refuses_what_a_python_policy_refuses():
    """A key already resident (KeyError) or no room (RuntimeError): nothing inserted."""
    _, leader = pair("depth_lfu", 2)
    m = BlockMeta(tokens=TOKENS, position=0)
    assert leader.insert_each([1, 2], [m, m]) == []
    with pytest.raises(KeyError):
        leader.insert_each([1], [m])
    leader.remove(2)
    with pytest.raises(KeyError):  # the same key twice in one call
        leader.insert_each([3, 3], [m, m])
    with pytest.raises(RuntimeError, match="full policy"):
        leader.insert_each([4, 5], [m, m])
    assert set(leader) == {1} and leader.evict(2, frozenset()) is None
    assert leader.evict(1, {1}) is None and leader.evict(1, frozenset()) == [1]


def test_a_key_whose_id_another_holds_is_refused_and_kept_aside_by_auto():
    """Two vLLM-style digests with one first 8 bytes are one id: the leader holds the first
    and refuses the second, which `auto` keeps outside it, evicted first."""
    _, leader = pair("depth_lfu_static", 8)
    m = BlockMeta(tokens=TOKENS, position=0)
    first, twin = b"12345678" + b"a" * 24, b"12345678" + b"b" * 24
    assert native.key_bits(first) == native.key_bits(twin)
    assert leader.insert_each([first, twin], [m, m]) == [twin]
    assert first in leader and twin not in leader and list(leader) == [first]
    leader.remove(twin)  # another key's id: nothing removed
    assert first in leader
    auto = make_policy("auto", 8)
    auto._live = leader
    auto.insert(twin, m)
    assert twin in auto and twin in auto._aside and auto.evict(1) == [twin]


def auto_run(native_shadows: bool, requests: list, capacity: int, experts: tuple) -> list:
    """A sampled `auto` of `experts` replayed per request: hits, leader, switches each."""
    from hkv.sim.replay import replay
    from hkv.sim.trace import Request, Trace

    sampling = {
        "sample_blocks": 64,
        "sample_above": 64,
        "margin_rebuild": 0.005,
        "evidence_rebuild": 0.0,
    }  # many switches
    policy = make_policy("auto", capacity, native=native_shadows, experts=experts, **sampling)
    log, leaders = [], set()
    for request in requests:
        keys = tuple(k for k, _ in request)
        trace = Trace((Request(0.0, len(keys) * 512, 1, keys),), 512)
        result = replay(trace, policy, store="per_request")
        log.append((result.block_hits, policy.leader, policy.switches))
        leaders.add(type(policy._live).__name__)
    return log, leaders


@pytest.mark.parametrize(
    "experts,seed,capacity",
    [
        (("lip", "cost_aware"), 12, 200),
        (("lru", "depth_lfu", "depth_lfu_static"), 11, 600),
        (("lip", "lru", "cost_aware", "depth_lfu"), 13, 300),
    ],
)
def test_auto_with_a_native_leader_decides_as_with_python_ones(experts, seed, capacity):
    """Switches to and from native leaders (resumed ones among them), every request's hits,
    leader and switch count as with Python shadows and leaders."""
    from tests.test_native_shadows import sessions

    requests = sessions(seed, 500, sessions=60)
    got, leaders = auto_run(True, requests, capacity, experts)
    expected, python_leaders = auto_run(False, requests, capacity, experts)
    assert "NativeLeader" in leaders and "NativeLeader" not in python_leaders
    assert got[-1][2] >= 3 and got == expected


def test_autos_history_forgets_past_its_limit_and_merges_each_request_once(monkeypatch):
    """`History`: the oldest requests go once `limit` references are kept without them; a
    request is merged into prefix order the first time a rebuild reads it, never again."""
    from hkv.policies import history as module

    calls = []
    real_merged = module.merged
    monkeypatch.setattr(module, "merged", lambda m, f: calls.append(1) or real_merged(m, f))
    kept = module.History(limit=5)
    for i in range(4):  # two references a request: a miss, and a hit found before it
        kept.remember(([10 * i + 1], [BlockMeta(16, 16)]), ([10 * i], [BlockMeta(16, 0)]))
    assert (len(kept), kept.oldest, kept.remembered) == (3, 1, 4)
    keys = [[key for key, _ in request] for request in kept.whole(2)]
    assert keys == [[20, 21], [30, 31]] and len(calls) == 2
    assert len(list(kept.whole())) == 3 and len(calls) == 3  # only request 1 was new
    assert [key for key, _ in next(kept.whole(0))] == [10, 11]  # before the oldest: the oldest
    assert [misses[0] for misses, _ in kept.kept()] == [[10, 11], [20, 21], [30, 31]]
    assert all(found == NO_BLOCKS for _, found in kept.kept())  # merged: no hits kept apart
    misses, found = ([41], [BlockMeta(16, 16)]), ([40], [BlockMeta(16, 0)])
    kept.remember(misses, found)  # kept as it came (the caller's lists) until a rebuild merges
    assert list(kept.kept())[-1] == (misses, found) and len(calls) == 3
    assert list(kept.kept())[-1][0] is misses


@pytest.mark.parametrize("label", ["arc", "cost_aware", "depth_lfu", "lip", "lru+st2"])
def test_a_rebuild_from_the_history_as_kept_is_one_from_the_merged_requests(label):
    """A switch hands `rebuilt_in_c` its history as kept (each request's misses and hits found,
    merged in C): the expert, live in C or handed to Python, is the one a Python replay of the
    merged requests leaves, with a copy of every meta (one shape, many objects: cost_aware's
    worths cached by shape), keys noted twice and hits listed out of order."""
    from hkv.policies.native import merged
    from hkv.policies.rebuild import rebuilt_in_c
    from hkv.policies.tier import VllmTier, replay_request
    from tests.test_native_shadows import columns, prefix_fields, queue_fields, sessions

    rng = random.Random(7)
    requests = sessions(6, 240)
    kept = []
    for request in requests[:160]:
        copies = [(key, BlockMeta(m.tokens, m.position, m.modality)) for key, m in request]
        to_misses = [rng.random() < 0.6 for _ in request]
        misses = [p for p, miss in zip(copies, to_misses, strict=True) if miss]
        found = [p for p, miss in zip(request, to_misses, strict=True) if not miss][::-1]
        kept.append((columns(misses + misses[:1]), columns(found)))
    capacity = 48
    python = VllmTier(make_expert(label, capacity), refuses=False)
    for misses, found in kept:
        python.store(merged(misses, found))
    rebuilt = rebuilt_in_c(label, capacity, kept, {})
    fields = prefix_fields if label in PREFIX_EXPERTS else queue_fields
    assert fields(rebuilt) == fields(python.policy)
    live = rebuilt_in_c(label, capacity, kept, {}, live=True)
    assert isinstance(live, NativeLeader) == (label in LIVE_IN_C)
    theirs, ours = VllmTier(python.policy, refuses=False), VllmTier(live, refuses=False)
    for i, request in enumerate(requests[160:]):
        assert replay_request(ours, request) == replay_request(theirs, request), i
        assert set(ours) == set(theirs), i


@pytest.mark.parametrize("thread", ["1", "0"])
@pytest.mark.parametrize("label", ["cost_aware", "depth_lfu_static", "lru", "s3fifo"])
def test_a_rebuild_begun_in_the_background_and_finished_later_is_the_one_made_at_once(
    monkeypatch, thread, label
):
    """A sampled `auto`'s switch begins its new leader's replay on the shadows' background
    thread (`rebuilt_in_c(background=True)`) while the engine goes on, and finishes it at the
    next score with the requests kept since: the policy, live in C (held to the tier's keys) or
    handed to Python, decides as the one replayed over all of them at once, whether the replay
    ran on a thread or in the caller (HKV_SHADOW_THREAD=0)."""
    from hkv.policies.rebuild import Rebuild, rebuilt_in_c
    from hkv.policies.tier import VllmTier, replay_request
    from tests.test_native_shadows import prefix_fields, queue_fields, sessions

    monkeypatch.setenv("HKV_SHADOW_THREAD", thread)
    requests, capacity = sessions(9, 260), 96
    begun = rebuilt_in_c(label, capacity, requests[:200], {}, background=True)
    assert isinstance(begun, Rebuild)
    later = begun.finished(requests[200:220])
    at_once = rebuilt_in_c(label, capacity, requests[:220], {})
    fields = prefix_fields if label in PREFIX_EXPERTS else queue_fields
    assert fields(later) == fields(at_once)
    held = {key: meta for request in requests[210:220] for key, meta in request}
    live = rebuilt_in_c(label, capacity, requests[:200], {}, live=True, background=True)
    live = live.finished(requests[200:220], held)
    made = rebuilt_in_c(label, capacity, requests[:220], {}, live=True, held=held)
    assert isinstance(live, NativeLeader) == isinstance(made, NativeLeader) == (label in LIVE_IN_C)
    ours, theirs = VllmTier(live, refuses=False), VllmTier(made, refuses=False)
    for i, request in enumerate(requests[220:]):
        assert replay_request(ours, request) == replay_request(theirs, request), i
        assert set(ours) == set(theirs), i
    with pytest.raises(HkvError, match="needs the held keys as a dict"):
        rebuilt_in_c(
            "cost_aware", capacity, requests[:20], {}, live=True, background=True
        ).finished()


@pytest.mark.parametrize("label", sorted(LIVE_IN_C))
def test_a_copied_native_leader_decides_as_the_original_and_apart_from_it(label):
    """`copy.deepcopy` of a `NativeLeader` (a full tier's `auto` copied) clones its expert in C
    (`Shadows.cloned`): from then on the copy hits and holds what the original does, and what
    one is told leaves the other as it was."""
    import copy

    from hkv.policies.tier import VllmTier, replay_request
    from tests.test_native_shadows import sessions

    capacity = 40
    shadows = native.shadows([label], capacity)
    value = make_expert(label, capacity).value if label == "cost_aware" else None
    leader = NativeLeader(label, capacity, native.leader(shadows, {}), value, shadows=shadows)
    requests = sessions(8, 180)
    ours = VllmTier(leader, refuses=False)
    for request in requests[:120]:
        replay_request(ours, request)
    twin = copy.deepcopy(leader)
    theirs = VllmTier(twin, refuses=False)
    theirs.aside = dict(ours.aside)  # the tier's own blocks aside, as a copied `auto` keeps them
    assert set(twin) == set(leader) and twin._c is not leader._c
    for i, request in enumerate(requests[120:]):
        assert replay_request(theirs, request) == replay_request(ours, request), i
        assert set(twin) == set(leader), i
    held = set(leader)
    assert twin.evict(len(held), frozenset()) is not None and not set(twin)
    assert set(leader) == held  # one told, the other not
    with pytest.raises(Exception, match="cannot be copied"):
        copy.deepcopy(pair(label, capacity)[1])  # made without its shadows


@pytest.mark.parametrize("label", sorted(QUEUE_EXPERTS))
def test_autos_first_leader_runs_in_c_once_misses_are_noted(label):
    """Inside vLLM (misses noted, nothing pinned) `auto`'s first leader, a queue expert, runs
    from C from the first request on; with Python shadows, or where no miss is noted (hkv's
    replay, which may pin), it stays the Python policy."""
    m = BlockMeta(tokens=TOKENS, position=0)
    for native_shadows, noted in ((True, True), (False, True), (True, False)):
        auto = make_policy("auto", 64, first=label, native=native_shadows)
        if noted:
            auto.note_misses([1], [m])
        auto.insert(1, m)
        assert isinstance(auto._live, NativeLeader) == (native_shadows and noted)
        admits = noted and label != "lru+st2"  # (store_threshold admits a second offer only)
        assert auto.leader == label and auto.admits_now == admits and 1 in auto


@pytest.mark.parametrize("label", sorted(LIVE_IN_C))
def test_a_leader_built_from_the_keys_held_is_the_one_built_from_the_registry(label):
    """A switch's rebuild gives its `NativeLeader` the tier's held keys (`keys` None): each
    resident id's key is the held key with that id, the others are removed, as with a registry
    of ids; `missing` names the held keys it does not hold, and `held_aside` keeps them aside
    (and, from a leader holding a key the tier does not, removes that key first)."""
    from hkv.policies.leader import held_aside
    from hkv.policies.tier import VllmTier, replay_request
    from tests.test_native_shadows import sessions

    capacity = 60
    requests = sessions(4, 200)
    built = []
    for registry in (True, False):
        shadows = native.shadows([label], capacity)
        keys = {}
        tier = VllmTier(NativeLeader(label, capacity, native.leader(shadows, {}), shadows=shadows))
        for request in requests[:150]:
            replay_request(tier, request)
            keys.update((native.key_bits(k), k) for k, _ in request)
        held = {k: m for request in requests[100:150] for k, m in request}
        held = dict(list(held.items())[::2])
        c = native.leader(shadows, keys if registry else None, held)
        built.append((sorted(c.keys(), key=repr), c.missing(held)))
        leader = NativeLeader(label, capacity, c, shadows=shadows)
        aside = held_aside(leader, held)
        assert set(aside) == set(held) - set(leader)
    assert built[0] == built[1] and built[0][0]
    extra = next(k for request in requests[150:] for k, _ in request if k not in held)
    leader.insert(extra, BlockMeta(tokens=TOKENS, position=0))
    assert held_aside(leader, held) == aside and extra not in leader


def test_a_leader_built_from_the_keys_held_takes_the_later_of_two_keys_with_one_id():
    m = BlockMeta(tokens=TOKENS, position=0)
    first, twin = b"12345678" + b"a" * 24, b"12345678" + b"b" * 24
    shadows = native.shadows(["lru"], 8)
    NativeLeader("lru", 8, native.leader(shadows, {}), shadows=shadows).insert(first, m)
    assert native.leader(shadows, None, {first: m, twin: m}).keys() == [twin]
    with pytest.raises(TypeError, match="held a dict"):
        native.leader(shadows, None, [first])


def test_an_s3fifo_leaders_eviction_that_fails_midway_keeps_every_key():
    """`s3fifo`'s eviction is no walk (blocks move between its FIFOs as it goes): where the
    protection test fails partway, the error reaches the caller and every key stays resident
    (the victims taken so far back at the small FIFO's front), none lost."""

    class FailsLate:
        def __init__(self, calls: int) -> None:
            self.calls = calls

        def __contains__(self, key) -> bool:
            self.calls -= 1
            if self.calls < 0:
                raise RuntimeError("protected: gone")
            return False

    m = BlockMeta(tokens=TOKENS, position=0)
    raised = 0
    for calls in range(5, 16):  # (the first 5: the count of candidates, before any move)
        _, leader = pair("s3fifo", 20)
        leader.insert_each(list(range(20)), [m] * 20)
        leader.touch_all(list(range(0, 20, 3)))  # promoted to the main FIFO as it evicts
        try:
            victims = leader.evict(5, FailsLate(calls))
        except RuntimeError as exc:
            assert "gone" in str(exc)
            raised += 1
            assert sorted(leader) == list(range(20)) and len(leader) == 20
            assert len(leader.evict(5, set())) == 5 and len(leader) == 15
        else:
            assert len(victims) == 5 and len(leader) == 15
    assert raised >= 5
