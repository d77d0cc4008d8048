"""One description of the tiers (`OffloadSpec`): `hkv plan`, `hkv flags`, the config file and the
vLLM adapter read the same sizes, block size and policy, under the same rules."""

from __future__ import annotations

import json
import shlex

import pytest

from hkv.cli.main import main
from hkv.errors import FlagConflict, HkvError
from hkv.models.model_spec import ModelSpec
from hkv.planning import plan
from hkv.planning.config import HybridKVCacheConfig
from hkv.planning.flags import translate
from hkv.planning.offload_spec import (
    DiskTierSpec,
    OffloadSpec,
    disk_tier,
    read_policy_settings,
)
from hkv.planning.sizes import GIB

MINIMAX = ModelSpec.load("minimax-m2.5")
FITS = ["--gpus", "4", "--max-model-len", "32768", "--cpu-ram", "512"]  # fp8 on 4 x 140 GiB
MODEL = ["--model", "minimax-m2.5", "--max-model-len", "32768", "--tensor-parallel-size", "4"]
SIZE, PERCENT = "--hybrid-kv-cache-cpu-offload-size", "--hybrid-kv-cache-cpu-offload-percent"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def extra_of(args: list[str]) -> dict:
    return json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]


# -- the rules, the same in plan and flags ---------------------------------------------------
def test_a_size_and_a_percent_that_disagree_are_one_conflict_in_plan_and_flags(capsys):
    code, _, err = run_cli(capsys, "plan", "--model", "minimax-m2.5", *FITS,
                           "--offload-size", "10", "--offload-percent", "0.9")  # fmt: skip
    assert code == 2
    assert "--offload-size conflicts with --offload-percent: the size says 10.0 GiB" in err
    with pytest.raises(FlagConflict) as planned:
        plan(MINIMAX, gpus=4, cpu_ram_gib=512, max_model_len=32768, offload_gib=10,
             offload_percent=0.9)  # fmt: skip
    with pytest.raises(FlagConflict) as flagged:
        translate([*MODEL, SIZE, "10", PERCENT, "0.9"], cpu_ram_gib=512)
    assert planned.value.flags == ("offload_gib", "offload_percent")
    assert flagged.value.flags == (SIZE, PERCENT)
    assert planned.value.reason == flagged.value.reason  # one rule, one sentence
    agreeing = plan(MINIMAX, gpus=4, cpu_ram_gib=512, max_model_len=32768, offload_percent=0.5)
    same = plan(MINIMAX, gpus=4, cpu_ram_gib=512, max_model_len=32768,
                offload_gib=agreeing.offload_bytes / GIB, offload_percent=0.5)  # fmt: skip
    assert same.offload_bytes == agreeing.offload_bytes  # within 1 %: one tier, not a conflict


def test_a_size_above_host_ram_is_refused_by_plan_as_by_flags(capsys):
    """Strict everywhere: a size someone typed is refused, never capped; a percent is capped
    by the article's formula, with a warning, in both."""
    code, _, err = run_cli(capsys, "plan", "--model", "minimax-m2.5", *FITS,
                           "--offload-size", "1000")  # fmt: skip
    assert code == 2 and "--offload-size conflicts with --cpu-ram: 1000.0 GiB is more" in err
    code, _, err = run_cli(capsys, "flags", "--cpu-ram", "512", "--", *MODEL, SIZE, "1000")
    assert code == 2
    assert f"{SIZE} conflicts with --cpu-ram: 1000.0 GiB is more than 0.7 x 512 GiB" in err
    capped = plan(MINIMAX, gpus=4, cpu_ram_gib=32, max_model_len=32768, offload_percent=0.9)
    assert capped.offload_bound_by == "host_ram"
    assert capped.offload_bytes == int(32 * GIB * 0.7)


def test_plan_prints_the_block_size_it_planned():
    p = plan(MINIMAX, gpus=4, cpu_ram_gib=512, max_model_len=32768, block_tokens=64)
    assert p.vllm_args[p.vllm_args.index("--block-size") + 1] == "64"
    assert p.block_tokens == 64
    default = plan(MINIMAX, gpus=4, cpu_ram_gib=512, max_model_len=32768)
    assert "--block-size" not in default.vllm_args  # vLLM's own default: 16


