"""Mooncake-format request traces: read, validate, write.

One JSON object per line (docs/design.md §2): `timestamp` (ms), `input_length`, `output_length`,
`hash_ids` (prefix-block ids, `block_tokens` tokens each, `len(hash_ids) ==
ceil(input_length / block_tokens)`), and optionally `modalities` (a list parallel to `hash_ids`
of "text" / "vision" / "audio") and `session` (shared by the turns of one conversation).
Unknown fields are ignored. Every malformed line raises `HkvError` naming the file and line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.errors import HkvError, is_number, shorten, shown
from hkv.inputs import parse_json, path_shown, read_lines
from hkv.outputs import write_atomic

DEFAULT_BLOCK_TOKENS = 512
MAX_TOKENS = 1 << 32
"""The longest `input_length` / `output_length` a trace line may give (no model comes near)."""
MAX_TIMESTAMP_MS = 1e15
"""About 30,000 years: a larger timestamp is a mistake, and would lose precision as a float."""


@dataclass(frozen=True, slots=True)
class Request:
    """One request: its prompt as prefix-block ids, plus optional modality labels and session."""

    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[Hashable, ...]
    modalities: tuple[Modality, ...] | None = None
    session: str | int | None = None

    def to_json(self) -> dict[str, Any]:
        """The request as one trace line's object (optional fields only when set)."""
        out: dict[str, Any] = {
            "timestamp": self.timestamp_ms,
            "input_length": self.input_length,
            "output_length": self.output_length,
            "hash_ids": list(self.hash_ids),
        }
        if self.modalities is not None:
            out["modalities"] = [
                Modality.parse(m, field="modalities").value for m in self.modalities
            ]
        if self.session is not None:
            out["session"] = self.session
        return out

    def block_meta(self, index: int, block_tokens: int, tier: Tier = Tier.HOST) -> BlockMeta:
        """Meta of block `index` of this request: its tokens, position and modality."""
        position = index * block_tokens
        tokens = min(block_tokens, self.input_length - position)
        modality = self.modalities[index] if self.modalities is not None else Modality.TEXT
        return BlockMeta(tokens=tokens, position=position, modality=modality, tier=tier)


@dataclass(frozen=True)
class Trace:
    """Requests in file order, with the block size their `hash_ids` were cut with."""

    requests: tuple[Request, ...]
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    source: str = ""

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def num_block_refs(self) -> int:
        return sum(len(r.hash_ids) for r in self.requests)

    def distinct_blocks(self) -> int:
        return len({k for r in self.requests for k in r.hash_ids})

    def reference_stream(self) -> list[list[Hashable]]:
        """`hash_ids` of every request, in order: the future an offline policy is given."""
        return [list(r.hash_ids) for r in self.requests]

    def has_modalities(self) -> bool:
        return any(r.modalities is not None for r in self.requests)


def load_trace(
    path: str | os.PathLike[str],
    *,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    max_request_blocks: int | None = None,
) -> Trace:
    """Read a Mooncake-format JSONL file; `HkvError` names the line of any malformed request
    (or of one longer than `max_request_blocks` blocks, when given). Lines are split at '\n'
    only and read in bounded pieces (`hkv.inputs.read_lines`)."""
    _check_block_tokens(block_tokens)
    path = Path(path)
    name = shorten(str(path))
    requests = []
    for lineno, line in read_lines(path, "trace"):
        if line.strip():
            request = parse_request(line, block_tokens, where=f"{name}:{lineno}")
            if max_request_blocks is not None and len(request.hash_ids) > max_request_blocks:
                raise HkvError(
                    f"{name}:{lineno}: a request of {len(request.hash_ids):,} blocks; hkv "
                    f"replays at most {max_request_blocks:,} a request (raise --block-tokens?)"
                )
            requests.append(request)
    if not requests:
        raise HkvError(f"trace: {path_shown(path)} holds no requests (one JSON object per line)")
    return Trace(tuple(requests), block_tokens, str(path))


def parse_request(line: str, block_tokens: int, *, where: str) -> Request:
    """Parse and validate one trace line; `where` (file:line) prefixes every error."""
    obj = parse_json(line, where)
    if not isinstance(obj, dict):
        raise HkvError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for name in ("timestamp", "input_length", "output_length", "hash_ids"):
        if name not in obj:
            raise HkvError(f"{where}: missing field {name!r}")
    timestamp = _timestamp(obj["timestamp"], where)
    input_length = _count(obj["input_length"], "input_length", where, low=1)
    output_length = _count(obj["output_length"], "output_length", where, low=0)
    hash_ids = _hash_ids(obj["hash_ids"], where)
    _check_num_blocks(len(hash_ids), input_length, block_tokens, where)
    return Request(
        timestamp_ms=timestamp,
        input_length=input_length,
        output_length=output_length,
        hash_ids=hash_ids,
        modalities=_modalities(obj.get("modalities"), len(hash_ids), where),
        session=_session(obj.get("session"), where),
    )


def _check_block_tokens(block_tokens: Any) -> None:
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
        raise HkvError(f"block_tokens: got {shown(block_tokens)}; expected an integer >= 1")


