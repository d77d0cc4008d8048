"""GPU and host memory, read through nvitop where a GPU exists and through psutil otherwise.

On a machine without NVIDIA's driver, nvitop imports fine, `Device.all()` is empty and
`Device.count()` raises after printing a banner; the monitor silences nvitop's NVML logger first
and quietly reports no GPUs. Nothing here imports torch.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
from dataclasses import asdict, dataclass
from typing import Any

from hkv.planning.sizes import GIB
from hkv.versions import package_versions

REPORTED_PACKAGES = (
    "hkv",
    "numpy",
    "torch",
    "vllm",
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


class GpuPeakSampler:
    """Peak memory used on one GPU as the driver sees it (nvitop over NVML: every process's
    allocations, the CUDA context and PyTorch's cached blocks), sampled on a thread every
    `interval_s` while the `with` block runs. `peak_bytes` is None without nvitop or a GPU.

        with GpuPeakSampler() as sampler:
            run()
        sampler.peak_bytes
    """

    def __init__(self, index: int = 0, interval_s: float = 0.005):
        self.index, self.interval_s = index, interval_s
        self.peak_bytes: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._device = None
        if any(g.index == index for g in gpus()):
            from nvitop import Device

            self._device = Device(index)

    def _read(self) -> int:
        used = int(self._device.memory_used())
        self.peak_bytes = used if self.peak_bytes is None else max(self.peak_bytes, used)
        self.samples += 1
        return used

    def now(self, peak: bool = False) -> int | None:
        """Memory used now (a fresh reading), or the peak so far including it."""
        if self._device is None:
            return None
        used = self._read()
        return self.peak_bytes if peak else used

    def restart(self) -> None:
        """Forget the peak so far: the next one is over what follows."""
        if self._device is not None:
            self.peak_bytes = None
            self._read()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def __enter__(self) -> GpuPeakSampler:
        if self._device is not None:
            self._read()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._read()


def snapshot() -> MemorySnapshot:
    import psutil

    vm = psutil.virtual_memory()
    return MemorySnapshot(
        gpus=gpus(),
        host_total_bytes=int(vm.total),
        host_available_bytes=int(vm.available),
        process_rss_bytes=int(psutil.Process(os.getpid()).memory_info().rss),
    )


def environment_report() -> dict[str, Any]:
    """What `hkv doctor` and notebook 01 show: Python, packages, CPU, memory, GPUs."""
    snap = snapshot()
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "packages": {k: v for k, v in package_versions(REPORTED_PACKAGES).items() if k != "python"},
        "host_total_gib": round(snap.host_total_bytes / GIB, 2),
        "host_available_gib": round(snap.host_available_bytes / GIB, 2),
        "gpus": [asdict(g) for g in snap.gpus],
        "native_shadows": native_report(),
        "native_disk_io": disk_io_report(),
    }


def native_report() -> dict[str, Any]:
    """Whether `auto`'s shadow tiers run in C here (`hkv.policies.native`), which experts, and
    which of them lead the tier from C inside vLLM (`leader.NativeLeader`: a queue expert from
    the start, any of them after a switch that rebuilds or copies it in C), and which hkv
    policies vLLM's adapter runs from C (`leader.vllms_lru`)."""
    from hkv.policies import native
    from hkv.policies.leader import LIVE_IN_C

    leaders = sorted(LIVE_IN_C) if native.built() else []
    return {"built": native.built(), "experts": sorted(native.LABELS), "leaders": leaders,
            "vllm_policies": ["lru"] if native.built() else [],  # `leader.vllms_lru`
            "threaded": native.threaded(), "parallel": native.parallel()}  # fmt: skip


def disk_io_report() -> dict[str, Any]:
    """Whether the disk tier reads and writes its slots in C here (`hkv.storage.slot_io`)."""
    from hkv.storage import disk, slot_io

    return {
        "built": slot_io.built(),
        "checksum": disk.CHECKSUMS[disk.DEFAULT_CHECKSUM][0],
        "crc32_from": slot_io.crc32_source(),
    }
