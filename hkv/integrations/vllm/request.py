"""What a vLLM request tells hkv's policies: block positions, prefix order and modality.

Modality per block: vLLM does not pass multimodal placeholder ranges to the policy. A client
marks the token spans that are images or audio in the request's `kv_transfer_params`:

    {"prompt": ..., "kv_transfer_params": {"hkv_modalities": [[0, 576, "vision"]]}}

(`[start, end, modality]`, token offsets into the prompt, end exclusive). A block whose tokens
overlap a marked span takes that span's modality; every other block is text. vLLM's multimodal
block hashes already include the image hash, so equal images still share blocks.

A malformed `hkv_modalities` (not a list of `[start, end, modality]`, offsets that are not
integers with `0 <= start < end`, a modality hkv does not know) is ignored, not refused: the
request is served, its blocks count as text, and one warning per request names the request, the
entry and the expected form. The policy runs inside vLLM's scheduler, where an exception would
stop the engine for every request; vLLM passes `kv_transfer_params` through unchecked, so there is
no earlier place to refuse it. A span reaching past the prompt is valid: its part beyond the last
token labels no block.
"""

from __future__ import annotations

import bisect
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from itertools import compress
from operator import not_
from typing import Any

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.policies.native import text_metas as whole_text_metas

MODALITY_PARAM = "hkv_modalities"
EXPECTED = (
    f"expected {MODALITY_PARAM}: [[start, end, modality], ...] with integer token offsets "
    f"0 <= start < end and modality one of {', '.join(m.value for m in Modality)}"
)

logger = logging.getLogger(__name__)
IGNORED = "ignoring kv_transfer_params"
IGNORED_LOG = f"hkv: request %s: {IGNORED}[%r] (%s); its blocks count as text; %s"
"""The warning for a request whose `hkv_modalities` hkv cannot read (logged once per request)."""

Spans = tuple[tuple[int, int, Modality], ...]


def modality_at(spans: Spans | None, start: int, end: int) -> Modality:
    """The modality of tokens `[start, end)` given a request's checked spans (text if none)."""
    for span_start, span_end, modality in spans or ():
        if span_start < end and start < span_end:
            return modality
    return Modality.TEXT


def request_spans(req_context: Any) -> Spans | None:
    """The request's marked modality spans, checked (None when it marks none, or marks them in a
    form hkv cannot read: then once per request a warning says so and its blocks are text)."""
    params = getattr(req_context, "kv_transfer_params", None)
    raw = params.get(MODALITY_PARAM) if isinstance(params, dict) else None
    if raw is None:
        return None
    get_state = getattr(req_context, "get_state", None)
    if get_state is not None and (checked := get_state(_CheckedSpans)) is not None:
        return checked.spans
    spans, problem = parse_spans(raw)
    if problem is not None:  # checked once per request where it has state, else once per id
        _warn(getattr(req_context, "req_id", "?"), problem, once_per_id=get_state is None)
    if get_state is not None:
        req_context.set_state(_CheckedSpans(spans))
    return spans


def parse_spans(raw: Any) -> tuple[Spans | None, str | None]:
    """`(spans, None)` for a well-formed `hkv_modalities` value (sorted), else `(None, problem)`."""
    if not isinstance(raw, list | tuple):
        return None, f"got {_short(raw)}, not a list"
    spans = []
    for entry in raw:
        if not isinstance(entry, list | tuple) or len(entry) != 3:
            return None, f"entry {_short(entry)} is not [start, end, modality]"
        start, end, label = entry
        if not (_is_int(start) and _is_int(end)) or not 0 <= start < end:
            return None, f"entry {_short(entry)}: offsets must be integers with 0 <= start < end"
        try:
            modality = Modality(label)
        except (ValueError, TypeError):
            return None, f"entry {_short(entry)}: unknown modality {_short(label)}"
        spans.append((start, end, modality))
    return tuple(sorted(spans)), None


class _CheckedSpans:
    """A request's `hkv_modalities`, checked once, kept in its `ReqContext` state."""

    __slots__ = ("spans",)

    def __init__(self, spans: Spans | None) -> None:
        self.spans = spans


_WARNED: OrderedDict[str, None] = OrderedDict()  # vLLM 0.26: requests warned about, newest last
_MAX_WARNED = 1024


