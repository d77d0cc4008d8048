"""The article's flags translated into real vLLM arguments; every conflict names both flags."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from hkv.errors import FlagConflict, HkvError
from hkv.planning.flags import translate
from hkv.planning.sizes import parse_size

ROOT = Path(__file__).resolve().parent.parent
ARTICLE_FILE = str(ROOT / "data" / "configs" / "custom_hybrid_config.py")
WEIGHTS = '{"text":1.0,"vision":1.5,"audio":1.2}'
ARTICLE_LINE = (
    "vllm serve MiniMaxAI/MiniMax-M2.5 --tensor-parallel-size 2 --gpu-memory-utilization 0.9 "
    "--max-model-len 32768 --block-size 16 --swap-space 64 --load-format awq "
    "--enable-hybrid-kv-cache --hybrid-kv-cache-cpu-offload-size 16GB "
    f"--hybrid-kv-cache-policy cost_aware --hybrid-kv-cache-cost-weights '{WEIGHTS}'"
)
MODEL = ["--model", "minimax-m2.5", "--max-model-len", "32768", "--tensor-parallel-size", "2"]


def value_of(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def transfer_config(args: list[str]) -> dict:
    return json.loads(value_of(args, "--kv-transfer-config"))


def test_article_command_becomes_a_real_vllm_command():
    t = translate(shlex.split(ARTICLE_LINE), cpu_ram_gib=128)
    assert t.command.startswith("vllm serve MiniMaxAI/MiniMax-M2.5 --tensor-parallel-size 2 ")
    assert t.vllm_args[:2] == ["--model", "MiniMaxAI/MiniMax-M2.5"]
    extra = transfer_config(t.vllm_args)["kv_connector_extra_config"]
    assert extra["eviction_policy"] == "hkv_cost_aware"
    assert extra["cache_policy_module_path"] == "hkv.integrations.vllm"
    assert extra["cpu_bytes_to_use"] == 16 * 10**9
    assert extra["hkv_config"]["cost_weights"] == {"text": 1.0, "vision": 1.5, "audio": 1.2}
    assert value_of(t.vllm_args, "--quantization") == "awq"
    dropped = {d["flag"].split()[0]: d["reason"] for d in t.dropped}
    assert "V1 engine recomputes" in dropped["--swap-space"]
    assert "not a load format" in dropped["--load-format"]
    assert not any(a.startswith("--hybrid") or a == "--enable-hybrid-kv-cache" for a in t.vllm_args)
    assert any("decimal units = 14.90 GiB" in w for w in t.warnings)


def test_lru_uses_vllm_native_offloading_flags():
    t = translate([*MODEL, "--hybrid-kv-cache-policy", "lru", "--hybrid-kv-cache-cpu-offload-size",
                   "8GiB"], cpu_ram_gib=64)  # fmt: skip
    assert value_of(t.vllm_args, "--kv-offloading-size") == "8.00"
    assert value_of(t.vllm_args, "--kv-offloading-backend") == "native"
    assert "--kv-transfer-config" not in t.vllm_args


def test_arc_is_vllms_own_policy_without_a_module_path():
    t = translate([*MODEL, "--hybrid-kv-cache-policy", "arc", "--hybrid-kv-cache-cpu-offload-size",
                   "8"], cpu_ram_gib=64)  # fmt: skip
    extra = transfer_config(t.vllm_args)["kv_connector_extra_config"]
    assert extra == {"cpu_bytes_to_use": 8 << 30, "eviction_policy": "arc"}


def test_percent_follows_the_article_formula():
    t = translate(
        [*MODEL, "--enable-hybrid-kv-cache", "--hybrid-kv-cache-cpu-offload-percent", "0.8"],
        cpu_ram_gib=32,
    )
    extra = transfer_config(t.vllm_args)["kv_connector_extra_config"]
    assert extra["cpu_bytes_to_use"] == int(32 * 0.7 * (1 << 30))
    assert any("min(RAM x 0.7, total_KV x percent)" in w for w in t.warnings)


def test_no_policy_named_emits_hkv_auto_and_says_so():
    t = translate([*MODEL, "--enable-hybrid-kv-cache", "--hybrid-kv-cache-cpu-offload-size", "8"],
                  cpu_ram_gib=64)  # fmt: skip
    extra = transfer_config(t.vllm_args)["kv_connector_extra_config"]
    assert extra["eviction_policy"] == "hkv_auto"
    assert extra["cache_policy_module_path"] == "hkv.integrations.vllm"
    assert extra["hkv_config"]["offload_strategy"] == "auto"
    assert "--kv-offloading-size" not in t.vllm_args
    said = [row for row in t.translated if row["flag"] == "--hybrid-kv-cache-policy (not given)"]
    assert len(said) == 1 and "recommended default" in said[0]["to"]
    named = translate([*MODEL, "--hybrid-kv-cache-policy", "lru",
                       "--hybrid-kv-cache-cpu-offload-size", "8"], cpu_ram_gib=64)  # fmt: skip
    assert value_of(named.vllm_args, "--kv-offloading-backend") == "native"
    assert not any("not given" in row["flag"] for row in named.translated)


def test_article_config_file_is_read_and_its_quantization_reported_as_dropped():
    t = translate([*MODEL, "--hybrid-kv-cache-config", ARTICLE_FILE,
                   "--hybrid-kv-cache-cpu-offload-size", "8GiB"], cpu_ram_gib=64)  # fmt: skip
    extra = transfer_config(t.vllm_args)["kv_connector_extra_config"]
    assert extra["eviction_policy"] == "hkv_modality_aware"
    assert extra["hkv_config"]["modality_configs"]["vision"]["quantization"] == "q6"
    assert any("no vLLM counterpart" in d["reason"] for d in t.dropped)


CONFLICTS = [
    (
        ["--hybrid-kv-cache-cpu-offload-size", "16GiB", "--hybrid-kv-cache-cpu-offload-percent",
         "0.4"],
        ("--hybrid-kv-cache-cpu-offload-size", "--hybrid-kv-cache-cpu-offload-percent"),
    ),
    (
        ["--hybrid-kv-cache-policy", "lru", "--hybrid-kv-cache-cost-weights", WEIGHTS,
         "--hybrid-kv-cache-cpu-offload-size", "8GiB"],
        ("--hybrid-kv-cache-cost-weights", "--hybrid-kv-cache-policy"),
    ),
    (
        ["--hybrid-kv-cache-cpu-offload-size", "64GiB"],
        ("--hybrid-kv-cache-cpu-offload-size", "--cpu-ram"),
    ),
    (["--block-size", "24", "--enable-hybrid-kv-cache"], ("--block-size", "--attention-backend")),
    (
        ["--block-size", "16", "--attention-backend", "FLASHMLA"],
        ("--block-size", "--attention-backend"),
    ),
    (
        ["--kv-cache-dtype", "fp8", "--hybrid-kv-cache-config", ARTICLE_FILE,
         "--hybrid-kv-cache-cpu-offload-size", "8GiB"],
        ("--kv-cache-dtype", "--hybrid-kv-cache-config"),
    ),
    (
        ["--hybrid-kv-cache-policy", "lru", "--hybrid-kv-cache-config", ARTICLE_FILE],
        ("--hybrid-kv-cache-policy", "--hybrid-kv-cache-config"),
    ),
    (
        ["--load-format", "awq", "--quantization", "gptq"],
        ("--load-format", "--quantization"),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "pair"), CONFLICTS, ids=lambda x: str(x)[:40])
def test_conflicts_name_both_flags(flags, pair):
    with pytest.raises(FlagConflict) as info:
        translate([*MODEL, *flags], cpu_ram_gib=32)
    assert info.value.flags == pair
    assert pair[0] in str(info.value) and pair[1] in str(info.value)


def test_tensor_parallel_that_does_not_divide_the_heads_conflicts_with_the_model():
    with pytest.raises(FlagConflict, match="--tensor-parallel-size conflicts with --model"):
        translate(["--model", "minimax-m2.5", "--tensor-parallel-size", "5"])


def test_mla_model_needs_block_size_64():
    with pytest.raises(
        FlagConflict,
        match=r"FLASHMLA \(vLLM's choice for MLA model\) needs a block size that is exactly 64",
    ):
        translate(["--model", "deepseek-v3", "--block-size", "16"])
    translate(["--model", "deepseek-v3", "--block-size", "64"])


def test_unknown_policy_lists_the_valid_ones():
    with pytest.raises(HkvError, match="unknown policy 'fifo'; valid: .*lru.*cost_aware"):
        translate([*MODEL, "--hybrid-kv-cache-policy", "fifo"])


def test_offline_oracle_is_not_a_serving_policy():
    with pytest.raises(HkvError, match="'belady' is an offline yardstick"):
        translate([*MODEL, "--hybrid-kv-cache-policy", "belady"])


def test_unknown_hybrid_flag_lists_the_known_ones():
    with pytest.raises(HkvError, match="--hybrid-kv-cache-size: no such flag"):
        translate([*MODEL, "--hybrid-kv-cache-size", "3"])


def test_percent_without_a_known_model_explains_what_is_missing():
    with pytest.raises(HkvError, match="needs the model's KV size"):
        translate(["--model", "org/unknown", "--hybrid-kv-cache-cpu-offload-percent", "0.4"])


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("16GiB", 16 << 30), ("16", 16 << 30), ("16GB", 16 * 10**9), ("512MiB", 512 << 20)],
)
def test_sizes(text, nbytes):
    assert parse_size(text, flag="--x")[0] == nbytes


def test_bad_size_names_the_flag():
    with pytest.raises(HkvError, match="--x: cannot read size 'lots'"):
        parse_size("lots", flag="--x")


@pytest.mark.slow
def test_installed_vllm_parser_accepts_the_translation():
    pytest.importorskip("vllm")
    from hkv.integrations.vllm.args import parse_vllm_args

    t = translate(shlex.split(ARTICLE_LINE), cpu_ram_gib=128)
    parsed = parse_vllm_args(t.vllm_args)
    assert parsed.kv_transfer_config.kv_connector == "OffloadingConnector"
    assert parsed.tensor_parallel_size == 2
    with pytest.raises(HkvError, match="unrecognized arguments: --swap-space"):
        parse_vllm_args(["--swap-space", "64"])


def test_tokens_that_are_not_strings_are_one_error():
    with pytest.raises(HkvError, match="argv: got 32768; every token is a string"):
        translate(["vllm", "serve", "m", "--max-model-len", 32768])
    with pytest.raises(HkvError, match="argv: got one string; expected its tokens"):
        translate("vllm serve m --enable-hybrid-kv-cache")
