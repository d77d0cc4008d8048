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


def test_notebook_parameters_a_user_may_change_are_read_or_named():
    """Notebooks 08, 09 and 02 with other parameters (a run through papermill): the targets'
    labels follow the tier compared (they said 8 GiB whatever it was), a tier or policy the file
    has no run of is one line (a pandas KeyError), a transfer file measured without a GPU is one
    line (KeyError 'gpu_name'), and another shipped model's config table has no MiniMax-only
    key to miss (KeyError 'rotary_dim')."""
    from hkv.errors import HkvError
    from hkv.models.model_spec import ModelSpec
    from hkv.report import bench_transfer, bench_vllm, loading

    root = Path(__file__).resolve().parent.parent / "data" / "results"
    runs = bench_vllm.gpu_runs(json.loads((root / "vllm_h200.json").read_text()))
    pairs = bench_vllm.sim_pairs(json.loads((root / "vllm_h200_sim.json").read_text()))
    table = bench_vllm.gpu_table(runs)
    acceptance = bench_vllm.acceptance(table, runs, pairs, "hkv_bip", 12.0, 16.0)
    labels = list(bench_vllm.targets_table(acceptance).index)
    assert "cached share at 12 GiB" in labels and not any("8 GiB" in x for x in labels)
    with pytest.raises(HkvError, match="no text run of hkv_nope at 8 GiB in this file"):
        bench_vllm.acceptance(table, runs, pairs, "hkv_nope", 8.0, 16.0)
    with pytest.raises(HkvError, match="TRANSFER: .* ran without a GPU"):
        bench_transfer.transfer_facts(json.loads((root / "transfer_cpu.json").read_text()))
    for model in ("deepseek-v3", "gpt-oss-120b"):
        assert len(loading.config_table(ModelSpec.load(model))) > 10


def test_a_notebook_results_name_is_no_path(tmp_path: Path) -> None:
    from hkv.errors import HkvError
    from hkv.report.notebook import save_notebook_results

    for name in ("../escaped", "sub/03_flags", "", "..", 3):
        with pytest.raises(HkvError, match="is not a notebook's name"):
            save_notebook_results(name, {"a": 1}, results_dir=tmp_path / "results")
    assert not (tmp_path / "escaped.json").exists()
    assert not (tmp_path / "results").exists()  # nothing written anywhere
    path = save_notebook_results("03_flags", {"a": 1}, results_dir=tmp_path / "results")
    assert path == tmp_path / "results" / "03_flags.json"
    assert json.loads(path.read_text())["a"] == 1