def _warn(req_id: str, problem: str, *, once_per_id: bool) -> None:
    if once_per_id:
        if req_id in _WARNED:
            return
        _WARNED[req_id] = None
        if len(_WARNED) > _MAX_WARNED:
            _WARNED.popitem(last=False)
    logger.warning(IGNORED_LOG, req_id, MODALITY_PARAM, problem, EXPECTED)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


def block_metas(
    keys: Sequence[Any],
    req_context: Any,
    block_tokens: int,
    text_metas: list[BlockMeta],
    marked: dict | None = None,
) -> list[BlockMeta]:
    """`block_meta` of each key, a request's at once: a whole text block (its end a multiple of
    `block_tokens`, with every shorter block of the request whole too) takes the shared meta of
    its position from `text_metas` (`extend_text_metas`), in one C call for the request where
    every end but the last is whole, so a request's store misses cost a position lookup each
    instead of a new meta; a prompt's short last block gets its meta in that call too, where the
    request keeps its state (`_previous_end` reads its ends there; without it, `block_meta` starts
    the block `block_tokens` before its end); any other block is worked out by `block_meta`.
    A request that marks modality spans takes its whole blocks' shared metas from `span_metas`
    (its marked blocks' kept in `marked`) where given and every end but the last is whole."""
    ends, spans = getattr(req_context, "_offload_key_positions", None), request_spans(req_context)
    marks = spans is not None and marked is not None and type(ends) is dict
    if marks and _whole(req_context, block_tokens):
        return _marked_metas(keys, ends, spans, req_context, block_tokens, text_metas, marked)
    if type(ends) is dict and type(keys) is list and spans is None:
        short = _short_text_meta if hasattr(req_context, "get_state") else None
        shared = whole_text_metas(keys, ends, block_tokens, text_metas, short)
        if shared is not None:  # every block but the last whole: the holes worked out here
            if not all(shared):  # (a meta is never falsy: `None in` would call its __eq__)
                _fill(shared, keys, ends, req_context, block_tokens, text_metas)
            return shared
    get = position_getter(req_context)
    if get is None or spans is not None or not _whole(req_context, block_tokens):
        return [block_meta(key, req_context, block_tokens) for key in keys]
    out = [None] * len(keys)
    _fill(out, keys, {key: get(key) for key in keys}, req_context, block_tokens, text_metas)
    return out


