"""The disk tier under faults: one owner per file, and never a corrupted block returned.

Each fault test counts the blocks a read returned whose bytes differ from what was written
("corrupted") and asserts there are none; lost blocks (reported, not returned) are fine. Seeded;
a few seconds in all.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from hkv.errors import HkvError
from hkv.storage.disk import HEADER_BYTES, DiskTier

SLOTS, SLOT_BYTES = 16, 4096


def payload(key: int, nbytes: int = SLOT_BYTES) -> np.ndarray:
    return np.random.default_rng(key).integers(0, 256, nbytes, dtype=np.uint8)


def filled(path, keys=range(SLOTS)) -> DiskTier:
    disk = DiskTier(path, SLOTS, SLOT_BYTES)
    slots = disk.allocate(len(keys))
    disk.write_many([(s, k, "q8", payload(k)) for s, k in zip(slots, keys, strict=True)])
    return disk


def count_reads(disk: DiskTier, keys=range(SLOTS)) -> tuple[int, int, int]:
    """(intact, lost, corrupted) over slot i holding key i."""
    intact = lost = corrupted = 0
    for key in keys:
        got = disk.read(key, key, "q8")
        if got is None:
            lost += 1
        elif np.array_equal(got, payload(key)):
            intact += 1
        else:
            corrupted += 1
    return intact, lost, corrupted


def run_python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_layout_formats_disk_and_table_import_without_torch() -> None:
    code = """
        import sys
        sys.modules["torch"] = None  # any import of torch fails
        import hkv.storage.layout, hkv.formats, hkv.storage.disk, hkv.storage.table
        print("ok")
    """
    proc = run_python(code)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == "ok", err


# ---- one owner -----------------------------------------------------------------------------


def test_a_second_opener_is_refused_and_the_first_keeps_reading(tmp_path) -> None:
    path = tmp_path / "tier.kv"
    disk = filled(path)
    for again in (lambda: DiskTier(path, SLOTS, SLOT_BYTES), lambda: DiskTier.open(path)):
        with pytest.raises(HkvError, match=rf"in use by another disk tier \(pid {os.getpid()}\)"):
            again()
    assert count_reads(disk) == (SLOTS, 0, 0)  # nothing was truncated under it
    disk.close()
    with DiskTier.open(path) as reopened:  # the lock went with the first owner
        assert count_reads(reopened) == (SLOTS, 0, 0)


def test_files_of_the_wrong_size_or_kind_are_refused(tmp_path) -> None:
    path = tmp_path / "tier.kv"
    filled(path).close()
    os.truncate(path, os.path.getsize(path) - 10)
    with pytest.raises(HkvError, match="truncated or damaged"):
        DiskTier.open(path)
    with open(path, "r+b") as f:
        f.write(b"HKVD\x01\x00")  # a version-1 superblock
    with pytest.raises(HkvError, match="file version 1"):
        DiskTier.open(path)
    precious = tmp_path / "notes.txt"
    precious.write_bytes(b"not a tier")
    with pytest.raises(HkvError, match="not an hkv disk tier file"):
        DiskTier(precious, 2, 64)
    assert precious.read_bytes() == b"not a tier"  # never overwritten


@pytest.mark.parametrize("table_at", [0, 8, 4095, 4097, 2**32, 2**63 - 1, 2**63, 2**64 - 1])
def test_a_superblock_with_a_damaged_table_offset_is_refused(tmp_path, table_at) -> None:
    """The flag table's offset (superblock bytes 32-39) is not covered by the size check:
    any value but the one written is refused in one line, never read at (2**63 and 2**64 - 1
    once raised OverflowError and OSError)."""
    path = tmp_path / "tier.kv"
    filled(path).close()
    with open(path, "r+b") as f:
        f.seek(32)
        f.write(table_at.to_bytes(8, "little"))
    with pytest.raises(HkvError, match=f"damaged superblock \\(flag table at {table_at},"):
        DiskTier.open(path)
    with open(path, "r+b") as f:
        f.seek(32)
        f.write((4096).to_bytes(8, "little"))
    with DiskTier.open(path) as reopened:  # the offset put back: every block is there again
        assert count_reads(reopened) == (SLOTS, 0, 0)


READER = """
    import sys, time
    import numpy as np
    from hkv.storage.disk import DiskTier

    def payload(key):
        return np.random.default_rng(key).integers(0, 256, 4096, dtype=np.uint8)

    disk = DiskTier.open(sys.argv[1])
    print("ready", flush=True)
    reads = lost = corrupted = 0
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        for key in range(16):
            got = disk.read(key, key, "q8")
            reads += 1
            if got is None:
                lost += 1
            elif not np.array_equal(got, payload(key)):
                corrupted += 1
    print(reads, lost, corrupted, flush=True)
