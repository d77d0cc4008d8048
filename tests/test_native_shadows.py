"""The native shadow tiers (hkv/policies/_native, `hkv.policies.native`) make the decisions of
the Python experts in a `VllmTier`: the same requests through both, every request's hits and
the tier's size compared, and the blocks held at the end."""

from __future__ import annotations

import random
import sys

import pytest

from hkv.blocks import BlockMeta, Modality
from hkv.policies import native
from hkv.policies.predictive import MODALITY_INDEX
from hkv.policies.rebuild import HANDED_OVER
from hkv.policies.shadow import make_expert
from hkv.policies.tier import VllmTier, replay_request

pytestmark = pytest.mark.skipif(not native.built(), reason="hkv's native shadows are not built")

TOKENS = 16


def sessions(seed: int, n_requests: int, *, shared: int = 8, sessions: int = 24) -> list:
    """Multi-turn sessions behind a few shared system prompts, with one-off requests between:
    each request a list of (int key, meta) in prefix order, keys chained like vLLM's."""
    rng = random.Random(seed)
    systems = [[rng.getrandbits(62) for _ in range(rng.randint(1, shared))] for _ in range(3)]
    chats = [list(rng.choice(systems)) for _ in range(sessions)]
    requests = []
    for _ in range(n_requests):
        roll = rng.random()
        if roll < 0.15:  # a one-off behind a system prompt
            keys = list(rng.choice(systems)) + [
                rng.getrandbits(62) for _ in range(rng.randint(1, 40))
            ]
        else:
            chat = rng.choice(chats)
            chat.extend(rng.getrandbits(62) for _ in range(rng.randint(1, 12)))
            cut = len(chat) if roll < 0.9 else rng.randint(1, len(chat))  # a retry: a prefix
            keys = chat[:cut]
        requests.append(
            [(k, BlockMeta(tokens=TOKENS, position=i * TOKENS)) for i, k in enumerate(keys)]
        )
    return requests


def columns(pairs: list) -> tuple[list, list]:
    """A request's `(key, meta)` pairs as `(keys, metas)`, as `auto` passes them."""
    return [key for key, _ in pairs], [meta for _, meta in pairs]


def sampled(requests: list, rate: float) -> list:
    """Each request's blocks whose key bits fall below `rate` of the hash space (as `auto`'s
    sampled shadows see them), empty requests dropped."""
    threshold = round(rate * (1 << 64))
    out = [[p for p in r if native.key_bits(p[0]) < threshold] for r in requests]
    return [r for r in out if r]


def compare(label: str, requests: list, capacity: int) -> None:
    python = VllmTier(make_expert(label, capacity), refuses=False)
    shadow = native.shadows([label], capacity)
    value = make_expert("cost_aware", 1).value if label == "cost_aware" else None
    for i, request in enumerate(requests):
        ids = [native.key_bits(k) for k, _ in request]
        positions = [m.position for _, m in request]
        tokens = [m.tokens for _, m in request]
        worths = [value(m) for _, m in request] if value else None
        modalities = [MODALITY_INDEX[m.modality] for _, m in request]
        expected = replay_request(python, request)
        got = shadow.replay(ids, positions, tokens, worths, modalities)[0]
        assert (got, shadow.sizes()[0]) == (expected, len(python)), f"{label}: request {i}"
    seen = {k for r in requests for k, _ in r}
    held = {k for k in seen if shadow.holds(0, native.key_bits(k))}
    assert held == {k for k in seen if k in python}, label


CASES = [
    # (seed, requests, capacity, sample rate): tight and roomy tiers, full and sampled streams
    (0, 300, 64, 1.0),
    (1, 300, 256, 1.0),
    (2, 400, 1024, 1.0),
    (3, 600, 48, 0.25),
    (4, 400, 17, 1.0),
    (1, 80, 30, 1.0),  # s3fifo: S's last candidates go to M mid-eviction, M's others protected
]


@pytest.mark.parametrize("label", sorted(native.LABELS))
@pytest.mark.parametrize("seed,n,capacity,rate", CASES)
def test_native_shadow_hits_match_python(label, seed, n, capacity, rate):
    requests = sessions(seed, n)
    compare(label, sampled(requests, rate) if rate < 1 else requests, capacity)