@pytest.mark.slow
def test_vllm_parses_a_plan_with_its_block_size():
    pytest.importorskip("vllm")
    from hkv.integrations.vllm.args import parse_vllm_args

    p = plan(MINIMAX, gpus=4, cpu_ram_gib=512, max_model_len=32768, block_tokens=64,
             offload_gib=8)  # fmt: skip
    parsed = parse_vllm_args(p.vllm_args)
    assert parsed.block_size == 64 and parsed.kv_offloading_size == 8.0


# -- the config file's sizes are read, and not echoed beside another -------------------------
def config_file(tmp_path, **fields) -> str:
    path = tmp_path / "hkv.json"
    path.write_text(json.dumps({"offload_strategy": "cost_aware", **fields}))
    return str(path)


def test_the_config_files_size_is_the_cpu_tier(tmp_path):
    path = config_file(tmp_path, cpu_offload_bytes=8 << 30)
    t = translate([*MODEL, "--hybrid-kv-cache-config", path], cpu_ram_gib=512)
    extra = extra_of(t.vllm_args)
    assert extra["cpu_bytes_to_use"] == 8 << 30
    assert "cpu_offload_bytes" not in extra["hkv_config"]  # said once, by cpu_bytes_to_use
    with pytest.raises(FlagConflict) as info:
        translate([*MODEL, "--hybrid-kv-cache-config", path, SIZE, "16GiB"], cpu_ram_gib=512)
    assert info.value.flags == (SIZE, "--hybrid-kv-cache-config")
    with pytest.raises(FlagConflict, match="conflicts with --cpu-ram"):
        translate([*MODEL, "--hybrid-kv-cache-config", path], cpu_ram_gib=8)


def test_the_config_files_percent_follows_the_formula(tmp_path):
    path = config_file(tmp_path, cpu_offload_percent=0.5)
    t = translate([*MODEL, "--hybrid-kv-cache-config", path], cpu_ram_gib=512)
    flag = translate([*MODEL, "--hybrid-kv-cache-policy", "cost_aware", PERCENT, "0.5"],
                     cpu_ram_gib=512)  # fmt: skip
    assert extra_of(t.vllm_args)["cpu_bytes_to_use"] == extra_of(flag.vllm_args)["cpu_bytes_to_use"]


def test_a_config_file_that_names_no_policy_gets_the_default_and_keeps_its_settings(tmp_path):
    """A file without `offload_strategy` is a command that names no policy: `hkv_auto`, with the
    file's settings in `hkv_config` (it was vLLM's lru, the settings dropped unsaid); a file
    naming vLLM's own lru says the settings it cannot apply."""
    vision = {"modality_configs": {"vision": {"offload_priority": 0.8}}}
    path = tmp_path / "hkv.json"
    path.write_text(json.dumps({"cpu_offload_bytes": 8 << 30, **vision}))
    t = translate([*MODEL, "--hybrid-kv-cache-config", str(path)], cpu_ram_gib=512)
    extra = extra_of(t.vllm_args)
    assert extra["eviction_policy"] == "hkv_auto"
    assert extra["hkv_config"]["modality_configs"]["vision"]["offload_priority"] == 0.8
    assert not HybridKVCacheConfig.from_file(path).strategy_named
    assert HybridKVCacheConfig().offload_strategy == "lru"  # (the block manager's, unchanged)
    path.write_text(json.dumps({"offload_strategy": "lru", **vision}))
    t = translate([*MODEL, "--hybrid-kv-cache-config", str(path), SIZE, "8GiB"], cpu_ram_gib=512)
    assert t.vllm_args[t.vllm_args.index("--kv-offloading-backend") + 1] == "native"
    said = [d["reason"] for d in t.dropped if d["flag"] == "--hybrid-kv-cache-config"]
    assert len(said) == 1 and "reads none of the file's modality_configs" in said[0]
    assert not any(row["flag"] == "--hybrid-kv-cache-config" for row in t.translated)
    with pytest.raises(FlagConflict):  # a file that names a policy still conflicts with a flag
        translate([*MODEL, "--hybrid-kv-cache-config", str(path),
                   "--hybrid-kv-cache-policy", "cost_aware"], cpu_ram_gib=512)  # fmt: skip


