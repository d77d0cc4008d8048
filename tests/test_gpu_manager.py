"""The manager and transfer engine on a CUDA device: pinned memory, streams, events, overlap.

Run on the H200 with `python -m pytest -m gpu tests/test_gpu_manager.py -q` (or run this file as
a script); elsewhere conftest.py skips every test here.
"""

from __future__ import annotations

import time

import pytest
import torch

from hkv import HybridKVCacheConfig
from hkv.blocks import Modality, Tier
from hkv.storage.layout import BlockLayout
from hkv.storage.manager import HybridKVCacheManager
from hkv.storage.quant import quantization_error
from hkv.storage.tiers import GpuTier, HostTier
from hkv.storage.transfer import LOAD_CHUNK_BYTES, PinnedRing, TransferEngine

pytestmark = pytest.mark.gpu

DEVICE = "cuda"
LAYOUT = BlockLayout(block_tokens=16, kv_heads=8, head_dim=128, num_layers=2)  # 128 KiB
BIG = BlockLayout(block_tokens=512, kv_heads=8, head_dim=128)  # 2 MiB, one MiniMax layer
LOSSLESS = HybridKVCacheConfig(
    offload_strategy="lru",
    modality_configs={m.value: {"quantization": "bf16"} for m in Modality},
)


def kv(seed: int, layout: BlockLayout = LAYOUT) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(layout.shape, generator=gen).to(layout.torch_dtype).to(DEVICE)


def seconds(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def filled_pool(layout: BlockLayout, num_blocks: int) -> GpuTier:
    gpu = GpuTier(layout, num_blocks, DEVICE)
    gpu.kv.copy_(torch.randn(gpu.kv.shape, device=DEVICE))
    return gpu


def test_pinned_ring_never_overwrites_an_upload_in_flight() -> None:
    """Index uploads through a small ring, with the stream held back so copies queue up: every
    upload arrives with its own values across many wrap-arounds."""
    ring, stream = PinnedRing(entries=64), torch.cuda.Stream()
    busy = torch.randn(4096, 4096, device=DEVICE)
    uploads = []
    with torch.cuda.stream(stream):
        for i in range(200):
            if i % 50 == 0:
                busy @ busy  # keeps the stream busy while later uploads are queued
            values = torch.arange(i, i + 7 + i % 23).numpy()
            uploads.append((values, ring.to_device(values, torch.device(DEVICE))))
    torch.cuda.synchronize()
    assert all(out.cpu().tolist() == values.tolist() for values, out in uploads)
    assert ring.to_device(torch.arange(100).numpy(), torch.device(DEVICE)).cpu().tolist() == list(
        range(100)
    )  # larger than the ring: a pinned copy of its own


def test_host_tier_is_pinned() -> None:
    host = HostTier.for_layout(LAYOUT, 4, pin_memory=True)
    assert host.pinned and host.buf.is_pinned()


def test_round_trip_through_every_tier_is_bit_exact(tmp_path) -> None:
    m = HybridKVCacheManager(
        LAYOUT,
        gpu_blocks=4,
        host_blocks=4,
        disk_blocks=8,
        disk_path=str(tmp_path / "cold.kv"),
        config=LOSSLESS,
        device=DEVICE,
    )
    assert m.host.pinned
    for key in range(12):
        assert m.admit(key, kv(key)).ok
    assert [m.where(k) for k in (0, 5, 11)] == [Tier.DISK, Tier.HOST, Tier.GPU]
    assert m.access(range(4)).hits == {"disk": 4}
    for key in range(12):
        if m.where(key) is not Tier.GPU:
            assert m.access([key]).ok
        assert torch.equal(m.gpu_view(key), kv(key)), key
    assert m.stats.transfer_s["gpu_to_host"] > 0 and m.stats.bytes_moved["disk_to_gpu"] > 0
    m.close()


def test_quantized_round_trip_within_bounds(tmp_path) -> None:
    config = HybridKVCacheConfig.article_example()  # text q8, vision q6, audio fp16
    m = HybridKVCacheManager(
        LAYOUT,
        gpu_blocks=6,
        host_blocks=2,
        disk_blocks=32,
        disk_path=str(tmp_path / "cold.kv"),
        config=config,
        policy="lru",
        device=DEVICE,
    )
    kinds = {0: "text", 1: "vision", 2: "audio", 3: "text", 4: "vision", 5: "audio"}
    for key, modality in kinds.items():
        assert m.admit(key, kv(key), modality=modality).ok
    for key in range(10, 26):
        assert m.admit(key, kv(key)).ok
    assert {m.where(k) for k in kinds} == {Tier.DISK}
    assert m.access(list(kinds)).ok
    bounds = {"q8": 0.01, "q6": 0.04, "fp16": 0.0}
    for key, modality in kinds.items():
        fmt = config.modality(modality).quantization
        error = quantization_error(kv(key)[None], fmt, LAYOUT, restored=m.gpu_view(key)[None])
        assert error.key_rel_l2 <= bounds[fmt] and error.value_rel_l2 <= bounds[fmt], error
    m.close()


def test_prepare_returns_before_the_copy_finishes() -> None:
    n = 512  # 1 GiB of 2 MiB blocks: ~20 ms over PCIe
    gpu = filled_pool(BIG, 2 * n)
    host = HostTier.for_layout(BIG, n, pin_memory=True)
    offsets = host.allocate(BIG.nbytes, n)
    engine = TransferEngine(DEVICE)
    engine.store(gpu, range(n), host, offsets, "bf16")
    transfer = engine.prepare_load(host, offsets, gpu, range(n, 2 * n), "bf16")
    in_flight = not transfer.done()
    stats = engine.complete_load(transfer)
    assert in_flight and transfer.done()
    assert stats.num_copies == n * BIG.nbytes // LOAD_CHUNK_BYTES and stats.gbps > 5  # pipelined
    assert torch.equal(gpu.kv[n:], gpu.kv[:n])


def test_store_sees_compute_written_before_it() -> None:
    """The engine's stream waits for the compute stream's pending writes (an event)."""
    gpu = filled_pool(BIG, 8)
    host = HostTier.for_layout(BIG, 8, pin_memory=True)
    offsets = host.allocate(BIG.nbytes, 2)
    engine = TransferEngine(DEVICE)
    a = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
    for _ in range(4):
        a = a @ a / 90  # keep the compute stream busy before the write
    gpu.kv[3].fill_(7.0)
    gpu.kv[5].copy_(a[:1, :1].expand_as(gpu.kv[5]))
    engine.store(gpu, [3, 5], host, offsets, "bf16")
    engine.load(host, offsets, gpu, [0, 1], "bf16")
    assert torch.equal(gpu.kv[0], gpu.kv[3]) and torch.equal(gpu.kv[1], gpu.kv[5])
    assert bool((gpu.kv[0] == 7.0).all())


def test_transfer_overlaps_compute() -> None:
    n = 256  # 512 MiB per load
    gpu = filled_pool(BIG, n)
    host = HostTier.for_layout(BIG, n, pin_memory=True)
    offsets = host.allocate(BIG.nbytes, n)
    engine = TransferEngine(DEVICE)
    a = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)

    def compute() -> None:
        for _ in range(12):
            a @ a

    def transfer() -> None:
        engine.complete_load(engine.prepare_load(host, offsets, gpu, range(n), "bf16"))

    def both() -> None:
        pending = engine.prepare_load(host, offsets, gpu, range(n), "bf16")
        compute()
        engine.complete_load(pending)

    for fn in (compute, transfer, both):
        fn()
    t_compute, t_transfer, t_both = (
        min(seconds(fn) for _ in range(3)) for fn in (compute, transfer, both)
    )
    hidden = (t_compute + t_transfer - t_both) / min(t_compute, t_transfer)
    print(
        f"compute {t_compute * 1e3:.1f} ms, transfer {t_transfer * 1e3:.1f} ms, both "
        f"{t_both * 1e3:.1f} ms: {hidden:.0%} of the shorter hidden"
    )
    assert hidden > 0.5


