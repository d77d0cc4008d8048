"""Measure this machine into a `HardwareProfile` (`hkv calibrate`): host memory copies, the
disk's write (with fsync) and read bandwidth, and the GPU's links when torch sees one.

The profile is JSON that `HardwareProfile.load` reads back and the cost model prices blocks
with. torch is imported only to measure a GPU.
"""

from __future__ import annotations

import math
import os
import platform
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from hkv.cost import HardwareProfile, LinkSpec
from hkv.errors import HkvError, shown
from hkv.inputs import open_problem

MAX_SIZE_MIB = 4096
"""The largest buffer `calibrate` measures with (4 GiB; it holds three)."""
MAX_REPEATS = 20
"""The most timed copies of each kind (the best is kept; a few suffice)."""


def calibrate(
    *, disk_dir: str | os.PathLike[str] | None = None, size_mib: int = 256, repeats: int = 3
) -> HardwareProfile:
    """Measure this machine's host memcpy and disk bandwidth (and GPU links when CUDA is present).

    Starts from the default H200 profile and replaces what it measures; `measured` lists those
    fields. Disk reads drop the page cache for the file first (`posix_fadvise`), so they come
    from the device. Takes a few seconds at the default size.
    """
    _check_count("size_mib", size_mib, MAX_SIZE_MIB, "MiB")
    _check_count("repeats", repeats, MAX_REPEATS, "timed copies")
    _check_memory(size_mib)
    disk_dir = Path(disk_dir) if disk_dir is not None else Path(tempfile.gettempdir())
    if not os.path.isdir(disk_dir):  # False, not OSError, for a name too long
        raise HkvError(f"disk_dir: no such directory {shown(str(disk_dir))}; give a folder")
    base = HardwareProfile.default()
    nbytes = size_mib * 2**20
    memcpy = _measure_memcpy(nbytes, repeats)
    disk_write, disk_read = _measure_disk(disk_dir, nbytes)
    links = dict(base.links)
    links["disk"] = replace(links["disk"], to_gpu_gbps=disk_read, from_gpu_gbps=disk_write)
    measured = ["host_memcpy_gbps", "links.disk.to_gpu_gbps", "links.disk.from_gpu_gbps"]
    gpu = _measure_cuda(nbytes, repeats)
    if gpu is not None:
        for name, spec in gpu["links"].items():
            links[name] = spec
            measured += [f"links.{name}.to_gpu_gbps", f"links.{name}.from_gpu_gbps"]
    machine = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "disk_dir": str(disk_dir),
        "size_mib": size_mib,
        "repeats": repeats,
    }
    no_gpu = "no CUDA device: GPU links and prefill_tflops are the default H200's. "
    return HardwareProfile(
        name=f"calibrated-{platform.node() or 'host'}",
        links=links,
        prefill_tflops=base.prefill_tflops,
        host_memcpy_gbps=memcpy,
        gpu_name=gpu["gpu_name"] if gpu else None,
        measured=tuple(measured),
        machine=machine,
        notes=("" if gpu else no_gpu) + "latencies and prefill_tflops are the default's.",
    )


def _check_count(name: str, value: Any, high: int, unit: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise HkvError(
            f"{name}: got {shown(value)}; expected an integer in [1, {high:,}] ({unit}; the cap "
            "keeps a calibration within about a minute)"
        )


def _check_memory(size_mib: int) -> None:
    """Refuse a buffer size whose three copies (source, destination, disk data) would not fit
    in the host memory available now."""
    try:
        import psutil
    except ImportError:  # measure anyway; the size cap still holds
        return
    available_mib = psutil.virtual_memory().available // 2**20
    if 3 * size_mib > available_mib:
        raise HkvError(
            f"size_mib: got {size_mib:,}; three buffers of that size do not fit in the "
            f"{available_mib:,} MiB of memory available; give at most {available_mib // 3:,}"
        )


def _measure_memcpy(nbytes: int, repeats: int) -> float:
    """Best-of-`repeats` GB/s of one large host-to-host copy (bytes copied per second)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9


def _measure_disk(directory: Path, nbytes: int) -> tuple[float, float]:
    """(write-with-fsync GB/s, cold sequential read GB/s) of a file in `directory`.

    The file is unlinked as soon as it is made and measured through its open descriptor, so
    no run, however it ends (Ctrl-C, SIGTERM, SIGKILL, a full disk), leaves it behind."""
    data = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8).tobytes()
    try:
        fd, name = tempfile.mkstemp(prefix="hkv-calibrate-", dir=directory)
        os.unlink(name)
    except OSError as exc:
        raise HkvError(open_problem(directory, "disk_dir", exc, "write into")) from None
    try:
        with os.fdopen(fd, "r+b") as handle:
            return _time_disk(handle, data)
    except OSError as exc:
        raise HkvError(open_problem(directory, "disk_dir", exc, "measure")) from None


def _time_disk(handle: Any, data: bytes) -> tuple[float, float]:
    start = time.perf_counter()
    handle.write(data)
    handle.flush()
    os.fsync(handle.fileno())
    write_s = time.perf_counter() - start
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    handle.seek(0)
    start = time.perf_counter()
    while handle.read(16 * 2**20):
        pass
    read_s = time.perf_counter() - start
    return len(data) / write_s / 1e9, len(data) / read_s / 1e9


def _measure_cuda(nbytes: int, repeats: int) -> dict[str, Any] | None:
    """Pinned / pageable host<->GPU and device copy bandwidth; None without torch or CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda")
    gpu_buf = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    gpu_dst = torch.empty_like(gpu_buf)

    def best_gbps(copy, moved: int) -> float:
        copy()
        torch.cuda.synchronize()
        best = math.inf
        for _ in range(repeats):
            start = time.perf_counter()
            copy()
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        return moved / best / 1e9

    links = {}
    for name, pin in (("host_pinned", True), ("host_pageable", False)):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
        h2d = best_gbps(lambda h=host: gpu_buf.copy_(h, non_blocking=True), nbytes)
        d2h = best_gbps(lambda h=host: h.copy_(gpu_buf, non_blocking=True), nbytes)
        links[name] = LinkSpec(h2d, d2h, HardwareProfile.default().links[name].latency_s)
    d2d = best_gbps(lambda: gpu_dst.copy_(gpu_buf), nbytes)
    links["gpu"] = LinkSpec(d2d, d2d, HardwareProfile.default().links["gpu"].latency_s)
    return {"gpu_name": torch.cuda.get_device_name(dev), "links": links}