@pytest.mark.parametrize("label", sorted(native.LABELS))
def test_native_shadow_with_repeated_keys_and_equal_positions(label):
    """A request that names a key twice, and two blocks at one position (a hybrid model's KV
    groups merged by position)."""
    rng = random.Random(9)
    requests = []
    for _ in range(200):
        keys = [rng.randrange(120) for _ in range(rng.randint(1, 20))]
        request = [
            (k, BlockMeta(tokens=TOKENS, position=(i // 2) * TOKENS)) for i, k in enumerate(keys)
        ]
        requests.append(request)
    compare(label, requests, 40)


@pytest.mark.parametrize("label", sorted(native.LABELS))
def test_native_shadow_with_ids_whose_low_bits_are_all_zero(label):
    """vLLM keys made of small block numbers as 8 big-endian bytes (the Mooncake replay's:
    `int.to_bytes(8, "big")`) give ids whose low 48 bits are zero. Every one of them used to land
    in one slot of the shadows' hash maps, which then probed through all the keys (a 4x slower
    replay of Mooncake's trace at 439 blocks); the decisions are the Python ones either way."""
    requests = [
        [(int(k).to_bytes(8, "big"), m) for k, m in request] for request in sessions(10, 300)
    ]
    numbered: dict = {}
    for request in requests:  # small block numbers, as a trace numbers its blocks
        for key, _ in request:
            numbered.setdefault(key, len(numbered).to_bytes(8, "big"))
    requests = [[(numbered[k], m) for k, m in request] for request in requests]
    assert all(native.key_bits(k) & 0xFFFFFFFFFFFF == 0 for k in numbered.values())
    compare(label, requests, 128)


def test_a_vllm_offload_keys_group_is_part_of_its_id_in_c_and_python():
    """vLLM 0.32's offload key is a block's digest and its KV-cache group (4 big-endian bytes):
    a hybrid model's groups of one block are separate blocks, so their ids differ (they used to
    be the digest's first 8 bytes alike, and a live leader in C refused all but one of them);
    group 0's id stays the digest's, and every other length of key is read as before."""
    digest = bytes(range(7, 39))
    keys = [digest + group.to_bytes(4, "big") for group in range(4)]
    ids = [native.key_bits(k) for k in keys]
    assert len(set(ids)) == 4 and ids[0] == int.from_bytes(digest[:8], "little")
    assert ext_ids(keys) == ids
    others = [digest, digest[:8], digest[:9] + b"\0\0\0\1", b"ab", digest + b"\0\0\0\0\1"]
    assert [native.key_bits(k) for k in others[:2]] == [ids[0]] * 2
    assert ext_ids(others) == [native.key_bits(k) for k in others]


def ext_ids(keys: list) -> list[int]:
    """The ids the C extension gives `keys`."""
    from hkv.policies import _shadows

    return list(_shadows.key_ids(keys))


def auto_log(native_shadows: bool, requests: list, capacity: int, sampled: bool = True) -> list:
    """`auto` (sampled unless `sampled` is false) replayed per request: each request's hits,
    leader and switches."""
    from hkv.policies import make_policy
    from hkv.sim.replay import replay
    from hkv.sim.trace import Request, Trace

    block = 512
    sampling = {"sample_blocks": 64, "sample_above": 64} if sampled else {}
    policy = make_policy("auto", capacity, native=native_shadows, **sampling)
    log = []
    for request in requests:
        keys = tuple(k for k, _ in request)
        trace = Trace((Request(0.0, len(keys) * block, 1, keys),), block)
        result = replay(trace, policy, store="per_request")
        log.append((result.block_hits, policy.leader, policy.switches, policy.scores()))
    return log


@pytest.mark.parametrize("seed,capacity", [(5, 256), (6, 700)])
def test_a_sampled_auto_decides_alike_with_native_or_python_shadows(seed, capacity):
    requests = sessions(seed, 500, sessions=60)
    assert auto_log(True, requests, capacity) == auto_log(False, requests, capacity)


def test_a_full_tier_auto_whose_key_registry_is_pruned_decides_as_with_python_shadows(
    monkeypatch,
):
    """A full tier's native shadows keep each id's key and meta for a switch (`copied`) and,
    past a bound, forget those no shadow names: with the bound's floor lowered so that pruning
    happens on a small run, `auto` still switches to and decides as with Python shadows."""
    from hkv.policies import shadow

    monkeypatch.setattr(shadow, "PRUNE_FLOOR", 64)
    requests = sessions(7, 500, sessions=60)
    pruned = []
    prune = shadow.ShadowSet._prune

    def counting(self, named):
        pruned.append(self._native.registry_size())
        prune(self, named)

    monkeypatch.setattr(shadow.ShadowSet, "_prune", counting)
    native_log = auto_log(True, requests, 96, sampled=False)
    assert len(pruned) >= 2 and native_log[-1][2] >= 1  # pruned, and switched
    assert native_log == auto_log(False, requests, 96, sampled=False)


def varied_metas(seed: int, n_requests: int, keys: int, *, modal: bool = False) -> list:
    """Requests whose metas vary: several block sizes (0 and 1 token among them), positions
    not multiples of them, positions that stay or step back inside a request (new epochs of the
    prefix-value experts), and keys met again at other positions (a resident block keeps the
    meta it was stored with)."""
    rng = random.Random(seed)
    sizes = rng.choice([(16,), (1, 16, 64), (0, 3, 7)])
    requests = []
    for _ in range(n_requests):
        position = rng.randint(0, 3) * 16
        request, modality = [], Modality.TEXT
        for _ in range(rng.randint(1, rng.choice((5, 20, 60)))):
            roll = rng.random()
            if roll < 0.1:
                position = max(0, position - rng.randint(0, 40))
            elif roll >= 0.3:
                position += rng.randint(1, 50)
            meta = BlockMeta(tokens=rng.choice(sizes), position=position)
            if modal:  # (each modality in runs, as a request's image or audio spans are)
                modality = rng.choice(list(Modality)) if rng.random() < 0.2 else modality
                meta = BlockMeta(meta.tokens, meta.position, modality)
            request.append((rng.randrange(keys), meta))
        requests.append(request)
    return requests


@pytest.mark.parametrize("label", sorted(native.LABELS))
@pytest.mark.parametrize(
    "seed,keys,capacity",
    [(0, 40, 1), (1, 40, 5), (2, 150, 13), (3, 600, 40), (4, 150, 100), (5, 10, 3)],
)
def test_native_shadow_with_varied_metas(label, seed, keys, capacity):
    compare(label, varied_metas(seed, 250, keys), capacity)


@pytest.mark.parametrize(("seed", "keys", "capacity"), [(0, 150, 13), (1, 600, 40), (2, 80, 5)])
def test_the_native_learned_expert_reads_each_blocks_modality(seed, keys, capacity):
    """`predictive` files a reference by its block's modality: with text, vision and audio
    blocks mixed, the native shadow still hits what the Python one hits, request by request."""
    requests = varied_metas(seed, 400, keys, modal=True)
    assert len({m.modality for r in requests for _, m in r}) == 3
    compare("predictive", requests, capacity)


def test_native_sample_of_a_request_is_the_python_one():
    """`native.sampled` (C) keeps the keys `key_bits` puts below the threshold and their metas,
    in order, for every kind of key: vLLM digests, short bytes, ints of any sign and size, other
    hashables."""
    rng = random.Random(7)
    keys = [rng.randbytes(32) for _ in range(300)] + [b"", b"ab", rng.randbytes(7)]
    keys += [rng.getrandbits(80) - (1 << 79) for _ in range(300)] + [0, -1, True]
    keys += [("session", i) for i in range(100)] + ["a string key"]
    metas = [BlockMeta(tokens=TOKENS, position=i) for i in range(len(keys))]
    for rate in (0.0, 0.01, 0.3, 0.999):
        threshold = round(rate * (1 << 64))
        kept = [i for i, key in enumerate(keys) if native.key_bits(key) < threshold]
        expected = ([keys[i] for i in kept], [metas[i] for i in kept])
        assert native.sampled((keys, metas), threshold) == expected
        assert native.sampled((tuple(keys), tuple(metas)), threshold) == expected
    assert 0 < len(native.sampled((keys, metas), 1 << 63)[0]) < len(keys)
    with pytest.raises(TypeError, match=r"expected \(keys, metas\)"):
        native.sampled([(b"a pair", metas[0])], 1 << 63)
    with pytest.raises(ValueError, match="keys and metas of different lengths"):
        native.sampled((keys, metas[:-1]), 1 << 63)


def prefix_fields(policy) -> dict:
    """What a prefix-value policy decides by, keys as they are (heap: its live items)."""
    entries = policy._entries
    live = sorted(
        item for item in [*policy._heap, *policy._parked] if entries.get(item[2]) is not None
        and entries[item[2]].seq == item[1]
    )  # fmt: skip
    fields = {
        "entries": {k: (e.seq, e.priority, e.meta) for k, e in entries.items()},
        "heap": live,
        "counts": policy._counts,
        "pending": {k: priority for k, (_, priority) in policy._pending.items()},
    }
    names = ("_seq", "inflation", "_epoch_inflation", "_chain_cap", "_refs_until_halving")
    fields |= {name: getattr(policy, name) for name in (*names, "_last_position", "_one_request")}
    if policy.bypass:  # only `_lowest_evictable` reads the epoch's keys
        fields["epoch"] = policy._epoch_keys
    return fields


def queue_fields(policy) -> dict:
    """What a queue expert decides by: its queues in order (`lru+st2`'s tracker, `arc`'s
    ghosts and target, `s3fifo`'s deques, ghosts and hit counters)."""
    if hasattr(policy, "inner"):  # lru+st2
        return {"counts": list(policy._counts.items()), **queue_fields(policy.inner)}
    if policy.name == "s3fifo":
        names = ("_small", "_main", "_ghost")
        return {n: list(getattr(policy, n)) for n in names} | {"state": policy._state}
    fields = {f"queue {i}": list(queue.items()) for i, queue in enumerate(policy._queues)}
    if policy.name == "arc":
        fields |= {"b1": list(policy._b1), "b2": list(policy._b2)}
        fields["target"] = policy.target_t1_blocks
    return fields


def predictive_fields(policy) -> dict:
    """What the learned expert decides by: its queues, its history (a logged reference's
    bucket, and whether it is its key's latest record: the same object), its labels since the
    last rebuild, its tables and its per-request state."""

    def logged(records):
        return [(r[0], r[1], r[3], policy._seen.get(r[3]) is r) for r in records]

    fields = {f"queue {i}": list(queue.items()) for i, queue in enumerate(policy._queues)}
    fields |= {
        "seen": {key: tuple(record) for key, record in policy._seen.items()},
        "log": logged(policy._log),
        "expiring": logged(policy._expiring),
        "kept": logged(policy._kept),
        "pending": policy._pending,
        "tables": [t.tolist() for t in (policy._pos, policy._num, policy._p, policy._trusted)],
        "coarse": [policy._coarse_pos.tolist(), policy._coarse_num.tolist()],
        "at": [policy._friendly_at, policy._declined_at],
    }
    names = ("_clock", "_labels", "_halved_at", "_log_at", "_drop_at", "_expiring_at",
             "_request_last", "_extends", "_declining", "_labelled", "_returned")  # fmt: skip
    return fields | {name: getattr(policy, name) for name in names}


def fields_of(label: str):
    """What expert `label`'s policy decides by (`prefix_fields`, `queue_fields`, ...)."""
    if label == "predictive":
        return predictive_fields
    prefix = ("cost_aware", "depth_lfu", "depth_lfu_static")
    return prefix_fields if label in prefix else queue_fields


@pytest.mark.parametrize("label", sorted(native.LABELS))
@pytest.mark.parametrize(("seed", "n", "capacity"), [(0, 200, 64), (1, 300, 17), (2, 700, 40)])
def test_a_native_shadow_handed_to_python_is_its_python_shadow(label, seed, n, capacity):
    """A native shadow's state handed to a fresh Python policy (`shadow.handed_over`, what a
    full tier's switch takes) is the Python shadow's after the same requests, field by field,
    and the two go on deciding alike."""
    from hkv.policies.shadow import handed_over

    requests = sessions(seed, n)
    cut = 2 * n // 3
    python = VllmTier(make_expert(label, capacity), refuses=False)
    shadow = native.shadows([label], capacity)
    value = make_expert("cost_aware", 1).value if label == "cost_aware" else None
    keys, metas = {}, {}
    for request in requests[:cut]:
        ids = [native.key_bits(k) for k, _ in request]
        keys.update(zip(ids, [k for k, _ in request], strict=True))
        metas.update(zip(ids, [m for _, m in request], strict=True))
        worths = [value(m) for _, m in request] if value else None
        shadow.replay(ids, [m.position for _, m in request], [m.tokens for _, m in request], worths)
        python.store(request)
    policy = make_expert(label, capacity)
    handed_over(policy, shadow, 0, keys, metas)
    fields = fields_of(label)
    assert fields(policy) == fields(python.policy)
    python, native_tier = VllmTier(python.policy, refuses=False), VllmTier(policy, refuses=False)
    for i, request in enumerate(requests[cut:]):
        assert replay_request(native_tier, request) == replay_request(python, request), i
        assert set(native_tier) == set(python), i


@pytest.mark.parametrize("label", sorted(HANDED_OVER))
@pytest.mark.parametrize(("seed", "n", "capacity"), [(0, 200, 64), (1, 300, 17), (2, 150, 512)])
def test_an_expert_rebuilt_in_c_is_the_python_one(label, seed, n, capacity):
    """`auto`'s switch to a prefix-value, recency or queue expert replays its history in C
    (`rebuilt_in_c`) and hands the state to the Python policy: every field a decision reads is
    what the Python replay leaves, and the two go on deciding alike."""
    from hkv.policies.rebuild import rebuilt_in_c

    requests = sessions(seed, n)
    cut = 2 * n // 3
    python = VllmTier(make_expert(label, capacity), refuses=False)
    for request in requests[:cut]:
        python.store(request)
    rebuilt = rebuilt_in_c(label, capacity, requests[:cut], {})
    prefix = ("cost_aware", "depth_lfu", "depth_lfu_static")
    fields = prefix_fields if label in prefix else queue_fields
    assert fields(rebuilt) == fields(python.policy)
    # each as `auto` takes it: the policy alone (the replay tier's blocks aside stay behind)
    python, native = VllmTier(python.policy, refuses=False), VllmTier(rebuilt, refuses=False)
    for i, request in enumerate(requests[cut:]):
        assert replay_request(native, request) == replay_request(python, request), i
        assert set(native) == set(python), i
    assert rebuilt_in_c("predictive", capacity, requests[:cut], {}) is None  # never handed over


def test_a_switch_holds_the_garbage_collector_off_and_gives_it_back():
    """`paused_gc` (around `auto`'s switches) restores the collector as it found it, also when
    the body raises; it never turns on a collector the caller had turned off."""
    import gc

    from hkv.policies.base import paused_gc

    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), paused_gc():
        raise ValueError("a failed rebuild")
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_rebuild_bench_times_both_ways_where_c_hands_over():
    """`bench.auto_rebuild` times an expert's rebuild from a history in Python and, for the
    experts handed over from C, in C; the results file has a row per sampled expert."""
    from bench import auto_rebuild
    from hkv.policies.auto import UNSAMPLED_ONLY
    from hkv.policies.rebuild import HANDED_OVER

    history = sessions(3, 120)
    for label in ("lip", "lru", "arc", "cost_aware"):
        python_ms = auto_rebuild.rebuild_ms(label, history, 64, native=False)
        c_ms = auto_rebuild.rebuild_ms(label, history, 64, native=True)
        assert python_ms > 0 and ((c_ms is not None) == (label in HANDED_OVER))
    from hkv.report.bench_results import load_results

    rows = load_results(["auto_rebuild_cpu.json"])["auto_rebuild_cpu.json"]["rows"]
    assert {r["expert"] for r in rows if r["c_ms"] is not None} == set(HANDED_OVER)
    assert {r["expert"] for r in rows} == set(native.LABELS) - UNSAMPLED_ONLY


def test_known_blocks_in_c_are_the_python_ones(monkeypatch):
    """`native.known` (the blocks of a request `auto` holds or declined) in C and in Python:
    the same keys and metas in the same order, the first dict's meta before the second's."""
    first = {k: BlockMeta(tokens=TOKENS, position=k) for k in range(0, 40, 2)}
    second = {k: BlockMeta(tokens=TOKENS, position=-k) for k in range(0, 60, 3)}
    keys = [5, 4, 3, 60, 6, 6, 0, 57, 1]
    in_c = native.known(keys, first, second)
    monkeypatch.setattr(native, "_shadows", None)
    assert in_c == native.known(keys, first, second)
    assert in_c[0] == [4, 3, 6, 6, 0, 57]
    assert in_c[1][2] is first[6] and in_c[1][1] is second[3]


@pytest.mark.parametrize("start", [0, 3, 9, 12])
@pytest.mark.parametrize("held", [True, False])
def test_a_requests_absent_and_resident_keys_in_c_are_the_python_ones(monkeypatch, start, held):
    """`native.note_split` (vLLM 0.26's touch: the keys to note, the resident ones) in C and in
    Python: the same keys and metas, or indices, in the same order, a repeated absent key each
    time."""
    keys = (b"a", b"b", b"c", b"d", b"b", b"e", b"f", b"c", b"g", b"h", b"a", b"i")
    chunks, pending = dict.fromkeys([b"b", b"f", b"h"]), dict.fromkeys([b"d", b"i"])
    metas = [BlockMeta(tokens=TOKENS, position=TOKENS * i) for i in range(len(keys))]
    calls = [(metas, True), (None, True), (metas, False)]  # (metas, held_metas)
    in_c = [native.note_split(keys, start, chunks, pending, m, held, w) for m, w in calls]
    monkeypatch.setattr(native, "_shadows", None)
    assert in_c == [native.note_split(keys, start, chunks, pending, m, held, w) for m, w in calls]
    absent = [i for i in (0, 2, 5, 7, 8, 10) if i >= start]
    assert in_c[1] == (absent, [b"b", b"b", b"f", b"h"] if held else None)
    assert in_c[0][0] == ([keys[i] for i in absent], [metas[i] for i in absent])
    resident = ([b"b", b"b", b"f", b"h"], [metas[i] for i in (1, 4, 6, 9)])  # text: by position
    assert in_c[0][1] == (resident if held else None)
    assert in_c[2] == (in_c[0][0], resident[0] if held else None)  # metas not asked for: keys
    assert chunks == dict.fromkeys([b"b", b"f", b"h"]) and len(pending) == 2  # neither changes


def test_note_split_refuses_too_few_metas_with_what_it_expects():
    with pytest.raises(ValueError, match="metas must be None or a list of a meta per key"):
        native.note_split([b"a", b"b"], 0, {}, {}, [BlockMeta(tokens=TOKENS)], True)


@pytest.mark.parametrize("label", ["cost_aware", "depth_lfu", "depth_lfu_static"])
def test_a_rebuild_that_keeps_only_the_held_blocks_is_one_that_removes_the_others(label):
    """`rebuilt_in_c(held=...)` (a switch of a sampled `auto`) makes no entry for a block the
    tier does not hold: the same policy as the Python replay with those blocks removed after."""
    from hkv.policies.rebuild import rebuilt_in_c

    requests = sessions(4, 240)
    capacity = 96
    python = VllmTier(make_expert(label, capacity), refuses=False)
    for request in requests:
        python.store(request)
    held = {key for key in list(python.policy)[::3]}  # a third of what the expert holds
    for key in [key for key in python.policy if key not in held]:
        python.policy.remove(key)
    rebuilt = rebuilt_in_c(label, capacity, requests, {}, held=held)
    assert set(rebuilt) == held
    assert prefix_fields(rebuilt) == prefix_fields(python.policy)


@pytest.mark.parametrize("threshold", [None, 1 << 63])
def test_a_request_end_in_one_c_call_is_the_python_steps(threshold):
    """`ShadowSet.replay_columns` (the merge of a request's misses and hits, its sample, ids,
    columns and registry of ids, in C) gives the hits, block counts, registries and worths of
    `replay(merged(...))` on sampled pairs: keys noted twice with other metas, hits among the
    misses, positions out of order and tied, bytes keys that share their first 8 bytes (one
    id: merged through a dict), equal keys that are other objects (one key: merged by id) and
    metas of every modality."""
    from hkv.policies.native import merged
    from hkv.policies.shadow import ShadowSet

    rng = random.Random(3)
    pool = [rng.randbytes(16) for _ in range(300)] + [b"same8byt" + bytes([i]) for i in range(4)]
    labels = sorted(native.LABELS)
    fused, steps = (ShadowSet(labels, 48, {}, native=True, keys=True) for _ in range(2))
    assert fused.fused
    modalities = list(Modality)
    for _ in range(400):

        def pairs(n):
            return [
                (key if rng.random() < 0.7 else bytes(bytearray(key)),
                 BlockMeta(rng.choice((16, 7)), 16 * rng.randint(0, 30), rng.choice(modalities)))
                for _ in range(n)
                for key in (rng.choice(pool),)
            ]  # fmt: skip

        misses, hits = columns(pairs(rng.randint(0, 12))), columns(pairs(rng.randint(0, 6)))
        got = fused.replay_columns(misses, hits, threshold)
        if threshold is not None:
            misses, hits = native.sampled(misses, threshold), native.sampled(hits, threshold)
        request = merged(misses, hits)
        expected = (steps.replay(request), len(request)) if request else None
        assert got == expected
    assert fused._native.registry() == steps._native.registry()
    assert fused._worths == steps._worths


def test_the_c_registry_of_ids_registers_a_block_again_only_where_its_meta_changed():
    """A request end registers each block's id with its key and meta in C (`register`) once: a
    block met again with the same meta object is not written again, another meta is; `register`
    adds ids, `registry_keep` forgets the others, and the registry holds what it keeps alive."""
    shadows = native.shadows(["lru"], 8)
    first, second = BlockMeta(16, 0), BlockMeta(16, 16)
    key, twin = bytes(bytearray(b"k" * 8)), bytes(bytearray(b"k" * 8))  # equal, two objects

    def end(key, meta, register=True):
        shadows.replay_request(([key], [meta]), ([], []), None, register, None, {}, None)

    end(key, first, register=False)
    assert shadows.registry() == ({}, {}) and shadows.registry_size() == 0
    end(key, first)
    keys, metas = shadows.registry()
    ((i, kept),) = keys.items()
    assert kept is key and metas[i] is first
    end(twin, first)  # the same meta object: not written again
    assert shadows.registry()[0][i] is key
    end(twin, second)
    keys, metas = shadows.registry()
    assert keys[i] is twin and metas[i] is second and shadows.registry_size() == 1
    meta = BlockMeta(16, 32)
    held = sys.getrefcount(meta)
    shadows.register([7], ["seven"], [meta])
    assert shadows.registry_size() == 2 and sys.getrefcount(meta) == held + 1
    shadows.registry_keep({7, 12345})
    assert shadows.registry() == ({7: "seven"}, {7: meta})
    shadows.registry_keep(set())
    assert shadows.registry() == ({}, {}) and sys.getrefcount(meta) == held
    with pytest.raises(ValueError, match="one length"):
        shadows.register([1, 2], ["a"], [meta])


def _random_trace(seed: int, count: int, longest: int, keys: int):
    """`count` requests of 1 to `longest` 512-token blocks drawn from `keys` block hashes."""
    from hkv.sim.trace import Request, Trace

    rng = random.Random(seed)
    requests = tuple(
        Request(float(i), 512 * n, 1, tuple(rng.randrange(keys) for _ in range(n)))
        for i, n in enumerate(rng.randint(1, longest) for _ in range(count))
    )
    return Trace(requests, 512)


def test_the_shadow_cost_bench_times_every_default_expert_and_all_together():
    """`bench.shadow_cost` replays a trace's requests through each default expert's native
    shadow and through all of them, and reports seconds a pass and time a block reference."""
    from bench import shadow_cost
    from hkv.policies.auto import DEFAULT_EXPERTS

    trace = _random_trace(1, 200, 30, 400)
    cell = shadow_cost.measure(trace, 0.1, shadow_cost.columns(trace), 1)
    assert list(cell["experts"]) == list(DEFAULT_EXPERTS)
    assert cell["capacity_blocks"] >= 1 and cell["block_refs"] == trace.num_block_refs
    assert cell["all_pass_s"] > 0 and all(r["pass_s"] > 0 for r in cell["experts"].values())


def test_the_shadow_cost_bench_through_vllm_gives_autos_budget_and_its_shadows_part():
    """`bench.shadow_cost --through-vllm`: vLLM's lru, hkv's lru and auto through vLLM's manager
    and auto's shadows alone on the request ends it gave them, each pass timed; the allowance
    is the gap between the two lru passes."""
    pytest.importorskip("vllm")
    from bench import shadow_cost

    trace = _random_trace(2, 120, 20, 300)
    requests = trace.requests
    row = shadow_cost.budget(trace, 0.1, 2)
    assert row["request_ends"] == len(requests) and row["block_refs"] == trace.num_block_refs
    assert set(row["pass_s_median"]) == set(shadow_cost.PASSES)
    assert all(t > 0 for t in row["pass_s_best"].values())
    median, half = row["pass_s_median"], 5e-5  # (each median rounded to 0.1 ms in the row)
    low = (median["vllm:lru"] - half) / (median["auto"] + half)
    high = (median["vllm:lru"] + half) / (median["auto"] - half)
    assert low - 0.001 <= row["auto_vs_vllm_lru_speed"] <= high + 0.001
    share = row["shadows_share_of_allowance"]
    assert share is None if row["allowance_s"] <= 0 else share > 0
    added = median["lru+shadows"] - median["lru"]
    assert abs(row["shadows_added_s"] - added) <= 3 * half + 1e-9  # three roundings
    assert 0 < median["shadows_in_pass"] < median["lru+shadows"]
    parts, calls = row["parts_s_median"], row["parts_calls"]
    assert set(parts["lru"]) == set(shadow_cost.ADAPTER_PARTS)
    assert set(parts["auto"]) == set(shadow_cost.ADAPTER_PARTS + shadow_cost.AUTO_PARTS)
    assert calls["auto"]["after_request"] == calls["auto"]["on_request_finished"] == len(requests)
    assert parts["auto"]["replay_columns"] <= parts["auto"]["after_request"]


def test_the_shadows_inside_a_pass_replay_every_request_end_as_back_to_back():
    """`shadow_cost.with_shadows`: hkv's lru through vLLM's manager, auto's recorded request ends
    replayed by fresh shadows at each request's end: every one of them, once, in order, each
    giving the hits it gives replayed back to back (the pass's own calls between them change
    only where the shadows' data sits, not what they decide)."""
    pytest.importorskip("vllm")
    from bench import shadow_cost
    from hkv.policies.auto import DEFAULT_EXPERTS
    from hkv.policies.shadow import ShadowSet

    trace = _random_trace(5, 90, 16, 200)
    requests, capacity = trace.requests, 40
    ends, context = shadow_cost.request_ends(trace, capacity)
    inside: list = []
    seconds, shadows_s = shadow_cost.with_shadows(trace, capacity, ends, context, inside)
    alone = ShadowSet(list(DEFAULT_EXPERTS), capacity, context, native=True, keys=True)
    assert inside == [alone.replay_columns(*end) for end in ends]
    assert len(inside) == len(ends) == len(requests)
    assert 0 < shadows_s < seconds


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repeats", "0"], "--repeats 0: expected a whole number of 1 or more"),
        (["--capacities", "0.02", "1.5"], "--capacities 1.5: expected a share"),
    ],
)
def test_the_shadow_cost_bench_names_a_bad_argument(argv, message, capsys):
    from bench import shadow_cost

    with pytest.raises(SystemExit):
        shadow_cost.parse(argv)
    assert message in capsys.readouterr().err


