"""One provenance schema for every results file hkv writes (benchmarks and notebooks).

    {"generated_by": "bench.policies", "date_utc": "2026-12-01T09:30:00Z",
     "machine": {...}, "versions": {...}, "parameters": {...}, ...the numbers...}

`machine` says where it ran (platform, CPUs, GPU name when one is visible, plus what the caller
measured there, such as a link's bandwidth); `versions` the packages that shaped the numbers;
`parameters` what the run was asked to do. Only the standard library is imported here:
versions are read from package metadata, never by importing torch or vLLM.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hkv.outputs import write_atomic
from hkv.versions import DEFAULT_PACKAGES, package_versions

PROVENANCE_KEYS = ("generated_by", "date_utc", "machine", "versions", "parameters")


def machine_info(**measured: Any) -> dict[str, Any]:
    """The host: platform, processor, CPU count; `measured` adds what the run found (a GPU's
    name, a link's bandwidth) under the caller's keys."""
    return {
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpus": os.cpu_count(),
        **measured,
    }


def provenance(
    generated_by: str,
    parameters: Mapping[str, Any] | None = None,
    *,
    packages: Iterable[str] = DEFAULT_PACKAGES,
    machine: Mapping[str, Any] | None = None,
    date_utc: str | None = None,
) -> dict[str, Any]:
    """The five provenance keys, in schema order. `machine` extends `machine_info()`."""
    return {
        "generated_by": generated_by,
        "date_utc": date_utc or utc_now(),
        "machine": machine_info(**dict(machine or {})),
        "versions": package_versions(packages),
        "parameters": dict(parameters or {}),
    }


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def write_json(path: str | os.PathLike[str], payload: Mapping[str, Any]) -> Path:
    """Write `payload` as indented JSON atomically (`hkv.outputs.write_atomic`: a temporary file
    in the same folder renamed over `path`, so an interrupted run leaves the old file or the new
    one, never half of one; the folder made where missing). `HkvError`, nothing written, for a
    path that is a link, folder, device or pipe (writing would replace it). A NaN or infinity,
    which JSON has no number for (`NaN` in the file is not JSON), is written as null: a long
    run's results are kept, and the missing number reads as missing."""
    text = json.dumps(_finite(payload), indent=1, sort_keys=False, default=_plain, allow_nan=False)
    return write_atomic(path, (text, "\n"), "results file", "results.json")


def _finite(value: Any) -> Any:
    """`value` with every float that is not finite as None, through dicts, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def save_results(
    path: str | os.PathLike[str],
    results: Mapping[str, Any],
    *,
    generated_by: str,
    parameters: Mapping[str, Any] | None = None,
    packages: Iterable[str] = DEFAULT_PACKAGES,
    machine: Mapping[str, Any] | None = None,
) -> Path:
    """Write `results` under the provenance keys (which `results` must not use itself)."""
    clash = set(PROVENANCE_KEYS) & set(results)
    if clash:
        raise ValueError(f"results use the provenance keys {sorted(clash)}; rename them")
    head = provenance(generated_by, parameters, packages=packages, machine=machine)
    return write_json(path, {**head, **results})


def _plain(value: Any) -> Any:
    """JSON for numpy scalars and arrays, enums, paths and sets (what results hold)."""
    if hasattr(value, "tolist"):
        return _finite(value.tolist())
    if hasattr(value, "value") and isinstance(value.value, str | int):
        return value.value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
