"""A block's shape and bytes (`BlockLayout`) and the free-slot accounting of bounded tiers.

Torch-free: the disk tier and the planners use these without torch; `BlockLayout.torch_dtype`
imports torch only when asked.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hkv.errors import HkvError

DTYPE_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
"""Bytes of one value of each KV dtype a layout may have."""


def check_count(owner: str, name: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise HkvError(f"{owner}.{name}: got {value!r}; expected an integer >= {low}")
    return value


@dataclass(frozen=True)
class BlockLayout:
    """Shape of one KV block: `[num_layers, 2, block_tokens, kv_heads, head_dim]` in `dtype`."""

    block_tokens: int
    kv_heads: int
    head_dim: int
    num_layers: int = 1
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        for name in ("block_tokens", "kv_heads", "head_dim", "num_layers"):
            check_count("BlockLayout", name, getattr(self, name))
        if self.dtype not in DTYPE_ITEMSIZE:
            accepted = ", ".join(DTYPE_ITEMSIZE)
            raise HkvError(f"BlockLayout.dtype: got {self.dtype!r}; expected one of {accepted}")

    @classmethod
    def from_spec(cls, spec: Any, block_tokens: int, *, dtype: str = "bfloat16") -> BlockLayout:
        """The layout of `spec`'s (a `ModelSpec`) largest attention layer group (a hybrid model's
        vLLM keeps each group's blocks apart: `groups_from_spec` gives them all)."""
        return max(
            cls.groups_from_spec(spec, block_tokens, dtype=dtype), key=lambda g: g.num_layers
        )

    @classmethod
    def groups_from_spec(
        cls, spec: Any, block_tokens: int, *, dtype: str = "bfloat16"
    ) -> tuple[BlockLayout, ...]:
        """One layout per GQA/MHA layer group of `spec`: together the KV of `block_tokens` tokens
        in every such layer, which is what the cost model counts as a block's bytes."""
        groups = [g for g in spec.layer_groups if g.kv_heads]
        if not groups:
            raise HkvError(f"{spec.name}: no GQA/MHA layer group to lay blocks out for")
        return tuple(
            cls(block_tokens, g.kv_heads, spec.head_dim, g.num_layers, dtype) for g in groups
        )

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        return (self.num_layers, 2, self.block_tokens, self.kv_heads, self.head_dim)

    @property
    def torch_dtype(self) -> Any:
        """The layout's dtype as a `torch.dtype` (imports torch)."""
        import torch

        return getattr(torch, self.dtype)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of one block in its own dtype (what a passthrough cold copy takes)."""
        return self.numel * DTYPE_ITEMSIZE[self.dtype]


class SlotPool:
    """Free slot numbers, lowest first, so a fresh batch gets consecutive slots."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._free = list(range(capacity))
        self._used = np.zeros(capacity, dtype=bool)

    def allocate(self, n: int) -> list[int] | None:
        if n > len(self._free):
            return None
        slots = [heapq.heappop(self._free) for _ in range(n)]
        self._used[slots] = True
        return slots

    def free(self, slots: Iterable[int]) -> None:
        for slot in slots:
            if not self._used[slot]:
                raise RuntimeError(f"slot {slot} freed twice")
            self._used[slot] = False
            heapq.heappush(self._free, slot)

    def claim(self, slots: Iterable[int]) -> None:
        """Mark `slots` in use without allocating them (what a reopened file already holds)."""
        taken = set(slots)
        if not taken:
            return
        self._used[list(taken)] = True
        self._free = [slot for slot in self._free if slot not in taken]
        heapq.heapify(self._free)

    @property
    def num_free(self) -> int:
        return len(self._free)


class SlotTier:
    """Slot accounting shared by the tiers that hold fixed-size blocks (`self._slots`)."""

    _slots: SlotPool

    @property
    def capacity_blocks(self) -> int:
        return self._slots.capacity

    @property
    def num_free(self) -> int:
        return self._slots.num_free

    def allocate(self, n: int) -> list[int] | None:
        """`n` free slots, or None (and nothing taken) when fewer are free: a full tier
        refuses, it never overwrites."""
        return self._slots.allocate(n)

    def free(self, slots: Iterable[int]) -> None:
        self._slots.free(slots)

    def claim(self, slots: Iterable[int]) -> None:
        """Hold `slots` as in use (a reopened file's blocks): never allocated until freed."""
        self._slots.claim(slots)