def test_a_connector_config_with_two_sizes_or_two_policies_is_refused():
    base = {"cpu_bytes_to_use": 8 << 30, "eviction_policy": "hkv_cost_aware"}
    ok = read_policy_settings(base | {"hkv_config": {"offload_strategy": "cost_aware"}})
    assert ok["config"].offload_strategy == "cost_aware"
    with pytest.raises(HkvError, match="offload_strategy 'lru' and eviction_policy"):
        read_policy_settings(base | {"hkv_config": {"offload_strategy": "lru"}})
    with pytest.raises(HkvError, match="cpu_offload_bytes 1024 but cpu_bytes_to_use"):
        read_policy_settings(base | {"hkv_config": {"cpu_offload_bytes": 1024}})
    config = HybridKVCacheConfig(offload_strategy="lru")
    with pytest.raises(HkvError, match="policy: 'cost_aware', but the config's offload_strategy"):
        OffloadSpec(8 << 30, policy="cost_aware", config=config)


# -- the description and vLLM's config, both ways --------------------------------------------
SPECS = [
    OffloadSpec(8 << 30),
    OffloadSpec(8 << 30, block_tokens=64, policy="bip", policy_params={"tail_first": False}),
    OffloadSpec(8 << 30, policy="lru", disk=DiskTierSpec("/nvme/hkv", 32 << 30)),
    OffloadSpec(8 << 30, policy="auto", policy_params={"experts": "lean", "first": "lru"}),
    OffloadSpec(
        8 << 30,
        policy="cost_aware",
        config=HybridKVCacheConfig(offload_strategy="cost_aware", cost_weights={"vision": 2}),
        disk=DiskTierSpec("/nvme/hkv", 32 << 30, "lru", "all", "/p.json", page_cache=True),
    ),
]


@pytest.mark.parametrize("spec", SPECS, ids=range(len(SPECS)))
def test_the_connector_config_reads_back_as_the_same_spec(spec):
    assert OffloadSpec.from_extra_config(spec.extra_config()) == spec


def test_fields_are_checked_with_their_names():
    cases = [
        ({"cpu_bytes": 0}, "cpu_bytes: got 0"),
        ({"cpu_bytes": 1, "block_tokens": 0}, "block_tokens: got 0"),
        ({"cpu_bytes": 1, "policy": "belady"}, "policy: 'belady' is an offline yardstick"),
        ({"cpu_bytes": 1, "policy": "lru", "policy_params": {"x": 1}}, "takes no hkv hyper"),
        ({"cpu_bytes": 1, "policy_params": {"experts": "fast"}},
         "policy_params: auto.experts: got 'fast'; expected \"lean\""),
        ({"cpu_bytes": 1, "policy_params": {"x": 1}},
         "policy_params: auto: unknown hyperparameter 'x'; valid: confirm"),
        ({"cpu_bytes": 1, "policy_params": {"config": {}}}, "'config' is what the server hands"),
        ({"cpu_bytes": 1, "policy_params": {"margin": float("nan")}}, "expected JSON values"),
        ({"cpu_bytes": 1, "policy_params": [("first", "lru")]}, "expected an object of name"),
    ]  # fmt: skip
    for fields, message in cases:
        with pytest.raises(HkvError, match=message):
            OffloadSpec(**fields)
    with pytest.raises(HkvError, match="disk_admission: got 'some'; expected one of cost, all"):
        DiskTierSpec("/d", 1, admission="some")
    with pytest.raises(HkvError, match="disk_dir: needed with --disk-size"):
        disk_tier("32", None)
    with pytest.raises(HkvError, match="--disk-size: got '0'; give a size above 0"):
        disk_tier("0", "/d")
    with pytest.raises(HkvError, match=f"{SIZE}: the CPU tier is 0 bytes"):
        translate([*MODEL, SIZE, "0"], cpu_ram_gib=512)
    fitting = ["--tensor-parallel-size", "4", "--max-model-len", "4096", "--max-num-seqs", "1"]
    with pytest.raises(HkvError, match="not needed: the KV cache fits on the GPUs"):
        translate([*MODEL[:2], *fitting, "--enable-hybrid-kv-cache"], cpu_ram_gib=512)


