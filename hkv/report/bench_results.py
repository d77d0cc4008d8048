"""Committed benchmark results (`data/results/*.json`), read under one provenance schema.

Files written before `hkv.report.provenance` spell their provenance in older ways (`date`,
`source`, `bench`, `benchmark`, `params`); `load_result` fills in the schema's keys
(`generated_by`, `date_utc`, `machine`, `versions`, `parameters`) from whichever spelling the
file uses, so readers work before and after the files are rewritten. The numbers are untouched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hkv.errors import HkvError

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_RESULTS_IN = Path(__file__).resolve().parents[2] / "data" / "results"
NOT_RECORDED = "not recorded in the file"


def load_result(
    name: str, results_in: str | os.PathLike[str] = DEFAULT_RESULTS_IN
) -> dict[str, Any]:
    """The committed results file `name` (`"policies"` or `"policies.json"`) as a dict whose
    provenance keys follow the schema: `generated_by` (str), `date_utc` (str or None),
    `machine` and `versions` (dicts) and `parameters` (dict). Raises FileNotFoundError naming
    the folder's files when `name` is not there."""
    path = Path(results_in) / (name if name.endswith(".json") else f"{name}.json")
    if not path.is_file():
        known = sorted(p.name for p in Path(results_in).glob("*.json"))
        raise FileNotFoundError(f"no results file {path}; the folder holds {known}")
    data = json.loads(path.read_text())
    return {**data, **_schema_keys(data)}


def section(data: Mapping[str, Any], key: str, parameter: str, wanted: str, source=None) -> Any:
    """`data[key]` of a results file (`source`, where `data` is a part of it) that a notebook
    parameter named; where it holds none, one HkvError naming the parameter, what wrote the file
    and the kind of file (`wanted`) that holds one."""
    if key not in data:
        written = (data if source is None else source).get("generated_by", NOT_RECORDED)
        raise HkvError(f"{parameter}: its file holds no {key!r} (written by {written}); give "
                       f"{wanted}")  # fmt: skip
    return data[key]


def _schema_keys(data: Mapping[str, Any]) -> dict[str, Any]:
    """The five provenance keys read from any of the spellings results files have used."""
    script = data.get("bench") or data.get("benchmark")
    generated_by = data.get("generated_by") or data.get("source")
    return {
        "generated_by": generated_by or (f"bench/{script}.py" if script else None),
        "date_utc": data.get("date_utc") or data.get("date"),
        "machine": dict(data.get("machine") or {}),
        "versions": dict(data.get("versions") or {}),
        "parameters": dict(data.get("parameters") or data.get("params") or {}),
    }


def load_results(
    names: Iterable[str], results_in: str | os.PathLike[str] = DEFAULT_RESULTS_IN
) -> dict[str, dict[str, Any]]:
    """`{name: load_result(name)}` for each of `names`, in order."""
    return {name: load_result(name, results_in) for name in names}


def provenance_table(results: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per results file (index `file`): written by, date, accelerator, platform and
    the versions it records (the machine's python/torch/hkv, then its `versions`)."""
    import pandas as pd

    rows = [{"file": name, **_provenance_row(data)} for name, data in results.items()]
    return pd.DataFrame(rows).set_index("file")


CPU_ONLY_BENCHES = ("bench.policies", "bench.vllm_replay", "bench.vllm_gpu_sim")
"""Benchmarks that never touch a GPU: a file they wrote ran on the CPU, whatever it records."""


def _provenance_row(data: Mapping[str, Any]) -> dict[str, str]:
    machine = data["machine"]
    versions = {k: machine[k] for k in ("python", "torch", "hkv") if k in machine}
    versions.update(data.get("versions", {}))
    accelerator = machine.get("gpu_name") or machine.get("device") or machine.get("gpu")
    return {
        "written by": data["generated_by"],
        "date": data["date_utc"] or NOT_RECORDED,
        "accelerator": accelerator or _no_accelerator(data["generated_by"] or ""),
        "platform": machine["platform"],
        "versions": ", ".join(
            f"{k} {NOT_RECORDED if v is None else v}" for k, v in versions.items()
        ),
    }


def _no_accelerator(generated_by: str) -> str:
    """What a file that names no GPU ran on: the CPU for a CPU-only bench, else unknown (a GPU
    bench that did not record its device)."""
    cpu_only = set(generated_by.replace("/", ".").removesuffix(".py").split()) & set(
        CPU_ONLY_BENCHES
    )
    return "none (CPU only)" if cpu_only else NOT_RECORDED


def records(table: pd.DataFrame | pd.Series) -> list[dict[str, Any]]:
    """The table's rows as plain dicts, its index as leading columns (JSON-ready)."""
    return table.reset_index().to_dict(orient="records")