def test_a_modality_index_out_of_range_is_refused_by_either_call():
    """`predictive` files a bucket by the modality's index: one outside 0-2, from a column or
    from the index a request end is read with, is a clear error, not a write past its table."""
    shadows = native.shadows(["predictive"], 8)
    with pytest.raises(ValueError, match="modality 5; expected 0, 1 or 2"):
        shadows.replay([1], [0], [TOKENS], None, [5])
    request = ([1], [BlockMeta(tokens=TOKENS, position=0)])
    with pytest.raises(ValueError, match="modality 7; expected 0, 1 or 2"):
        shadows.replay_request(request, ([], []), None, False, None, {}, {Modality.TEXT: 7})
    assert shadows.replay([1], [0], [TOKENS], None, [0]) == [0]


@pytest.mark.parametrize("thread", ["1", "0"])
def test_a_deferred_request_end_returns_the_previous_ones_result_on_a_thread_or_inline(
    monkeypatch, thread
):
    """`replay_columns(..., deferred=True)` stores the request on a background thread (or in the
    caller with HKV_SHADOW_THREAD=0) and returns the previous deferred request's result (None
    for the first, and after a request with no block sampled), which is what the same calls
    gave at once; every other call on the shadows sees the deferred request stored; a copy made
    while one is in flight carries its result (`defer`, for Python shadows)."""
    import copy

    from hkv.policies.shadow import ShadowSet

    monkeypatch.setenv("HKV_SHADOW_THREAD", thread)
    rng = random.Random(11)
    pool = [rng.randbytes(16) for _ in range(400)]
    labels = sorted(native.LABELS - {"predictive"})
    deferred, direct = (ShadowSet(labels, 40, {}, native=True, keys=True) for _ in range(2))
    assert deferred._native.threaded() is (thread == "1")
    waiting = None
    for i in range(300):
        threshold = 0 if i % 37 == 5 else 1 << 62  # now and then nothing sampled
        misses = [(rng.choice(pool), BlockMeta(16, 16 * j)) for j in range(rng.randint(0, 30))]
        hits = [(rng.choice(pool), BlockMeta(16, 16 * j)) for j in range(rng.randint(0, 10))]
        misses, hits = columns(misses), columns(hits)
        got = deferred.replay_columns(misses, hits, threshold, deferred=True)
        assert got == waiting
        waiting = direct.replay_columns(misses, hits, threshold)
        assert deferred._native.sizes() == direct._native.sizes()  # waits for the thread
        if i == 150:
            twin = copy.deepcopy(deferred)  # Python shadows from here, the result carried
            assert twin.defer(None) == waiting and twin.defer(None) is None
    assert deferred._native.deferred() == waiting == deferred._native.deferred()  # not taken


