"""What a vLLM request tells hkv's policies: block positions, prefix order and modality.

Modality per block: vLLM does not pass multimodal placeholder ranges to the policy. A client
marks the token spans that are images or audio in the request's `kv_transfer_params`:

    {"prompt": ..., "kv_transfer_params": {"hkv_modalities": [[0, 576, "vision"]]}}

(`[start, end, modality]`, token offsets into the prompt, end exclusive). A block whose tokens
overlap a marked span takes that span's modality; every other block is text. vLLM's multimodal
block hashes already include the image hash, so equal images still share blocks.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

from hkv.blocks import BlockMeta, Modality, Tier

MODALITY_PARAM = "hkv_modalities"


def modality_at(spans: Sequence[Sequence[Any]] | None, start: int, end: int) -> Modality:
    """The modality of tokens `[start, end)` given a request's marked spans (text if none)."""
    for span_start, span_end, label in spans or ():
        if span_start < end and start < span_end:
            return Modality.parse(label, field=MODALITY_PARAM)
    return Modality.TEXT


def request_spans(req_context: Any) -> Any:
    """The request's marked modality spans (None when it marks none)."""
    params = getattr(req_context, "kv_transfer_params", None) or {}
    return params.get(MODALITY_PARAM)


def block_meta(key: Any, req_context: Any, block_tokens: int) -> BlockMeta:
    """A stored block's metadata from vLLM's per-request key positions (vLLM >= 0.32).

    Without a position (no context, or 0.26's) the block is `block_tokens` text tokens at an
    unknown position."""
    end = None
    if req_context is not None and hasattr(req_context, "get_offload_key_position"):
        end = req_context.get_offload_key_position(key)
    if end is None:
        return BlockMeta(tokens=block_tokens, tier=Tier.HOST)
    start = max(0, end - block_tokens, _previous_end(req_context, end))
    return BlockMeta(
        tokens=end - start,
        position=start,
        modality=modality_at(request_spans(req_context), start, end),
        tier=Tier.HOST,
    )


def span_meta(spans: Any, block_tokens: int) -> Callable[[int], BlockMeta]:
    """`index -> BlockMeta` for the full blocks of a prompt with marked modality spans."""

    def meta(index: int) -> BlockMeta:
        position = index * block_tokens
        modality = modality_at(spans, position, position + block_tokens)
        return BlockMeta(block_tokens, position, modality)

    return meta


def extend_text_metas(metas: list[BlockMeta], blocks: int, block_tokens: int) -> list[BlockMeta]:
    """Grow `metas` to the metadata of full text blocks at index 0, 1, ... `blocks - 1`: one
    shared instance per position, never mutated, so that noting a prompt's absent blocks
    allocates nothing."""
    for index in range(len(metas), blocks):
        metas.append(BlockMeta(block_tokens, index * block_tokens, Modality.TEXT, Tier.HOST))
    return metas


def in_prefix_order(keys: Sequence[Any], req_context: Any) -> list[Any]:
    """`keys` sorted by their position in the request (as given when a position is unknown)."""
    get = getattr(req_context, "get_offload_key_position", None)
    if get is None:
        return list(keys)
    positions = {key: get(key) for key in keys}
    if any(p is None for p in positions.values()):
        return list(keys)
    return sorted(keys, key=positions.__getitem__)


class _EndPositions(list):
    """A request's sorted block end positions, kept in its `ReqContext` state."""


def _previous_end(req_context: Any, end: int) -> int:
    """End of the block before the one ending at `end` (0 if first): a short last block of a
    prompt then gets its true token count."""
    positions = getattr(req_context, "_offload_key_positions", None)
    if positions is None or not hasattr(req_context, "get_state"):
        return 0
    ends = req_context.get_state(_EndPositions)
    if ends is None or len(ends) != len(positions):
        ends = _EndPositions(sorted(positions.values()))
        req_context.set_state(ends)
    at = bisect.bisect_left(ends, end)
    return ends[at - 1] if at > 0 else 0