def test_batched_beats_one_copy_per_block() -> None:
    layout = BlockLayout(16, 8, 128)  # 64 KiB, one MiniMax layer
    n = 1024
    gpu = filled_pool(layout, 2 * n)
    host = HostTier.for_layout(layout, n, pin_memory=True)
    offsets = host.allocate(layout.nbytes, n)
    slots = torch.randperm(2 * n)[:n].tolist()
    rows = host.buf.view(n, layout.nbytes)
    flat = gpu.kv.view(2 * n, -1).view(torch.uint8)
    engine = TransferEngine(DEVICE)

    def per_block() -> None:
        for i, slot in enumerate(slots):
            rows[i].copy_(flat[slot], non_blocking=True)

    def batched() -> None:
        engine.store(gpu, slots, host, offsets, "bf16")

    per_block(), batched()
    t_per_block = min(seconds(per_block) for _ in range(3))
    t_batched = min(seconds(batched) for _ in range(3))
    gbps = n * layout.nbytes / 1e9
    print(f"64 KiB x {n}: batched {gbps / t_batched:.1f} GB/s, per block {gbps / t_per_block:.1f}")
    assert t_batched * 3 < t_per_block


def test_pageable_fallback_still_moves_blocks_correctly() -> None:
    gpu = filled_pool(LAYOUT, 8)
    host = HostTier.for_layout(LAYOUT, 4, pin_memory=False)
    assert not host.pinned
    offsets = host.allocate(LAYOUT.nbytes, 3)
    engine = TransferEngine(DEVICE)
    engine.store(gpu, [7, 1, 4], host, offsets, "bf16")
    engine.load(host, offsets, gpu, [0, 2, 3], "bf16")
    assert torch.equal(gpu.kv[[0, 2, 3]], gpu.kv[[7, 1, 4]])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
