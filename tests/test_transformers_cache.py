"""HkvCache in model.generate: token-identical to DynamicCache with lossless cold blocks."""

from __future__ import annotations

import types

import pytest
import torch
from generation import generate, parked_turn
from transformers import DynamicCache, MiniMaxM2ForCausalLM

from hkv.blocks import Tier
from hkv.errors import HkvError
from hkv.integrations.transformers import HkvCache, HkvCacheSettings, HkvSessionStore
from hkv.integrations.transformers.kv_blocks import ALL_LAYERS
from hkv.tiny_model import TinyMiniMaxSettings, tiny_config

VOCAB = 320


@pytest.fixture(scope="module")
def model():
    """A tiny MiniMax-M2 in fp32 with random weights (no tokenizer: token ids are random)."""
    tokenizer = type(
        "Tok", (), {"__len__": lambda self: VOCAB, "bos_token_id": 1, "eos_token_id": 2}
    )
    config = tiny_config(TinyMiniMaxSettings(num_layers=2), tokenizer())
    torch.manual_seed(0)
    return MiniMaxM2ForCausalLM(config).to(torch.float32).eval()


def prompt(n: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, n), generator=gen)


SMALL = HkvCacheSettings(
    block_tokens=8, hot_blocks=7, host_blocks=64, sink_blocks=1, recent_blocks=2
)


def test_greedy_tokens_equal_dynamic_cache_with_most_blocks_cold(model) -> None:
    input_ids = prompt(70)
    reference = generate(model, input_ids, DynamicCache(config=model.config))
    cache = HkvCache(model.config, SMALL)
    out = generate(model, input_ids, cache)
    assert torch.equal(out, reference)
    m = cache.manager
    assert cache.get_seq_length() == out.shape[1] - 1
    assert len(m.block_ids(Tier.HOST)) > len(m.block_ids(Tier.GPU))  # most of the KV is cold
    assert m.stats.hits["host"] > 0 and m.stats.demoted["host"] > 0


def test_returned_kv_is_bit_identical_to_dynamic_cache(model) -> None:
    input_ids = prompt(50, seed=1)
    ours, theirs = HkvCache(model.config, SMALL), DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids, past_key_values=ours, use_cache=True)
        model(input_ids, past_key_values=theirs, use_cache=True)
    k = torch.randn(1, 2, 3, 32)
    for i in range(2):
        got = ours.layers[i].update(k, k)
        want = theirs.layers[i].update(k, k)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_second_turn_prefills_only_new_tokens_and_matches_dynamic_cache(model) -> None:
    store = HkvSessionStore(model.config, SMALL)
    turn1 = prompt(40, seed=2)
    cache = store.cache_for("chat", turn1)
    out1 = generate(model, turn1, cache, new_tokens=10)
    store.finish_turn("chat", cache, out1)
    assert store.park("chat") > 0
    assert not cache.manager.block_ids(Tier.GPU)  # the whole session is in host RAM
    turn2 = torch.cat([out1, prompt(13, seed=3)], dim=1)
    cache2 = store.cache_for("chat", turn2)
    assert cache2 is cache and store.last_decision["action"] == "load"
    layer, before = cache.layers[0], cache.layers[0].updates
    out2 = generate(model, turn2, cache2, new_tokens=10)
    prefill = layer.recent_updates[before - layer.updates]  # the turn's first update
    assert prefill == turn2.shape[1] - (out1.shape[1] - 1)

    reference_cache = DynamicCache(config=model.config)
    ref1 = generate(model, turn1, reference_cache, new_tokens=10)
    ref2 = generate(model, turn2, reference_cache, new_tokens=10)
    assert torch.equal(ref1, out1) and torch.equal(ref2, out2)


def test_cost_model_may_choose_recompute(model) -> None:
    class AlwaysRecompute:
        def decide(self, meta, tier, fmt):
            return types.SimpleNamespace(load_s=1.0, recompute_s=0.5)

    store = HkvSessionStore(model.config, SMALL, cost_model=AlwaysRecompute())
    turn1 = prompt(30, seed=4)
    cache = store.cache_for("chat", turn1)
    out1 = generate(model, turn1, cache, new_tokens=4)
    store.finish_turn("chat", cache, out1)
    store.park("chat")  # blocks still on the GPU would cost nothing to load
    cache2 = store.cache_for("chat", torch.cat([out1, prompt(5)], dim=1))
    assert cache2 is not cache and store.last_decision["action"] == "recompute"
    assert cache2.get_seq_length() == 0


