"""hkv's batched block transfers and disk tier against their baselines, measured in one run.

    python bench/transfer.py --out data/results/transfer_h200.json        # on an H200 host
    python bench/transfer.py --quick --out data/results/transfer_cpu.json # CPU-sized, CI

Host <-> GPU, both directions, for blocks of 16 / 32 / 64 / 512 tokens at MiniMax-M2.5 dims
(one layer: 8 KV heads x 128 x bf16, so 64 KiB / 128 KiB / 256 KiB / 2 MiB per block):
- `hkv`: `TransferEngine.prepare_*` + `complete_*` on randomly scattered GPU slots (gather on
  the GPU, one bulk copy, scatter), wall time from the call to completion;
- `per_block`: one `copy_` per block on a side stream (what a naive offloader does);
- `bulk`: one copy of the same number of bytes between a contiguous GPU buffer and a pinned
  host buffer (the link's ceiling in this run).
Target: `hkv` >= 90% of `bulk` in both directions for blocks of 64 KiB and larger.

Disk: `DiskTier.write_many` (headers, checksums, three fdatasyncs) and `read_many` (from the
disk: the page cache is dropped first) against one sequential write + fsync and one sequential
read of the same bytes in the same folder. Target: the tier >= 80% of the sequential throughput.

Also measured: overlap of a transfer with a matmul on the compute stream, and q8 / q4 stores
and loads (quantized on the GPU). Medians over `--repeats` interleaved runs (disk: best of).
Without CUDA the same code runs on CPU (the "GPU" pool is host memory): only a smoke test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import hkv
from hkv.storage.disk import CHECKSUMS, DEFAULT_CHECKSUM, DiskTier
from hkv.storage.quant import codec
from hkv.storage.layout import BlockLayout
from hkv.storage.tiers import GpuTier, HostTier
from hkv.storage.transfer import TransferEngine

BLOCK_TOKENS = (16, 32, 64, 512)
MINIMAX = {"kv_heads": 8, "head_dim": 128}  # one layer of MiniMax-M2.5 (DESIGN §3)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any]) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def link_case(tokens: int, batch_bytes: int, repeats: int, device: torch.device) -> dict:
    """hkv vs per-block vs bulk copies of one batch of blocks, both directions."""
    layout = BlockLayout(tokens, **MINIMAX)
    n = max(1, batch_bytes // layout.nbytes)
    rng = np.random.default_rng(tokens)
    gpu = GpuTier(layout, 2 * n, device)
    gpu.kv.copy_(torch.randn(gpu.kv.shape, dtype=torch.float32, device=device))
    src = rng.permutation(2 * n)[:n]  # numpy, as a serving engine's block tables are
    dst = rng.permutation(2 * n)[:n]
    host = HostTier(n * layout.nbytes, page_bytes=max(512, layout.nbytes // 16))
    offsets = host.allocate(layout.nbytes, n)
    rows = host.buf.view(n, layout.nbytes)
    engine = TransferEngine(device)
    side = torch.cuda.Stream(device) if device.type == "cuda" else None
    flat = gpu.kv.view(2 * n, -1).view(torch.uint8)
    bulk_gpu = torch.empty(n * layout.nbytes, dtype=torch.uint8, device=device)
    bulk_gpu.copy_(flat[:n].reshape(-1))

    def per_block(to_host: bool) -> None:
        with torch.cuda.stream(side) if side else contextlib.nullcontext():
            for i, slot in enumerate(src if to_host else dst):
                if to_host:
                    rows[i].copy_(flat[slot], non_blocking=True)
                else:
                    flat[slot].copy_(rows[i], non_blocking=True)

    methods = {
        "gpu_to_host": {
            "hkv": lambda: engine.store(gpu, src, host, offsets, "bf16"),
            "per_block": lambda: per_block(True),
            "bulk": lambda: host.buf.copy_(bulk_gpu, non_blocking=True),
        },
        "host_to_gpu": {
            "hkv": lambda: engine.load(host, offsets, gpu, dst, "bf16"),
            "per_block": lambda: per_block(False),
            "bulk": lambda: bulk_gpu.copy_(host.buf, non_blocking=True),
        },
    }
    out: dict[str, Any] = {
        "block_tokens": tokens,
        "block_bytes": layout.nbytes,
        "num_blocks": n,
        "batch_bytes": n * layout.nbytes,
        "host_pinned": host.pinned,
    }
    for direction, fns in methods.items():
        seconds = {name: [] for name in fns}
        for fn in fns.values():  # warm-up
            timed(fn)
        for _ in range(repeats):
            for name, fn in fns.items():
                seconds[name].append(timed(fn))
        gbps = {name: n * layout.nbytes / statistics.median(s) / 1e9 for name, s in seconds.items()}
        out[direction] = {
            **{f"{k}_gbps": round(v, 3) for k, v in gbps.items()},
            "hkv_vs_bulk": round(gbps["hkv"] / gbps["bulk"], 4),
            "hkv_vs_per_block": round(gbps["hkv"] / gbps["per_block"], 2),
            "hkv_copies": engine.store(gpu, src, host, offsets, "bf16").num_copies,
        }
    expected = gpu.kv[src].clone()
    engine.store(gpu, src, host, offsets, "bf16")
    engine.load(host, offsets, gpu, dst, "bf16")
    assert torch.equal(gpu.kv[dst], expected), "hkv round trip changed the blocks"
    return out


def quantized_case(tokens: int, batch_bytes: int, repeats: int, device: torch.device) -> list:
    """q8 / q4 store and load: encoded on the device, fewer bytes over the link."""
    layout = BlockLayout(tokens, **MINIMAX)
    n = max(1, batch_bytes // layout.nbytes)
    gpu = GpuTier(layout, 2 * n, device)
    gpu.kv.copy_(torch.randn(gpu.kv.shape, device=device))
    host = HostTier(n * layout.nbytes, page_bytes=max(512, layout.nbytes // 16))
    engine = TransferEngine(device)
    rows = []
    for fmt in ("q8", "q4"):
        offsets = host.allocate(codec(layout, fmt).payload_bytes, n)

        def store(fmt=fmt, offsets=offsets) -> None:
            engine.store(gpu, range(n), host, offsets, fmt)

        def load(fmt=fmt, offsets=offsets) -> None:
            engine.load(host, offsets, gpu, range(n, 2 * n), fmt)

        store_s = [timed(store) for _ in range(repeats + 1)][1:]
        load_s = [timed(load) for _ in range(repeats + 1)][1:]
        host.free(offsets)
        raw = n * layout.nbytes
        rows.append(
            {
                "fmt": fmt,
                "block_tokens": tokens,
                "bits_per_value": codec(layout, fmt).bits_per_value,
                "store_raw_equivalent_gbps": round(raw / statistics.median(store_s) / 1e9, 3),
                "load_raw_equivalent_gbps": round(raw / statistics.median(load_s) / 1e9, 3),
            }
        )
    return rows


def overlap_case(batch_bytes: int, device: torch.device) -> dict | None:
    """A load prepared before a matmul runs alongside it: time(both) vs time(each)."""
    if device.type != "cuda":
        return None
    layout = BlockLayout(512, **MINIMAX)
    n = max(1, batch_bytes // layout.nbytes)
    gpu = GpuTier(layout, 2 * n, device)
    host = HostTier(n * layout.nbytes, page_bytes=layout.nbytes // 16)
    offsets = host.allocate(layout.nbytes, n)
    engine = TransferEngine(device)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)

    def compute() -> None:
        for _ in range(8):
            a @ a

    def transfer() -> None:
        for _ in range(4):
            engine.complete_load(engine.prepare_load(host, offsets, gpu, range(n), "bf16"))

    def both() -> None:
        pending = [engine.prepare_load(host, offsets, gpu, range(n), "bf16") for _ in range(4)]
        compute()
        for p in pending:
            engine.complete_load(p)

    for fn in (compute, transfer, both):
        timed(fn)
    t_compute, t_transfer, t_both = (
        statistics.median(timed(fn) for _ in range(5)) for fn in (compute, transfer, both)
    )
    hidden = (t_compute + t_transfer - t_both) / min(t_compute, t_transfer)
    return {
        "compute_s": t_compute,
        "transfer_s": t_transfer,
        "both_s": t_both,
        "hidden_fraction_of_shorter": round(hidden, 3),
    }


def disk_case(tokens: int, total_bytes: int, repeats: int, folder: Path) -> dict:
    """DiskTier write/read vs sequential file write+fsync / read, same bytes, same folder."""
    layout = BlockLayout(tokens, **MINIMAX)
    n = max(1, total_bytes // layout.nbytes)
    nbytes = n * layout.nbytes
    host = HostTier(nbytes, page_bytes=max(512, layout.nbytes // 16))
    host.buf.copy_(torch.randint(0, 256, (nbytes,), dtype=torch.uint8))
    offsets = host.allocate(layout.nbytes, n).tolist()
    data = host.buf.numpy()
    seq_path, tier_path = folder / "hkv-bench-seq.bin", folder / "hkv-bench-tier.kv"
    tier = DiskTier(tier_path, n, layout.nbytes)
    entries = [(i, i, "bf16", data[o : o + layout.nbytes]) for i, o in enumerate(offsets)]
    back = np.empty_like(data)
    results: dict[str, list[float]] = {
        k: [] for k in ("seq_write", "seq_read", "tier_write", "tier_read")
    }
    reads = [(i, i, "bf16") for i in range(n)]

    def tier_read() -> None:
        problems = tier.read_many(reads, back, offsets)
        assert problems == [None] * n, problems[:3]

    cases = {
        "seq_write": lambda: _sequential_write(seq_path, data),
        "seq_read": lambda: _sequential_read(seq_path, back),
        "tier_write": lambda: tier.write_many(entries),
        "tier_read": tier_read,
    }
    try:
        for _ in range(repeats):
            for name, fn in cases.items():
                back[:] = 0
                if name == "tier_read":
                    tier.drop_cache()
                results[name].append(timed(fn))
                if name.endswith("read"):
                    assert np.array_equal(back, data), name
    finally:
        tier.close()
        for path in (seq_path, tier_path):
            path.unlink(missing_ok=True)
    gbps = {k: nbytes / min(v) / 1e9 for k, v in results.items()}
    return {
        "block_tokens": tokens,
        "block_bytes": layout.nbytes,
        "num_blocks": n,
        "total_bytes": nbytes,
        **{f"{k}_gbps": round(v, 3) for k, v in gbps.items()},
        "write_vs_sequential": round(gbps["tier_write"] / gbps["seq_write"], 4),
        "read_vs_sequential": round(gbps["tier_read"] / gbps["seq_read"], 4),
    }


def _sequential_write(path: Path, data: np.ndarray) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[: 64 * 2**20]) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _sequential_read(path: Path, out: np.ndarray) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        view, done = memoryview(out), 0
        while done < out.nbytes:
            done += os.readv(fd, [view[done : done + 16 * 2**20]])
    finally:
        os.close(fd)


def machine(device: torch.device, folder: Path) -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "hkv": hkv.__version__,
        "device": str(device),
        "disk_dir": str(folder),
        "disk_filesystem": _filesystem(folder),
        "disk_checksum": CHECKSUMS[DEFAULT_CHECKSUM][0],
    }
    if device.type == "cuda":
        info["gpu_name"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
        try:
            query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            info["driver"] = subprocess.run(
                query, capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            info["driver"] = None
    return info


def _filesystem(folder: Path) -> str | None:
    """Type and device of the mount holding `folder` (from /proc/mounts), e.g. "ext4 /dev/vda"."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return None
    path = str(folder.resolve())
    best = max(
        (m for m in mounts if path == m[1] or path.startswith(m[1].rstrip("/") + "/")),
        key=lambda m: len(m[1]),
        default=None,
    )
    return f"{best[2]} {best[0]} on {best[1]}" if best else None