def test_a_sampled_auto_decides_alike_with_its_shadows_on_a_thread_or_inline(monkeypatch):
    requests = sessions(8, 400, sessions=50)
    threaded = auto_log(True, requests, 300)
    monkeypatch.setenv("HKV_SHADOW_THREAD", "0")
    assert threaded == auto_log(True, requests, 300) == auto_log(False, requests, 300)
    assert threaded[-1][2] >= 1  # it switched


@pytest.mark.parametrize("where", ["beside", "inline", "one_cpu"])
def test_an_exact_tier_stores_each_request_beside_the_caller_and_decides_alike(monkeypatch, where):
    """An exact tier's C shadows read a request's hits at once and store it on the background
    thread while the caller goes on, where they run on a thread and this process may use more
    than one CPU (`parallel`), else in the caller (HKV_SHADOW_THREAD=0, or pinned to one CPU):
    each request's hits and every tier's size (read after the store) are those of shadows that
    store at once, and `auto` gets each request's hits, leader, switches and scores as with
    Python shadows."""
    import os

    from hkv.policies.shadow import ShadowSet

    if not native.built():
        pytest.skip("hkv's C extension is not built here")
    monkeypatch.setenv("HKV_SHADOW_THREAD", "0" if where == "inline" else "1")
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if where == "one_cpu" and cpus:
        os.sched_setaffinity(0, {min(cpus)})
    try:
        shadows = ShadowSet(sorted(native.LABELS), 40, {}, native=True, keys=True)
        beside = where == "beside" and len(cpus) > 1
        assert shadows._native.parallel() is beside
        monkeypatch.setenv("HKV_SHADOW_THREAD", "0")
        at_once = ShadowSet(sorted(native.LABELS), 40, {}, native=True, keys=True)
        for request in sessions(12, 300, sessions=40):
            half = len(request) // 2
            misses, hits = columns(request[half:]), columns(request[:half])
            assert shadows.replay_columns(misses, hits) == at_once.replay_columns(misses, hits)
            assert shadows._native.sizes() == at_once._native.sizes()  # waits for the store
        monkeypatch.setenv("HKV_SHADOW_THREAD", "0" if where == "inline" else "1")
        requests = sessions(13, 400, sessions=50)
        log = auto_log(True, requests, 120, sampled=False)
        assert log == auto_log(False, requests, 120, sampled=False) and log[-1][2] >= 1
    finally:
        if cpus:
            os.sched_setaffinity(0, cpus)


