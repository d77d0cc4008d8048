"""Batched block moves between the GPU pool and a host arena: gather, one bulk copy, scatter.

One copy call per block is launch-bound (docs/design.md §3; on an H200 host,
`data/results/transfer_h200.json`: 8.9 GB/s for 64 KiB blocks); gathering the blocks into a
staging buffer first and moving it in one copy runs near the link's speed (50.9-52.2 GB/s, 92-94%
of one bulk copy). So a store (GPU -> host) is:

    index_select the blocks into a GPU staging buffer -> encode in the cold format (on the GPU)
    -> one copy per run of consecutive host extents (one run when the arena had room)

and a load (host -> GPU) the reverse: copies into a GPU staging buffer -> decode -> `index_copy_`
into the pool's slots. A load is pipelined in chunks of `LOAD_CHUNK_BYTES`: while the copy engine
moves chunk i+1 on the engine's stream, a second stream decodes and scatters chunk i (an event
per chunk), so the scatter costs one chunk's time instead of the whole batch's (serialized, it
cost about 10% of the link time on an H200). A lossless chunk bound for consecutive slots (a
restore into a freed pool, say) skips staging: its bytes are the blocks' own, copied straight
into the slots. Gathers and scatters move rows as 8-byte words, not bf16 elements: index
kernels pay per element. Slot indices reach the GPU through a pinned ring (`PinnedRing`). On
CUDA the engine's streams start after the compute stream's pending work (an event) and the
calls return at once: `prepare_store` / `prepare_load` launch, `complete_store` /
`complete_load` wait on the transfer's end event, so compute launched in between overlaps the
copy. On a machine without CUDA the same calls run synchronously (the "GPU" pool is then a CPU
tensor), so the manager and its tests run anywhere.

Contract with the caller: the source slots of a store must not be rewritten, and host extents of
either direction not reused, before the matching `complete_*` returns (the manager frees them
only then). Host extents are given as byte offsets into a `HostTier`'s arena; each block takes
`host.stride_bytes(payload_bytes)` there.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hkv.storage.quant import codec
from hkv.storage.tiers import GpuTier, HostTier

GPU_TO_HOST = "gpu_to_host"
HOST_TO_GPU = "host_to_gpu"
LOAD_CHUNK_BYTES = 64 * 2**20
"""Bytes per pipelined piece of a load: large enough to run at link speed, small enough that the
last chunk's scatter (the part not hidden behind a copy) is short."""


@dataclass(frozen=True)
class TransferStats:
    """One finished transfer: `nbytes` crossed the link in `device_s` (CUDA events; wall time on
    CPU); `wall_s` runs from `prepare_*` to the end of `complete_*`."""

    direction: str
    fmt: str
    num_blocks: int
    nbytes: int
    num_copies: int
    device_s: float
    wall_s: float

    @property
    def gbps(self) -> float:
        return self.nbytes / self.device_s / 1e9 if self.device_s > 0 else float("inf")


@dataclass(eq=False)
class Transfer:
    """A launched transfer; pass it to the matching `complete_*`. `done()` never blocks."""

    direction: str
    fmt: str
    num_blocks: int
    nbytes: int
    num_copies: int
    _t0: float
    _start: Any = None
    _end: Any = None
    _keep: tuple = ()
    _stats: TransferStats | None = field(default=None, repr=False)
    arrivals: list[tuple[int, Any]] = field(default_factory=list, repr=False)
    """A load's chunks as (end index in the batch, event after its scatter; None off CUDA)."""

    def done(self) -> bool:
        return self._end is None or self._end.query()

    def block_arrivals(self) -> list[Any]:
        """A load's blocks in batch order: the event after which each is in its slot."""
        out, start = [], 0
        for end, event in self.arrivals:
            out += [event] * (end - start)
            start = end
        return out


def copy_runs(offsets: np.ndarray, stride: int) -> list[tuple[int, int, int]]:
    """`(first block, count, byte offset)` of each run of extents laid end to end."""
    if offsets.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(offsets) != stride) + 1
    firsts = np.concatenate(([0], breaks))
    counts = np.diff(np.concatenate((firsts, [offsets.size])))
    return list(zip(firsts.tolist(), counts.tolist(), offsets[firsts].tolist(), strict=True))


