"""HybridKVCacheConfig: the article's example verbatim, three file formats, errors naming fields."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hkv import HybridKVCacheConfig
from hkv.errors import ConfigError, HkvError, reject_unknown
from hkv.planning.config import ModalityConfig

ROOT = Path(__file__).resolve().parent.parent
ARTICLE_FILE = ROOT / "data" / "configs" / "custom_hybrid_config.py"


def test_article_file_loads_verbatim_despite_importing_from_vllm():
    assert "from vllm import HybridKVCacheConfig" in ARTICLE_FILE.read_text()
    config = HybridKVCacheConfig.from_file(ARTICLE_FILE)
    assert config == HybridKVCacheConfig.article_example()
    assert config.offload_strategy == "modality_aware"
    assert config.modality("vision").quantization == "q6"
    assert config.modality("audio").lossless
    assert config.cost_model_params.transfer_cost_cpu_to_gpu == 0.12
    assert sorted(config.quantized_modalities) == ["text", "vision"]


def test_article_constructor_accepts_instances_as_well_as_dicts():
    config = HybridKVCacheConfig(
        offload_strategy="cost_aware",
        modality_configs={"vision": ModalityConfig(offload_priority=0.9, quantization="q8")},
    )
    assert config.modality("vision").offload_priority == 0.9
    assert config.modality("text").quantization == "fp16"  # untouched modalities keep defaults


def test_json_and_yaml_round_trip(tmp_path):
    original = HybridKVCacheConfig.article_example()
    as_json = tmp_path / "c.json"
    as_json.write_text(json.dumps(original.to_dict()))
    import yaml

    as_yaml = tmp_path / "c.yaml"
    as_yaml.write_text(yaml.safe_dump(original.to_dict()))
    assert HybridKVCacheConfig.from_file(as_json) == original
    assert HybridKVCacheConfig.from_file(as_yaml) == original


def test_python_file_may_define_a_plain_dict(tmp_path):
    path = tmp_path / "c.py"
    path.write_text("config = {'offload_strategy': 'lru', 'cost_weights': {'vision': 2}}\n")
    assert HybridKVCacheConfig.from_file(path).cost_weights == {"vision": 2.0}


@pytest.mark.parametrize(
    ("modality_settings", "message"),
    [
        (
            {"offload_priority": 1.5},
            r"modality_configs\['vision'\]\.offload_priority: got 1\.5; "
            r"expected a number in \[0, 1\]",
        ),
        ({"quantization": "q5"}, r"quantization: got 'q5'; expected one of fp16, bf16, q8, q6, q4"),
        ({"max_keep_blocks": -1}, r"max_keep_blocks: got -1; expected an integer >= 0 or None"),
        ({"offload_priorty": 0.5}, r"unknown field 'offload_priorty'; accepted fields: offload_"),
    ],
)
def test_bad_modality_values_name_field_value_and_range(modality_settings, message):
    with pytest.raises(ConfigError, match=message):
        HybridKVCacheConfig(modality_configs={"vision": modality_settings})


def test_unknown_modality_and_strategy_list_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown modality 'smell'; use one of text, vision"):
        HybridKVCacheConfig(modality_configs={"smell": {}})
    with pytest.raises(ConfigError, match="offload_strategy: got 'fifo'; expected one of .*lru"):
        HybridKVCacheConfig(offload_strategy="fifo")


def test_negative_cost_is_refused():
    with pytest.raises(ConfigError, match=r"cost_model_params\.transfer_cost_gpu_to_cpu: got -1"):
        HybridKVCacheConfig(cost_model_params={"transfer_cost_gpu_to_cpu": -1})


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("syntax.py", "config = HybridKVCacheConfig(\n", "line 1: SyntaxError"),
        ("none.py", "x = 1\n", "defines no `config`"),
        ("boom.py", "a = 1\nconfig = undefined_name\n", "line 2: NameError"),
        ("bad.json", '{"offload_strategy": "lru",}', "not valid JSON"),
        ("bad.yaml", "offload_strategy: [unclosed\n", "not valid YAML"),
        ("field.json", '{"modality_configs": {"text": {"quantization": "q3"}}}', "got 'q3'"),
        ("c.toml", "x = 1", "use .py .* .json or .yaml"),
    ],
)
def test_bad_files_give_errors_naming_the_file(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        HybridKVCacheConfig.from_file(path)
    assert name in str(info.value)


def test_bad_config_file_on_the_command_line_is_one_line_not_a_traceback(tmp_path):
    path = tmp_path / "custom.py"
    path.write_text(
        "from vllm import HybridKVCacheConfig\n"
        "config = HybridKVCacheConfig(modality_configs={'vision': {'offload_priority': 2}})\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "hkv.cli", "flags", "--", "--hybrid-kv-cache-config", str(path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "offload_priority: got 2" in result.stderr
    assert result.stdout == ""


def test_every_settings_mapping_names_its_unknown_fields_alike():
    from hkv import ModelSpec, plan
    from hkv.sim.zipf_sessions import generate_zipf_sessions

    with pytest.raises(HkvError, match=r"hkv\.x: unknown fields 'a', 2; accepted fields: b, c$"):
        reject_unknown("hkv.x", {"a": 1, "b": 2, 2: 3}, ["b", "c"])
    reject_unknown("hkv.x", {"b": 1}, ["b", "c"])  # nothing unknown: nothing raised
    spec = ModelSpec.load("minimax-m2.5")
    for call in (
        lambda: plan(spec, gpu=2, nope=1),
        lambda: generate_zipf_sessions(nope=1),
        lambda: HybridKVCacheConfig.from_dict({"nope": 1}),
    ):
        with pytest.raises(HkvError, match=r": unknown fields? .*'nope'.*; accepted fields: "):
            call()