def test_settings_name_the_bad_field() -> None:
    with pytest.raises(HkvError, match="hot_blocks"):
        HkvCache(2, HkvCacheSettings(hot_blocks=6, sink_blocks=1, recent_blocks=2))
    with pytest.raises(HkvError, match="block_tokens"):
        HkvCacheSettings(block_tokens=0)


def test_only_blocks_outside_the_hot_window_move_each_step(model) -> None:
    # 2 layers x (1 sink + 1 recent) pinned = 4; of the 12 other slots 3 are kept for
    # streaming, so each layer keeps a window of the 4 blocks before its recent one.
    settings = HkvCacheSettings(block_tokens=8, hot_blocks=16, sink_blocks=1, recent_blocks=1)
    cache = HkvCache(model.config, settings)
    with torch.no_grad():
        out = model(prompt(120, seed=5), past_key_values=cache, use_cache=True)  # 15 blocks
        next_id = out.logits[:, -1:].argmax(-1)
        m = cache.manager
        for _ in range(3):
            before = m.stats.hits["host"]
            next_id = model(next_id, past_key_values=cache, use_cache=True).logits.argmax(-1)
            assert m.stats.hits["host"] - before == 2 * 9  # 15 - sink - recent - window of 4
    for layer in cache.layers:
        hot = [i for i in range(15) if m.where(layer.block_key(i)) is Tier.GPU]
        assert {0, 10, 11, 12, 13, 14} <= set(hot)


def test_next_layer_is_prefetched_and_tokens_stay_identical(model) -> None:
    input_ids = prompt(90, seed=6)
    reference = generate(model, input_ids, DynamicCache(config=model.config))
    settings = HkvCacheSettings(block_tokens=8, hot_blocks=16, sink_blocks=1, recent_blocks=1)
    cache = HkvCache(model.config, settings)
    out = generate(model, input_ids, cache)
    assert torch.equal(out, reference)
    assert cache.store.prefetched > 0  # loads launched a layer ahead were used, not redone
    off = HkvCache(
        model.config,
        HkvCacheSettings(
            block_tokens=8, hot_blocks=16, sink_blocks=1, recent_blocks=1, prefetch=False
        ),
    )
    assert torch.equal(generate(model, input_ids, off), reference)
    assert off.store.prefetched == 0
    # the same blocks move either way: a prefetch replaces a load, it does not add one
    assert cache.manager.stats.hits["host"] == off.manager.stats.hits["host"]


def test_all_hot_decode_moves_nothing_and_keeps_lru_order(model) -> None:
    settings = HkvCacheSettings(block_tokens=8, hot_blocks=64, sink_blocks=1, recent_blocks=1)
    cache = HkvCache(model.config, settings)
    generate(model, prompt(60, seed=7), cache, new_tokens=12)
    m = cache.manager
    assert m.stats.hits["host"] == 0 and sum(m.stats.bytes_moved.values()) == 0
    # every step touched every block: the least recent is the oldest block of the first layer
    victims = m.policies[Tier.GPU].evict(1, set())
    assert victims == [cache.layers[0].block_key(1)]  # block 0 is a pinned sink


def test_waiting_session_is_prefetched_while_another_runs(model) -> None:
    settings = HkvCacheSettings(block_tokens=8, hot_blocks=40, host_blocks=128)
    store = HkvSessionStore(model.config, settings)
    turns = {name: prompt(30, seed=seed) for name, seed in (("a", 8), ("b", 9))}
    outs = {}
    for name, ids in turns.items():
        cache = store.cache_for(name, ids)
        outs[name] = generate(model, ids, cache, new_tokens=6)
        store.finish_turn(name, cache, outs[name])
        store.park(name)  # to host RAM now (else it would wait on the GPU)
    next_b = torch.cat([outs["b"], prompt(5, seed=11)], dim=1)
    cache_b = store.cache_for("b", next_b)  # b's turn 2 starts (its first layer loading), a waits
    manager = cache_b.manager
    assert manager.pending is not None
    launched = store.prefetch("a")  # right away: b's own load is completed, not in the way
    assert launched > 0 and manager.pending is not None
    generate(model, next_b, cache_b, new_tokens=3)
    store.finish_turn("b", cache_b, next_b)
    next_a = torch.cat([outs["a"], prompt(5, seed=10)], dim=1)
    cache = store.cache_for("a", next_a)  # the prefetch may still be in flight: no wait
    assert store.last_decision["action"] == "load"
    out = generate(model, next_a, cache, new_tokens=6)
    reference = DynamicCache(config=model.config)
    generate(model, turns["a"], reference, new_tokens=6)
    assert torch.equal(out, generate(model, next_a, reference, new_tokens=6))
    assert store.prefetch("nobody") == 0


