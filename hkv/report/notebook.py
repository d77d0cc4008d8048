"""A notebook's results file: what its last cell saves and `tests/test_notebooks.py` reads.

    save_notebook_results("03_flags", results, parameters={"MODEL": MODEL, ...})

writes `<results_dir>/03_flags.json` with the provenance schema of every hkv results file
(`hkv.report.provenance`): generated_by `notebooks/03_flags.ipynb`, date_utc, machine, versions,
parameters, then the notebook's own keys.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hkv.report.provenance import DEFAULT_PACKAGES, save_results

DEFAULT_RESULTS_DIR = "../out/results"  # relative to notebooks/, where papermill runs them


def save_notebook_results(
    name: str,
    results: Mapping[str, Any],
    *,
    parameters: Mapping[str, Any] | None = None,
    results_dir: str | os.PathLike[str] = DEFAULT_RESULTS_DIR,
    packages: Iterable[str] = DEFAULT_PACKAGES,
    machine: Mapping[str, Any] | None = None,
) -> Path:
    """Save notebook `name`'s results (atomically) and return the file's path."""
    return save_results(
        Path(results_dir) / f"{name}.json",
        results,
        generated_by=f"notebooks/{name}.ipynb",
        parameters=parameters,
        packages=packages,
        machine=machine,
    )
