"""The disk tier file's superblock and its one owner (`DiskTier`, hkv/storage/disk.py).

The first page of a tier file holds its magic, layout version, geometry and the owner's pid;
an exclusive, non-blocking `flock` on the file keeps a second tier (in this process or another)
off it, and the refusal names the pid that holds it.
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

from hkv.errors import HkvError

_FILE_MAGIC = b"HKVD"
FILE_VERSION = 2
"""Version of the file layout (2: the superblock names its owner's pid)."""
_SUPER = struct.Struct("<4sHHQQQQQQ")  # magic, file version, header bytes, slots, slot bytes,
#                                        stride, flag table offset, first slot's offset, owner pid
HEADER_BYTES = 64
"""Bytes before each slot's payload (the header, zero-padded)."""
_ALIGN = 4096


def _round_up(n: int, to: int = _ALIGN) -> int:
    return -(-n // to) * to


def _take_ownership(fd: int, path: Path) -> None:
    """Lock `fd` exclusively (non-blocking) or close it and say who holds the file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        head = os.pread(fd, _SUPER.size, 0)
        fields = _SUPER.unpack(head) if len(head) == _SUPER.size else None
        owner = f"pid {fields[-1]}" if fields and fields[0] == _FILE_MAGIC else "unknown pid"
        os.close(fd)
        raise HkvError(
            f"DiskTier: {str(path)!r} is in use by another disk tier ({owner}); give each "
            "manager its own disk_path, or close the other one first"
        ) from None


def _superblock(fd: int, path: Path) -> tuple:
    """The superblock of the tier file open at `fd`, checked against the file's size."""
    head = os.pread(fd, _SUPER.size, 0)
    if len(head) < _SUPER.size or _SUPER.unpack(head)[0] != _FILE_MAGIC:
        raise HkvError(f"DiskTier.open: {str(path)!r} is not an hkv disk tier file")
    fields = _SUPER.unpack(head)
    _, version, header_bytes, num_slots, slot_bytes, stride, table_at, data_at, _ = fields
    if (version, header_bytes) != (FILE_VERSION, HEADER_BYTES):
        raise HkvError(
            f"DiskTier.open: {str(path)!r} has file version {version}; this hkv reads version "
            f"{FILE_VERSION}: create a new tier file"
        )
    size, expected = os.fstat(fd).st_size, data_at + num_slots * stride
    if size != expected or stride < HEADER_BYTES + slot_bytes:
        raise HkvError(
            f"DiskTier.open: {str(path)!r} is {size} bytes; its superblock says {expected} "
            "(truncated or damaged): create a new tier file"
        )
    # the one layout `DiskTier()` writes: offsets past it would be read as they are (a table
    # at 2**63 is an OverflowError, not a refusal)
    layout = (_ALIGN, _ALIGN + _round_up(num_slots), _round_up(HEADER_BYTES + slot_bytes))
    if (table_at, data_at, stride) != layout:
        raise HkvError(
            f"DiskTier.open: {str(path)!r} has a damaged superblock (flag table at {table_at}, "
            f"slots at {data_at}, stride {stride}; its geometry gives {layout[0]}, {layout[1]}, "
            f"{layout[2]}): create a new tier file"
        )
    return fields