def test_sessions_opened_before_any_ran_share_one_manager(model) -> None:
    store = HkvSessionStore(model.config, HkvCacheSettings(block_tokens=8, hot_blocks=40))
    ids = {name: prompt(20, seed=seed) for name, seed in (("a", 1), ("b", 2))}
    caches = {name: store.cache_for(name, i) for name, i in ids.items()}  # both before a run
    assert all(c.manager is None for c in caches.values())
    for name, cache in caches.items():
        out = generate(model, ids[name], cache, new_tokens=3)
        store.finish_turn(name, cache, out)
    assert caches["a"].manager is caches["b"].manager  # one GPU pool, not one per session
    assert caches["a"].manager.gpu.capacity_blocks == 40


def test_a_prefetch_leaves_the_running_session_the_room_it_still_needs(model) -> None:
    # a pool of about one and a half sessions: a prefetch into every free slot would take the
    # slots of the running session's blocks still in host RAM, and it would reload them each step
    settings = HkvCacheSettings(block_tokens=8, hot_blocks=15, host_blocks=128)
    store = HkvSessionStore(model.config, settings)
    outs = {}
    for name, seed in (("a", 8), ("b", 9)):
        ids = prompt(30, seed=seed)
        cache = store.cache_for(name, ids)
        outs[name] = generate(model, ids, cache, new_tokens=6)
        store.finish_turn(name, cache, outs[name])
        store.park(name)
    next_b = torch.cat([outs["b"], prompt(5, seed=11)], dim=1)
    cache_b = store.cache_for("b", next_b)
    manager = cache_b.manager
    assert store.prefetch("b") == 0  # the running session is not prefetched
    manager.complete_access(manager.pending)
    b_keys = set(cache_b.block_keys())
    b_away = sum(1 for k in b_keys if manager.where(k) is not Tier.GPU)
    free = manager.gpu.num_free
    launched = store.prefetch("a")
    assert 0 < launched <= free - b_away - 2 * 2  # two a layer kept for b's new blocks
    loads: dict[int, int] = {}
    launch = manager.mover.launch_loads

    def counted(blocks, slots, scratch, *starts):
        for block in blocks:
            loads[block.key] = loads.get(block.key, 0) + 1
        return launch(blocks, slots, scratch, *starts)

    manager.mover.launch_loads = counted
    out = generate(model, next_b, cache_b, new_tokens=4)
    # none of b's blocks loaded more than once (all came back at cache_for here, with room)
    assert all(n == 1 for k, n in loads.items() if k in b_keys)
    reference = DynamicCache(config=model.config)
    generate(model, prompt(30, seed=9), reference, new_tokens=6)
    assert torch.equal(out, generate(model, next_b, reference, new_tokens=4))


def test_working_copy_appends_in_place_and_matches_dynamic_cache(model) -> None:
    input_ids = prompt(70, seed=12)
    reference = generate(model, input_ids, DynamicCache(config=model.config), new_tokens=20)
    settings = HkvCacheSettings(block_tokens=8, hot_blocks=64, sink_blocks=1, recent_blocks=1)
    cache = HkvCache(model.config, settings)
    gathers = []
    gather = cache.store.gather  # every layer's gathers go through the one store
    cache.store.gather = lambda *a: gathers.append(1) or gather(*a)
    out = generate(model, input_ids, cache, new_tokens=20)
    assert torch.equal(out, reference)
    # built once per layer at its second update, then every step appended in place: 20 steps
    # crossed two block boundaries (70 + 20 tokens, blocks of 8) and sealed from the copy
    assert len(gathers) == len(cache.layers)
    for layer in cache.layers:
        assert layer._work is not None and layer.get_seq_length() == 89
        assert layer.num_blocks == 11 and all(
            cache.manager.where(k) is Tier.GPU for k in layer._keys
        )
    cache.release(demote=False)
    assert all(layer._work is None for layer in cache.layers)  # freed at the end of the turn
    assert [layer.tail_keys.shape[-2] for layer in cache.layers] == [1, 1]


