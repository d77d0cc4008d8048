"""StaticBlockGraphs on a CUDA device: the feed-forward blocks replayed from CUDA graphs give
the tokens of the eager model, with DynamicCache and with HkvCache's KV in host RAM.

Run on the H200 with `python -m pytest -m gpu tests/test_gpu_graphs.py -q -s`; elsewhere
conftest.py skips every test here. The model is a tiny MiniMax-M2 in bf16 whose experts run
transformers' `grouped_mm` (no host reads of GPU values, so they can be captured); the eager
expert loop is the refused case.
"""

from __future__ import annotations

import pytest
import torch
from generation import generate
from transformers import DynamicCache, MiniMaxM2ForCausalLM

from hkv.blocks import Tier
from hkv.errors import HkvError
from hkv.integrations.transformers import HkvCache, HkvCacheSettings, StaticBlockGraphs
from hkv.tiny_model import TinyMiniMaxSettings, tiny_config

pytestmark = pytest.mark.gpu

VOCAB = 320
PROMPT_TOKENS = 200
NEW_TOKENS = 24


@pytest.fixture(scope="module", autouse=True)
def no_cudnn_attention():
    """cuDNN's SDPA may round differently from one plan to the next (see test_gpu_transformers)."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


def tiny(experts: str):
    tokenizer = type(
        "Tok", (), {"__len__": lambda self: VOCAB, "bos_token_id": 1, "eos_token_id": 2}
    )
    settings = TinyMiniMaxSettings(
        num_layers=3, hidden_size=256, num_attention_heads=8, num_kv_heads=2, head_dim=64
    )
    config = tiny_config(settings, tokenizer())
    config._experts_implementation = experts
    torch.manual_seed(0)
    with torch.device("cuda"):
        return MiniMaxM2ForCausalLM(config).to(torch.bfloat16).eval()


@pytest.fixture(scope="module")
def model():
    return tiny("grouped_mm")


def prompt(n: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, n), generator=gen).cuda()


def test_graphed_blocks_give_the_eager_tokens_with_dynamic_and_hkv_caches(model) -> None:
    ids = prompt(PROMPT_TOKENS)
    reference = generate(model, ids, DynamicCache(config=model.config), NEW_TOKENS)
    again = generate(model, ids, DynamicCache(config=model.config), NEW_TOKENS)
    assert torch.equal(reference, again), "the eager model itself is not deterministic here"
    with StaticBlockGraphs(model, token_counts=(1, PROMPT_TOKENS)) as graphs:
        assert all("forward" in block.__dict__ for block in graphs.blocks)
        dynamic = generate(model, ids, DynamicCache(config=model.config), NEW_TOKENS)
        settings = HkvCacheSettings(block_tokens=32, hot_blocks=12, host_blocks=128)
        cache = HkvCache(model.config, settings)
        offloaded = generate(model, ids, cache, NEW_TOKENS)
    cold = len(cache.manager.block_ids(Tier.HOST))
    print(
        f"\ngraphed (1 and {PROMPT_TOKENS} tokens): DynamicCache tokens identical "
        f"{torch.equal(dynamic, reference)}, HkvCache with {cold} blocks in host RAM identical "
        f"{torch.equal(offloaded, reference)}"
    )
    assert cold > 0
    assert torch.equal(dynamic, reference) and torch.equal(offloaded, reference)
    assert all("forward" not in block.__dict__ for block in graphs.blocks)


def test_uncaptured_shapes_autograd_and_disabled_graphs_run_eagerly(model) -> None:
    block = model.model.layers[0].mlp
    x = torch.randn(1, 5, model.config.hidden_size, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        eager = block(x)
    with StaticBlockGraphs(model, token_counts=(5,)) as graphs:
        replays = []
        original = graphs._graphs[0][(1, 5, model.config.hidden_size)].graph.replay

        def counted():
            replays.append(1)
            original()

        graphs._graphs[0][(1, 5, model.config.hidden_size)].graph.replay = counted
        with torch.no_grad():
            first = block(x)
            second = block(x * 2)  # a later replay must not change a tensor already returned
            assert len(replays) == 2
            block(x[:, :4])  # 4 tokens: not captured
            graphs.enabled = False
            block(x)
            graphs.enabled = True
        with_grad = block(x)  # autograd on: eager, with a graph to backpropagate through
        with torch.inference_mode():
            inference = block(x)
    assert len(replays) == 3 and with_grad.requires_grad
    assert torch.equal(first, eager) and torch.equal(inference, eager)
    assert not torch.equal(second, first)


def test_a_block_that_reads_gpu_values_on_the_host_is_refused_by_layer() -> None:
    eager_experts = tiny("eager")
    pattern = r"layer 0's MiniMaxM2SparseMoeBlock at input \[1, 4, 256\] makes the host wait.*"
    with pytest.raises(HkvError, match=pattern + "grouped_mm") as info:
        StaticBlockGraphs(eager_experts, token_counts=(4,))
    print(f"\n{info.value}")
    assert all("forward" not in layer.mlp.__dict__ for layer in eager_experts.model.layers)
    assert torch.cuda.get_sync_debug_mode() == 0  # the caller's setting is back
    torch.randn(4, device="cuda")  # no capture was left half-way: the generator still works


def test_buffers_built_under_inference_mode_serve_calls_outside_it(model) -> None:
    ids = prompt(PROMPT_TOKENS, seed=3)
    reference = generate(model, ids, DynamicCache(config=model.config), 8)
    with torch.inference_mode():
        graphs = StaticBlockGraphs(model, token_counts=(1,))
    try:
        out = generate(model, ids, DynamicCache(config=model.config), 8)  # under no_grad
    finally:
        graphs.remove()
    assert torch.equal(out, reference)
