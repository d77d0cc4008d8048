"""The disk tier file's superblock and its one owner (`DiskTier`, hkv/storage/disk.py).

The first page of a tier file holds its magic, layout version, geometry and the owner's pid;
an exclusive, non-blocking `flock` on the file keeps a second tier (in this process or another)
off it, and the refusal names the pid that holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from pathlib import Path
from typing import Any

from hkv.errors import HkvError


class DamagedTierFile(HkvError):
    """A tier file that cannot be reopened as it is (not hkv's, another version, truncated, a
    damaged superblock): its owner may make it anew, where a second tier on a file in use may
    not (that is a plain `HkvError`)."""


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
            f"DiskTier: {str(path)!r} is in use by another disk tier ({owner}); give each tier "
            "its own file (vLLM's disk tier: its `path`; hkv's block manager: `disk_path`), or "
            "close the other one first"
        ) from None


def _superblock(fd: int, path: Path) -> tuple:
    """The superblock of the tier file open at `fd`, checked against the file's size."""
    head = os.pread(fd, _SUPER.size, 0)
    if len(head) < _SUPER.size or _SUPER.unpack(head)[0] != _FILE_MAGIC:
        raise DamagedTierFile(f"DiskTier.open: {str(path)!r} is not an hkv disk tier file")
    fields = _SUPER.unpack(head)
    _, version, header_bytes, num_slots, slot_bytes, stride, table_at, data_at, _ = fields
    if (version, header_bytes) != (FILE_VERSION, HEADER_BYTES):
        raise DamagedTierFile(
            f"DiskTier.open: {str(path)!r} has file version {version}; this hkv reads version "
            f"{FILE_VERSION}: create a new tier file"
        )
    size, expected = os.fstat(fd).st_size, data_at + num_slots * stride
    if size != expected or stride < HEADER_BYTES + slot_bytes:
        raise DamagedTierFile(
            f"DiskTier.open: {str(path)!r} is {size} bytes; its superblock says {expected} "
            "(truncated or damaged): create a new tier file"
        )
    # the one layout `DiskTier()` writes: offsets past it would be read as they are (a table
    # at 2**63 is an OverflowError, not a refusal)
    layout = (_ALIGN, _ALIGN + _round_up(num_slots), _round_up(HEADER_BYTES + slot_bytes))
    if (table_at, data_at, stride) != layout:
        raise DamagedTierFile(
            f"DiskTier.open: {str(path)!r} has a damaged superblock (flag table at {table_at}, "
            f"slots at {data_at}, stride {stride}; its geometry gives {layout[0]}, {layout[1]}, "
            f"{layout[2]}): create a new tier file"
        )
    return fields


def _lay_out(fd: int, path: Path, superblock: bytes, size: int) -> None:
    """Make the file open at `fd` (owned) `superblock` then zeros, `size` bytes (the magic
    first: a start killed half-way leaves a file `DiskTier()` may overwrite); on failure the
    file is removed and `fd` closed, with an `HkvError` naming the size for an error of the
    file system (the file is larger than it allows, or than a file may be)."""
    try:
        os.ftruncate(fd, 0)
        _write_all(fd, superblock, 0)
        os.ftruncate(fd, size)
        os.fsync(fd)
    except (OSError, OverflowError) as exc:  # no half-made file left behind
        _discard(fd, path)
        raise HkvError(
            f"DiskTier: cannot make a tier file of {size} bytes at {str(path)!r} ({exc}); give "
            "fewer bytes or a file system with room for it"
        ) from None
    except BaseException:
        _discard(fd, path)
        raise


def _discard(fd: int, path: Path) -> None:
    """Remove the tier file this process was making at `path` (open at `fd`, owned) and close
    it: a file cut short of its superblock would make the next start refuse the path."""
    with contextlib.suppress(OSError):
        os.unlink(path)
    os.close(fd)


def _write_all(fd: int, data: Any, offset: int) -> None:
    """`os.pwrite` of all of `data` at `offset`: a short write goes on where it stopped."""
    view = memoryview(data).cast("B")
    while view.nbytes:
        done = os.pwrite(fd, view, offset)
        if done <= 0:
            raise OSError(f"wrote {done} of {view.nbytes} bytes at offset {offset}")
        view, offset = view[done:], offset + done


def _writev_all(fd: int, buffers: list[Any], offset: int) -> None:
    """`os.pwritev` of all of `buffers` at `offset`: after a short write, the rest follows (a
    slot whose bytes did not all land would pass as stored and read as lost)."""
    done = os.pwritev(fd, buffers, offset)
    total = sum(memoryview(b).nbytes for b in buffers)
    if done < total:
        rest = b"".join(memoryview(b).cast("B") for b in buffers)[done:]
        _write_all(fd, rest, offset + done)
