"""The disk tier: one file of fixed-size slots, bounded (vLLM's file tier is not), one owner.

Each slot is a header (magic, version, format, key, payload length, checksum) and the payload; its
valid flag (in a table of flags) is set last, after header and payload are on disk, so an
interrupted write never leaves a slot that reads as valid, and a torn, corrupted or truncated slot
is reported lost, never returned. Reads use `pread`, never a memory map: a file truncated or
replaced under the tier makes a read short (a lost slot), not a SIGBUS. The file has one owner at
a time (an exclusive `flock`, its pid in the superblock). The GPU and host tiers are in
`hkv.storage.tiers`.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hkv.errors import HkvError
from hkv.formats import COLD_FORMATS
from hkv.storage import slot_io
from hkv.storage.disk_file import (
    _ALIGN,
    _FILE_MAGIC,
    _SUPER,
    FILE_VERSION,
    HEADER_BYTES,
    _lay_out,
    _round_up,
    _superblock,
    _take_ownership,
    _write_all,
    _writev_all,
)
from hkv.storage.layout import SlotPool, SlotTier, check_count

try:  # xxh3 checksums at memory speed where xxhash is installed; zlib's crc32 otherwise
    import xxhash

    _XXH3 = xxhash.xxh3_64_intdigest
except ImportError:  # pragma: no cover - depends on the environment
    _XXH3 = None

CHECKSUMS = {1: ("crc32", zlib.crc32)}
if _XXH3 is not None:
    CHECKSUMS[2] = ("xxh3_64", _XXH3)
DEFAULT_CHECKSUM = 1 if slot_io.built() else max(CHECKSUMS)
"""crc32 where the C slot I/O is built (it checks crc32 without the GIL), else the fastest."""

SLOT_FORMATS = (*COLD_FORMATS, "raw")
"""What a slot header may name: hkv's cold formats, or `raw`, another engine's bytes kept as
they came (vLLM's offloaded chunks, `hkv.storage.disk_store`). Codes are indices: append only."""

_SLOT_MAGIC = b"HKVS"
_VERSION = 1  # of a slot header
VALID = 0x5A
"""A slot's byte in the valid-flag table when its header and payload are durable."""
_HEADER = struct.Struct("<4sHBBQQQ")  # magic, version, format, checksum kind, key, length, sum
_KEY_MASK = 2**64 - 1


@dataclass(frozen=True)
class SlotHeader:
    """What a valid disk slot says it holds."""

    key: int
    fmt: str
    nbytes: int
    checksum_kind: str


RUN_SLOTS = 64
"""Consecutive slots one `read_many` system call reads at most (32 MiB of 512 KiB slots)."""
_MAX_IOV = min(1024, os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024)
"""Buffers one `pwritev` may take (the kernel's limit)."""


class DiskTier(SlotTier):
    """`num_slots` slots of up to `slot_bytes` payload in one file at `path`, owned by this tier.

    File: a superblock page (magic, file version, geometry, owner pid); a table of one
    valid-flag byte per slot; then the slots, each a 64-byte header (magic, version, format,
    checksum kind, key, payload length, checksum) and the payload. The flags live together
    rather than in each header so that marking a batch valid writes a few table pages instead
    of one scattered page per slot (which halved write throughput when measured).

    Ownership: creating or opening takes an exclusive, non-blocking `flock` on the file, held
    until `close`; a second tier on the same path (in this process or another) gets an
    `HkvError` naming the owner's pid, before anything is truncated or written. Creating
    refuses to overwrite a file that is not an hkv tier file; `open` refuses a file of another
    version or of the wrong size.

    Writes (`write_many`) go through `os.pwritev`, in three steps, each made durable with
    `fdatasync` before the next: clear the flags of slots being reused; write headers and
    payloads; set the flags. Reads (`read_many`) go through `os.pread` / `os.preadv` and check
    flag, magic, version, key, format, length and checksum: a slot failing any, or cut short by
    a truncated file, is reported lost. Keys are integers, compared modulo 2**64.
    """

    def __init__(self, path: str | os.PathLike[str], num_slots: int, slot_bytes: int):
        check_count("DiskTier", "num_slots", num_slots)
        check_count("DiskTier", "slot_bytes", slot_bytes)
        path = Path(path)
        if not path.parent.is_dir():
            raise HkvError(f"DiskTier.path: folder {str(path.parent)!r} does not exist")
        stride = _round_up(HEADER_BYTES + slot_bytes)
        table_at = _ALIGN
        data_at = table_at + _round_up(num_slots)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        _take_ownership(fd, path)
        head = (_FILE_MAGIC, FILE_VERSION, HEADER_BYTES, num_slots, slot_bytes, stride)
        head = (*head, table_at, data_at, os.getpid())
        try:
            first = os.pread(fd, 4, 0)
            if first and first != _FILE_MAGIC:
                raise HkvError(
                    f"DiskTier.path: {str(path)!r} exists and is not an hkv disk tier file; "
                    "give a new path (hkv overwrites only its own tier files)"
                )
        except BaseException:
            os.close(fd)
            raise
        _lay_out(fd, path, _SUPER.pack(*head), data_at + num_slots * stride)
        self._attach(path, fd, head)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> DiskTier:
        """Reopen a tier file (after a crash, say); slots whose flag is set stay valid."""
        path = Path(path)
        if not path.is_file():
            raise HkvError(f"DiskTier.open: no such file {str(path)!r}")
        fd = os.open(path, os.O_RDWR)
        _take_ownership(fd, path)
        try:
            head = _superblock(fd, path)
            _write_all(fd, struct.pack("<Q", os.getpid()), _SUPER.size - 8)
        except BaseException:
            os.close(fd)
            raise
        tier = cls.__new__(cls)
        tier._attach(path, fd, head)
        flags = os.pread(fd, tier.capacity_blocks, tier._table_at)
        tier._flags[: len(flags)] = flags
        return tier

    def _attach(self, path: Path, fd: int, head: tuple) -> None:
        _, _, _, num_slots, slot_bytes, stride, table_at, data_at, _ = head
        self.path, self._fd = path, fd
        self.slot_bytes, self.stride = slot_bytes, stride
        self._table_at, self._data_at = table_at, data_at
        self._slots = SlotPool(num_slots)
        self._flags = bytearray(num_slots)  # what this process last made durable
        self.checksum_kind = DEFAULT_CHECKSUM

    def _offset(self, slot: int) -> int:
        return self._data_at + slot * self.stride

    def _mark(self, slots: Sequence[int], valid: bool) -> None:
        """Write the flags of `slots` (one contiguous table range) and make them durable."""
        for slot in slots:
            self._flags[slot] = VALID if valid else 0
        low, high = min(slots), max(slots) + 1
        _write_all(self._fd, self._flags[low:high], self._table_at + low)
        os.fdatasync(self._fd)

    def write_many(self, entries: Sequence[tuple[int, int, str, Any]]) -> int:
        """Store `(slot, key, fmt, payload)` entries; returns the payload bytes written.

        `payload` is anything with the buffer protocol (a numpy array, a CPU tensor's `.numpy()`).
        """
        if not entries:
            return 0
        reused = [slot for slot, *_ in entries if self._flags[slot]]
        if reused:
            self._mark(reused, valid=False)
        if slot_io.built() and self.checksum_kind == slot_io.CHECKSUM_KIND:
            total = self._write_native(entries)
        else:
            total = self._write_python(entries)
        os.fdatasync(self._fd)
        self._mark([slot for slot, *_ in entries], valid=True)
        return total

    def _write_native(self, entries: Sequence[tuple[int, int, str, Any]]) -> int:
        payloads = [memoryview(payload).cast("B") for *_, payload in entries]
        for data in payloads:
            if data.nbytes > self.slot_bytes:
                self._too_long(data.nbytes)
        slots = [slot for slot, *_ in entries]
        codes = [SLOT_FORMATS.index(fmt) for _, _, fmt, _ in entries]
        keys = [key for _, key, *_ in entries]
        return slot_io.write(self._fd, self._data_at, self.stride, slots, keys, codes, payloads)

    def _too_long(self, nbytes: int) -> None:
        raise HkvError(f"DiskTier: payload of {nbytes} bytes exceeds slot_bytes={self.slot_bytes}")

    def _write_python(self, entries: Sequence[tuple[int, int, str, Any]]) -> int:
        kind, total = self.checksum_kind, 0
        run: list[Any] = []  # buffers of consecutive slots, written with one pwritev
        run_start = previous = None
        last_bytes = 0
        for slot, key, fmt, payload in entries:
            data = memoryview(payload).cast("B")
            if data.nbytes > self.slot_bytes:
                self._too_long(data.nbytes)
            fields = (_SLOT_MAGIC, _VERSION, SLOT_FORMATS.index(fmt), kind, key & _KEY_MASK)
            header = _HEADER.pack(*fields, data.nbytes, CHECKSUMS[kind][1](data))
            if run and (slot != previous + 1 or len(run) >= _MAX_IOV - 3):
                _writev_all(self._fd, run, self._offset(run_start))
                run = []
            if not run:
                run_start = slot
            elif gap := self.stride - HEADER_BYTES - last_bytes:
                run.append(bytes(gap))  # the rest of the previous slot
            run += [header.ljust(HEADER_BYTES, b"\0"), data]
            previous, last_bytes = slot, data.nbytes
            total += data.nbytes
        _writev_all(self._fd, run, self._offset(run_start))
        return total

    def write(self, slot: int, key: int, fmt: str, payload: Any) -> None:
        self.write_many([(slot, key, fmt, payload)])

    def read_many(
        self, entries: Sequence[tuple[int, int, str]], out: np.ndarray, offsets: Sequence[int]
    ) -> list[str | None]:
        """Copy each `(slot, key, fmt)` payload into `out[offset:]` and verify it.

        Returns, per entry, None when the payload is intact, else why it is lost (the bytes at
        its offset in `out` must then not be used).
        """
        if not entries:
            return []
        size = os.fstat(self._fd).st_size
        slots = [slot for slot, *_ in entries]
        self._read_ahead(slots, size)
        low = min(slots)
        flags = os.pread(self._fd, max(slots) + 1 - low, self._table_at + low)
        valid = [s - low < len(flags) and flags[s - low] == VALID for s in slots]
        if not slot_io.built() or any(fmt not in SLOT_FORMATS for *_, fmt in entries):
            return self._read_python(entries, out, offsets, valid)
        codes = bytearray(len(entries))
        geometry = (self._data_at, self.stride, self.slot_bytes, RUN_SLOTS)
        for fmt in {fmt for *_, fmt in entries}:  # the C path checks one format a call
            part = [i for i, (*_, f) in enumerate(entries) if f == fmt]
            got = slot_io.read(
                self._fd, geometry, [slots[i] for i in part], [entries[i][1] for i in part],
                bytes(valid[i] for i in part), SLOT_FORMATS.index(fmt), out,
                [offsets[i] for i in part],
            )  # fmt: skip
            for i, code in zip(part, got, strict=True):
                codes[i] = code
        problems: list[str | None] = [None] * len(codes)
        # what C could not vouch for (another checksum kind, any problem): the Python path
        # reads it again, decides and says why
        again = [i for i, code in enumerate(codes) if code != slot_io.OK]
        if again:
            redo = self._read_python(
                [entries[i] for i in again], out, [offsets[i] for i in again],
                [valid[i] for i in again],
            )  # fmt: skip
            for i, problem in zip(again, redo, strict=True):
                problems[i] = problem
        return problems

    def _read_python(
        self, entries: Sequence[tuple[int, int, str]], out: np.ndarray, offsets: Sequence[int],
        valid: Sequence[bool],
    ) -> list[str | None]:  # fmt: skip
        """`read_many` in Python: the reference the C path agrees with, and the one that says
        why a slot is lost."""
        slots = [slot for slot, *_ in entries]
        problems: list[str | None] = []
        start = 0
        while start < len(entries):  # runs of consecutive slots, each read in one call
            end = start + 1
            while (
                end < len(entries) and end - start < RUN_SLOTS and slots[end] == slots[end - 1] + 1
            ):
                end += 1
            run = range(start, end)
            staging = self._read_span(slots[start], end - start)
            for i in run:
                entry, offset = entries[i], int(offsets[i])
                at = (i - start) * self.stride
                problems.append(self._check(entry, staging, at, out, offset, valid[i]))
            start = end
        return problems

    def _read_span(self, first: int, count: int) -> np.ndarray:
        """Slots `first .. first + count - 1`, headers and payloads, in one `preadv`: one
        system call, so a reader thread gives up and retakes the GIL once per run, not twice
        per slot (under a busy engine thread each retake waits for its switch interval)."""
        span = (count - 1) * self.stride + HEADER_BYTES + self.slot_bytes
        staging = np.empty(span, dtype=np.uint8)
        got = os.preadv(self._fd, [staging], self._offset(first))
        return staging[:got]

    def _check(
        self, entry: tuple[int, int, str], staging: np.ndarray, at: int, out: np.ndarray,
        offset: int, valid: bool,
    ) -> str | None:  # fmt: skip
        """Verify the slot read at `staging[at:]` and copy its payload to `out[offset:]`;
        None, or why the slot is lost."""
        slot, key, fmt = entry
        if not valid:
            return f"slot {slot} is not marked valid (never written, or an interrupted write)"
        if at + _HEADER.size > staging.size:
            return f"file truncated before slot {slot}'s header"
        raw = staging[at : at + _HEADER.size].tobytes()
        magic, version, fmt_code, kind, stored_key, nbytes, checksum = _HEADER.unpack(raw)
        if (magic, version, stored_key) != (_SLOT_MAGIC, _VERSION, key & _KEY_MASK):
            return f"slot {slot}: header does not match block {key} (magic, version or key)"
        if fmt_code >= len(SLOT_FORMATS) or SLOT_FORMATS[fmt_code] != fmt:
            return f"slot {slot}: header format code {fmt_code} is not {fmt}"
        if nbytes > self.slot_bytes or offset + nbytes > out.size:
            return f"slot {slot}: header says {nbytes} payload bytes, more than fit"
        if kind not in CHECKSUMS:
            return f"slot {slot}: checksum kind {kind} unavailable here (install xxhash)"
        first = at + HEADER_BYTES
        if first + nbytes > staging.size:
            return f"file truncated inside slot {slot}'s payload"
        dest = out[offset : offset + nbytes]
        dest[:] = staging[first : first + nbytes]
        if CHECKSUMS[kind][1](dest) != checksum:
            return f"slot {slot}: checksum mismatch (corrupted payload)"
        return None

    def _read_ahead(self, slots: list[int], size: int) -> None:
        """One readahead hint for the batch's span, when the batch fills most of it (the disk
        then reads while earlier slots are verified; a hint per slot was slower, measured)."""
        if not slots or not hasattr(os, "posix_fadvise"):
            return
        start, end = self._offset(min(slots)), min(self._offset(max(slots)) + self.stride, size)
        if end > start and end - start <= 2 * len(slots) * self.stride:
            os.posix_fadvise(self._fd, start, end - start, os.POSIX_FADV_WILLNEED)

    def read(self, slot: int, key: int, fmt: str) -> np.ndarray | None:
        """The verified payload of `slot`, or None when it is lost."""
        staging = self._read_span(slot, 1)
        if staging.size < HEADER_BYTES:
            return None
        nbytes = _HEADER.unpack(staging[: _HEADER.size].tobytes())[5]
        out = np.empty(min(nbytes, self.slot_bytes), dtype=np.uint8)
        (problem,) = self.read_many([(slot, key, fmt)], out, [0])
        return None if problem is not None else out

    def scan(self) -> dict[int, SlotHeader]:
        """Headers of the slots marked valid (payload checksums are checked at read time)."""
        flags = os.pread(self._fd, self.capacity_blocks, self._table_at)
        found = {}
        for slot, flag in enumerate(flags):
            raw = os.pread(self._fd, _HEADER.size, self._offset(slot)) if flag == VALID else b""
            if len(raw) < _HEADER.size:
                continue
            magic, _, fmt_code, kind, key, nbytes, _ = _HEADER.unpack(raw)
            if magic == _SLOT_MAGIC and fmt_code < len(SLOT_FORMATS):
                name = CHECKSUMS.get(kind, ("unknown",))[0]
                found[slot] = SlotHeader(key, SLOT_FORMATS[fmt_code], nbytes, name)
        return found

    def forget_pages(self, slots: Sequence[int]) -> None:
        """Drop `slots` (durable after `write_many`) from the page cache, so that reading them
        back reads the disk, not a copy in RAM that the host tier should be holding instead."""
        if not slots or not hasattr(os, "posix_fadvise"):
            return
        if slot_io.built():
            slot_io.drop_pages(self._fd, self._data_at, self.stride, sorted(slots))
            return
        for slot in sorted(slots):  # neighbours merge in the kernel; one call each is cheap
            os.posix_fadvise(self._fd, self._offset(slot), self.stride, os.POSIX_FADV_DONTNEED)

    def drop_cache(self) -> None:
        """Evict this file from the page cache (benchmarks use it to time reads from the disk)."""
        os.fdatasync(self._fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        """Close the file and release its lock (idempotent)."""
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()

    def __enter__(self) -> DiskTier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
