"""hkv.report.bench_results: committed results read the same before and after their provenance
keys are renamed to the schema's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hkv.report.bench_results import (
    DEFAULT_RESULTS_IN,
    load_result,
    load_results,
    provenance_table,
)

OLD = {
    "bench": "e2e",
    "date": "2026-11-29T13:43:16+00:00",
    "machine": {"platform": "Linux", "device": "NVIDIA H200"},
    "params": {"decode_steps": 32},
    "decode": [1, 2],
}
NEW = {
    "generated_by": "bench/e2e.py",
    "date_utc": "2026-11-29T13:43:16+00:00",
    "machine": {"platform": "Linux", "device": "NVIDIA H200"},
    "versions": {},
    "parameters": {"decode_steps": 32},
    "decode": [1, 2],
}


def write(folder: Path, name: str, payload: dict) -> None:
    (folder / name).write_text(json.dumps(payload))


def test_old_and_new_spellings_read_alike(tmp_path: Path) -> None:
    write(tmp_path, "old.json", OLD)
    write(tmp_path, "new.json", NEW)
    old, new = load_result("old", tmp_path), load_result("new.json", tmp_path)
    for key in ("generated_by", "date_utc", "machine", "versions", "parameters", "decode"):
        assert old[key] == new[key], key
    table = provenance_table(load_results(["old.json", "new.json"], tmp_path))
    assert table.loc["old.json"].to_dict() == table.loc["new.json"].to_dict()
    assert table.loc["old.json", "accelerator"] == "NVIDIA H200"


def test_missing_date_and_missing_file(tmp_path: Path) -> None:
    write(tmp_path, "nodate.json", {"source": "bench/transfer.py", "machine": {"platform": "x"}})
    table = provenance_table(load_results(["nodate.json"], tmp_path))
    assert table.loc["nodate.json", "date"] == "not recorded in the file"
    # a GPU bench that named no device did not record it; a CPU-only bench ran on the CPU
    assert table.loc["nodate.json", "accelerator"] == "not recorded in the file"
    write(
        tmp_path, "cpu.json", {"source": "python -m bench.policies", "machine": {"platform": "x"}}
    )
    cpu = provenance_table(load_results(["cpu.json"], tmp_path))
    assert cpu.loc["cpu.json", "accelerator"] == "none (CPU only)"
    with pytest.raises(FileNotFoundError, match=r"nodate\.json"):
        load_result("absent", tmp_path)


def test_committed_results_all_load() -> None:
    names = [p.name for p in sorted(DEFAULT_RESULTS_IN.glob("*.json"))]
    assert names, DEFAULT_RESULTS_IN
    table = provenance_table(load_results(names))
    assert table["written by"].map(bool).all() and table["platform"].map(bool).all()