def _timestamp(value: Any, where: str) -> int | float:
    ok = is_number(value)
    if not ok or not -MAX_TIMESTAMP_MS <= value <= MAX_TIMESTAMP_MS:  # NaN fails too
        raise HkvError(
            f"{where}: timestamp: got {shown(value)}; expected a number of ms within "
            f"+-{MAX_TIMESTAMP_MS:g}"
        )
    return value


def _count(value: Any, name: str, where: str, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_TOKENS:
        raise HkvError(
            f"{where}: {name}: got {shown(value)}; expected an integer in [{low}, {MAX_TOKENS:,}]"
        )
    return value


def _check_num_blocks(num_blocks: int, input_length: int, block_tokens: int, where: str) -> None:
    expected = -(-input_length // block_tokens)
    if num_blocks != expected:
        raise HkvError(
            f"{where}: {num_blocks} hash_ids for input_length {input_length}; expected "
            f"ceil({input_length} / {block_tokens}) = {expected} (is --block-tokens right?)"
        )


def _hash_ids(value: Any, where: str) -> tuple[Hashable, ...]:
    if not isinstance(value, list):
        raise HkvError(f"{where}: hash_ids: got {type(value).__name__}; expected a list")
    _check_ids(value, where)
    return tuple(value)


def _check_ids(ids: Iterable[Any], where: str) -> None:
    for item in ids:
        if isinstance(item, bool) or not isinstance(item, int | str):
            raise HkvError(f"{where}: hash_ids: got {shown(item)}; expected integers (or strings)")


def _modalities(value: Any, num_blocks: int, where: str) -> tuple[Modality, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != num_blocks:
        got = len(value) if isinstance(value, list) else type(value).__name__
        raise HkvError(
            f"{where}: modalities: got {got}; expected a list of {num_blocks} labels "
            "(one per hash_id)"
        )
    return tuple(Modality.parse(m, field=f"{where}: modalities") for m in value)


def _session(value: Any, where: str) -> str | int | None:
    if value is None or (isinstance(value, int | str) and not isinstance(value, bool)):
        return value
    raise HkvError(f"{where}: session: got {shown(value)}; expected a string or integer id")


def write_trace(
    requests: Iterable[Request], path: str | os.PathLike[str], *, block_tokens: int | None = None
) -> Path:
    """Write requests as Mooncake-format JSONL (the format `load_trace` reads), atomically
    (`hkv.outputs.write_atomic`: an interrupted run leaves no half-written trace). Creates
    missing folders; `HkvError` when the place cannot be written or is not a regular file, or
    when a request holds what `load_trace` would refuse (then no file is written); with
    `block_tokens`, also when its `hash_ids` do not cut its `input_length` into such blocks."""
    if block_tokens is not None:
        _check_block_tokens(block_tokens)

    lines = (_line(r, block_tokens, f"write_trace: request {i}") for i, r in enumerate(requests))
    return write_atomic(path, lines, "out", example="trace.jsonl")


def _line(request: Request, block_tokens: int | None, where: str) -> str:
    """`request` as a trace line, after every check `parse_request` would make of it."""
    check_request(request, block_tokens, where)
    _check_ids(request.hash_ids, where)
    for label in request.modalities or ():
        Modality.parse(label, field=f"{where}: modalities")
    _session(request.session, where)
    return json.dumps(request.to_json(), separators=(", ", ": ")) + "\n"


def check_request(request: Any, block_tokens: int | None, where: str) -> None:
    """`HkvError` (prefixed by `where`) when `request` is not a `Request` or holds numbers or
    counts `parse_request` refuses: its timestamp, lengths, block count (unless `block_tokens` is
    None) and label count. Cheap (no look at each block): ids are `write_trace`'s to check."""
    if not isinstance(request, Request):
        raise HkvError(f"{where}: got {shown(request)}; expected an hkv.sim.Request")
    _timestamp(request.timestamp_ms, where)
    _count(request.input_length, "input_length", where, low=1)
    _count(request.output_length, "output_length", where, low=0)
    ids = request.hash_ids
    if not isinstance(ids, tuple | list):
        raise HkvError(f"{where}: hash_ids: got {shown(ids)}; expected a tuple of block ids")
    if block_tokens is not None:
        _check_num_blocks(len(ids), request.input_length, block_tokens, where)
    labels = request.modalities
    if labels is not None and (not isinstance(labels, tuple | list) or len(labels) != len(ids)):
        got = len(labels) if isinstance(labels, tuple | list) else shown(labels)
        raise HkvError(
            f"{where}: modalities: got {got}; expected None or {len(ids)} labels (one per hash_id)"
        )


def trace_from_requests(
    requests: Sequence[Request], *, block_tokens: int = DEFAULT_BLOCK_TOKENS, source: str = ""
) -> Trace:
    """Wrap in-memory requests (e.g. from `hkv.sim.workload`) as a `Trace`. `HkvError` names
    the first request whose numbers `load_trace` would refuse (`check_request`: timestamp,
    lengths, `len(hash_ids) == ceil(input_length / block_tokens)`, label count)."""
    _check_block_tokens(block_tokens)
    requests = tuple(requests)
    for index, request in enumerate(requests):
        check_request(request, block_tokens, f"trace_from_requests: request {index}")
    return Trace(requests, block_tokens, source)