def test_decode_steps_take_the_fast_path_except_where_a_block_ends(model) -> None:
    """`_fast_append` serves every step that completes no block and fits the copy; the other
    steps, and a step in a grad mode other than the copy's, take `_append_to_work`. Every
    step's K/V equals DynamicCache's, bit for bit."""
    settings = HkvCacheSettings(block_tokens=8, hot_blocks=64, sink_blocks=1, recent_blocks=1)
    ours, theirs = HkvCache(2, settings), DynamicCache(config=model.config)
    layer = ours.layers[0]
    slow = []
    append = layer._append_to_work

    def counted(keys, values):
        slow.append(layer.get_seq_length() + keys.shape[-2])
        return append(keys, values)

    layer._append_to_work = counted
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for step in range(32):
            n = 21 if step == 0 else 1
            k, v = (torch.randn(1, 2, n, 32, generator=gen) for _ in range(2))
            mode = torch.inference_mode() if step == 20 else torch.no_grad()
            with mode:
                got = ours.layers[0].update(k, v)
                want = theirs.layers[0].update(k, v)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    # tokens 22..52: blocks end at 24, 32, 40 and 48; the copy (21 tokens and a block of room)
    # grows at 30, 39 and 48; step 20 (token 41) ran under inference mode
    assert layer.get_seq_length() == 52 and layer.num_blocks == 6
    assert slow == [24, 30, 32, 39, 40, 41, 48]
    assert not layer._work.is_inference()


@pytest.mark.parametrize("prefetch", [True, False])
def test_working_copies_wait_until_the_whole_sequence_is_back(model, prefetch) -> None:
    input_ids = prompt(60, seed=13)
    reference = generate(model, input_ids, DynamicCache(config=model.config), new_tokens=12)
    settings = HkvCacheSettings(
        block_tokens=8, hot_blocks=64, sink_blocks=1, recent_blocks=1, prefetch=prefetch
    )
    cache = HkvCache(model.config, settings)
    with torch.no_grad():
        out = model(input_ids, past_key_values=cache, use_cache=True)
        next_id = out.logits[:, -1:].argmax(-1)
        tokens = [next_id]
        for step in range(11):
            if step == 4:  # a block of layer 1 goes to host RAM between two steps
                copies = [layer._work for layer in cache.layers]
                assert all(c is not None for c in copies)
                cache.manager.demote([cache.layers[1].block_key(2)])
            out = model(next_id, past_key_values=cache, use_cache=True)
            next_id = out.logits[:, -1:].argmax(-1)
            tokens.append(next_id)
            if step == 4:
                assert cache.manager.stats.hits["host"] == 1  # loaded back once
                # layer 0 ran while the block was away: it dropped its copy. Layer 1 found it
                # arriving (prefetched by layer 0), lossless: kept its own; or, without
                # prefetch, loaded it itself and had none this step
                assert cache.layers[0]._work is None
                assert (cache.layers[1]._work is copies[1]) == prefetch
            if step == 5:  # the whole sequence back: every layer has a copy again
                assert all(layer._work is not None for layer in cache.layers)
    assert torch.equal(torch.cat([input_ids, *tokens], dim=1), reference)


def test_without_working_copy_every_step_gathers(model) -> None:
    settings = HkvCacheSettings(block_tokens=8, hot_blocks=64, working_copy=False)
    cache = HkvCache(model.config, settings)
    out = generate(model, prompt(40, seed=14), cache, new_tokens=5)
    assert out.shape[1] == 45 and all(layer._work is None for layer in cache.layers)


