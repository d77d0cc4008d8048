"""The block manager on CPU: tiers, policies, pins, per-modality limits, faults, cost decisions."""

from __future__ import annotations

import os
import random
from dataclasses import replace

import pytest
import torch

from hkv import HybridKVCacheConfig
from hkv.blocks import Modality, Tier
from hkv.cost import CostModel, HardwareProfile, LinkSpec
from hkv.errors import HkvError
from hkv.policies import policy_names
from hkv.storage.layout import BlockLayout
from hkv.storage.manager import HybridKVCacheManager
from hkv.storage.quant import quantization_error

LAYOUT = BlockLayout(block_tokens=16, kv_heads=2, head_dim=32, num_layers=2)
LOSSLESS = HybridKVCacheConfig(
    offload_strategy="lru",
    modality_configs={m.value: {"quantization": "bf16"} for m in Modality},
)


def kv(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(LAYOUT.shape, generator=gen).to(LAYOUT.torch_dtype)


def manager(tmp_path, *, gpu=4, host=4, disk=8, config=LOSSLESS, **kwargs):
    return HybridKVCacheManager(
        LAYOUT,
        gpu_blocks=gpu,
        host_blocks=host,
        disk_blocks=disk,
        disk_path=str(tmp_path / "cold.kv") if disk else None,
        config=config,
        device="cpu",
        **kwargs,
    )


def fill(m, ids, modality="text"):
    for key in ids:
        assert m.admit(key, kv(key), modality=modality, position=16 * key).ok


def test_round_trip_through_every_tier_is_bit_exact(tmp_path) -> None:
    m = manager(tmp_path)
    fill(m, range(12))  # LRU: 0-3 end on disk, 4-7 in host RAM, 8-11 on the GPU
    assert [m.where(k) for k in (0, 5, 11)] == [Tier.DISK, Tier.HOST, Tier.GPU]
    result = m.access([0, 1, 2, 3])  # disk -> (host staging) -> GPU
    assert result.ok and result.hits == {"disk": 4} and not result.to_compute
    assert [m.where(k) for k in (4, 8)] == [Tier.DISK, Tier.HOST]  # 8-11 made room
    result = m.access([8, 9])  # host -> GPU
    assert result.hits == {"host": 2}
    for key in range(12):
        if m.where(key) is not Tier.GPU:
            assert m.access([key]).ok
        assert torch.equal(m.gpu_view(key), kv(key)), key
    stats = m.stats
    assert stats.demoted["disk"] >= 4 and stats.hits["disk"] >= 4 and stats.hits["host"] >= 2
    assert stats.bytes_moved["gpu_to_host"] > 0 and stats.bytes_moved["host_to_disk"] > 0
    assert stats.transfer_s["gpu_to_host"] > 0
    assert m.stats.to_dict()["bytes_moved"]["disk_to_gpu"] > 0


def test_quantized_round_trip_stays_within_bounds(tmp_path) -> None:
    config = HybridKVCacheConfig.article_example()  # text q8, vision q6, audio fp16
    m = manager(tmp_path, gpu=6, host=2, disk=24, config=config, policy="lru")
    kinds = {0: "text", 1: "vision", 2: "audio", 3: "text", 4: "vision", 5: "audio"}
    for key, modality in kinds.items():
        assert m.admit(key, kv(key), modality=modality).ok
    fill(m, range(10, 26))  # push 0-5 through host RAM to disk
    assert {m.where(k) for k in kinds} == {Tier.DISK}
    assert m.access(list(kinds)).ok
    for key, modality in kinds.items():
        fmt = config.modality(modality).quantization
        error = quantization_error(kv(key)[None], fmt, LAYOUT, restored=m.gpu_view(key)[None])
        bound = {"q8": 0.01, "q6": 0.04, "fp16": 0.0}[fmt]
        assert error.key_rel_l2 <= bound and error.value_rel_l2 <= bound, (modality, error)


def test_policy_chooses_victims_and_pins_are_honoured(tmp_path) -> None:
    m = manager(tmp_path, disk=0)
    fill(m, range(4))
    m.pin([0])
    m.access([1])  # LRU order now 2, 3, 1 (0 pinned)
    fill(m, [4, 5])
    assert m.where(0) is Tier.GPU  # pinned: never demoted although least recently used
    assert (m.where(2), m.where(3)) == (Tier.HOST, Tier.HOST)
    m.unpin([0])
    fill(m, [6])
    assert m.where(0) is Tier.HOST


def test_full_gpu_refuses_and_leaves_every_block_intact(tmp_path) -> None:
    m = manager(tmp_path)
    fill(m, range(6))
    m.pin([2, 3, 4, 5])
    before = {k: m.where(k) for k in range(6)}
    refused = m.admit(9, kv(9))
    assert not refused.ok and refused.gpu_slot is None
    assert "GPU tier full" in refused.reason and "unpin" in refused.reason
    access = m.access([0])
    assert not access.ok and "4 pinned" in access.reason
    assert {k: m.where(k) for k in range(6)} == before and 9 not in m
    assert m.stats.refused == 2
    m.unpin([2])
    assert m.access([0]).ok
    for key in range(6):
        m.access([key]) if m.where(key) is not Tier.GPU else None
        assert torch.equal(m.gpu_view(key), kv(key))


def test_max_keep_blocks_per_modality(tmp_path) -> None:
    config = HybridKVCacheConfig(
        offload_strategy="lru",
        modality_configs={"vision": {"max_keep_blocks": 2, "quantization": "q6"}},
    )
    m = manager(tmp_path, gpu=8, host=8, disk=0, config=config)
    fill(m, range(5), modality="vision")
    fill(m, range(10, 14), modality="text")
    on_gpu = [k for k in range(5) if m.where(k) is Tier.GPU]
    assert len(on_gpu) == 2 and on_gpu == [3, 4]  # the cap, most recent kept (LRU)
    assert all(m.where(k) is Tier.GPU for k in range(10, 14))  # text has no cap here
    usage = m.usage()["vision"]
    assert usage["host"]["blocks"] == 3
    assert usage["host"]["stored_bytes"] < usage["host"]["raw_bytes"]  # q6 takes fewer pages
    assert m.access([0, 1, 2], pin=True).ok  # a request may hold more than the cap ...
    assert m.block_ids(Tier.GPU, "vision") == [0, 1, 2]
    m.unpin([0, 1, 2])  # ... until it lets go
    assert len(m.block_ids(Tier.GPU, Modality.VISION)) == 2
    assert m.stats.capped >= 4  # three at admission, one at unpin


def test_host_full_demotes_to_disk_and_full_disk_drops(tmp_path) -> None:
    m = manager(tmp_path, gpu=2, host=2, disk=2)
    fill(m, range(8))  # 2 on GPU, 2 in host RAM, 2 on disk, the 2 oldest dropped
    assert [m.where(k) for k in range(8)] == [None, None] + [Tier.DISK] * 2 + [Tier.HOST] * 2 + [
        Tier.GPU
    ] * 2
    assert m.stats.dropped == 2
    result = m.access([0, 2])
    assert result.missing == (0,) and result.hits == {"disk": 1}
    assert m.stats.misses == 1


def test_corrupted_disk_block_is_reported_lost_never_served(tmp_path) -> None:
    m = manager(tmp_path)
    fill(m, range(12))
    block = m.table.records[1]
    with open(m.disk.path, "r+b") as f:
        f.seek(m.disk._offset(block.disk_slot) + 64 + 10)
        f.write(b"\x00\x01\x02")
    result = m.access([0, 1])
    assert result.ok and result.lost == (1,) and result.to_compute == (1,)
    assert 1 not in m and m.stats.lost == 1
    assert torch.equal(m.gpu_view(0), kv(0))  # its neighbour arrived intact
    assert m.admit(1, kv(1)).ok  # recomputed by the caller, admitted again


def test_truncated_disk_file_loses_only_the_cut_blocks(tmp_path) -> None:
    m = manager(tmp_path)
    fill(m, range(12))
    slots = {k: m.table.records[k].disk_slot for k in range(4)}
    cut = max(slots.values())
    os.truncate(m.disk.path, m.disk._offset(cut) + 10)
    result = m.access(range(4))
    assert result.lost == tuple(k for k in range(4) if slots[k] == cut)
    for key in range(4):
        if key in m:
            assert torch.equal(m.gpu_view(key), kv(key))


def slow_host_cost_model() -> CostModel:
    default = HardwareProfile.default()
    slow = LinkSpec(to_gpu_gbps=1e-3, from_gpu_gbps=1e-3, latency_s=0.0)
    return CostModel.default(profile=replace(default, links={**default.links, "host_pinned": slow}))


def test_cost_model_decides_load_or_recompute(tmp_path) -> None:
    # Default H200 profile, MiniMax-M2.5 dims: a 16-token block is cheaper to recompute than to
    # read from a ~1 GB/s disk, so it is dropped instead of written; host RAM is worth it.
    m = manager(tmp_path, cost_model=CostModel.default())
    fill(m, range(12))
    assert m.stats.demoted["disk"] == 0 and m.stats.dropped == 4
    assert m.access([5]).hits == {"host": 1}
    # With a host link slower than recomputing, a held host block is reported for recompute.
    m = manager(tmp_path, disk=0, cost_model=slow_host_cost_model())
    fill(m, range(6))
    result = m.access([0, 4])
    assert result.recompute == (0,) and result.gpu_slots.keys() == {4}
    assert 0 not in m and m.stats.recomputed == 1


def test_prepare_and_complete_access_overlap_with_admissions(tmp_path) -> None:
    m = manager(tmp_path, gpu=4, host=8, disk=0)
    fill(m, range(8))
    pending = m.prepare_access([0, 1])
    with pytest.raises(HkvError, match="pending"):
        m.prepare_access([2])
    assert m.admit(20, kv(20)).ok  # compute carries on while the loads are in flight
    with pytest.raises(HkvError, match="pinned or being moved"):
        m.free([0])
    result = m.complete_access(pending)
    assert set(result.gpu_slots) == {0, 1}
    assert torch.equal(m.gpu_view(0), kv(0)) and torch.equal(m.gpu_view(1), kv(1))


def test_access_pin_and_usage_mistakes(tmp_path) -> None:
    m = manager(tmp_path, disk=0)
    fill(m, range(6))
    result = m.access([0, 5], pin=True)
    assert m.table.records[0].pins == 1 and m.table.records[5].pins == 1
    assert result.hits == {"host": 1, "gpu": 1}
    with pytest.raises(HkvError, match="in the host tier.*access"):
        m.pin([1])
    with pytest.raises(HkvError, match="not pinned"):
        m.unpin([2])
    with pytest.raises(HkvError, match="already held"):
        m.admit(5)
    with pytest.raises(HkvError, match="expected an integer"):
        m.admit("x")
    with pytest.raises(HkvError, match="kv shape"):
        m.admit(50, torch.zeros(3))
    with pytest.raises(HkvError, match="not held"):
        m.unpin([99])
    with pytest.raises(HkvError, match="disk_path"):
        HybridKVCacheManager(LAYOUT, gpu_blocks=2, host_blocks=2, disk_blocks=2, device="cpu")
    idle = next(k for k in (2, 3, 4) if m.where(k) is Tier.GPU)
    m.demote([idle])
    assert m.where(idle) is Tier.HOST
    m.free([idle, 1])
    assert idle not in m and 1 not in m


@pytest.mark.parametrize("name", policy_names(online_only=True))
def test_every_policy_keeps_the_invariants(tmp_path, name: str) -> None:
    rng = random.Random(name)
    m = manager(tmp_path, gpu=6, host=6, disk=6, policy=name)
    pinned: set[int] = set()
    for step in range(120):
        key = rng.randrange(40)
        if key not in m:
            m.admit(key, kv(key), modality=rng.choice(list(Modality)), position=16 * key)
        else:
            result = m.access([key])
            assert result.ok or len(pinned) == 6
        if rng.random() < 0.2 and m.where(key) is Tier.GPU and key not in pinned:
            m.pin([key])
            pinned.add(key)
        if pinned and rng.random() < 0.25:
            m.unpin([pinned.pop()])
        assert m.gpu.num_free >= 0 and len(m.policies[Tier.GPU]) <= 6
        assert all(m.where(k) is Tier.GPU for k in pinned), step
    m.unpin(pinned)  # a GPU full of pinned blocks would refuse the loads below
    for key in list(m.table.records):
        if m.where(key) is not Tier.GPU:
            assert m.access([key]).ok
        if key in m:
            assert torch.equal(m.gpu_view(key), kv(key)), (name, key)


def test_reloaded_block_keeps_its_host_copy_and_demotes_without_a_copy(tmp_path) -> None:
    m = manager(tmp_path, gpu=2, host=4, disk=0)
    fill(m, range(3))  # block 0 went to host
    assert m.where(0) is Tier.HOST
    copied = m.stats.bytes_moved["gpu_to_host"]
    assert m.access([0]).hits == {"host": 1}  # 1 is demoted (a copy) to make room
    assert m.stats.bytes_moved["gpu_to_host"] == 2 * copied
    m.demote([0])  # the host still holds 0's bytes
    assert m.where(0) is Tier.HOST and m.stats.demoted_clean == 1
    assert m.stats.bytes_moved["gpu_to_host"] == 2 * copied
    m.access([0])
    assert torch.equal(m.gpu_view(0), kv(0))


def test_retained_copies_are_given_up_first_when_the_host_is_short(tmp_path) -> None:
    m = manager(tmp_path, gpu=4, host=6, disk=0)
    fill(m, range(8))  # 0-3 in host RAM, 4-7 on the GPU
    m.access([0, 1])  # 0, 1 back (copies kept), 4, 5 demoted: the arena is full now
    assert m.where(4) is Tier.HOST and m.where(0) is Tier.GPU
    departures = m.gpu_departures
    fill(m, [8, 9])  # 6, 7 must go to host: the copies of 0 and 1 make the room
    assert m.gpu_departures == departures + 2
    assert {m.where(k) for k in (2, 3, 4, 5, 6, 7)} == {Tier.HOST}  # nothing dropped
    assert m.stats.dropped == 0
    m.access([6, 7])  # demoted through the room the copies left: bytes intact
    assert torch.equal(m.gpu_view(6), kv(6)) and torch.equal(m.gpu_view(7), kv(7))


def test_without_retained_copies_every_demotion_copies(tmp_path) -> None:
    m = manager(tmp_path, gpu=2, host=4, disk=0, retain_host_copies=False)
    fill(m, range(3))
    m.access([0])
    m.demote([0])
    assert m.stats.demoted_clean == 0 and m.where(0) is Tier.HOST


def test_touch_and_slot_map_for_readers_that_skip_access(tmp_path) -> None:
    m = manager(tmp_path, gpu=3, host=4, disk=0)
    fill(m, range(3))
    assert m.gpu_slots_of([0, 1, 2]) is not None
    m.touch([0])  # 0 is now the most recent: 1 is the next victim
    fill(m, [3])
    assert m.where(1) is Tier.HOST and m.gpu_slots_of([0, 1]) is None
    with pytest.raises(HkvError, match="access"):
        m.touch([1])
    pending = m.prepare_access([1])
    assert m.pending is pending and m.gpu_slots_of([1]) is None  # still arriving
    first = m.complete_access(pending)
    assert m.complete_access(pending) is first  # a second completion returns the same


def test_demotion_larger_than_the_host_arena_flows_on_to_disk(tmp_path) -> None:
    m = manager(tmp_path, gpu=12, host=4, disk=16)
    fill(m, range(12))
    m.demote(range(12))  # three arenas' worth at once
    assert m.stats.dropped == 0
    assert len(m.block_ids(Tier.HOST)) == 4 and len(m.block_ids(Tier.DISK)) == 8
    m.access([0, 1, 2, 3])
    assert all(torch.equal(m.gpu_view(k), kv(k)) for k in range(4))


def test_without_a_host_tier_evicted_blocks_are_dropped(tmp_path) -> None:
    m = manager(tmp_path, gpu=2, host=0, disk=0)
    fill(m, range(4))
    assert m.stats.dropped == 2 and len(m) == 2
    assert m.access([0]).missing == (0,)


# ---- cold bytes are encoded once ---------------------------------------------------------

BOUNDS = {"q8": 0.01, "q6": 0.04, "q4": 0.15}  # tests/test_quant.py: one encoding's rel. L2


def outlier_kv(seed: int) -> torch.Tensor:
    """KV with a few large-offset key channels, as in tests/test_quant.py."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(LAYOUT.shape, generator=gen)
    x[:, 0, :, :, :: LAYOUT.head_dim // 4] += 6.0
    return x.to(LAYOUT.torch_dtype)


def quantized(fmt: str) -> HybridKVCacheConfig:
    return HybridKVCacheConfig(
        offload_strategy="lru", modality_configs={m.value: {"quantization": fmt} for m in Modality}
    )


def cycle(m, keys, times: int) -> list[torch.Tensor]:
    """Demote `keys` and bring them back `times` times; their GPU values after the first."""
    first = None
    for step in range(times):
        m.demote(keys)
        assert all(m.where(k) is not Tier.GPU for k in keys)
        result = m.access(keys)
        assert result.ok and not result.to_compute
        if step == 0:
            first = [m.gpu_view(k).clone() for k in keys]
    return first


def rel_errors(m, key: int, fmt: str, original: torch.Tensor) -> tuple[float, float]:
    error = quantization_error(original[None], fmt, LAYOUT, restored=m.gpu_view(key)[None])
    return error.key_rel_l2, error.value_rel_l2


@pytest.mark.parametrize("fmt", sorted(BOUNDS))
@pytest.mark.parametrize("route", ["host", "disk", "both"])
def test_quantized_blocks_do_not_drift_over_100_cycles(tmp_path, fmt: str, route: str) -> None:
    host, disk = {"host": (4, 0), "disk": (1, 8), "both": (1, 4)}[route]
    m = manager(tmp_path, gpu=2, host=host, disk=disk, config=quantized(fmt))
    keys = [0, 1] if route == "both" else [0]
    for key in keys:
        assert m.admit(key, outlier_kv(key)).ok
    if route == "disk":  # fill host RAM behind 0: it cycles between the GPU and the disk
        m.demote([0])
        for key in range(1, 6):
            assert m.admit(key, outlier_kv(key)).ok
            m.demote([key])
        assert m.where(0) is Tier.DISK and m.access([0]).ok
    first = cycle(m, keys, 100)
    for key, values in zip(keys, first, strict=True):
        assert torch.equal(m.gpu_view(key), values), key  # the bytes of the first encoding
        key_err, value_err = rel_errors(m, key, fmt, outlier_kv(key))
        assert key_err <= BOUNDS[fmt] and value_err <= BOUNDS[fmt], (key_err, value_err)
    assert m.stats.requantized == 0 and m.stats.demoted_clean >= 99
    if route == "disk":
        assert m.stats.hits["disk"] >= 100


@pytest.mark.parametrize("how", ["write", "gpu_view", "mark_dirty"])
def test_a_written_block_is_encoded_again_from_its_new_values(tmp_path, how: str) -> None:
    m = manager(tmp_path, gpu=2, host=4, disk=0, config=quantized("q8"))
    assert m.admit(0, outlier_kv(0)).ok
    cycle(m, [0], 3)
    new = outlier_kv(50)
    if how == "write":
        m.write(0, new)
    elif how == "gpu_view":
        m.gpu_view(0, write=True).copy_(new)
    else:
        m.mark_dirty([0])
        m.gpu.kv[m.gpu_slots_of([0])[0]].copy_(new)
    copied = m.stats.bytes_moved["gpu_to_host"]
    cycle(m, [0], 20)
    assert m.stats.bytes_moved["gpu_to_host"] > copied  # encoded once more, then reused
    key_err, value_err = rel_errors(m, 0, "q8", new)
    assert key_err <= BOUNDS["q8"] and value_err <= BOUNDS["q8"]
    with pytest.raises(HkvError, match="not on the GPU"):
        m.demote([0])
        m.mark_dirty([0])


@pytest.mark.parametrize("fmt", sorted(BOUNDS))
def test_without_kept_copies_quantized_blocks_keep_one_encodings_error(tmp_path, fmt) -> None:
    """With no kept copy every round trip encodes the
    decoded block again, with the minima and scales it was decoded with, so the codes, the
    GPU values and the error stay those of the first encoding (they drifted: q8 0.035)."""
    m = manager(tmp_path, gpu=2, host=4, disk=0, config=quantized(fmt), retain_host_copies=False)
    assert m.admit(0, outlier_kv(0)).ok
    first = cycle(m, [0], 1)[0]
    once = rel_errors(m, 0, fmt, outlier_kv(0))
    cycle(m, [0], 19)
    assert torch.equal(m.gpu_view(0), first) and rel_errors(m, 0, fmt, outlier_kv(0)) == once
    assert m.stats.requantized == 19


@pytest.mark.parametrize("fmt", sorted(BOUNDS))
def test_a_short_host_arena_keeps_quantized_blocks_at_one_encodings_error(tmp_path, fmt):
    """A host arena of 2 bf16 blocks (8 q4 ones), 12 other blocks through it each cycle: block
    0's kept copy is given up for them every time, and 0 is encoded again from its decoded
    values, 20 times.
    Its error after 20 cycles is its error after 1 (it drifted to q8 0.035, q6 0.23, q4 0.33)."""
    m = manager(tmp_path, gpu=16, host=2, disk=0, config=quantized(fmt))
    assert m.admit(0, outlier_kv(0)).ok
    errors = []
    for step in range(20):
        m.demote([0])
        assert m.access([0]).ok and m.where(0) is Tier.GPU  # 0 keeps its host copy ...
        others = list(range(100 + 12 * step, 112 + 12 * step))
        for key in others:
            assert m.admit(key, outlier_kv(key)).ok
        m.demote(others)  # ... given up for these
        m.free([k for k in others if k in m])
        errors.append(rel_errors(m, 0, fmt, outlier_kv(0)))
    assert m.stats.requantized == 19
    assert errors[-1] == errors[0] and max(errors[0]) <= BOUNDS[fmt], errors[::19]


def test_ready_slots_cover_blocks_still_arriving(tmp_path) -> None:
    m = manager(tmp_path, gpu=6, host=8, disk=0)
    fill(m, range(6))
    m.demote([0, 1, 2, 3])
    pending = m.prepare_access([0, 1, 2, 3], starts=[0, 2])  # two readers' units
    assert m.gpu_slots_of([0, 1]) is None  # in flight: not readable to a plain reader
    slots = m.ready_slots([4, 0, 1])  # one hot, two arriving
    assert slots is not None and len(set(slots)) == 3
    assert m.ready_slots([0, 99]) is None  # not held
    ((transfer, _),) = pending.transfers
    assert [end for end, _ in transfer.arrivals] == [2, 4]  # a chunk per unit
    result = m.complete_access(pending)
    assert [result.gpu_slots[k] for k in (0, 1)] == slots[1:]
    assert m.ready_slots([0, 1]) == m.gpu_slots_of([0, 1]) == slots[1:]
    m.demote([5])
    assert m.ready_slots([5]) is None  # gone to host: no longer on the GPU


def test_a_disk_read_the_drive_fails_refuses_the_access_and_moves_nothing(tmp_path) -> None:
    """An I/O error reading the disk tier (EIO, once): `access` says so (`ok=False`, the
    reason naming the error) and every block stays where it was, readable by the next access
    (it raised, and left the blocks 'being moved' for good: out of every policy, never
    readable again)."""
    import errno

    m = manager(tmp_path)
    fill(m, range(12))  # 0-3 on disk
    read, calls = m.mover.disk.read_many, []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.EIO, "Input/output error")
        return read(*args)

    m.mover.disk.read_many = flaky
    result = m.access([0, 1, 8])
    assert not result.ok and "Input/output error" in result.reason and result.hits == {}
    assert [m.where(k) for k in (0, 1, 8)] == [Tier.DISK, Tier.DISK, Tier.GPU]
    assert m.stats.refused == 1 and m.stats.lost == 0
    result = m.access([0, 1, 8])
    assert result.ok and result.hits == {"disk": 2, "gpu": 1}
    assert all(torch.equal(m.gpu_view(k), kv(k)) for k in (0, 1, 8))


def test_a_disk_write_the_drive_fails_drops_the_blocks_and_leaks_nothing(tmp_path) -> None:
    """A demotion to disk that the drive refuses (ENOSPC, once): those blocks are dropped, as
    from a full disk, and the admission goes on (it raised, with the blocks out of the host
    policy but still in host RAM, and their disk slots taken: both leaked for good)."""
    import errno

    m = manager(tmp_path)
    fill(m, range(8))  # 0-3 in host RAM, 4-7 on the GPU
    write, calls = m.mover.disk.write_many, []

    def flaky(entries):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(entries)

    m.mover.disk.write_many = flaky
    fill(m, range(8, 24))
    assert calls and m.stats.dropped >= 1 and m.stats.lost == 0
    held = [k for k in range(24) if m.where(k) is not None]
    assert len(held) == 4 + 4 + 8  # every tier full again: nothing leaked
    assert m.mover.disk.num_free == 0 and len(m.policies[Tier.HOST]) == 4
    for key in held:  # (each access demotes others down a full cascade: some are dropped)
        if m.where(key) is not None:
            assert m.access([key]).ok and torch.equal(m.gpu_view(key), kv(key)), key


def test_a_pending_access_holds_its_blocks_until_it_completes(tmp_path) -> None:
    """Between `prepare_access` and `complete_access` (the overlap the docstring allows) the
    access's blocks stay: a block already on the GPU is pinned as the loads are, so admits
    demote others (a hot block demoted then was in neither `gpu_slots` nor `to_compute`), and
    the caller cannot unpin the access's own pin (an unpinned block in flight was then taken
    as a victim: a KeyError, a block on the GPU in no policy, pins below zero)."""
    m = manager(tmp_path, gpu=3, host=4, disk=0)
    fill(m, range(4))  # 0 in host RAM; 1, 2, 3 on the GPU
    pending = m.prepare_access([0, 1])  # 0 loads, 1 is hot
    with pytest.raises(HkvError, match="pending access holds it until complete_access"):
        m.unpin([0])
    with pytest.raises(HkvError, match="pending access holds it"):
        m.unpin([1])
    assert m.admit(10, kv(10)).ok and m.admit(11, kv(11)).ok  # 1 stays; others go
    result = m.complete_access(pending)
    assert set(result.gpu_slots) == {0, 1} and not result.to_compute
    assert all(m.table.records[k].pins == 0 for k in (0, 1)) and m.table.num_pinned == 0
    assert all(torch.equal(m.gpu_view(k), kv(k)) for k in (0, 1))
    pending = m.prepare_access([0, 1], pin=True)  # pinned for the caller once it completes
    m.complete_access(pending)
    m.unpin([0, 1])
    assert m.table.num_pinned == 0


def test_a_refused_call_changes_nothing(tmp_path) -> None:
    """`pin`, `unpin` and `free` check every id before acting on any (they pinned, unpinned or
    freed the ids before a bad one, then raised); `admit` checks `kv`, `position` and `tokens`
    before it places the block (a numpy kv left block 7 held, with block 0's bytes)."""

    m = manager(tmp_path, gpu=2, host=4, disk=0)
    fill(m, range(3))  # 0 in host RAM; 1, 2 on the GPU
    before = {k: (m.where(k), m.table.records[k].pins) for k in range(3)}
    for call, ids in ((m.pin, [1, 0]), (m.pin, [2, 99]), (m.unpin, [1, 1]), (m.free, [1, 99])):
        with pytest.raises(HkvError):
            call(ids)
        assert {k: (m.where(k), m.table.records[k].pins) for k in range(3)} == before
    bad = [
        ({"kv": kv(7).float().numpy()}, "kv is a ndarray; expected a torch.Tensor"),
        ({"kv": kv(7).float()}, "kv dtype torch.float32; expected torch.bfloat16"),
        ({"position": -16}, "position -16; expected >= 0"),
        ({"position": "x"}, "position 'x'; expected an integer"),
        ({"tokens": 17}, "tokens 17; expected from 1 to 16"),
    ]
    for kwargs, message in bad:
        with pytest.raises(HkvError, match=message):
            m.admit(7, **kwargs)
        assert 7 not in m and {k: m.where(k) for k in range(3)} == {
            k: w for k, (w, _) in before.items()
        }


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.access(["a"]), "access: block id 'a'; expected an integer"),
        (lambda m: m.access([1.9]), "access: block id 1.9"),  # it read block 1
        (lambda m: m.access(2), "access: got 2; expected a list of block ids"),
        (lambda m: m.where(2.5), "where: block id 2.5"),  # it answered for block 2
        (lambda m: m.gpu_view(None), "gpu_view: block id None"),
        (lambda m: m.unpin(2), "unpin: got 2"),
        (lambda m: m.complete_access(None), "not the pending access"),
    ],
)
def test_bad_ids_are_one_line_never_a_raw_error_or_another_block(tmp_path, call, message):
    m = manager(tmp_path, disk=0)
    fill(m, range(3))
    with pytest.raises(HkvError, match=message):
        call(m)


def test_a_closed_manager_refuses_in_one_line_and_changes_nothing(tmp_path) -> None:
    m = manager(tmp_path)
    fill(m, range(8))
    before = {k: m.where(k) for k in range(8)}
    m.close()
    for call in (lambda: m.admit(20, kv(20)), lambda: m.access([0]), lambda: m.demote([7])):
        with pytest.raises(HkvError, match="this manager is closed"):
            call()
    assert {k: m.where(k) for k in range(8)} == before


def test_tiers_larger_than_memory_are_refused_in_one_line(tmp_path) -> None:
    """torch's allocation error named neither the size nor the setting to lower."""
    with pytest.raises(HkvError, match=r"cannot allocate [\d.]+ GiB for the GPU pool .* lower gpu"):
        manager(tmp_path, gpu=10**12, host=0, disk=0)
    with pytest.raises(HkvError, match=r"cannot allocate [\d.]+ GiB for host RAM .* host_blocks"):
        manager(tmp_path, gpu=4, host=10**13, disk=0)