def _marked_metas(keys: Sequence[Any], ends: dict, spans: Spans, req_context: Any,
                  block_tokens: int, text_metas: list, marked: dict) -> list:  # fmt: skip
    """`block_metas` of a request with marked spans whose every end but the last is whole: a
    whole block's meta is its position's in `span_metas` (a block so ending starts
    `block_tokens` before, as `block_meta` would start it), any other's `block_meta`."""
    at = []
    for key in keys:
        end = ends.get(key)
        whole = type(end) is int and end > 0 and end % block_tokens == 0
        at.append(end // block_tokens - 1 if whole else -1)
    shared = span_metas(spans, max(at, default=-1) + 1, block_tokens, text_metas, marked)
    return [
        shared[i] if i >= 0 else block_meta(key, req_context, block_tokens)
        for key, i in zip(keys, at, strict=True)
    ]


def _short_text_meta(start: int, tokens: int) -> BlockMeta:
    """A prompt's short last text block, `tokens` from `start` (`block_metas`)."""
    return BlockMeta(tokens, start, Modality.TEXT, Tier.HOST)


def _fill(out: list, keys: Sequence[Any], ends: dict, req_context: Any, block_tokens: int,
          text_metas: list[BlockMeta]) -> None:  # fmt: skip
    """`out`'s None entries, of a request whose every block but the last is whole: a whole
    block's shared meta (`text_metas` grown to it), any other's `block_meta`."""
    for i in list(compress(range(len(out)), map(not_, out))):  # the holes (None), found in C
        end = ends.get(keys[i])
        if end is None or end <= 0 or end % block_tokens:
            out[i] = block_meta(keys[i], req_context, block_tokens)
            continue
        index = end // block_tokens - 1
        if index >= len(text_metas):
            extend_text_metas(text_metas, index + 1, block_tokens)
        out[i] = text_metas[index]


def _whole(req_context: Any, block_tokens: int) -> bool:
    """Whether each of the request's blocks but its last ends at a multiple of `block_tokens`
    (then a block so ending starts `block_tokens` before: `_previous_end` is no later)."""
    if not hasattr(req_context, "get_state") or not hasattr(req_context, "_offload_key_positions"):
        return False
    ends = _ends(req_context)
    whole = ends.whole.get(block_tokens)
    if whole is None:
        last = ends[-1] if ends else 0
        whole = ends.whole[block_tokens] = all(e % block_tokens == 0 for e in ends if e != last)
    return whole


def span_metas(
    spans: Spans, blocks: int, block_tokens: int, text_metas: list[BlockMeta], kept: dict
) -> list[BlockMeta]:
    """The metas of a prompt's first `blocks` full blocks given its marked `spans`, each
    block's position with the modality `modality_at` gives it (the first span in order that
    overlaps it, else text), as shared instances, never mutated: a text block's from
    `text_metas`, a marked block's from `kept[modality]` (each a list by position, grown as
    `extend_text_metas` grows `text_metas`). A multimodal prompt's absent blocks then cost vLLM
    0.26's first touch one C pass (`native.note_split`), as a text prompt's do, instead of a new
    meta and a scan of the spans a block. The spans are sorted by start, so what the earlier
    ones cover from a span's start on is one run up to the furthest end yet: a span takes the
    blocks past it, a slice each."""
    metas = extend_text_metas(text_metas, blocks, block_tokens)[:blocks]
    covered = 0  # blocks before this index are taken by an earlier span, from its start on
    for start, end, modality in spans:
        low, high = max(start // block_tokens, covered), min(blocks, -(-end // block_tokens))
        if low < high:
            shared = kept.setdefault(modality, [])
            for index in range(len(shared), high):
                shared.append(BlockMeta(block_tokens, index * block_tokens, modality))
            metas[low:high] = shared[low:high]
        covered = max(covered, high)
    return metas


def extend_text_metas(metas: list[BlockMeta], blocks: int, block_tokens: int) -> list[BlockMeta]:
    """Grow `metas` to the metadata of full text blocks at index 0, 1, ... `blocks - 1`: one
    shared instance per position, never mutated, so that noting a prompt's absent blocks
    allocates nothing."""
    for index in range(len(metas), blocks):
        metas.append(BlockMeta(block_tokens, index * block_tokens, Modality.TEXT, Tier.HOST))
    return metas


def in_prefix_order(keys: Sequence[Any], req_context: Any) -> list[Any]:
    """`keys` sorted by their position in the request (as given when a position is unknown)."""
    get = position_getter(req_context)
    if get is None or None in map(get, keys):
        return list(keys)
    return sorted(keys, key=get)


def position_getter(req_context: Any) -> Callable[[Any], int | None] | None:
    """`key -> its end position in the request, or None`, for a request's context: the `get` of
    the position dictionary a vLLM >= 0.32 `ReqContext` keeps, which answers as its
    `get_offload_key_position` does without a Python call a key (vLLM calls the policy with a
    request's every key), else that method; None where the context has neither (0.26)."""
    positions = getattr(req_context, "_offload_key_positions", None)
    if type(positions) is dict:
        return positions.get
    return getattr(req_context, "get_offload_key_position", None)


class _EndPositions(list):
    """A request's sorted block end positions, kept in its `ReqContext` state, and by block
    size whether they are whole blocks (`_whole`)."""

    def __init__(self, ends) -> None:
        super().__init__(ends)
        self.whole: dict[int, bool] = {}


def _previous_end(req_context: Any, end: int) -> int:
    """End of the block before the one ending at `end` (0 if first): a short last block of a
    prompt then gets its true token count."""
    positions = getattr(req_context, "_offload_key_positions", None)
    if positions is None or not hasattr(req_context, "get_state"):
        return 0
    ends = _ends(req_context)
    at = bisect.bisect_left(ends, end)
    return ends[at - 1] if at > 0 else 0


def _ends(req_context: Any) -> _EndPositions:
    """The request's sorted block end positions, worked out once per request (kept in its
    state; again when its keys change)."""
    positions = req_context._offload_key_positions
    ends = req_context.get_state(_EndPositions)
    if ends is None or len(ends) != len(positions):
        ends = _EndPositions(sorted(positions.values()))
        req_context.set_state(ends)
    return ends