def test_finished_sessions_stay_on_the_gpu_until_their_slots_are_wanted(model) -> None:
    # a pool of 40 blocks; each session ends with 2 layers x 4 blocks: all fit, nothing moves
    settings = HkvCacheSettings(block_tokens=8, hot_blocks=40, host_blocks=128)
    store = HkvSessionStore(model.config, settings)
    outs = {}
    for name, seed in (("a", 20), ("b", 21), ("c", 22)):
        ids = prompt(30, seed=seed)
        cache = store.cache_for(name, ids)
        outs[name] = generate(model, ids, cache, new_tokens=4)
        store.finish_turn(name, cache, outs[name])
    manager = cache.manager
    assert manager.stats.bytes_moved["gpu_to_host"] == 0
    # a small pool: a prefetch demotes the session that finished longest ago, never the next
    small = HkvSessionStore(model.config, HkvCacheSettings(block_tokens=8, hot_blocks=20))
    for name in ("a", "b", "c"):
        cache = small.cache_for(name, outs[name][:, :30])
        generate(model, outs[name][:, :30], cache, new_tokens=4)
        small.finish_turn(name, cache, outs[name])
    m = cache.manager
    on_gpu = {
        n: sum(m.where(k) is Tier.GPU for k in small._sessions[n].cache.block_keys())
        for n in ("a", "b", "c")
    }
    assert on_gpu["c"] == 8 and on_gpu["a"] < on_gpu["b"]  # LRU order of the pool's policy
    next_a = torch.cat([outs["a"], prompt(3, seed=23)], dim=1)
    cache_c = small.cache_for("c", torch.cat([outs["c"], prompt(3, seed=24)], dim=1))
    launched = small.prefetch("a")
    assert launched > 0
    a_keys = small._sessions["a"].cache.block_keys()
    assert all(m.where(k) is Tier.GPU for k in a_keys)  # b was demoted for it, c kept
    assert all(m.where(k) is Tier.GPU for k in cache_c.block_keys())
    with pytest.raises(HkvError, match="park"):
        small.park("c")  # running
    assert small.park("b") == 0  # already in host RAM
    assert small.park("a") == len(a_keys)
    del next_a


def test_lossy_cold_blocks_never_keep_a_stale_working_copy(model) -> None:
    from hkv.planning.config import HybridKVCacheConfig

    q8 = HybridKVCacheConfig(
        offload_strategy="lru", modality_configs={"text": {"quantization": "q8"}}
    )
    settings = HkvCacheSettings(
        block_tokens=8, hot_blocks=64, sink_blocks=1, recent_blocks=1, config=q8
    )
    cache = HkvCache(model.config, settings)
    with torch.no_grad():
        next_id = model(prompt(60, seed=15), past_key_values=cache, use_cache=True).logits[:, -1:]
        next_id = next_id.argmax(-1)
        model(next_id, past_key_values=cache, use_cache=True)
        copy = cache.layers[1]._work
        assert copy is not None
        key = cache.layers[1].block_key(2)
        exact = cache.manager.gpu_view(key).clone()
        cache.manager.demote([key])  # to host as q8; prefetched back (decoded) by layer 0
        model(next_id, past_key_values=cache, use_cache=True)
    layer = cache.layers[1]
    assert layer._work is not copy  # rebuilt from the decoded block, not kept from before
    b = 8
    block = layer._work[:, :, 2 * b : 3 * b].permute(0, 2, 1, 3)
    assert torch.equal(block, cache.manager.gpu_view(key)[0])
    assert not torch.equal(block, exact[0])  # q8 changed it; the copy says what the pool says


def test_a_resumed_turn_loads_every_layer_in_one_access_a_chunk_each(model) -> None:
    store = HkvSessionStore(model.config, HkvCacheSettings(block_tokens=8, hot_blocks=40))
    turn1 = prompt(50, seed=16)
    cache, out1 = parked_turn(model, store, "chat", turn1, 6)
    turn2 = torch.cat([out1, prompt(7, seed=17)], dim=1)
    assert store.cache_for("chat", turn2) is cache
    pending = cache.manager.pending
    assert pending is not None and cache.store.prefetch_for == ALL_LAYERS
    per_layer = [layer.num_blocks for layer in cache.layers]  # all parked, all loading
    assert len(pending.loads) == sum(per_layer)
    ((transfer, _),) = pending.transfers
    assert [end for end, _ in transfer.arrivals] == [per_layer[0], sum(per_layer)]
    out2 = generate(model, turn2, cache, new_tokens=6)
    assert cache.manager.pending is None  # completed by the last layer's first update
    assert cache.manager.stats.hits["host"] == sum(per_layer)  # each block loaded once
    reference = DynamicCache(config=model.config)
    generate(model, turn1, reference, new_tokens=6)
    assert torch.equal(out2, generate(model, turn2, reference, new_tokens=6))


