"""HkvCache in model.generate on a CUDA device: greedy tokens identical to DynamicCache.

Run on the H200 with `python -m pytest -m gpu tests/test_gpu_transformers.py -q -s`; elsewhere
conftest.py skips every test here. Cold blocks really live in pinned host RAM here, move on
the transfer streams and are prefetched a layer ahead, so this is the path the CPU tests cannot
exercise. The model is a tiny MiniMax-M2 in bf16 with the experts' eager loop and PyTorch's flash
attention (not cuDNN's), and the test first checks that DynamicCache repeats itself, so a
difference means hkv changed a bit.
"""

from __future__ import annotations

import pytest
import torch
from generation import generate, parked_turn
from transformers import DynamicCache, MiniMaxM2ForCausalLM

from hkv.blocks import Tier
from hkv.integrations.transformers import HkvCache, HkvCacheSettings, HkvSessionStore
from hkv.tiny_model import TinyMiniMaxSettings, tiny_config

pytestmark = pytest.mark.gpu

VOCAB = 320
NUM_LAYERS = 3
# The first test (the README states these): a prompt of PROMPT_TOKENS, NEW_TOKENS greedy tokens,
# HOT_BLOCKS of BLOCK_TOKENS on the GPU for all layers together, the rest in pinned host RAM
PROMPT_TOKENS = 600
NEW_TOKENS = 48
BLOCK_TOKENS = 32
HOT_BLOCKS = 20


@pytest.fixture(scope="module", autouse=True)
def no_cudnn_attention():
    """cuDNN's SDPA plans per sequence length and may round differently from one plan to the
    next, so DynamicCache would not repeat itself; PyTorch's flash kernel does."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


@pytest.fixture(scope="module")
def model():
    tokenizer = type(
        "Tok", (), {"__len__": lambda self: VOCAB, "bos_token_id": 1, "eos_token_id": 2}
    )
    settings = TinyMiniMaxSettings(
        num_layers=NUM_LAYERS, hidden_size=256, num_attention_heads=8, num_kv_heads=2, head_dim=64
    )
    config = tiny_config(settings, tokenizer())
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    with torch.device("cuda"):
        return MiniMaxM2ForCausalLM(config).to(torch.bfloat16).eval()


def prompt(n: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, n), generator=gen).cuda()


def test_greedy_tokens_identical_with_most_kv_in_host_ram(model) -> None:
    input_ids = prompt(PROMPT_TOKENS)
    dynamic = DynamicCache(config=model.config)
    reference = generate(model, input_ids, dynamic, new_tokens=NEW_TOKENS)
    again = generate(model, input_ids, DynamicCache(config=model.config), new_tokens=NEW_TOKENS)
    assert torch.equal(reference, again), "DynamicCache itself is not deterministic here"
    settings = HkvCacheSettings(block_tokens=BLOCK_TOKENS, hot_blocks=HOT_BLOCKS, host_blocks=256)
    cache = HkvCache(model.config, settings)
    out = generate(model, input_ids, cache, new_tokens=NEW_TOKENS)
    m = cache.manager
    cold = len(m.block_ids(Tier.HOST))
    print(
        f"\n{out.shape[1] - input_ids.shape[1]} greedy tokens identical: "
        f"{torch.equal(out, reference)}; blocks on GPU {len(m.block_ids(Tier.GPU))}, "
        f"in host RAM {cold}; host->GPU {m.stats.bytes_moved['host_to_gpu'] / 1e6:.1f} MB, "
        f"prefetched a layer ahead {cache.store.prefetched} blocks; pinned host: {m.host.pinned}"
    )
    assert m.host.pinned and m.device.type == "cuda"
    assert cold > len(m.block_ids(Tier.GPU)) and cache.store.prefetched > 0
    assert torch.equal(out, reference)


def test_second_turn_restored_from_host_matches_dynamic_cache(model) -> None:
    store = HkvSessionStore(model.config, HkvCacheSettings(block_tokens=32, hot_blocks=64))
    turn1 = prompt(300, seed=1)
    cache, out1 = parked_turn(model, store, "chat", turn1, 16)
    assert not cache.manager.block_ids(Tier.GPU)
    turn2 = torch.cat([out1, prompt(20, seed=2)], dim=1)
    out2 = generate(model, turn2, store.cache_for("chat", turn2), new_tokens=16)
    assert store.last_decision["action"] == "load"
    reference = DynamicCache(config=model.config)
    ref1 = generate(model, turn1, reference, new_tokens=16)
    ref2 = generate(model, turn2, reference, new_tokens=16)
    print(f"\nturn 2 restored from host, tokens identical: {torch.equal(ref2, out2)}")
    assert torch.equal(ref1, out1) and torch.equal(ref2, out2)


@pytest.mark.parametrize("hot_blocks", [200, 40])
def test_sessions_taking_turns_match_dynamic_cache(model, hot_blocks) -> None:
    """Three conversations, two rounds of turns, the next one prefetched while one runs: with a
    pool that holds them all nothing moves; with a small one they cycle through host RAM. Every
    layer decodes from its working copy once its blocks are on the GPU. A finished turn's tail
    waits in its layer's pinned staging buffer, the same buffer every turn."""
    settings = HkvCacheSettings(block_tokens=32, hot_blocks=hot_blocks, host_blocks=256)
    store = HkvSessionStore(model.config, settings)
    ids = {s: prompt(150 + 40 * s, seed=30 + s) for s in range(3)}
    refs = {s: DynamicCache(config=model.config) for s in range(3)}
    staging = {}
    for r in range(2):
        for s in range(3):
            if r:
                ids[s] = torch.cat([ids[s], prompt(24, seed=40 + s)], dim=1)
            cache = store.cache_for(str(s), ids[s])
            store.prefetch(str((s + 1) % 3))
            out = generate(model, ids[s], cache, new_tokens=12)
            assert all(layer._work is not None for layer in cache.layers)
            store.finish_turn(str(s), cache, out)
            buffers = staging.setdefault(s, [layer._staging for layer in cache.layers])
            for layer, buffer in zip(cache.layers, buffers, strict=True):
                assert layer._staging is buffer and buffer.is_pinned()
                assert layer.tail_keys.data_ptr() == buffer.data_ptr()
            assert torch.equal(out, generate(model, ids[s], refs[s], new_tokens=12))
            ids[s] = out
    moved = store._manager.stats.bytes_moved
    print(f"\npool {hot_blocks} blocks: bytes moved {dict(moved)}")
    assert (sum(moved.values()) == 0) == (hot_blocks == 200)