def summarize(links: list[dict], disks: list[dict]) -> dict[str, Any]:
    big = [row for row in links if row["block_bytes"] >= 64 * 1024]
    worst = {d: min(row[d]["hkv_vs_bulk"] for row in big) for d in ("gpu_to_host", "host_to_gpu")}
    disk_worst = min(min(r["write_vs_sequential"], r["read_vs_sequential"]) for r in disks)
    return {
        "targets_apply": bool(links) and links[0]["host_pinned"],
        "batched_vs_bulk_worst_at_64KiB_plus": worst,
        "batched_target_0.9_met": all(v >= 0.9 for v in worst.values()),
        "disk_vs_sequential_worst": disk_worst,
        "disk_target_0.8_met": disk_worst >= 0.8,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="results JSON (default: print only)")
    parser.add_argument("--quick", action="store_true", help="CPU-sized: small batches, CI")
    parser.add_argument("--batch-mib", type=int, default=None, help="bytes moved per transfer")
    parser.add_argument("--disk-mib", type=int, default=None, help="bytes written to disk per case")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--disk-dir", default=tempfile.gettempdir())
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    small = args.quick or device.type != "cuda"
    batch = (args.batch_mib or (2 if small else 512)) * 2**20
    disk_bytes = (args.disk_mib or (2 if small else 512)) * 2**20
    repeats = args.repeats or (2 if small else 7)
    folder = Path(args.disk_dir)
    links = []
    for tokens in BLOCK_TOKENS:
        links.append(link_case(tokens, batch, repeats, device))
        row = links[-1]
        print(
            f"{tokens:4d} tokens ({row['block_bytes'] // 1024} KiB) x {row['num_blocks']}: "
            + "  ".join(
                f"{d}: hkv {row[d]['hkv_gbps']:.1f} / bulk {row[d]['bulk_gbps']:.1f} / "
                f"per-block {row[d]['per_block_gbps']:.1f} GB/s ({row[d]['hkv_vs_bulk']:.0%})"
                for d in ("gpu_to_host", "host_to_gpu")
            ),
            flush=True,
        )
    disks = [disk_case(tokens, disk_bytes, max(2, repeats // 3), folder) for tokens in (16, 512)]
    for row in disks:
        print(
            f"disk {row['block_bytes'] // 1024} KiB blocks: write {row['tier_write_gbps']:.2f} vs "
            f"{row['seq_write_gbps']:.2f} GB/s ({row['write_vs_sequential']:.0%}), read "
            f"{row['tier_read_gbps']:.2f} vs {row['seq_read_gbps']:.2f} "
            f"({row['read_vs_sequential']:.0%})",
            flush=True,
        )
    result = {
        "benchmark": "transfer",
        "source": "bench/transfer.py" + (" --quick" if args.quick else ""),
        "regenerate": "python bench/transfer.py --out data/results/transfer_<machine>.json",
        "machine": machine(device, folder),
        "note": None
        if device.type == "cuda"
        else (
            "no CUDA: the 'GPU' pool is host memory and every copy a host memcpy, so this run "
            "checks the code path only; the targets apply to the CUDA run"
        ),
        "parameters": {
            "block_tokens": list(BLOCK_TOKENS),
            "layout": {**MINIMAX, "num_layers": 1, "dtype": "bfloat16"},
            "batch_bytes": batch,
            "disk_bytes": disk_bytes,
            "repeats": repeats,
        },
        "links": links,
        "quantized": quantized_case(512 if not small else 64, batch, max(1, repeats // 2), device),
        "overlap": overlap_case(batch, device),
        "disk": disks,
        "summary": summarize(links, disks),
    }
    print(json.dumps(result["summary"], indent=2))
    if result["overlap"]:
        print("overlap:", json.dumps(result["overlap"]))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
