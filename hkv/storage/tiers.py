"""Where a block's bytes live: a GPU pool, a host arena (pinned) and a disk file, each bounded.

- `GpuTier`: a preallocated pool `kv` of `[num_blocks, num_layers, 2, block_tokens, kv_heads,
  head_dim]`; `layer(i)` is the `[num_blocks, 2, block_tokens, kv_heads, head_dim]` view an
  attention kernel reads for layer `i`. A block is one slot across the layer group's layers, so
  it moves as one contiguous piece. Runs on CPU too (`device="cpu"`), for tests.
- `HostTier`: one pinned byte arena cut into pages. A block takes as many consecutive pages as
  its cold format needs (q4 about a quarter of bf16), so quantization saves host memory, and a
  batch is placed in one run when it can be, so it moves in one copy. Without pinned memory
  (no CUDA, or the allocation fails) it falls back to pageable memory with one warning.
- `DiskTier` is in `hkv.storage.disk`: one locked file of fixed-size slots, bounded,
  checksummed, never returning a torn slot.

Tiers only hold bytes; which block sits in which slot is the manager's (`hkv.storage.manager`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from hkv.errors import HkvError
from hkv.storage.layout import BlockLayout, SlotPool, SlotTier, check_count


class PinnedMemoryWarning(UserWarning):
    """Pinned host memory was asked for and is unavailable; pageable memory is used instead."""


class GpuTier(SlotTier):
    """The hot pool: `kv` is `[num_blocks, num_layers, 2, block_tokens, kv_heads, head_dim]`."""

    def __init__(self, layout: BlockLayout, num_blocks: int, device: str | torch.device = "cuda"):
        check_count("GpuTier", "num_blocks", num_blocks)
        self.layout = layout
        self.device = torch.device(device)
        shape, where = (num_blocks, *layout.shape), f"the GPU pool on {device}"
        setting = "gpu_blocks (HkvCache: hot_blocks)"
        self.kv = _allocated(lambda: torch.zeros(shape, dtype=layout.torch_dtype, device=device),
                             num_blocks * layout.nbytes, where, setting)  # fmt: skip
        self._slots = SlotPool(num_blocks)

    def block(self, slot: int) -> torch.Tensor:
        """Slot `slot` as a `[num_layers, 2, block_tokens, kv_heads, head_dim]` view."""
        return self.kv[slot]

    def layer(self, index: int) -> torch.Tensor:
        """Layer `index` of every slot: `[num_blocks, 2, block_tokens, kv_heads, head_dim]`."""
        return self.kv[:, index]


def host_buffer(nbytes: int, pin_memory: bool | None) -> tuple[torch.Tensor, bool]:
    """A 1-D uint8 host tensor and whether it is pinned.

    `pin_memory=None` pins when CUDA is available; `True` tries to pin and falls back to pageable
    memory with a `PinnedMemoryWarning` (transfers then run synchronously, at pageable speed).
    """
    want = torch.cuda.is_available() if pin_memory is None else pin_memory
    if want:
        try:
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True), True
        except RuntimeError as exc:
            warnings.warn(
                f"pinned host memory unavailable ({exc}); using {nbytes / 2**20:.1f} MiB of "
                "pageable memory instead: host<->GPU copies will be synchronous and slower "
                "(about 5-10 GB/s instead of about 50 on an H200 host)",
                PinnedMemoryWarning,
                stacklevel=3,
            )
    buffer = _allocated(
        lambda: torch.empty(nbytes, dtype=torch.uint8), nbytes, "host RAM", "host_blocks"
    )
    return buffer, False


class HostTier:
    """A host byte arena of `capacity_bytes`, in pages of `page_bytes`; blocks take page runs.

    `allocate(nbytes, count)` places `count` blocks of `nbytes` each, `stride_bytes(nbytes)`
    apart, in one run of pages when there is one (one copy moves the batch), else wherever runs
    fit; it returns their byte offsets, or None and takes nothing when they do not fit.
    """

    def __init__(self, capacity_bytes: int, page_bytes: int = 4096, pin_memory: bool | None = None):
        check_count("HostTier", "page_bytes", page_bytes)
        check_count("HostTier", "capacity_bytes", capacity_bytes, page_bytes)
        self.page_bytes = page_bytes
        self.num_pages = capacity_bytes // page_bytes
        self.buf, self.pinned = host_buffer(self.num_pages * page_bytes, pin_memory)
        self._free = np.ones(self.num_pages, dtype=bool)
        self._pages_at: dict[int, int] = {}  # first page of an extent -> its page count

    @classmethod
    def for_layout(
        cls, layout: BlockLayout, num_blocks: int, pin_memory: bool | None = None
    ) -> HostTier:
        """Room for `num_blocks` blocks in their own dtype; quantized blocks take less."""
        check_count("HostTier", "num_blocks", num_blocks)
        page = max(512, -(-layout.nbytes // 16 // 512) * 512)
        return cls(num_blocks * (-(-layout.nbytes // page)) * page, page, pin_memory)

    @property
    def capacity_bytes(self) -> int:
        return self.num_pages * self.page_bytes

    @property
    def used_bytes(self) -> int:
        return int(self.num_pages - np.count_nonzero(self._free)) * self.page_bytes

    def stride_bytes(self, nbytes: int) -> int:
        """Bytes a block of `nbytes` occupies (whole pages)."""
        return -(-nbytes // self.page_bytes) * self.page_bytes

    def can_allocate(self, nbytes: int, count: int) -> bool:
        pages = self.stride_bytes(nbytes) // self.page_bytes
        _, lengths = self._runs()
        return int((lengths // pages).sum()) >= count

    def allocate(self, nbytes: int, count: int) -> np.ndarray | None:
        """Byte offsets of `count` new extents of `nbytes`, or None when they do not fit."""
        pages = self.stride_bytes(nbytes) // self.page_bytes
        starts, lengths = self._runs()
        whole = np.flatnonzero(lengths >= pages * count)
        if whole.size:
            first = np.arange(count) * pages + starts[whole[0]]
        else:
            fits = lengths // pages
            if int(fits.sum()) < count:
                return None
            first = np.concatenate(
                [start + np.arange(k) * pages for start, k in zip(starts, fits, strict=True) if k]
            )[:count]
        for page in first.tolist():
            self._free[page : page + pages] = False
            self._pages_at[page] = pages
        return first * self.page_bytes

    def free(self, offsets: Iterable[int]) -> None:
        for offset in offsets:
            page = int(offset) // self.page_bytes
            pages = self._pages_at.pop(page)
            self._free[page : page + pages] = True

    def view(self, offset: int, nbytes: int) -> torch.Tensor:
        return self.buf[offset : offset + nbytes]

    def _runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(first page, length) of every run of free pages."""
        edges = np.diff(np.concatenate(([0], self._free.view(np.int8), [0])))
        starts = np.flatnonzero(edges == 1)
        return starts, np.flatnonzero(edges == -1) - starts


def _allocated(make: Any, nbytes: int, where: str, setting: str) -> torch.Tensor:
    """`make()`, or one `HkvError` naming the size and the setting to lower where the memory
    is not there (torch's own error names neither)."""
    try:
        return make()
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        why = str(exc).splitlines()[0][:100]
        raise HkvError(
            f"cannot allocate {nbytes / 2**30:.2f} GiB for {where} ({why}); lower {setting}"
        ) from None
