"""The disk half of `python -m bench.transfer`: `DiskTier` against plain sequential file I/O.

`DiskTier.write_many` (headers, checksums, three fdatasyncs) and `read_many` (from the disk: the
page cache is dropped first) against one sequential write + fsync and one sequential read of the
same bytes in the same folder. Target: the tier >= 80% of the sequential throughput.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from bench.transfer_timing import MINIMAX, timed
from hkv.storage.disk import DiskTier
from hkv.storage.layout import BlockLayout
from hkv.storage.tiers import HostTier


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