"""


def test_two_processes_reader_survives_an_opener_and_a_truncation(tmp_path) -> None:
    path = tmp_path / "tier.kv"
    filled(path).close()
    reader = run_python(READER, str(path), "1.5")
    assert reader.stdout.readline().strip() == "ready"
    for _ in range(20):  # another process's tiers on the same path: refused, file untouched
        with pytest.raises(HkvError, match=rf"pid {reader.pid}"):
            DiskTier(path, SLOTS, SLOT_BYTES)
        with pytest.raises(HkvError, match=rf"pid {reader.pid}"):
            DiskTier.open(path)
    time.sleep(0.3)
    os.truncate(path, os.path.getsize(path) // 2)  # behind the tier's back: would be SIGBUS
    out, err = reader.communicate(timeout=30)
    assert reader.returncode == 0, (reader.returncode, err)  # -7 would be SIGBUS
    reads, lost, corrupted = map(int, out.split())
    print(
        f"two processes: {reads} reads, {lost} lost (after the truncation), {corrupted} corrupted"
    )
    assert corrupted == 0 and reads > lost > 0


# ---- faults: 0 corrupted blocks ------------------------------------------------------------


def test_payload_bit_flips_are_never_returned(tmp_path) -> None:
    rng = random.Random(20)
    disk = filled(tmp_path / "tier.kv")
    flipped = set()
    with open(disk.path, "r+b") as f:
        for _ in range(10):
            key = rng.randrange(SLOTS)
            f.seek(disk._offset(key) + HEADER_BYTES + rng.randrange(SLOT_BYTES))
            byte = f.read(1)[0]
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
            flipped.add(key)
    intact, lost, corrupted = count_reads(disk)
    print(
        f"bit flips: {len(flipped)} slots hit, {intact} intact, {lost} lost, {corrupted} corrupted"
    )
    assert corrupted == 0 and lost == len(flipped) and intact == SLOTS - len(flipped)


def test_truncation_at_random_offsets_loses_blocks_never_corrupts(tmp_path) -> None:
    rng = random.Random(21)
    totals = np.zeros(3, dtype=int)
    for _ in range(40):
        disk = filled(tmp_path / "tier.kv")
        cut = rng.randrange(os.path.getsize(disk.path))
        os.truncate(disk.path, cut)
        counts = count_reads(disk)
        totals += counts
        out = np.zeros(SLOTS * SLOT_BYTES, dtype=np.uint8)
        entries = [(k, k, "q8") for k in range(SLOTS)]
        problems = disk.read_many(entries, out, [k * SLOT_BYTES for k in range(SLOTS)])
        assert sum(p is None for p in problems) == counts[0]
        disk.close()
    print(f"truncations: intact, lost, corrupted = {totals.tolist()}")
    assert totals[2] == 0 and totals[1] > 0


def test_zeroed_headers_and_flags_are_lost_not_served(tmp_path) -> None:
    rng = random.Random(22)
    disk = filled(tmp_path / "tier.kv")
    zeroed = rng.sample(range(SLOTS), 6)
    with open(disk.path, "r+b") as f:
        for key in zeroed[:4]:
            f.seek(disk._offset(key))
            f.write(bytes(HEADER_BYTES))
        for key in zeroed[4:]:  # the flag table's byte
            f.seek(disk._table_at + key)
            f.write(b"\0")
    intact, lost, corrupted = count_reads(disk)
    assert (intact, lost, corrupted) == (SLOTS - 6, 6, 0)
    disk.close()
    with open(disk.path, "r+b") as f:
        f.write(bytes(64))  # the superblock
    with pytest.raises(HkvError, match="not an hkv disk tier"):
        DiskTier.open(disk.path)


WRITER = """
    import sys
    import numpy as np
    from hkv.storage.disk import DiskTier

    disk = DiskTier(sys.argv[1], 16, 4096)
    print("ready", flush=True)
    key, rounds = 0, 0
    while True:  # rewrite the first 1 to 16 slots with ever newer keys until killed
        batch = [(slot, key + slot, "q8",
                  np.random.default_rng(key + slot).integers(0, 256, 4096, dtype=np.uint8))
                 for slot in range(1 + rounds % 16)]
        disk.write_many(batch)
        key, rounds = key + 16, rounds + 1