class TransferEngine:
    """Moves batches of blocks between a `GpuTier` and a `HostTier` (see the module docstring)."""

    def __init__(self, device: str | torch.device | None = None):
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        self.stream = torch.cuda.Stream(self.device) if self.is_cuda else None
        self.scatter_stream = torch.cuda.Stream(self.device) if self.is_cuda else None
        self._ring: PinnedRing | None = None  # device_index's pinned staging, made when needed

    def prepare_store(
        self,
        gpu: GpuTier,
        gpu_slots: Sequence[int],
        host: HostTier,
        host_offsets: Sequence[int],
        fmt: str,
    ) -> Transfer:
        """Launch: encode the blocks in `gpu_slots` as `fmt` into host extents `host_offsets`."""
        c = codec(gpu.layout, fmt)
        stride = host.stride_bytes(c.payload_bytes)
        offsets = _offsets(host_offsets, gpu_slots)
        runs = copy_runs(offsets, stride)
        transfer = self._begin(GPU_TO_HOST, fmt, len(offsets), stride, len(runs))
        with self._stream():
            self._mark_start(transfer)
            index = self.device_index(gpu_slots)
            words = as_words(gpu.kv).index_select(0, index)
            blocks = words.view(torch.uint8).view(gpu.layout.torch_dtype)
            payload = c.encode(blocks.view(len(offsets), *gpu.layout.shape))
            staging = _rows(payload, stride)
            for first, count, offset in runs:
                host_rows = host.buf[offset : offset + count * stride].view(count, stride)
                host_rows.copy_(staging[first : first + count], non_blocking=self.is_cuda)
            transfer._keep = (index, payload, staging)
        return self._launched(transfer)

    def prepare_load(
        self,
        host: HostTier,
        host_offsets: Sequence[int],
        gpu: GpuTier,
        gpu_slots: Sequence[int],
        fmt: str,
        starts: Sequence[int] = (),
    ) -> Transfer:
        """Launch: decode the `fmt` payloads at `host_offsets` into GPU slots `gpu_slots`.

        A chunk also starts at each index of `starts` (a reader's unit, a layer say): its
        event in `arrivals` then tells when that unit is in place, before the whole load."""
        c = codec(gpu.layout, fmt)
        stride = host.stride_bytes(c.payload_bytes)
        offsets = _offsets(host_offsets, gpu_slots)
        runs = split_runs(copy_runs(offsets, stride), stride, LOAD_CHUNK_BYTES)
        chunks = split_at(runs, starts, stride)
        transfer = self._begin(HOST_TO_GPU, fmt, len(offsets), stride, len(chunks))
        slots = list(gpu_slots)
        # a lossless chunk bound for consecutive slots is copied straight into them: the
        # payload is the block's own bytes, so staging and scattering it would change nothing
        direct = c.lossless and stride == gpu.layout.nbytes
        cuda, device = self.is_cuda, self.device
        pool, pieces, index, staging = as_words(gpu.kv), [], None, None
        with self._stream():  # the copy stream throughout; the scatters nest their own
            self._mark_start(transfer)
            for first, count, offset in chunks:
                host_rows = host.buf[offset : offset + count * stride].view(count, stride)
                slot = slots[first]
                if direct and consecutive(slots[first : first + count]):
                    pool[slot : slot + count].view(torch.uint8).copy_(host_rows, non_blocking=cuda)
                    transfer.arrivals.append((first + count, self._event(self.stream)))
                    continue
                if staging is None:
                    index = self.device_index(slots)
                    staging = torch.empty((len(slots), stride), dtype=torch.uint8, device=device)
                staging[first : first + count].copy_(host_rows, non_blocking=cuda)
                self._hand_over()
                with self._stream(self.scatter_stream):
                    blocks = c.decode(staging[first : first + count, : c.payload_bytes])
                    pool.index_copy_(0, index[first : first + count], as_words(blocks))
                    pieces.append(blocks)
                    transfer.arrivals.append((first + count, self._event(self.scatter_stream)))
        if self.is_cuda and staging is not None:  # made on the copy stream, read on the scatter
            index.record_stream(self.scatter_stream)
            staging.record_stream(self.scatter_stream)
        self._hand_over()  # the end event, on the scatter stream, also follows the direct copies
        transfer._keep = (index, staging, pieces)
        return self._launched(transfer, self.scatter_stream)

    def _event(self, stream: Any) -> Any:
        """An event recorded on `stream` now (None off CUDA)."""
        if not self.is_cuda:
            return None
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def device_index(self, gpu_slots: Sequence[int]) -> torch.Tensor:
        """`gpu_slots` on the device, copied on the current stream without the CPU waiting for
        it (a pageable copy would wait for the stream's earlier work): through a pinned ring
        (`PinnedRing`), since pinning a fresh small tensor costs tens of microseconds."""
        index = np.asarray(gpu_slots, dtype=np.int64)
        if not self.is_cuda:
            return torch.from_numpy(index)
        if self._ring is None:
            self._ring = PinnedRing()
        return self._ring.to_device(index, self.device)

    def after(self, result: Any, events: Sequence[Any]) -> Any:
        """`result`, once the current stream waits (on the device) for `events`."""
        for event in events:
            torch.cuda.current_stream(self.device).wait_event(event)
        return result

    def complete_store(self, transfer: Transfer) -> TransferStats:
        """Wait for a store; its source slots may be reused and its host bytes read after this."""
        return self._complete(transfer, GPU_TO_HOST)

    def complete_load(self, transfer: Transfer) -> TransferStats:
        """Wait for a load; the blocks are in their GPU slots for any stream after this."""
        return self._complete(transfer, HOST_TO_GPU)

    def store(self, gpu, gpu_slots, host, host_offsets, fmt) -> TransferStats:
        """`prepare_store` then `complete_store`."""
        return self.complete_store(self.prepare_store(gpu, gpu_slots, host, host_offsets, fmt))

    def load(self, host, host_offsets, gpu, gpu_slots, fmt) -> TransferStats:
        """`prepare_load` then `complete_load`."""
        return self.complete_load(self.prepare_load(host, host_offsets, gpu, gpu_slots, fmt))

    def _begin(self, direction: str, fmt: str, n: int, stride: int, copies: int) -> Transfer:
        transfer = Transfer(direction, fmt, n, n * stride, copies, time.perf_counter())
        if self.is_cuda:
            transfer._start = torch.cuda.Event(enable_timing=True)
            transfer._end = torch.cuda.Event(enable_timing=True)
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self.device))
            self.stream.wait_event(ready)  # see what compute has written so far
        return transfer

    def _stream(self, stream: Any = None) -> contextlib.AbstractContextManager:
        if not self.is_cuda:
            return contextlib.nullcontext()
        return torch.cuda.stream(stream if stream is not None else self.stream)

    def _hand_over(self) -> None:
        """Make the scatter stream wait for what the copy stream has queued so far."""
        if self.is_cuda:
            copied = torch.cuda.Event()
            copied.record(self.stream)
            self.scatter_stream.wait_event(copied)

    def _mark_start(self, transfer: Transfer) -> None:
        if transfer._start is not None:
            transfer._start.record(self.stream)

    def _launched(self, transfer: Transfer, last_stream: Any = None) -> Transfer:
        if self.is_cuda:
            transfer._end.record(last_stream if last_stream is not None else self.stream)
        return transfer

    def _complete(self, transfer: Transfer, direction: str) -> TransferStats:
        if transfer.direction != direction:
            raise ValueError(f"complete_{direction}: got a {transfer.direction} transfer")
        if transfer._stats is None:
            if self.is_cuda:
                transfer._end.synchronize()
                device_s = transfer._start.elapsed_time(transfer._end) / 1e3
            else:
                device_s = time.perf_counter() - transfer._t0
            transfer._stats = TransferStats(
                direction,
                transfer.fmt,
                transfer.num_blocks,
                transfer.nbytes,
                transfer.num_copies,
                device_s,
                time.perf_counter() - transfer._t0,
            )
            transfer._keep = ()
        return transfer._stats


