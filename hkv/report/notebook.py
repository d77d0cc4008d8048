"""A notebook's results file: what its last cell saves and `tests/test_notebooks.py` reads.

    save_notebook_results("03_flags", results, parameters={"MODEL": MODEL, ...})

writes `<results_dir>/03_flags.json` with the provenance schema of every hkv results file
(`hkv.report.provenance`): generated_by `notebooks/03_flags.ipynb`, date_utc, machine, versions,
parameters, then the notebook's own keys.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hkv.errors import HkvError
from hkv.report.provenance import DEFAULT_PACKAGES, save_results

DEFAULT_RESULTS_DIR = "../out/results"  # relative to notebooks/, where papermill runs them
QUIET_VLLM_LEVEL = "ERROR"


def quiet_vllm_logging() -> str:
    """Hold vLLM's loggers at `VLLM_LOGGING_LEVEL` (set to ERROR here when unset) from its import
    on; returns the level. Call it before the first `import vllm`.

    vLLM applies that variable only when an engine starts; what it logs while being imported
    (on the CPU build: "Triton is installed, but doesn't include CPU backend") goes through
    Python's last-resort handler at WARNING whatever the variable says.
    """
    level = os.environ.setdefault("VLLM_LOGGING_LEVEL", QUIET_VLLM_LEVEL).upper()
    logging.getLogger("vllm").setLevel(level)
    return level


def save_notebook_results(
    name: str,
    results: Mapping[str, Any],
    *,
    parameters: Mapping[str, Any] | None = None,
    results_dir: str | os.PathLike[str] = DEFAULT_RESULTS_DIR,
    packages: Iterable[str] = DEFAULT_PACKAGES,
    machine: Mapping[str, Any] | None = None,
) -> Path:
    """Save notebook `name`'s results (atomically) and return the file's path. `name` is a
    notebook's name (its file name without `.ipynb`), not a path: the file goes into
    `results_dir` and nowhere else."""
    if not isinstance(name, str) or not name or name in (".", "..") or Path(name).name != name:
        raise HkvError(f"save_notebook_results: name {name!r} is not a notebook's name (no "
                       "folders in it); give the folder as results_dir")  # fmt: skip
    return save_results(
        Path(results_dir) / f"{name}.json",
        results,
        generated_by=f"notebooks/{name}.ipynb",
        parameters=parameters,
        packages=packages,
        machine=machine,
    )
