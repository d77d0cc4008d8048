"""Tiers: bounded pools that refuse cleanly when full; a disk tier that never serves a bad slot."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch

from hkv.errors import HkvError
from hkv.models.model_spec import ModelSpec
from hkv.storage import tiers
from hkv.storage.disk import CHECKSUMS, HEADER_BYTES, DiskTier
from hkv.storage.layout import BlockLayout
from hkv.storage.tiers import GpuTier, HostTier, PinnedMemoryWarning

LAYOUT = BlockLayout(block_tokens=4, kv_heads=2, head_dim=8, num_layers=2)


def payload(seed: int, nbytes: int = 512) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


# ---- layout and GPU pool -------------------------------------------------------------------


def test_layout_of_minimax() -> None:
    layout = BlockLayout.from_spec(ModelSpec.load("minimax-m2.5"), 512)
    assert layout.shape == (62, 2, 512, 8, 128)
    assert layout.nbytes == 512 * 253_952  # docs/design.md §3: 124 MiB per 512-token block


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("block_tokens", 0, "block_tokens"),
        ("head_dim", 1.5, "head_dim"),
        ("dtype", "int8", "dtype"),
    ],
)
def test_layout_rejects_bad_values(field: str, value: object, match: str) -> None:
    args = {"block_tokens": 4, "kv_heads": 2, "head_dim": 8, field: value}
    with pytest.raises(HkvError, match=match):
        BlockLayout(**args)


def test_gpu_pool_shapes_and_full_refusal() -> None:
    gpu = GpuTier(LAYOUT, 3, device="cpu")
    assert gpu.kv.shape == (3, 2, 2, 4, 2, 8)
    assert gpu.layer(1).shape == (3, 2, 4, 2, 8)  # [num_blocks, 2, block_tokens, heads, dim]
    slots = gpu.allocate(2)
    assert slots == [0, 1]
    gpu.kv[0].fill_(1.0)
    assert gpu.allocate(2) is None  # refused, and nothing taken
    assert gpu.num_free == 1
    assert torch.all(gpu.block(0) == 1.0)
    gpu.free([0])
    with pytest.raises(RuntimeError, match="freed twice"):
        gpu.free([0])


# ---- host arena ----------------------------------------------------------------------------


def test_pinned_unavailable_falls_back_with_one_warning(monkeypatch) -> None:
    real_empty = torch.empty

    def no_pinned(*args, **kwargs):
        if kwargs.get("pin_memory"):
            raise RuntimeError("simulated: cudaHostAlloc failed")
        return real_empty(*args, **kwargs)

    monkeypatch.setattr(tiers.torch, "empty", no_pinned)
    with pytest.warns(PinnedMemoryWarning, match="pageable") as caught:
        host = HostTier(64 * 1024, pin_memory=True)
    assert len(caught) == 1
    assert host.pinned is False and host.buf.numel() == 64 * 1024


def test_no_warning_when_pinning_is_not_asked_for() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        host = HostTier(8192, pin_memory=None)
    assert host.pinned == torch.cuda.is_available()


def test_host_batch_lands_in_one_run_and_full_arena_refuses() -> None:
    host = HostTier(16 * 4096, page_bytes=4096, pin_memory=False)
    first = host.allocate(5000, 3)  # two pages each
    assert first.tolist() == [0, 8192, 16384]
    assert host.used_bytes == 6 * 4096
    host.free(first[1:2])  # a two-page hole
    assert host.allocate(5000, 7) is None  # 12 pages free, but only 6 two-page runs
    assert host.used_bytes == 4 * 4096  # the refusal took nothing
    scattered = host.allocate(5000, 6)  # no run of 12 pages: the hole is used too
    assert 8192 in scattered.tolist() and len(set(scattered.tolist())) == 6
    assert host.can_allocate(4096, 1) is False


def test_host_tier_for_layout_pages() -> None:
    big = BlockLayout(16, 8, 128)  # 64 KiB: 16 pages of 4 KiB
    host = HostTier.for_layout(big, 10, pin_memory=False)
    assert host.page_bytes == 4096 and host.capacity_bytes == 10 * big.nbytes


# ---- disk tier -----------------------------------------------------------------------------


@pytest.fixture
def disk(tmp_path):
    with DiskTier(tmp_path / "tier.kv", num_slots=4, slot_bytes=512) as tier:
        yield tier


def test_disk_round_trip_and_capacity(disk) -> None:
    slots = disk.allocate(4)
    assert disk.allocate(1) is None  # bounded: a full tier refuses
    for slot in slots:
        disk.write(slot, key=100 + slot, fmt="q8", payload=payload(slot, 300))
    for slot in slots:
        assert np.array_equal(disk.read(slot, 100 + slot, "q8"), payload(slot, 300))
    out = np.zeros(4 * 300, dtype=np.uint8)
    problems = disk.read_many([(s, 100 + s, "q8") for s in slots], out, [0, 300, 600, 900])
    assert problems == [None] * 4
    assert np.array_equal(out[300:600], payload(1, 300))
    assert set(disk.scan()) == set(slots)


def test_disk_slot_checks_key_format_and_checksum(disk) -> None:
    (slot,) = disk.allocate(1)
    disk.write(slot, key=7, fmt="bf16", payload=payload(7))
    assert disk.read(slot, 8, "bf16") is None  # another block's key
    disk.write(slot, key=7, fmt="bf16", payload=payload(7))
    assert disk.read(slot, 7, "q4") is None  # wrong format
    disk.write(slot, key=7, fmt="bf16", payload=payload(7))
    with open(disk.path, "r+b") as f:  # flip one payload byte behind the tier's back
        f.seek(disk._offset(slot) + HEADER_BYTES + 100)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    out = np.zeros(512, dtype=np.uint8)
    (problem,) = disk.read_many([(slot, 7, "bf16")], out, [0])
    assert "checksum mismatch" in problem
    assert disk.read(slot, 7, "bf16") is None  # reported lost, never returned


def test_corrupted_header_is_lost(disk) -> None:
    (slot,) = disk.allocate(1)
    disk.write(slot, key=1, fmt="q6", payload=payload(1))
    with open(disk.path, "r+b") as f:
        f.seek(disk._offset(slot))
        f.write(b"XXXX")  # magic
    assert disk.read(slot, 1, "q6") is None


def test_truncated_file_is_detected_not_a_crash(disk) -> None:
    slots = disk.allocate(3)
    for slot in slots:
        disk.write(slot, key=slot, fmt="fp16", payload=payload(slot))
    os.truncate(disk.path, disk._offset(1) + HEADER_BYTES + 10)  # inside slot 1's payload
    out = np.zeros(3 * 512, dtype=np.uint8)
    problems = disk.read_many([(s, s, "fp16") for s in slots], out, [0, 512, 1024])
    assert problems[0] is None and np.array_equal(out[:512], payload(0))
    assert "truncated" in problems[1] and "truncated" in problems[2]


def test_interrupted_write_leaves_no_valid_slot(disk, monkeypatch) -> None:
    slots = disk.allocate(2)
    disk.write(slots[0], key=1, fmt="q8", payload=payload(1))
    real_mark = DiskTier._mark

    def crash_before_valid_flag(self, marked, valid):
        if valid:
            raise OSError("simulated power loss after the payload, before the valid flag")
        real_mark(self, marked, valid)

    monkeypatch.setattr(DiskTier, "_mark", crash_before_valid_flag)
    with pytest.raises(OSError, match="power loss"):
        disk.write_many([(slots[1], 2, "q8", payload(2)), (slots[0], 3, "q8", payload(3))])
    monkeypatch.undo()
    # The new slot never became valid; the reused one lost its old flag before being rewritten.
    assert disk.read(slots[1], 2, "q8") is None
    assert disk.read(slots[0], 3, "q8") is None
    assert disk.read(slots[0], 1, "q8") is None  # the old block is not served either
    disk.close()  # the crashed process is gone (and its lock with it)
    reopened = DiskTier.open(disk.path)  # what a restart after the crash finds on disk
    assert reopened.scan() == {}
    reopened.close()


def test_torn_payload_under_a_valid_flag_is_lost(disk) -> None:
    """A crash the flag cannot see (a sector of the payload never reached the disk)."""
    (slot,) = disk.allocate(1)
    disk.write(slot, key=4, fmt="q4", payload=payload(4))
    with open(disk.path, "r+b") as f:
        f.seek(disk._offset(slot) + HEADER_BYTES + 256)
        f.write(bytes(256))  # the second half of the payload is zeros, as after a torn write
    assert disk.scan()[slot].key == 4  # flag and header look fine ...
    assert disk.read(slot, 4, "q4") is None  # ... the checksum does not


def test_reopen_finds_valid_slots(tmp_path) -> None:
    path = tmp_path / "tier.kv"
    with DiskTier(path, num_slots=3, slot_bytes=256) as disk:
        disk.write(2, key=2**63 + 5, fmt="q4", payload=payload(5, 200))
    with DiskTier.open(path) as again:
        header = again.scan()[2]
        assert (header.key, header.fmt, header.nbytes) == (2**63 + 5, "q4", 200)
        assert np.array_equal(again.read(2, 2**63 + 5, "q4"), payload(5, 200))
    with pytest.raises(HkvError, match="not an hkv disk tier"):
        (tmp_path / "other").write_bytes(b"hello")
        DiskTier.open(tmp_path / "other")


@pytest.mark.parametrize("kind", sorted(CHECKSUMS))
def test_every_checksum_kind_detects_corruption(disk, kind: int) -> None:
    disk.checksum_kind = kind
    (slot,) = disk.allocate(1)
    disk.write(slot, key=9, fmt="q8", payload=payload(9))
    assert disk.scan()[slot].checksum_kind == CHECKSUMS[kind][0]
    with open(disk.path, "r+b") as f:
        f.seek(disk._offset(slot) + HEADER_BYTES)
        f.write(b"\0\0\0\0")
    assert disk.read(slot, 9, "q8") is None


def test_disk_errors_are_user_errors(tmp_path) -> None:
    with pytest.raises(HkvError, match="does not exist"):
        DiskTier(tmp_path / "missing" / "tier.kv", 2, 64)
    with DiskTier(tmp_path / "t.kv", 1, 64) as disk, pytest.raises(HkvError, match="exceeds"):
        disk.write(0, 1, "fp16", payload(1, 65))