class PinnedRing:
    """Pinned host memory for small index uploads, used round robin: a region is written again
    only after the copy that last read it has run (an event per upload; with the ring this
    large the wait is almost never real)."""

    def __init__(self, entries: int = 1 << 16):
        self.buf = torch.empty(entries, dtype=torch.int64, pin_memory=True)
        self.array = self.buf.numpy()
        self.pos = 0
        self.fences: collections.deque[tuple[int, int, Any]] = collections.deque()

    def to_device(self, values: np.ndarray, device: torch.device) -> torch.Tensor:
        n = values.size
        if n > self.buf.numel():  # larger than the ring: a pinned copy of its own
            return torch.from_numpy(values).pin_memory().to(device, non_blocking=True)
        if self.pos + n > self.buf.numel():  # wrap: the last round's uploads past here first
            while self.fences and self.fences[0][0] >= self.pos:
                self.fences.popleft()[2].synchronize()
            self.pos = 0
        start, end = self.pos, self.pos + n
        while self.fences and self.fences[0][0] < end and start < self.fences[0][1]:
            self.fences.popleft()[2].synchronize()  # that region's copy has to have run
        self.array[start:end] = values
        out = self.buf[start:end].to(device, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))
        self.fences.append((start, end, event))
        self.pos = end
        return out