def test_a_model_that_does_not_fit_is_no_reason_given_as_the_kv_fitting():
    """At one GPU MiniMax-M2.5's weights alone exceed it: the CPU tier has no size because
    nothing fits, which the error says (with the plan's reason), naming the flag given (or
    that no size was given)."""
    line = ["vllm", "serve", "MiniMaxAI/MiniMax-M2.5", "--enable-hybrid-kv-cache"]
    message = f"^{SIZE} \\(not given\\): the model does not fit these GPUs.*weights alone"
    with pytest.raises(HkvError, match=message):
        translate(line, cpu_ram_gib=512)
    with pytest.raises(HkvError, match=f"^{PERCENT}: the model does not fit these GPUs"):
        translate([*line, PERCENT, "0.8"], cpu_ram_gib=512)


# -- hkv flags with a disk tier: vLLM's tiering config with hkv's tier --------------------------
ARTICLE_LINE = (
    "vllm serve MiniMaxAI/MiniMax-M2.5 --tensor-parallel-size 2 --gpu-memory-utilization 0.9 "
    "--max-model-len 32768 --block-size 16 --swap-space 64 --load-format awq "
    "--enable-hybrid-kv-cache --hybrid-kv-cache-cpu-offload-size 16GB "
    "--hybrid-kv-cache-policy cost_aware --hybrid-kv-cache-cost-weights '{\"text\":1.0}'"
)


def article_with_disk(tmp_path):
    disk = disk_tier("32", str(tmp_path / "nvme"))
    return translate(shlex.split(ARTICLE_LINE), cpu_ram_gib=128, disk=disk)


def test_flags_with_a_disk_size_emit_vllms_tiering_config_with_hkvs_tier(tmp_path):
    t = article_with_disk(tmp_path)
    extra = extra_of(t.vllm_args)
    assert extra["cpu_bytes_to_use"] == 16 * 10**9 and extra["block_size"] == 16
    assert extra["eviction_policy"] == "hkv_cost_aware"
    assert extra["cache_policy_module_path"] == "hkv.integrations.vllm"
    assert extra["spec_name"] == "HkvTieringOffloadingSpec"  # vLLM's, handing hkv its config
    assert extra["spec_module_path"] == "hkv.integrations.vllm.spec"
    assert extra["secondary_tiers"] == [
        {
            "type": "HkvDiskTier",
            "module_path": "hkv.integrations.vllm.tier",
            "path": str(tmp_path / "nvme"),
            "disk_bytes": 32 << 30,
            "policy": "cost_aware",
            "admission": "cost",
        }
    ]
    assert t.command.startswith("PYTHONHASHSEED=0 vllm serve MiniMaxAI/MiniMax-M2.5 ")
    assert any("restarted server would find none" in n for n in t.notes)
    lru = translate([*MODEL, "--hybrid-kv-cache-policy", "lru", SIZE, "8"], cpu_ram_gib=512,
                    disk=disk_tier("32", str(tmp_path)))  # fmt: skip
    # hkv's spec behind vLLM's lru too: on vLLM 0.26 it carries the late-store guard
    assert extra_of(lru.vllm_args)["spec_name"] == "HkvTieringOffloadingSpec"
    assert extra_of(lru.vllm_args)["eviction_policy"] == "lru"


def test_flags_cli_says_why_the_hash_seed_is_set(capsys, tmp_path):
    code, out, err = run_cli(capsys, "flags", "--cpu-ram", "512", "--disk-size", "32",
                             "--disk-dir", str(tmp_path), "--", *MODEL, SIZE, "8")  # fmt: skip
    assert code == 0, err
    assert out.startswith("PYTHONHASHSEED=0 vllm serve ")
    assert "# note: PYTHONHASHSEED=0 before vllm serve" in out
    code, _, err = run_cli(capsys, "flags", "--disk-dir", str(tmp_path), "--", *MODEL)
    assert code == 2 and "--disk-dir: given without --disk-size" in err


