"""What the block manager hands out and keeps: access results, counters, one record per block."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hkv.blocks import BlockId, BlockMeta, Tier


@dataclass(frozen=True)
class Admission:
    """What `admit` did: `ok` with the block's GPU slot, or not `ok` with the reason."""

    ok: bool
    block_id: BlockId
    gpu_slot: int | None
    reason: str | None = None


@dataclass(frozen=True)
class AccessResult:
    """What `access` found. Blocks in `gpu_slots` are on the GPU now; the rest must be computed.

    `hits` counts the requested blocks served from each tier ("gpu", "host", "disk");
    `recompute` were held but cheaper to recompute (dropped), `lost` failed their disk checks
    (dropped), `missing` were not held. With `ok=False` (no room: the GPU is full of pinned
    blocks; or the drive failed a read) nothing changed and `reason` says why.
    """

    ok: bool
    gpu_slots: dict[BlockId, int]
    hits: dict[str, int]
    recompute: tuple[BlockId, ...] = ()
    lost: tuple[BlockId, ...] = ()
    missing: tuple[BlockId, ...] = ()
    reason: str | None = None

    @property
    def to_compute(self) -> tuple[BlockId, ...]:
        return self.missing + self.lost + self.recompute


class Link(enum.StrEnum):
    GPU_TO_HOST = "gpu_to_host"
    HOST_TO_GPU = "host_to_gpu"
    HOST_TO_DISK = "host_to_disk"
    DISK_TO_GPU = "disk_to_gpu"


def zero_counts(keys: Iterable[str], kind: type = int) -> dict[str, Any]:
    return {k: kind() for k in keys}


@dataclass
class ManagerStats:
    """Counters since construction; `to_dict()` for results JSON."""

    hits: dict[str, int] = field(default_factory=lambda: zero_counts(t.name.lower() for t in Tier))
    misses: int = 0
    lost: int = 0
    recomputed: int = 0
    admitted: int = 0
    refused: int = 0
    accesses: int = 0  # accesses launched (`prepare_access` calls that moved or pinned blocks)
    demoted: dict[str, int] = field(default_factory=lambda: zero_counts(("host", "disk")))
    capped: int = 0  # of the demotions from the GPU: over a modality's max_keep_blocks
    demoted_clean: int = 0  # of the demotions: the cold tier had kept a copy, none was made
    requantized: int = 0  # lossy encodings of a decoded copy (its cold copy had been given up)
    dropped: int = 0
    bytes_moved: dict[str, int] = field(default_factory=lambda: zero_counts(Link))
    transfer_s: dict[str, float] = field(default_factory=lambda: zero_counts(Link, float))

    def moved(self, link: Link, nbytes: int, seconds: float) -> None:
        self.bytes_moved[link] += nbytes
        self.transfer_s[link] += seconds

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        for name in ("bytes_moved", "transfer_s"):
            out[name] = {str(k): v for k, v in out[name].items()}
        return out


@dataclass(slots=True, eq=False)
class BlockRecord:
    """One held block: where its bytes are and what the GPU copy is.

    A block on the GPU may keep the cold copy it was loaded from (`host_offset` or `disk_slot`,
    never both): that copy encodes its current values. `exact` says the GPU values are the
    block's own (admitted or written), not decoded from a lossy format; when they are decoded,
    `scales` holds the minima and scales they were decoded with (a CPU uint8 tensor, the
    payload's bytes after its codes), so that encoding them again gives back the same codes.
    """

    key: int
    meta: BlockMeta
    fmt: str
    pins: int = 0
    gpu_slot: int | None = None
    host_offset: int | None = None
    disk_slot: int | None = None
    inflight: bool = False
    exact: bool = True
    scales: Any = None


@dataclass(eq=False)
class PendingAccess:
    """An access whose loads are in flight; pass it to `complete_access`."""

    ids: list[int]
    pin: bool
    hits: dict[str, int]
    loads: list[BlockRecord]
    transfers: list[tuple[Any, Link]]
    scratch_offsets: list[int]
    recompute: tuple[BlockId, ...]
    lost: tuple[BlockId, ...]
    missing: tuple[BlockId, ...]
    arrivals: dict[int, Any] = field(default_factory=dict)
    """key -> the event after which that loaded block is in its slot (None off CUDA)."""
    hot: list[BlockRecord] = field(default_factory=list)
    """The blocks already on the GPU, pinned until the access completes, as its loads are."""

    @property
    def own(self) -> set[int]:
        """The keys this access pinned itself (each once), until `complete_access`."""
        return {b.key for b in self.loads} | {b.key for b in self.hot}