def test_a_sequence_larger_than_the_pool_never_keeps_a_copy(model) -> None:
    # 2 layers x 15 blocks through a pool of 26: one layer's blocks are all on the GPU at times
    # (with a per-layer rule, that layer kept a copy: 1.4-1.7x DynamicCache's KV at 128K on the
    # H200), but a copy of them holds what the pool does not: the memory stays the pool's
    settings = HkvCacheSettings(block_tokens=8, hot_blocks=26, sink_blocks=1, recent_blocks=1)
    cache = HkvCache(model.config, settings)
    input_ids = prompt(120, seed=18)
    copies = []
    for layer in cache.layers:
        append = layer._append_to_work
        layer._append_to_work = lambda *a, append=append: copies.append(1) or append(*a)
    out = generate(model, input_ids, cache, new_tokens=6)
    assert not copies and all(layer._work is None for layer in cache.layers)
    assert cache.manager.stats.hits["host"] > 0  # it did stream
    assert torch.equal(out, generate(model, input_ids, DynamicCache(config=model.config), 6))


def test_blocks_still_on_the_gpu_cost_nothing_to_load(model) -> None:
    class HalfLoaded:
        def decide(self, meta, tier, fmt):
            return types.SimpleNamespace(load_s=1.0, recompute_s=0.5)

    store = HkvSessionStore(
        model.config, HkvCacheSettings(block_tokens=8, hot_blocks=40), HalfLoaded()
    )
    turn1 = prompt(40, seed=19)
    cache = store.cache_for("chat", turn1)
    out1 = generate(model, turn1, cache, new_tokens=4)
    store.finish_turn("chat", cache, out1)  # all of it stays in the pool
    assert store.cache_for("chat", torch.cat([out1, prompt(5)], dim=1)) is cache
    assert store.last_decision["action"] == "load" and store.last_decision["load_s"] == 0.0


MODES = {"inference": torch.inference_mode, "no_grad": torch.no_grad}


@pytest.mark.parametrize(
    ("forward_modes", "store_mode"),
    [
        (("inference", "inference"), "no_grad"),  # model under inference mode, store outside
        (("no_grad", "no_grad"), "inference"),  # the reverse
        (("inference", "no_grad"), "no_grad"),  # the pool born in inference mode, turn 2 not
        (("no_grad", "inference"), "inference"),
    ],
)
def test_grad_modes_may_differ_between_the_forward_and_the_store(
    model, forward_modes, store_mode
) -> None:
    """A forward under `torch.inference_mode` makes inference tensors, which nothing may
    update in place outside it: `park` outside it used to fail with PyTorch's RuntimeError.
    hkv works in the mode its pool was born in, so any mix of modes runs, token-identical."""

    def turn(ids: torch.Tensor, mode: str) -> torch.Tensor:
        with MODES[mode]():
            out = model.generate(
                ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                do_sample=False, max_new_tokens=6, eos_token_id=None, pad_token_id=0,
            )  # fmt: skip
        return out

    store = HkvSessionStore(model.config, SMALL)
    turn1 = prompt(37, seed=11)
    with MODES[store_mode]():
        cache = store.cache_for("chat", turn1)
    out1 = turn(turn1, forward_modes[0])
    with MODES[store_mode]():
        store.finish_turn("chat", cache, out1)
        assert store.park("chat") > 0
        turn2 = torch.cat([out1, prompt(9, seed=12)], dim=1)
        assert store.cache_for("chat", turn2) is cache
    assert store.last_decision["action"] == "load"
    out2 = turn(turn2, forward_modes[1])
    born_inference = forward_modes[0] == "inference"
    assert store.manager.gpu.kv.is_inference() == born_inference
    reference = DynamicCache(config=model.config)
    ref1 = generate(model, turn1, reference, new_tokens=6)
    ref2 = generate(model, turn2, reference, new_tokens=6)
    assert torch.equal(out1, ref1) and torch.equal(out2, ref2)


