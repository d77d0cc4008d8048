"""Cold-tier block formats and what they cost in bits: one definition for the config, the cost
model, the quantizer (`hkv.storage.quant`) and the disk tier. Torch-free."""

from __future__ import annotations

import math

from hkv.errors import HkvError

COLD_FORMATS = ("fp16", "bf16", "q8", "q6", "q4")
"""Cold-tier block formats: two lossless passthroughs and three quantized ones."""

LOSSLESS_FORMATS = ("fp16", "bf16")

CODE_BITS = {"q8": 8, "q6": 6, "q4": 4}
"""Bits of one quantized code in each lossy cold format (`hkv.storage.quant` packs them)."""

KEY_GROUP_TOKENS = 64
"""Tokens that share one key minimum and scale per channel (fewer in a shorter block)."""

COLD_FORMAT_NAMES = ("auto", *COLD_FORMATS)
"""What a caller may ask a block's cold size in: `auto` is the KV cache's own dtype."""


def cold_bits_per_value(fmt: str, block_tokens: int, head_dim: int) -> float | None:
    """Stored bits per KV value of a `block_tokens`-token block in cold format `fmt`.

    `None` for `auto` (the KV cache's own dtype). The q* formats are counted exactly as
    `hkv.storage.quant` stores them (KIVI-style): b-bit codes, plus a 16-bit minimum and scale
    per key channel per group of gcd(block_tokens, 64) tokens, plus a 16-bit minimum and scale
    per value token and head; i.e. b + 16 / group + 16 / head_dim bits (8.375 for q8 at 512
    tokens and head_dim 128).
    """
    if fmt not in COLD_FORMAT_NAMES:
        raise HkvError(f"cold format: got {fmt!r}; expected one of {', '.join(COLD_FORMAT_NAMES)}")
    if fmt == "auto":
        return None
    if fmt in LOSSLESS_FORMATS:
        return 16.0
    group = math.gcd(block_tokens, KEY_GROUP_TOKENS)
    return CODE_BITS[fmt] + 16 / group + 16 / head_dim