def test_a_sampled_auto_with_native_shadows_refuses_a_copy_with_what_to_do():
    """Its C shadows keep no key registry: a deep copy is refused with a clear error, and the
    same policy made with `native=False` copies and decides as the original."""
    import copy

    from hkv.errors import HkvError
    from hkv.policies import make_policy
    from hkv.sim.replay import replay
    from hkv.sim.trace import Request, Trace

    def run(policy, requests):
        hits = []
        for request in requests:
            keys = tuple(k for k, _ in request)
            trace = Trace((Request(0.0, len(keys) * 512, 1, keys),), 512)
            hits.append(replay(trace, policy, store="per_request").block_hits)
        return hits

    requests = sessions(9, 120, sessions=30)
    sampling = {"sample_blocks": 64, "sample_above": 64}
    native_auto = make_policy("auto", 200, **sampling)
    run(native_auto, requests[:60])
    with pytest.raises(HkvError, match="make the policy with native=False to copy it"):
        copy.deepcopy(native_auto)
    python_auto = make_policy("auto", 200, native=False, **sampling)
    run(python_auto, requests[:60])
    twin = copy.deepcopy(python_auto)
    assert run(twin, requests[60:]) == run(python_auto, requests[60:])


def test_the_c_ids_of_keys_are_key_bits():
    """The ids C gives keys (`native.key_ids`: bytes keys of any length, read in one load
    where they hold 8 bytes or more, ints and other hashables) are `native.key_bits`'s."""
    keys = [bytes(range(n, 2 * n)) for n in range(13)] + [
        b"\xff" * 40,
        0,
        7,
        -3,
        2**70,
        "k",
        (1, 2),
    ]
    assert native.key_ids(keys) == [native.key_bits(k) for k in keys]