def test_a_reset_is_refused_where_it_would_read_the_old_sequence(model) -> None:
    """transformers' own `reset` cleared each layer's tensors but not its blocks, and the next
    sequence was assembled behind the old one's: silently other tokens."""
    cache = HkvCache(model.config, SMALL)
    generate(model, prompt(40), cache, new_tokens=4)
    with pytest.raises(HkvError, match="reset is not supported"):
        cache.reset()


def test_after_a_step_fails_part_way_the_cache_refuses_the_next(model) -> None:
    """A disk read failed in layer 0's update after it had taken the step's token in; retried
    (as the error's 'try again' invited), the step returned other KV and generation went on
    with other tokens. Now every later step says the cache is no longer consistent."""
    import errno

    cache = HkvCache(model.config, SMALL)
    input_ids = prompt(70)
    generate(model, input_ids, cache, new_tokens=2)
    manager, calls = cache.manager, []
    access = manager.access

    def failing(*args, **kwargs):
        calls.append(1)
        raise OSError(errno.EIO, "Input/output error")

    manager.access = failing
    step = torch.tensor([[5]])
    with pytest.raises(OSError), torch.no_grad():
        model(step, past_key_values=cache, use_cache=True)
    manager.access = access
    assert calls
    message = "an earlier step failed .* start again with a new"
    with pytest.raises(HkvError, match=message), torch.no_grad():
        model(step, past_key_values=cache, use_cache=True)


def test_a_cache_for_other_layers_or_settings_is_refused_in_one_line(model) -> None:
    with pytest.raises(HkvError, match="layer 1 of a cache made for 1 layers"):
        generate(model, prompt(20), HkvCache(1, SMALL), new_tokens=1)
    for bad, message in (
        (lambda: HkvCache(0, SMALL), "0 layers"),
        (lambda: HkvCache(model.config, {"block_tokens": 8}), "settings is a dict"),
        (lambda: HkvCacheSettings(config="lru"), "config: got 'lru'"),
        (lambda: HkvCache(object(), SMALL), "no num_hidden_layers"),
    ):
        with pytest.raises(HkvError, match=message):
            bad()


def test_quantized_blocks_larger_than_raw_ones_reach_disk_and_come_back(model, tmp_path) -> None:
    """q8 of a 5-token fp32 block (scales per group) outgrows the raw block: its disk slots
    and the staging of disk reads are sized for it (a disk write raised 'payload exceeds
    slot_bytes', a read then found no staging: AttributeError)."""
    from hkv.planning.config import HybridKVCacheConfig

    q8 = HybridKVCacheConfig(
        offload_strategy="lru", modality_configs={"text": {"quantization": "q8"}}
    )
    settings = HkvCacheSettings(
        block_tokens=5, hot_blocks=5, host_blocks=4, sink_blocks=1, recent_blocks=1,
        disk_blocks=64, disk_path=str(tmp_path / "kv.bin"), config=q8,
    )  # fmt: skip
    cache = HkvCache(model.config, settings)
    generate(model, prompt(40), cache, new_tokens=10)
    m = cache.manager
    assert m.stats.demoted["disk"] > 0 and m.stats.hits["disk"] > 0 and m.stats.lost == 0


@pytest.mark.parametrize("policy", ["cost_aware", "depth_lfu", "modality_aware"])
def test_a_policy_that_admits_by_value_drops_no_block_of_the_cache(model, tmp_path, policy):
    """Value-ranked policies decline a low-value block at a full host tier and the manager
    dropped it, though the disk had room; the cache cannot recompute a block, so generate
    stopped ('blocks lost'). Its manager's cold tiers now take every block they have room for
    (`cold_admission=False`) and the tokens are DynamicCache's."""
    from hkv.planning.config import HybridKVCacheConfig

    config = HybridKVCacheConfig(offload_strategy=policy)  # (fp16: the blocks own bytes)
    settings = HkvCacheSettings(
        block_tokens=8, hot_blocks=5, host_blocks=10, sink_blocks=1, recent_blocks=0,
        disk_blocks=20, disk_path=str(tmp_path / "kv.bin"), config=config, prefetch=False,
    )  # fmt: skip
    input_ids = prompt(57)
    reference = generate(model, input_ids, DynamicCache(config=model.config), new_tokens=19)
    cache = HkvCache(model.config, settings)
    assert torch.equal(generate(model, input_ids, cache, new_tokens=19), reference)
    assert cache.manager.stats.dropped == 0 and cache.manager.stats.demoted["disk"] > 0
