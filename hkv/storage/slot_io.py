"""The disk tier's slot I/O in C where hkv's extension is built (`hkv.storage._slots`, sources
in hkv/storage/_native/slots.c): a batch of slots read, checked and copied out, or written, in
one call that holds no GIL. `DiskTier` keeps the same reads and writes in Python and uses them
where the module is absent, and to say why a slot the C path could not vouch for is lost.

Why it matters: an I/O thread in Python gives the GIL up at every system call and checksum and
waits to take it back; beside a serving engine that keeps the GIL busy (vLLM's engine core runs
in the same process as the tier), each wait is up to the interpreter's switch interval, and
reads of 512 KiB chunks crawled at a fraction of the disk's speed
(`python -m bench.disk_busy`, `data/results/disk_busy_cpu.json`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

try:  # built by `pip install` (setup.py); absent where no compiler was found
    from hkv.storage import _slots
except ImportError:  # pragma: no cover - depends on the build
    _slots = None

OK = 0
CHECKSUM_KIND = 1
"""The checksum the C path writes and checks: crc32 (`disk.CHECKSUMS[1]`, zlib's)."""
MASK = (1 << 64) - 1


def built() -> bool:
    """Whether the C slot I/O is built and importable here."""
    return _slots is not None


def crc32_source() -> str | None:
    """Where the C path's crc32 comes from: "zlib" (the system's libz, found at import) or
    "tables" (the module's own); None where the module is not built."""
    return None if _slots is None else _slots.CRC32


def crc32(data: Any) -> int:
    """zlib's crc32 of `data`, from the C module (tests compare the two)."""
    if _slots is None:
        raise RuntimeError("hkv.storage._slots is not built")
    return _slots.crc32(data)


def read(
    fd: int, geometry: tuple[int, int, int, int], slots: Sequence[int], keys: Sequence[int],
    valid: bytes, fmt_code: int, out: np.ndarray, offsets: Sequence[int],
) -> bytes:  # fmt: skip
    """Per slot a code, 0 where the slot was read, checked (crc32) and copied to
    `out[offset:]`; any other code: the caller's Python path decides (and says why)."""
    data_at, stride, slot_bytes, run_slots = geometry
    return _slots.read_slots(
        fd, data_at, stride, slot_bytes, run_slots,
        np.asarray(slots, dtype=np.int64), np.array([k & MASK for k in keys], dtype=np.uint64),
        valid, fmt_code, out, np.asarray(offsets, dtype=np.int64),
    )  # fmt: skip


def write(
    fd: int, data_at: int, stride: int, slots: Sequence[int], keys: Sequence[int],
    fmt_codes: Sequence[int], payloads: Sequence[Any],
) -> int:  # fmt: skip
    """Headers (crc32) and payloads of a batch, one `pwritev` per run of consecutive slots;
    payload bytes written. Durability (`fdatasync`) and the valid flags stay with the caller."""
    return _slots.write_slots(
        fd, data_at, stride, np.asarray(slots, dtype=np.int64),
        np.array([k & MASK for k in keys], dtype=np.uint64),
        bytes(fmt_codes), payloads,
    )  # fmt: skip


def drop_pages(fd: int, data_at: int, stride: int, slots: Sequence[int]) -> None:
    """`POSIX_FADV_DONTNEED` over each slot, in one call."""
    _slots.drop_pages(fd, data_at, stride, np.asarray(slots, dtype=np.int64))
