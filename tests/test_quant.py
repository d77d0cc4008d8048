"""Cold-tier formats: passthrough is bit-exact, q8/q6/q4 stay within the bounds hkv states."""

from __future__ import annotations

import pytest
import torch

from hkv.errors import HkvError
from hkv.storage.layout import BlockLayout
from hkv.storage.quant import BITS, _pack, _unpack, codec, quantization_error

# Stated bounds (relative L2) for KV drawn from a standard normal with outlier key channels;
# measured values are about two thirds of these (see test_error_bounds).
BOUNDS = {
    "q8": {"key": 0.01, "value": 0.01, "attention": 0.015},
    "q6": {"key": 0.04, "value": 0.04, "attention": 0.05},
    "q4": {"key": 0.15, "value": 0.15, "attention": 0.20},
}


def kv_blocks(layout: BlockLayout, n: int = 4, seed: int = 0) -> torch.Tensor:
    """Random KV `[n, *layout.shape]` whose keys have a few large-offset outlier channels."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((n, *layout.shape), generator=gen)
    x[:, :, 0, :, :, :: max(1, layout.head_dim // 4)] += 6.0  # key outlier channels (KIVI)
    return x.to(layout.torch_dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("fmt", ["q8", "q6", "q4"])
def test_a_decoded_block_encoded_with_its_scales_gives_back_its_codes(dtype, fmt) -> None:
    """`encode(decode(p), scales=p[:, codes_bytes:]) == p`; from its own min-max stats a
    decoded block gets other codes (a rounding step further each time: the drift)."""
    layout = BlockLayout(16, 2, 64, num_layers=2, dtype=dtype)
    c = codec(layout, fmt)
    payload = c.encode(kv_blocks(layout))
    decoded = c.decode(payload)
    assert torch.equal(c.encode(decoded, scales=payload[:, c.codes_bytes :]), payload)
    if dtype == "bfloat16":
        assert not torch.equal(c.encode(decoded), payload)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_passthrough_is_bit_exact(dtype: str, fmt: str) -> None:
    layout = BlockLayout(16, 2, 64, num_layers=2, dtype=dtype)
    blocks = kv_blocks(layout)
    c = codec(layout, fmt)
    payload = c.encode(blocks)
    assert payload.dtype == torch.uint8 and payload.shape == (4, layout.nbytes)
    assert torch.equal(c.decode(payload), blocks)
    assert quantization_error(blocks, fmt, layout).max_abs_error == 0.0


def test_payload_sizes_at_minimax_dims() -> None:
    layout = BlockLayout(512, 8, 128)  # one layer of MiniMax-M2.5, a 512-token block: 2 MiB
    assert layout.nbytes == 2 * 2**20
    bits = {fmt: codec(layout, fmt).bits_per_value for fmt in BITS}
    # codes + fp16-sized minimum and scale per 64 key tokens per channel and per value token
    assert bits == {"q8": 8.375, "q6": 6.375, "q4": 4.375}
    small = BlockLayout(16, 8, 128)  # a 16-token block groups keys over its 16 tokens
    assert codec(small, "q4").bits_per_value == pytest.approx(5.125)


@pytest.mark.parametrize("bits", [4, 6, 8])
@pytest.mark.parametrize("count", [4, 6, 10, 64])
def test_pack_unpack_round_trip(bits: int, count: int) -> None:
    if bits == 4 and count % 2:
        pytest.skip("q4 payloads always hold an even number of codes")
    codes = torch.randint(0, 2**bits, (3, count), dtype=torch.uint8)
    packed = _pack(codes, bits)
    assert packed.shape[1] == -(-count * bits // 8) if bits != 6 else -(-count // 4) * 3
    assert torch.equal(_unpack(packed, bits, count), codes)


@pytest.mark.parametrize("fmt", sorted(BITS))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_every_element_within_half_a_step(fmt: str, dtype: str) -> None:
    """|x - x_hat| <= scale / 2, plus the rounding of x_hat to the block's dtype."""
    layout = BlockLayout(32, 2, 64, num_layers=2, dtype=dtype)
    blocks = kv_blocks(layout, seed=1).float()
    restored = codec(layout, fmt).decode(codec(layout, fmt).encode(blocks.to(layout.torch_dtype)))
    x, err = blocks, (restored.float() - blocks).abs()
    levels, eps = 2 ** BITS[fmt] - 1, torch.finfo(layout.torch_dtype).eps
    values = x[:, :, 1]
    value_step = (values.amax(-1, keepdim=True) - values.amin(-1, keepdim=True)) / levels
    keys = x[:, :, 0]  # per channel over the block's 32 tokens (one key group)
    key_step = (keys.amax(2, keepdim=True) - keys.amin(2, keepdim=True)) / levels
    for step, part, e in ((key_step, keys, err[:, :, 0]), (value_step, values, err[:, :, 1])):
        slack = 2 * eps * part.abs().amax() / levels + eps * part.abs()
        assert bool((e <= step / 2 * (1 + 4 * eps) + slack + 1e-6).all())


@pytest.mark.parametrize("block_tokens", [16, 64, 512])
@pytest.mark.parametrize("fmt", sorted(BITS))
def test_error_bounds(fmt: str, block_tokens: int) -> None:
    layout = BlockLayout(block_tokens, 8, 128, num_layers=1)
    error = quantization_error(kv_blocks(layout, n=2, seed=block_tokens), fmt, layout)
    bound = BOUNDS[fmt]
    assert error.key_rel_l2 < bound["key"]
    assert error.value_rel_l2 < bound["value"]
    assert error.attention_rel_l2 < bound["attention"]
    assert error.bits_per_value < BITS[fmt] + 1.2


def test_more_bits_less_error() -> None:
    layout = BlockLayout(64, 4, 64)
    blocks = kv_blocks(layout)
    errors = [quantization_error(blocks, fmt, layout).attention_rel_l2 for fmt in BITS]
    assert errors == sorted(errors)  # q8, q6, q4 in BITS order: growing error


def test_constant_groups_decode_without_nan() -> None:
    layout = BlockLayout(16, 2, 16)
    blocks = torch.full((2, *layout.shape), 1.5, dtype=torch.bfloat16)
    restored = codec(layout, "q4").decode(codec(layout, "q4").encode(blocks))
    assert torch.isfinite(restored.float()).all()
    assert (restored.float() - 1.5).abs().max() <= 0.02


def test_unknown_format_is_a_user_error() -> None:
    with pytest.raises(HkvError, match="q3.*fp16, bf16, q8, q6, q4"):
        codec(BlockLayout(16, 2, 16), "q3")


@pytest.mark.parametrize("fmt", ["fp16", "q8", "q6", "q4"])
@pytest.mark.parametrize("block_tokens", [16, 512])
def test_cost_model_counts_the_bytes_the_codec_stores(fmt, block_tokens):
    from hkv.blocks import BlockMeta
    from hkv.cost import CostModel
    from hkv.models.model_spec import ModelSpec

    spec = ModelSpec.load("minimax-m2.5")
    layout = BlockLayout.from_spec(spec, block_tokens)
    counted = CostModel(spec).block_bytes(BlockMeta(tokens=block_tokens), fmt)
    stored = codec(layout, fmt).payload_bytes
    assert 0 <= stored - counted <= 5 * 8  # the codec pads each of its 5 parts to 8 bytes
