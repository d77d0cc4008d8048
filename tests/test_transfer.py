"""The transfer engine on CPU: same API as on CUDA, synchronous, batched into few copies."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hkv.storage import transfer
from hkv.storage.layout import BlockLayout
from hkv.storage.quant import codec
from hkv.storage.tiers import GpuTier, HostTier
from hkv.storage.transfer import TransferEngine, copy_runs, split_at, split_runs

LAYOUT = BlockLayout(block_tokens=16, kv_heads=2, head_dim=32, num_layers=2)  # 8 KiB blocks


@pytest.fixture
def gpu() -> GpuTier:
    pool = GpuTier(LAYOUT, 16, device="cpu")
    pool.kv.copy_(torch.randn(pool.kv.shape, generator=torch.Generator().manual_seed(0)))
    return pool


@pytest.fixture
def host() -> HostTier:
    return HostTier.for_layout(LAYOUT, 16, pin_memory=False)


def test_copy_runs_and_pipeline_chunks() -> None:
    assert split_runs([(0, 5, 0), (5, 1, 900)], 100, 250) == [
        (0, 2, 0),
        (2, 2, 200),
        (4, 1, 400),
        (5, 1, 900),
    ]
    assert split_runs([(0, 2, 0)], 100, 10) == [(0, 1, 0), (1, 1, 100)]  # a block at least
    assert copy_runs(np.array([0, 100, 200]), 100) == [(0, 3, 0)]
    assert copy_runs(np.array([300, 0, 100, 500]), 100) == [(0, 1, 300), (1, 2, 0), (3, 1, 500)]
    assert copy_runs(np.array([], dtype=np.int64), 100) == []
    # a reader's units (layers) start new chunks too, offsets following within a run
    assert split_at([(0, 5, 0), (5, 1, 900)], [2, 5], 100) == [(0, 2, 0), (2, 3, 200), (5, 1, 900)]
    assert split_at([(0, 3, 0)], [], 100) == [(0, 3, 0)]


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_passthrough_store_and_load_are_bit_exact(gpu, host, fmt) -> None:
    engine = TransferEngine("cpu")
    src = [11, 2, 7, 5]
    original = gpu.kv[src].clone()
    offsets = host.allocate(codec(LAYOUT, fmt).payload_bytes, len(src))
    transfer = engine.prepare_store(gpu, src, host, offsets, fmt)
    assert transfer.done()  # synchronous on CPU
    stats = engine.complete_store(transfer)
    assert (stats.num_blocks, stats.nbytes, stats.num_copies) == (4, 4 * LAYOUT.nbytes, 1)
    assert engine.complete_store(transfer) is stats
    dst = [0, 15, 3, 8]
    gpu.kv[dst] = 0
    engine.complete_load(engine.prepare_load(host, offsets, gpu, dst, fmt))
    assert torch.equal(gpu.kv[dst], original)


def test_scattered_host_extents_take_one_copy_per_run(gpu, host) -> None:
    engine = TransferEngine("cpu")
    stride = host.stride_bytes(LAYOUT.nbytes)
    offsets = np.array([5, 6, 0, 9]) * stride
    stats = engine.store(gpu, [1, 2, 3, 4], host, offsets, "bf16")
    assert stats.num_copies == 3
    engine.load(host, offsets, gpu, [12, 13, 14, 15], "bf16")
    assert torch.equal(gpu.kv[[12, 13, 14, 15]], gpu.kv[[1, 2, 3, 4]])


def test_large_load_is_pipelined_in_chunks(gpu, host, monkeypatch) -> None:
    q8_bytes = codec(LAYOUT, "q8").payload_bytes
    monkeypatch.setattr(transfer, "LOAD_CHUNK_BYTES", 2 * host.stride_bytes(q8_bytes))
    engine = TransferEngine("cpu")
    offsets = host.allocate(q8_bytes, 5)
    engine.store(gpu, [0, 1, 2, 3, 4], host, offsets, "q8")
    stats = engine.load(host, offsets, gpu, [15, 14, 13, 12, 11], "q8")
    assert stats.num_copies == 3  # 2 + 2 + 1 blocks, each decoded and scattered on arrival
    expected = engine.load(host, offsets[::-1], gpu, [6, 7, 8, 9, 10], "q8")
    assert expected.num_blocks == 5
    assert torch.equal(gpu.kv[[15, 14, 13, 12, 11]], gpu.kv[[10, 9, 8, 7, 6]])


@pytest.mark.parametrize(("fmt", "bound"), [("q8", 0.01), ("q6", 0.04), ("q4", 0.15)])
def test_quantized_moves_fewer_bytes_within_bound(gpu, host, fmt, bound) -> None:
    engine = TransferEngine("cpu")
    c = codec(LAYOUT, fmt)
    offsets = host.allocate(c.payload_bytes, 3)
    stats = engine.store(gpu, [0, 1, 2], host, offsets, fmt)
    assert stats.nbytes == 3 * host.stride_bytes(c.payload_bytes) < 3 * LAYOUT.nbytes
    engine.load(host, offsets, gpu, [8, 9, 10], fmt)
    original, restored = gpu.kv[[0, 1, 2]].float(), gpu.kv[[8, 9, 10]].float()
    rel = torch.linalg.vector_norm(restored - original) / torch.linalg.vector_norm(original)
    assert rel < bound


def test_mismatched_arguments_are_rejected(gpu, host) -> None:
    engine = TransferEngine("cpu")
    offsets = host.allocate(LAYOUT.nbytes, 2)
    with pytest.raises(ValueError, match="2 host extents for 3 GPU slots"):
        engine.prepare_store(gpu, [0, 1, 2], host, offsets, "bf16")
    store = engine.prepare_store(gpu, [0, 1], host, offsets, "bf16")
    with pytest.raises(ValueError, match="got a gpu_to_host transfer"):
        engine.complete_load(store)


def test_cpu_sized_benchmark_runs(tmp_path) -> None:
    """`python -m bench.transfer --quick`: the CI variant of the H200 benchmark (numbers not
    asserted), its results under the provenance keys."""
    from bench import transfer as bench
    from hkv.report import PROVENANCE_KEYS

    out = tmp_path / "transfer.json"
    result = bench.main(
        ["--quick", "--repeats", "1", "--out", str(out), "--disk-dir", str(tmp_path)]
    )
    assert json.loads(out.read_text())["summary"] == result["summary"]
    assert [row["block_tokens"] for row in result["links"]] == [16, 32, 64, 512]
    assert {"hkv_gbps", "bulk_gbps", "per_block_gbps"} <= set(result["links"][0]["gpu_to_host"])
    assert all(row["tier_read_gbps"] > 0 for row in result["disk"])
    assert result["versions"]["torch"] == torch.__version__
    assert tuple(json.loads(out.read_text()))[:5] == PROVENANCE_KEYS


def test_lossless_load_into_consecutive_slots_skips_the_staging_copy(gpu, host) -> None:
    """A lossless chunk bound for consecutive slots is copied straight into them; a chunk
    bound for scattered slots still goes through staging; both land bit for bit."""
    engine = TransferEngine("cpu")
    src = [0, 1, 2, 3, 4, 5]
    offsets = host.allocate(LAYOUT.nbytes, len(src))
    engine.store(gpu, src, host, offsets, "bf16")
    direct = engine.prepare_load(host, offsets[:3], gpu, [9, 10, 11], "bf16")
    assert direct._keep[1] is None  # no staging buffer was made
    engine.complete_load(direct)
    mixed = engine.prepare_load(host, offsets, gpu, [6, 7, 8, 15, 12, 13], "bf16", starts=[3])
    assert [end for end, _ in mixed.arrivals] == [3, 6]
    assert mixed._keep[1] is not None  # the second chunk was staged and scattered
    engine.complete_load(mixed)
    assert torch.equal(gpu.kv[[9, 10, 11]], gpu.kv[[0, 1, 2]])
    assert torch.equal(gpu.kv[[6, 7, 8, 15, 12, 13]], gpu.kv[src])
