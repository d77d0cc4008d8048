"""The disk tier's slot I/O in C (`hkv.storage.slot_io`) against its Python path: the same file
bytes written, the same slots read back, the same slots reported lost with the same reasons."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from hkv.storage import slot_io
from hkv.storage.disk import HEADER_BYTES, DiskTier

pytestmark = pytest.mark.skipif(not slot_io.built(), reason="hkv.storage._slots is not built")

SLOT = 4096


def payload(seed: int, nbytes: int = SLOT) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def test_crc32_is_zlibs() -> None:
    """Both C implementations (the system zlib's where found, the module's tables) agree with
    Python's zlib, at every alignment and length."""
    data = payload(1, 10_007)
    for start, stop in [(0, 0), (0, 1), (3, 11), (1, 4099), (0, 10_007), (5, 10_000)]:
        assert slot_io.crc32(data[start:stop]) == zlib.crc32(data[start:stop])
        assert slot_io._slots.crc32_table(data[start:stop]) == zlib.crc32(data[start:stop])


def entries_for(slots: list[int]) -> list[tuple]:
    # full slots, short payloads and formats mixed, keys past 2**63
    fmts = ["raw", "q8", "raw", "fp16", "raw", "raw"]
    return [
        (slot, 2**63 + slot, fmts[i % len(fmts)], payload(slot, SLOT - 100 * (i % 3)))
        for i, slot in enumerate(slots)
    ]


SLOTS = [0, 1, 2, 5, 6, 9, 3]


def test_native_writes_the_bytes_python_writes(tmp_path, monkeypatch) -> None:
    with DiskTier(tmp_path / "c.kv", 12, SLOT) as native:
        native.write_many(entries_for(SLOTS))
    monkeypatch.setattr(slot_io, "_slots", None)
    with DiskTier(tmp_path / "py.kv", 12, SLOT) as python:
        python.checksum_kind = slot_io.CHECKSUM_KIND
        python.write_many(entries_for(SLOTS))
    c_bytes, py_bytes = (tmp_path / "c.kv").read_bytes(), (tmp_path / "py.kv").read_bytes()
    skip = 64  # the superblock's owner pid differs; everything after it must not
    assert c_bytes[: skip - 8] == py_bytes[: skip - 8] and c_bytes[skip:] == py_bytes[skip:]


def damage(tier: DiskTier) -> None:
    """Flip a payload byte of slot 1, rewrite slot 2's key, clear slot 5's flag, cut the file
    inside slot 9's payload; slot 6 is read under another format."""
    with open(tier.path, "r+b") as f:
        f.seek(tier._offset(1) + HEADER_BYTES + 17)
        f.write(bytes([f.read(1)[0] ^ 0x40]))
        f.seek(tier._offset(2) + 8)
        f.write(b"\x01" * 8)
    tier._mark([5], valid=False)
    with open(tier.path, "r+b") as f:
        f.truncate(tier._offset(9) + HEADER_BYTES + 10)


def read_back(tier: DiskTier, asked: list[tuple]) -> tuple[list, np.ndarray]:
    out = np.zeros(len(asked) * SLOT, dtype=np.uint8)
    problems = tier.read_many(asked, out, [i * SLOT for i in range(len(asked))])
    return problems, out


def test_reads_agree_on_every_slot(tmp_path, monkeypatch) -> None:
    written = entries_for(SLOTS)
    with DiskTier(tmp_path / "t.kv", 12, SLOT) as tier:
        tier.write_many(written)
        damage(tier)
        asked = [(slot, key, "fp16" if slot == 6 else fmt) for slot, key, fmt, _ in written]
        asked.append((11, 7, "raw"))  # never written
        c_problems, c_out = read_back(tier, asked)
        monkeypatch.setattr(slot_io, "_slots", None)
        py_problems, py_out = read_back(tier, asked)
    assert c_problems == py_problems
    lost = {asked[i][0] for i, p in enumerate(py_problems) if p is not None}
    assert lost == {1, 2, 5, 6, 9, 11}
    for i, (slot, _, _, data) in enumerate(written):
        if slot not in lost:  # intact slots come back byte for byte, by both paths
            got = c_out[i * SLOT : i * SLOT + data.size]
            assert np.array_equal(got, data) and np.array_equal(
                py_out[i * SLOT :][: data.size], data
            )


def test_python_reads_what_native_wrote(tmp_path, monkeypatch) -> None:
    """Files are one format: a tier without the C module reads a file the C path wrote."""
    with DiskTier(tmp_path / "t.kv", 12, SLOT) as tier:
        tier.write_many(entries_for(SLOTS))
    monkeypatch.setattr(slot_io, "_slots", None)
    with DiskTier.open(tmp_path / "t.kv") as again:
        asked = [(slot, key, fmt) for slot, key, fmt, _ in entries_for(SLOTS)]
        problems, _ = read_back(again, asked)
    assert problems == [None] * len(asked)


def test_a_slot_under_another_checksum_goes_through_python(tmp_path) -> None:
    with DiskTier(tmp_path / "t.kv", 4, SLOT) as tier:
        tier.checksum_kind = 99  # not a kind: neither path vouches for it
        with pytest.raises(KeyError):
            tier.write_many([(0, 1, "raw", payload(1))])
        tier.checksum_kind = slot_io.CHECKSUM_KIND
        tier.write_many([(0, 1, "raw", payload(1))])
        with open(tier.path, "r+b") as f:  # the header's checksum kind byte
            f.seek(tier._offset(0) + 7)
            f.write(bytes([42]))
        problems, _ = read_back(tier, [(0, 1, "raw")])
    assert problems == ["slot 0: checksum kind 42 unavailable here (install xxhash)"]


def test_payload_longer_than_a_slot_is_refused_before_writing(tmp_path) -> None:
    from hkv.errors import HkvError

    with DiskTier(tmp_path / "t.kv", 2, SLOT) as tier:
        with pytest.raises(HkvError, match="exceeds slot_bytes"):
            tier.write_many([(0, 1, "raw", payload(1)), (1, 2, "raw", payload(2, SLOT + 1))])
        assert tier.scan() == {}
