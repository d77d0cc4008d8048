"""Per-block cold-tier formats: lossless passthrough, and q8 / q6 / q4 quantization as in KIVI.

A block `[num_layers, 2, block_tokens, kv_heads, head_dim]` is encoded into one flat byte payload
on demotion and decoded on promotion, in batches `[n, ...]`, on whichever device holds it (the
transfer engine quantizes on the GPU, so a q4 block also crosses PCIe in a quarter of the bytes).

- `fp16` / `bf16`: passthrough. The block's own bytes, unchanged (bit-exact round trip); the name
  says "16-bit, lossless", whichever 16-bit dtype the KV cache uses.
- `q8` / `q6` / `q4`: asymmetric min-max integer codes (KIVI: Liu et al., "KIVI: A Tuning-Free
  Asymmetric 2bit Quantization for KV Cache", ICML 2024). Keys are quantized per channel (one
  minimum and scale per layer, head and channel, over groups of up to `KEY_GROUP_TOKENS` tokens:
  key outliers live in fixed channels), values per token (one per layer, token and head, over
  `head_dim`). Codes are packed: q6 four to three bytes, q4 two to a byte. Minimum and scale are
  stored in the block's dtype, the minimum rounded down and the scale up, so every element
  decodes to within half a quantization step of its value:
  `|x - x_hat| <= scale / 2` (plus the rounding of `x_hat` to the block's dtype).

Payload layout: packed codes (K then V, `[num_layers, 2, tokens, heads, head_dim]` order), key
minima, key scales, value minima, value scales; each part padded to 8 bytes.

`quantization_error` reports the relative L2 error of K, of V and of attention outputs for random
queries (what a model would see).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import torch

from hkv.errors import HkvError
from hkv.formats import CODE_BITS, COLD_FORMATS, KEY_GROUP_TOKENS, LOSSLESS_FORMATS
from hkv.storage.layout import BlockLayout

BITS = CODE_BITS  # one definition of the formats: the cost model counts these bytes too


def _pad8(nbytes: int) -> int:
    return -(-nbytes // 8) * 8


@dataclass(frozen=True)
class Codec:
    """Encoder and decoder of one cold format for one block layout (build with `codec()`)."""

    layout: BlockLayout
    fmt: str

    @property
    def lossless(self) -> bool:
        return self.fmt in LOSSLESS_FORMATS

    @property
    def key_group_tokens(self) -> int:
        return math.gcd(self.layout.block_tokens, KEY_GROUP_TOKENS)

    @functools.cached_property
    def _parts(self) -> tuple[int, ...]:
        """Byte sizes of: codes, key minima, key scales, value minima, value scales."""
        lay = self.layout
        values = lay.numel  # K and V together
        codes = _pad8(-(-values // 4) * 4 * BITS[self.fmt] // 8)
        item = lay.torch_dtype.itemsize
        key_stats = _pad8(
            lay.num_layers
            * (lay.block_tokens // self.key_group_tokens)
            * lay.kv_heads
            * lay.head_dim
            * item
        )
        value_stats = _pad8(lay.num_layers * lay.block_tokens * lay.kv_heads * item)
        return (codes, key_stats, key_stats, value_stats, value_stats)

    @property
    def payload_bytes(self) -> int:
        """Bytes of one encoded block."""
        return self.layout.nbytes if self.lossless else sum(self._parts)

    @property
    def bits_per_value(self) -> float:
        """Stored bits per KV element, scales included."""
        return 8 * self.payload_bytes / self.layout.numel

    @property
    def codes_bytes(self) -> int:
        """Bytes of a payload's packed codes; the rest (`payload[:, codes_bytes:]`, the
        minima and scales) is what `encode(..., scales=)` takes back."""
        return self._parts[0]

    def encode(self, blocks: torch.Tensor, scales: torch.Tensor | None = None) -> torch.Tensor:
        """`[n, *layout.shape]` blocks -> `[n, payload_bytes]` uint8, on the blocks' device.

        `scales` (`[n, payload_bytes - codes_bytes]` uint8: the minima and scales of payloads
        these blocks were decoded from) quantizes with them instead of the blocks' own: a
        decoded block then gets back the codes it was decoded from, so a lossy block encoded
        again keeps its first encoding's error (min-max stats of decoded values drift by a
        rounding step each time)."""
        n = blocks.shape[0]
        if self.lossless:
            return blocks.contiguous().view(n, -1).view(torch.uint8)
        lay, levels = self.layout, 2 ** BITS[self.fmt] - 1
        x = blocks.float()
        group = self.key_group_tokens
        keys = x[:, :, 0].reshape(n, lay.num_layers, -1, group, lay.kv_heads, lay.head_dim)
        if scales is None:
            k_lo, k_scale, k_codes = _quantize(keys, 3, levels, lay.torch_dtype)
            v_lo, v_scale, v_codes = _quantize(x[:, :, 1], -1, levels, lay.torch_dtype)
            stats = [t.reshape(n, -1).view(torch.uint8) for t in (k_lo, k_scale, v_lo, v_scale)]
        else:
            (k_lo, k_scale), (v_lo, v_scale) = self._stats(scales.to(blocks.device), n)
            k_codes = _codes(keys, k_lo, k_scale, levels)
            v_codes = _codes(x[:, :, 1], v_lo, v_scale, levels)
        codes = torch.stack([k_codes.reshape(v_codes.shape), v_codes], dim=2).reshape(n, -1)
        parts = [_pack(codes, BITS[self.fmt])]
        if scales is not None:
            return torch.cat([_pad_cols(parts[0], self._parts[0]), scales.to(blocks.device)], 1)
        parts += stats
        padded = [_pad_cols(p, size) for p, size in zip(parts, self._parts, strict=True)]
        return torch.cat(padded, dim=1)

    def _stats(self, scales: torch.Tensor, n: int) -> tuple[tuple[torch.Tensor, ...], ...]:
        """((key minima, key scales), (value minima, value scales)) as float32, shaped to
        broadcast over the grouped keys and the values, from a payload's stats bytes."""
        lay, dtype, group = self.layout, self.layout.torch_dtype, self.key_group_tokens
        bounds = [0]
        for size in self._parts[1:]:
            bounds.append(bounds[-1] + size)
        sections = [scales[:, a:b] for a, b in itertools.pairwise(bounds)]

        def stats(section: torch.Tensor, count: int) -> torch.Tensor:
            return section[:, : count * dtype.itemsize].contiguous().view(dtype).float()

        key_shape = (n, lay.num_layers, lay.block_tokens // group, 1, lay.kv_heads, lay.head_dim)
        v_shape = (n, lay.num_layers, lay.block_tokens, lay.kv_heads, 1)
        k_count, v_count = math.prod(key_shape[1:]), math.prod(v_shape[1:])
        keys = tuple(stats(s, k_count).view(key_shape) for s in sections[0:2])
        values = tuple(stats(s, v_count).view(v_shape) for s in sections[2:4])
        return keys, values

    def decode(self, payload: torch.Tensor) -> torch.Tensor:
        """`[n, payload_bytes]` uint8 -> `[n, *layout.shape]` in the layout's dtype."""
        n, lay = payload.shape[0], self.layout
        if self.lossless:
            return payload.contiguous().view(lay.torch_dtype).view(n, *lay.shape)
        split = self.codes_bytes
        codes = _unpack(payload[:, :split], BITS[self.fmt], lay.numel).view(n, *lay.shape).float()
        dtype, group = lay.torch_dtype, self.key_group_tokens
        (k_lo, k_scale), (v_lo, v_scale) = self._stats(payload[:, split:], n)
        k_codes = codes[:, :, 0].reshape(n, lay.num_layers, -1, group, lay.kv_heads, lay.head_dim)
        keys = (k_lo + k_codes * k_scale).reshape(
            n, lay.num_layers, lay.block_tokens, lay.kv_heads, lay.head_dim
        )
        values = v_lo + codes[:, :, 1] * v_scale
        return torch.stack([keys, values], dim=2).to(dtype)


@functools.cache
def codec(layout: BlockLayout, fmt: str) -> Codec:
    """The codec of cold format `fmt` (one of `hkv.formats.COLD_FORMATS`) for `layout`."""
    if fmt not in COLD_FORMATS:
        raise HkvError(f"cold format: got {fmt!r}; expected one of {', '.join(COLD_FORMATS)}")
    return Codec(layout, fmt)


def _quantize(
    x: torch.Tensor, dim: int, levels: int, store: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(minimum, scale) in `store` dtype and uint8 codes of `x` (float32) grouped along `dim`.

    The stored minimum is rounded down and the scale up (by one `store` epsilon before rounding
    to nearest), so `[lo, lo + levels * scale]` covers the group and no code is clipped.
    """
    eps = torch.finfo(store).eps
    lo = x.amin(dim, keepdim=True)
    hi = x.amax(dim, keepdim=True)
    lo_s = (lo - lo.abs() * eps).to(store)
    scale_s = ((hi - lo_s.float()) / levels * (1 + eps)).to(store)
    lo_f, scale_f = lo_s.float(), scale_s.float()
    safe = torch.where(scale_f > 0, scale_f, torch.ones_like(scale_f))
    codes = torch.round((x - lo_f) / safe).clamp_(0, levels).to(torch.uint8)
    return lo_s.squeeze(dim).contiguous(), scale_s.squeeze(dim).contiguous(), codes


def _codes(x: torch.Tensor, lo: torch.Tensor, scale: torch.Tensor, levels: int) -> torch.Tensor:
    """uint8 codes of `x` (float32) on the grid of minima `lo` and `scale` (broadcast)."""
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round((x - lo) / safe).clamp_(0, levels).to(torch.uint8)


def _pad_cols(part: torch.Tensor, size: int) -> torch.Tensor:
    if part.shape[1] == size:
        return part
    pad = torch.zeros((part.shape[0], size - part.shape[1]), dtype=part.dtype, device=part.device)
    return torch.cat([part, pad], dim=1)


def _pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """`[n, m]` uint8 codes below 2**bits -> `[n, ceil(m * bits / 8)]` packed bytes."""
    n = codes.shape[0]
    if bits == 8:
        return codes
    if bits == 4:
        pairs = codes.view(n, -1, 2)
        return pairs[..., 0] | (pairs[..., 1] << 4)
    if codes.shape[1] % 4:
        codes = _pad_cols(codes, -(-codes.shape[1] // 4) * 4)
    c = codes.view(n, -1, 4).to(torch.int32)
    word = c[..., 0] | (c[..., 1] << 6) | (c[..., 2] << 12) | (c[..., 3] << 18)
    return (
        torch.stack([word & 255, (word >> 8) & 255, word >> 16], dim=-1).to(torch.uint8).view(n, -1)
    )


def _unpack(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """Inverse of `_pack`: `[n, count]` uint8 codes."""
    n = packed.shape[0]
    if bits == 8:
        return packed[:, :count]
    if bits == 4:
        p = packed[:, : count // 2]
        return torch.stack([p & 15, p >> 4], dim=-1).view(n, -1)
    b = packed[:, : -(-count // 4) * 3].reshape(n, -1, 3).to(torch.int32)
    word = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16)
    codes = torch.stack([(word >> s) & 63 for s in (0, 6, 12, 18)], dim=-1)
    return codes.to(torch.uint8).view(n, -1)[:, :count]


@dataclass(frozen=True)
class QuantError:
    """How far a cold format's round trip is from the original blocks (relative L2 norms)."""

    fmt: str
    bits_per_value: float
    key_rel_l2: float
    value_rel_l2: float
    attention_rel_l2: float
    max_abs_error: float

    def to_dict(self) -> dict[str, float | str]:
        return dict(self.__dict__)


def relative_l2(reference: torch.Tensor, other: torch.Tensor) -> float:
    """`||other - reference|| / ||reference||`, computed in float64."""
    ref = reference.double()
    norm = torch.linalg.vector_norm(ref).item()
    diff = torch.linalg.vector_norm(other.double() - ref).item()
    return diff / norm if norm > 0 else diff


def attention_outputs(blocks: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Softmax attention of `queries` `[q, kv_heads, head_dim]` over each block's tokens.

    `blocks` is `[n, num_layers, 2, tokens, kv_heads, head_dim]`; returns
    `[n, num_layers, kv_heads, q, head_dim]` (float32), one query head per KV head.
    """
    keys = blocks[:, :, 0].float()
    values = blocks[:, :, 1].float()
    logits = torch.einsum("nlthd,qhd->nlhqt", keys, queries.float()) / math.sqrt(keys.shape[-1])
    return torch.einsum("nlhqt,nlthd->nlhqd", logits.softmax(dim=-1), values)


def quantization_error(
    blocks: torch.Tensor,
    fmt: str,
    layout: BlockLayout,
    *,
    restored: torch.Tensor | None = None,
    num_queries: int = 16,
    seed: int = 0,
) -> QuantError:
    """Error of `fmt` on `blocks` `[n, *layout.shape]`: encoded and decoded here unless `restored`
    (what came back from the cold tiers) is given. Queries are standard normal, seeded."""
    c = codec(layout, fmt)
    if restored is None:
        restored = c.decode(c.encode(blocks))
    generator = torch.Generator(device="cpu").manual_seed(seed)
    queries = torch.randn((num_queries, layout.kv_heads, layout.head_dim), generator=generator).to(
        blocks.device
    )
    return QuantError(
        fmt=fmt,
        bits_per_value=c.bits_per_value,
        key_rel_l2=relative_l2(blocks[:, :, 0], restored[:, :, 0]),
        value_rel_l2=relative_l2(blocks[:, :, 1], restored[:, :, 1]),
        attention_rel_l2=relative_l2(
            attention_outputs(blocks, queries), attention_outputs(restored, queries)
        ),
        max_abs_error=(blocks.float() - restored.float()).abs().max().item(),
    )