def test_metas_read_from_their_slots_in_c_are_the_ones_getattr_reads():
    """C reads a `BlockMeta`'s fields from its slots (`native.META_SLOTS`): a request end of
    BlockMetas gives the hits, worths and registry that the same blocks with metas read
    through getattr give (a subclass's instances, which C reads that way); a class without
    such slots is not taken, and a BlockMeta with an unset field is an AttributeError naming it."""
    from hkv.policies import _shadows
    from hkv.policies.shadow import ShadowSet

    class Looked(BlockMeta):  # not exactly BlockMeta: read through getattr
        __slots__ = ()

    assert native.META_SLOTS
    rng = random.Random(5)
    pool = [rng.randbytes(16) for _ in range(200)]
    labels = sorted(native.LABELS)
    slots, looked = (ShadowSet(labels, 40, {}, native=True, keys=True) for _ in range(2))
    for _ in range(300):
        fields = [(rng.choice((16, 5)), 16 * rng.randint(0, 20), rng.choice(list(Modality)))
                  for _ in range(rng.randint(1, 12))]  # fmt: skip
        blocks = [(rng.choice(pool), f) for f in fields]
        keys = [key for key, _ in blocks]
        got = slots.replay_columns((keys, [BlockMeta(*f) for _, f in blocks]), ([], []))
        expected = looked.replay_columns((keys, [Looked(*f) for _, f in blocks]), ([], []))
        assert got == expected
    assert slots._worths == looked._worths
    (keys, metas), (other_keys, other_metas) = slots._native.registry(), looked._native.registry()
    assert keys == other_keys and len(metas) == len(keys) > 0
    assert {
        i: BlockMeta(m.tokens, m.position, m.modality, m.tier) for i, m in other_metas.items()
    } == metas

    class NoSlots:
        position = tokens = modality = tier = 0

    assert _shadows.meta_type(NoSlots) is False
    assert _shadows.meta_type(BlockMeta) is True
    unset = BlockMeta.__new__(BlockMeta)
    unset.position, unset.modality, unset.tier = 0, Modality.TEXT, BlockMeta(1).tier
    with pytest.raises(AttributeError, match="tokens"):
        ShadowSet(["lru"], 4, {}, native=True).replay_columns(([b"k" * 8], [unset]), ([], []))
