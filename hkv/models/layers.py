"""Layer kinds and layer groups: how each part of a model's KV cache grows with its tokens.

- full attention: K and V for every token, `2 x kv_heads x head_dim` values per token per layer;
- sliding window: the same per token, but only the last `window_tokens` tokens are kept;
- MLA (multi-head latent attention, DeepSeek): one compressed latent of `kv_lora_rank` values
  plus `qk_rope_head_dim` rotary values per token per layer, shared by all heads;
- linear (mamba / gated delta-net): a constant state per sequence, independent of its length.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from hkv.errors import HkvError

DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "fp32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "int8": 1,
    "int4": 0.5,
}
"""Bytes per element for the dtype names used by HF configs, vLLM flags and hkv."""


def dtype_bytes(dtype: str, *, field_name: str = "dtype") -> float:
    """Bytes per element of `dtype`; raises `HkvError` naming `field_name` on an unknown dtype."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        valid = ", ".join(DTYPE_BYTES)
        raise HkvError(f"{field_name}: unknown dtype {dtype!r}; use one of {valid}") from None


class LayerKind(enum.StrEnum):
    FULL = "full_attention"
    SLIDING = "sliding_attention"
    MLA = "mla"
    LINEAR = "linear"


@dataclass(frozen=True)
class LayerGroup:
    """Layers whose cache grows the same way.

    `kv_values_per_token` is the number of cached elements one token adds in one layer (0 for
    linear layers); `state_values_per_seq` the constant per-sequence state of one linear layer.
    `kv_heads` is what tensor parallelism shards (`None` for MLA, whose latent is replicated).
    """

    kind: LayerKind
    num_layers: int
    kv_values_per_token: int
    kv_heads: int | None = None
    window_tokens: int | None = None
    state_values_per_seq: int = 0

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> int:
        """Bytes one held token costs across this group's layers."""
        return int(self.num_layers * self.kv_values_per_token * kv_dtype_bytes)

    def kv_bytes_per_seq(self, tokens: int, kv_dtype_bytes: float) -> int:
        """Bytes one sequence of `tokens` tokens holds in this group (window and state applied)."""
        held = tokens if self.window_tokens is None else min(tokens, self.window_tokens)
        state = self.num_layers * self.state_values_per_seq * kv_dtype_bytes
        return int(held * self.kv_bytes_per_token(kv_dtype_bytes) + state)
