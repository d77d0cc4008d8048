"""hkv's batched block transfers and disk tier against their baselines, measured in one run.

    python -m bench.transfer --out data/results/transfer_h200.json        # on an H200 host
    python -m bench.transfer --quick --out data/results/transfer_cpu.json # CPU-sized, CI

Host <-> GPU, both directions, for blocks of 16 / 32 / 64 / 512 tokens at MiniMax-M2.5 dims
(one layer: 8 KV heads x 128 x bf16, so 64 KiB / 128 KiB / 256 KiB / 2 MiB per block):
- `hkv`: `TransferEngine.prepare_*` + `complete_*` on randomly scattered GPU slots (gather on
  the GPU, one bulk copy, scatter), wall time from the call to completion;
- `per_block`: one `copy_` per block on a side stream (what a naive offloader does);
- `bulk`: one copy of the same number of bytes between a contiguous GPU buffer and a pinned
  host buffer (the link's ceiling in this run).
Target: `hkv` >= 90% of `bulk` in both directions for blocks of 64 KiB and larger.

Disk (`bench.transfer_disk`): `DiskTier.write_many` and `read_many` against sequential file I/O
of the same bytes in the same folder. Target: the tier >= 80% of the sequential throughput.

Also measured: overlap of a transfer with a matmul on the compute stream, and q8 / q4 stores
and loads (quantized on the GPU). Medians over `--repeats` interleaved runs (disk: best of).
Without CUDA the same code runs on CPU (the "GPU" pool is host memory): only a smoke test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.transfer_disk import _filesystem, disk_case
from bench.transfer_timing import MINIMAX, timed
from hkv.report import provenance, write_json
from hkv.storage.disk import CHECKSUMS, DEFAULT_CHECKSUM
from hkv.storage.layout import BlockLayout
from hkv.storage.quant import codec
from hkv.storage.tiers import GpuTier, HostTier
from hkv.storage.transfer import TransferEngine

BLOCK_TOKENS = (16, 32, 64, 512)
CPU_NOTE = (
    "no CUDA: the 'GPU' pool is host memory and every copy a host memcpy, so this run "
    "checks the code path only; the targets apply to the CUDA run"
)


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
        gbps = interleaved_gbps(fns, repeats, n * layout.nbytes)
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


def interleaved_gbps(fns: dict[str, Any], repeats: int, nbytes: int) -> dict[str, float]:
    """GB/s of each of `fns` moving `nbytes`: medians of `repeats` interleaved runs, after one
    warm-up each."""
    seconds: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # warm-up
        timed(fn)
    for _ in range(repeats):
        for name, fn in fns.items():
            seconds[name].append(timed(fn))
    return {name: nbytes / statistics.median(s) / 1e9 for name, s in seconds.items()}


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


def measured_machine(device: torch.device, folder: Path) -> dict[str, Any]:
    """What this run adds to `machine_info`: host name, device, the disk tier's folder and
    filesystem, and on CUDA the GPU's name, CUDA and driver versions."""
    info: dict[str, Any] = {
        "hostname": platform.node(),
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


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.transfer", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", default=None, help="results JSON (default: print only)")
    parser.add_argument("--quick", action="store_true", help="CPU-sized: small batches, CI")
    parser.add_argument("--batch-mib", type=int, default=None, help="bytes moved per transfer")
    parser.add_argument("--disk-mib", type=int, default=None, help="bytes written to disk per case")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--disk-dir", default=tempfile.gettempdir())
    return parser.parse_args(argv)


def link_line(row: dict[str, Any]) -> str:
    return f"{row['block_tokens']:4d} tokens ({row['block_bytes'] // 1024} KiB) x " + (
        f"{row['num_blocks']}: "
        + "  ".join(
            f"{d}: hkv {row[d]['hkv_gbps']:.1f} / bulk {row[d]['bulk_gbps']:.1f} / "
            f"per-block {row[d]['per_block_gbps']:.1f} GB/s ({row[d]['hkv_vs_bulk']:.0%})"
            for d in ("gpu_to_host", "host_to_gpu")
        )
    )


def disk_line(row: dict[str, Any]) -> str:
    return (
        f"disk {row['block_bytes'] // 1024} KiB blocks: write {row['tier_write_gbps']:.2f} vs "
        f"{row['seq_write_gbps']:.2f} GB/s ({row['write_vs_sequential']:.0%}), read "
        f"{row['tier_read_gbps']:.2f} vs {row['seq_read_gbps']:.2f} "
        f"({row['read_vs_sequential']:.0%})"
    )


def measure(sizes: dict[str, Any], device: torch.device, folder: Path) -> dict[str, Any]:
    """Every case at `sizes` (batch_bytes, disk_bytes, repeats, small), printed as it runs."""
    batch, repeats = sizes["batch_bytes"], sizes["repeats"]
    links = []
    for tokens in BLOCK_TOKENS:
        links.append(link_case(tokens, batch, repeats, device))
        print(link_line(links[-1]), flush=True)
    disks = [
        disk_case(tokens, sizes["disk_bytes"], max(2, repeats // 3), folder) for tokens in (16, 512)
    ]
    for row in disks:
        print(disk_line(row), flush=True)
    quant_tokens = 512 if not sizes["small"] else 64
    return {
        "note": None if device.type == "cuda" else CPU_NOTE,
        "links": links,
        "quantized": quantized_case(quant_tokens, batch, max(1, repeats // 2), device),
        "overlap": overlap_case(batch, device),
        "disk": disks,
        "summary": summarize(links, disks),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    small = args.quick or device.type != "cuda"
    sizes = {
        "batch_bytes": (args.batch_mib or (2 if small else 512)) * 2**20,
        "disk_bytes": (args.disk_mib or (2 if small else 512)) * 2**20,
        "repeats": args.repeats or (2 if small else 7),
        "small": small,
    }
    folder = Path(args.disk_dir)
    results = measure(sizes, device, folder)
    parameters = {
        "block_tokens": list(BLOCK_TOKENS),
        "layout": {**MINIMAX, "num_layers": 1, "dtype": "bfloat16"},
        "batch_bytes": sizes["batch_bytes"],
        "disk_bytes": sizes["disk_bytes"],
        "repeats": sizes["repeats"],
    }
    command = "python -m bench.transfer" + (" --quick" if args.quick else "")
    head = provenance(command, parameters, packages=("hkv", "numpy", "torch"),
                      machine=measured_machine(device, folder))  # fmt: skip
    result = head | results
    print(json.dumps(result["summary"], indent=2))
    if result["overlap"]:
        print("overlap:", json.dumps(result["overlap"]))
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