def consecutive(slots: list[int]) -> bool:
    """Whether `slots` are `s, s + 1, ...`: a run one copy reads or writes in place."""
    return bool(slots) and slots == list(range(slots[0], slots[0] + len(slots)))


def split_runs(
    runs: list[tuple[int, int, int]], stride: int, chunk_bytes: int
) -> list[tuple[int, int, int]]:
    """`runs` cut into pieces of at most `chunk_bytes` (at least one block each)."""
    per = max(1, chunk_bytes // stride)
    return [
        (first + k, min(per, count - k), offset + k * stride)
        for first, count, offset in runs
        for k in range(0, count, per)
    ]


def split_at(
    chunks: list[tuple[int, int, int]], starts: Sequence[int], stride: int
) -> list[tuple[int, int, int]]:
    """`chunks` (first, count, host offset) also cut where a block index of `starts` falls
    inside one (a chunk is one run of extents `stride` bytes apart)."""
    if not starts:
        return chunks
    cuts = sorted(set(starts))
    out = []
    for first, count, offset in chunks:
        edges = [first, *(s for s in cuts if first < s < first + count), first + count]
        out += [(a, b - a, offset + (a - first) * stride) for a, b in itertools.pairwise(edges)]
    return out


def as_words(rows: torch.Tensor) -> torch.Tensor:
    """Contiguous `rows` `[n, ...]` as `[n, row_bytes / w]` of the widest integer type dividing a
    row: gather and scatter kernels work per element, so 8-byte words move rows faster than
    2-byte values."""
    flat = rows.view(rows.shape[0], -1).view(torch.uint8)
    for dtype in (torch.int64, torch.int32, torch.int16):
        if flat.shape[1] % dtype.itemsize == 0:
            return flat.view(dtype)
    return flat


def _offsets(host_offsets: Sequence[int], gpu_slots: Sequence[int]) -> np.ndarray:
    offsets = np.asarray(host_offsets, dtype=np.int64).reshape(-1)
    if offsets.size != len(gpu_slots) or offsets.size == 0:
        raise ValueError(
            f"transfer: {offsets.size} host extents for {len(gpu_slots)} GPU slots; "
            "give one of each per block, at least one block"
        )
    return offsets


def _rows(payload: torch.Tensor, stride: int) -> torch.Tensor:
    """`payload` `[n, nbytes]` as rows of `stride` bytes (padded; the pad is never read)."""
    if payload.shape[1] == stride:
        return payload
    rows = torch.empty((payload.shape[0], stride), dtype=torch.uint8, device=payload.device)
    rows[:, : payload.shape[1]] = payload
    return rows