"""


def test_sigkill_mid_write_leaves_no_corrupted_slot(tmp_path) -> None:
    rng = random.Random(23)
    path = tmp_path / "tier.kv"
    totals = np.zeros(3, dtype=int)
    for _ in range(4):
        writer = run_python(WRITER, str(path))
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.3))
        writer.send_signal(signal.SIGKILL)
        writer.communicate(timeout=30)
        assert writer.returncode == -signal.SIGKILL
        with DiskTier.open(path) as disk:  # the dead writer's lock is gone
            for slot, header in disk.scan().items():
                got = disk.read(slot, header.key, "q8")
                if got is None:
                    totals[1] += 1
                elif np.array_equal(got, payload(header.key)):
                    totals[0] += 1
                else:
                    totals[2] += 1
    print(f"SIGKILL mid-write: intact, lost, corrupted = {totals.tolist()}")
    assert totals[2] == 0  # slots caught mid-write read as not valid: lost, not served


def test_a_file_the_file_system_cannot_hold_is_refused_in_one_line_and_left_out(
    tmp_path, monkeypatch
) -> None:
    """A bound larger than a file may be (EFBIG), or than an offset can say: one `HkvError`
    naming the size, and no half-made file that the next start would refuse as damaged."""
    import errno

    from hkv.storage import disk_file

    path = tmp_path / "tier.bin"
    real = os.ftruncate

    def too_large(fd: int, size: int) -> None:
        if size:
            raise OSError(errno.EFBIG, "File too large")
        real(fd, size)

    monkeypatch.setattr(disk_file.os, "ftruncate", too_large)
    with pytest.raises(HkvError, match=r"cannot make a tier file of \d+ bytes .*File too large"):
        DiskTier(path, SLOTS, SLOT_BYTES)
    assert not path.exists()
    monkeypatch.setattr(disk_file.os, "ftruncate", real)
    with pytest.raises(HkvError, match="cannot make a tier file"):
        DiskTier(path, 2**62, SLOT_BYTES)  # past what an offset holds (OverflowError)
    assert not path.exists()
    with DiskTier(path, SLOTS, SLOT_BYTES) as disk:  # the path is free for a good one
        assert disk.capacity_blocks == SLOTS


def test_a_short_write_goes_on_where_it_stopped(tmp_path, monkeypatch) -> None:
    """Python's slot I/O (no C extension): `pwritev` may write less than it was given; the
    rest follows, so a stored slot reads back whole (it read as lost before)."""
    from hkv.storage import disk_file, slot_io

    monkeypatch.setattr(slot_io, "_slots", None)
    real, short = os.pwritev, []

    def half(fd: int, buffers: list, offset: int) -> int:
        data = b"".join(bytes(memoryview(b).cast("B")) for b in buffers)
        short.append(len(data) // 2)
        return os.pwrite(fd, data[: len(data) // 2], offset)

    monkeypatch.setattr(disk_file.os, "pwritev", half)
    disk = filled(tmp_path / "tier.bin", keys=range(4))
    monkeypatch.setattr(disk_file.os, "pwritev", real)
    try:
        assert short and count_reads(disk, keys=range(4)) == (4, 0, 0)
    finally:
        disk.close()


def test_a_start_stopped_before_its_sidecar_never_reopens_another_geometry(
    tmp_path, monkeypatch
) -> None:
    """`open_store` made anew for another bound and stopped before writing its sidecar: the
    old sidecar names another geometry than the file's, so the next start with the old bound
    makes the file anew and keeps to its bound (it reopened the larger file, and its full
    policy then raised in the engine's poll); a second server on the directory removes
    nothing of the first's."""
    from hkv.outputs import write_atomic
    from hkv.policies import make_policy
    from hkv.storage import disk_store
    from hkv.storage.disk_store import FILE_NAME, open_store, slots_within

    identity = {"model": "m"}
    small, large = 4 * (SLOT_BYTES + 8192) + 8192, 40 * (SLOT_BYTES + 8192) + 8192

    def start(bound: int) -> disk_store.DiskStore:
        return open_store(tmp_path, bound, SLOT_BYTES, identity, lambda n: make_policy("lru", n))

    start(small).close()

    def disk_full(*args, **kwargs):
        raise HkvError("disk tier path: cannot write hkv_tier.json (No space left on device)")

    monkeypatch.setattr(disk_store, "write_atomic", disk_full)
    with pytest.raises(HkvError, match="No space left"):
        start(large)
    monkeypatch.setattr(disk_store, "write_atomic", write_atomic)
    again = start(small)
    try:
        assert (
            again.tier.capacity_blocks
            == again.policy.capacity_blocks
            == slots_within(small, SLOT_BYTES)
        )
        assert os.path.getsize(tmp_path / FILE_NAME) <= small
    finally:
        again.close()
    # and a sidecar naming this geometry over a file of another is not trusted either
    DiskTier(tmp_path / FILE_NAME, 40, SLOT_BYTES).close()
    again = start(small)
    try:
        assert again.tier.capacity_blocks == slots_within(small, SLOT_BYTES)
        sidecar = (tmp_path / disk_store.META_NAME).read_text()
        with pytest.raises(HkvError, match="in use by another disk tier"):
            start(large)  # another bound, while this one owns the file
        assert (tmp_path / disk_store.META_NAME).read_text() == sidecar
    finally:
        again.close()


def test_a_tier_file_cut_short_while_down_starts_empty_instead_of_refusing(tmp_path) -> None:
    from hkv.policies import make_policy
    from hkv.storage.disk_store import FILE_NAME, digest, open_store

    def start():
        return open_store(tmp_path, 8 * (SLOT_BYTES + 8192), SLOT_BYTES, {"m": 1},
                          lambda n: make_policy("lru", n))  # fmt: skip

    store = start()
    reserved = store.reserve([(b"k", None)])
    store.write(reserved, [payload(1)])
    store.finish_write(reserved, ok=True)
    store.close()
    path = tmp_path / FILE_NAME
    os.truncate(path, os.path.getsize(path) - 100)
    store = start()
    try:
        assert len(store) == 0 and digest(b"k") not in store
        assert os.path.getsize(path) == store.file_bytes
    finally:
        store.close()