@pytest.mark.slow
def test_vllm_accepts_the_tiering_command_and_resolves_its_spec_and_tier(tmp_path):
    pytest.importorskip("vllm")
    import importlib.util

    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

    from hkv.integrations.vllm.args import parse_vllm_args

    t = article_with_disk(tmp_path)
    parsed = parse_vllm_args(t.vllm_args)
    extra = parsed.kv_transfer_config.kv_connector_extra_config
    assert parsed.kv_transfer_config.kv_connector == "OffloadingConnector"
    spec_cls = OffloadingSpecFactory.get_spec_cls(extra)
    assert issubclass(spec_cls, TieringOffloadingSpec) and spec_cls.__name__ == extra["spec_name"]
    if importlib.util.find_spec("hkv.integrations.vllm.tier") is None:
        pytest.skip("hkv.integrations.vllm.tier (HkvDiskTier) is not written yet")
    from hkv.integrations.vllm.tier import HkvDiskTier

    assert SecondaryTierFactory.get_tier_class(extra["secondary_tiers"][0]) is HkvDiskTier


# -- hkv flags --policy-param: the policy's hyperparameters in vLLM's connector config ----------
ARTICLE_AUTO = [*MODEL, "--enable-hybrid-kv-cache", SIZE, "64GiB"]


def test_flags_hand_the_policy_params_to_the_policy_vllm_builds(capsys):
    """`hkv flags --policy-param` writes `hkv_policy_params`, checked by the policy before the
    server starts, and the policy the adapter builds from that config takes them."""
    pytest.importorskip("vllm")
    from hkv.integrations.vllm.policy import policy_class
    from hkv.policies.auto import LEAN_EXPERTS

    params = ["--policy-param", "experts=lean", "--policy-param", "half_life=10"]
    code, out, err = run_cli(capsys, "flags", "--cpu-ram", "512", *params, "--json", "--",
                             *ARTICLE_AUTO)  # fmt: skip
    assert code == 0, err
    translation = json.loads(out)
    extra = extra_of(translation["vllm_args"])
    assert extra["hkv_policy_params"] == {"experts": "lean", "half_life": 10}
    assert {"flag": "--policy-param", "to": 'hkv_policy_params {"experts": "lean", '
            '"half_life": 10} in --kv-transfer-config'} in translation["translated"]  # fmt: skip
    adapter = policy_class(extra["eviction_policy"])(1024, **read_policy_settings(extra))
    assert adapter.policy.experts == LEAN_EXPERTS and adapter.policy.half_life == 10
    assert translate(ARTICLE_AUTO, cpu_ram_gib=512).vllm_args != translation["vllm_args"]


@pytest.mark.parametrize(
    ("params", "extra", "message"),
    [
        (["experts=fast"], [], "(--policy-param): auto.experts: got 'fast'"),
        (["first=belady"], [], "(--policy-param): auto.first: got 'belady'"),
        (["first"], [], "--policy-param: got 'first'; expected NAME=VALUE"),
        (["first=lru", "first=lip"], [], "--policy-param first: given twice"),
        (["first=lru"], ["--hybrid-kv-cache-policy", "lru"], "vLLM's own 'lru' takes no hkv"),
        (['experts=["lru", "nope"]'], [], "auto.experts: unknown expert 'nope'"),
    ],
)  # fmt: skip
def test_flags_refuse_policy_params_the_policy_would_refuse(capsys, params, extra, message):
    argv = [arg for param in params for arg in ("--policy-param", param)]
    code, out, err = run_cli(capsys, "flags", "--cpu-ram", "512", *argv, "--", *ARTICLE_AUTO,
                             *extra)  # fmt: skip
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_policy_params_need_an_offloading_line():
    with pytest.raises(HkvError, match=r"policy_params \(--policy-param\): nothing is offloaded"):
        translate(MODEL, cpu_ram_gib=512, policy_params={"first": "lru"})
