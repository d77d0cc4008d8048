"""`python -m bench.vllm_serve run --disk-gib G`: the `vllm serve` command with hkv's disk tier
behind the CPU tier, checked on CPU (the server itself runs on the GPU machine).

The served `--kv-transfer-config` must be the one `hkv flags` prints for the same tiers, the
environment must carry `hkv flags`' `PYTHONHASHSEED=0`, the long variant needs a 128K context,
and without `--disk-gib` the command is the one the bench always started. vLLM 0.32's own
`vllm serve` parser reads the command, and its factories resolve the spec and the tier; the
engine hook reads the tier's `stats()` inside vLLM's tiering manager.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.vllm_serve import HOOK
from bench.vllm_serve.__main__ import main, parser
from bench.vllm_serve.disk import (
    PROFILE,
    hkv_flags_argv,
    note_stopped,
    note_workload,
    prepare_dir,
    tier_flags,
    tier_setup,
)
from bench.vllm_serve.server import serve_command, server_env
from hkv.cli.main import main as hkv_main
from hkv.errors import HkvError

GIB = 1 << 30


def run_args(tmp_path, *extra: str):
    return parser().parse_args(
        ["run", "--policy", "lru", "--cpu-gib", "2", "--model", str(tmp_path / "model"),
         "--out", str(tmp_path / "r.json"), *extra]
    )  # fmt: skip


def disk_args(tmp_path, *extra: str):
    return run_args(tmp_path, "--disk-gib", "3", "--disk-dir", str(tmp_path / "d"), *extra)


def value_of(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def printed_by_hkv_flags(capsys, argv: list[str]) -> dict:
    """What `hkv flags --json` prints for `argv` (`hkv flags ...`, as recorded by the run)."""
    assert argv[:2] == ["hkv", "flags"]
    capsys.readouterr()
    code = hkv_main(["flags", "--json", *argv[2:]])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("policy", ["lru", "hkv_auto"])
def test_the_served_tiering_config_is_what_hkv_flags_prints(tmp_path, capsys, policy):
    args = disk_args(tmp_path, "--variant", "long")
    flags = tier_flags(args, policy)
    command = serve_command(args, policy, 8431, flags)
    served = value_of(command, "--kv-transfer-config")
    extra = json.loads(served)["kv_connector_extra_config"]
    assert extra["secondary_tiers"] == [
        {
            "type": "HkvDiskTier",
            "module_path": "hkv.integrations.vllm.tier",
            "path": str(tmp_path / "d"),
            "disk_bytes": 3 * GIB,
            "policy": "cost_aware",
            "admission": "cost",
            "profile": str(PROFILE),
        }
    ]
    assert PROFILE.is_file()
    assert (extra["cpu_bytes_to_use"], extra["eviction_policy"]) == (2 * GIB, policy)
    printed = printed_by_hkv_flags(capsys, hkv_flags_argv(args, policy))
    assert value_of(printed["vllm_args"], "--kv-transfer-config") == served  # byte for byte
    assert printed["env"] == flags.env == {"PYTHONHASHSEED": "0"}
    env = server_env(args, tmp_path / "stats.json", flags)
    assert env["PYTHONHASHSEED"] == "0" and env["HKV_SERVE_STATS"] == str(tmp_path / "stats.json")
    assert value_of(command, "--max-model-len") == "131072"
    assert value_of(serve_command(disk_args(tmp_path), policy, 1, flags), "--max-model-len") == (
        "32768"
    )


def test_an_admission_of_all_reaches_the_tier(tmp_path):
    args = disk_args(tmp_path, "--disk-admission", "all")
    extra = json.loads(value_of(serve_command(args, "lru", 1, tier_flags(args, "lru")),
                                "--kv-transfer-config"))["kv_connector_extra_config"]  # fmt: skip
    assert extra["secondary_tiers"][0]["admission"] == "all"


def test_without_a_disk_tier_the_command_and_environment_are_as_before(tmp_path):
    args = run_args(tmp_path)
    assert tier_flags(args, "lru") is None
    transfer = {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 2 * GIB, "eviction_policy": "lru"},
    }
    assert serve_command(args, "lru", 8431) == [
        *(sys.executable, "-c", "from vllm.entrypoints.cli.main import main; main()", "serve"),
        str(tmp_path / "model"),
        *("--served-model-name", "minimax-m2.5-8l", "--host", "127.0.0.1", "--port", "8431"),
        *("--load-format", "dummy", "--skip-tokenizer-init", "--enforce-eager"),
        *("--kv-cache-memory-bytes", str(4 * GIB)),
        *("--max-model-len", "32768", "--max-num-batched-tokens", "8192", "--max-num-seqs", "16"),
        *("--enable-prefix-caching", "--seed", "0", "--enable-prompt-tokens-details"),
        "--disable-uvicorn-access-log",
        *("--kv-transfer-config", json.dumps(transfer)),
    ]
    env = server_env(args, tmp_path / "stats.json")
    assert env.get("PYTHONHASHSEED") == os.environ.get("PYTHONHASHSEED")
    long = run_args(tmp_path, "--variant", "long")  # the long sessions alone, no disk tier
    assert value_of(serve_command(long, "lru", 1), "--max-model-len") == "131072"


@pytest.mark.parametrize(
    ("extra", "policy", "message"),
    [
        ((), "hkv_lru", "would serve 'lru' instead"),
        (("--disk-gib", "0"), "lru", "--disk-size: got '0.0'; give a size above 0"),
        (("--cpu-gib", "0"), "lru", "hkv flags refuses it"),
    ],
)
def test_tiers_hkv_flags_refuses_are_said_in_one_line(tmp_path, extra, policy, message):
    args = parser().parse_args([*_argv_of(tmp_path), *extra])  # the last value of a flag wins
    with pytest.raises(HkvError, match="^--policy") as caught:
        tier_flags(args, policy)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def _argv_of(tmp_path) -> list[str]:
    return ["run", "--policy", "lru", "--cpu-gib", "2", "--model", str(tmp_path / "model"),
            "--out", str(tmp_path / "r.json"), "--disk-gib", "3",
            "--disk-dir", str(tmp_path / "d")]  # fmt: skip


def test_the_runner_refuses_bad_options_before_any_server_starts(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["run", "--policy", "lru", "--cpu-gib", "2", "--keep-dir", "--out", str(out)])
    assert code == 2 and "--keep-dir: only with a disk tier" in capsys.readouterr().err
    code = main([*_argv_of(tmp_path), "--policy", "lru,hkv_lru"])
    err = capsys.readouterr().err
    assert code == 2 and "--policy hkv_lru: with a disk tier" in err and not out.exists()
    with pytest.raises(SystemExit) as done:
        main(["run", "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert all(f in shown for f in ("--disk-gib", "--disk-dir", "--disk-admission", "--keep-dir"))
    assert "long" in shown


def test_the_disk_dir_is_emptied_of_the_tiers_files_kept_with_keep_dir_else_refused(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    for name in ("hkv_tier.bin", "hkv_tier.json", ".hkv_tier_speed.json.x.tmp"):
        (folder / name).write_bytes(b"x" * 10)
    prepare_dir(disk_args(tmp_path, "--keep-dir"))
    assert len(list(folder.iterdir())) == 3
    prepare_dir(disk_args(tmp_path))
    assert list(folder.iterdir()) == []
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(HkvError, match=r"holds notes\.txt, not hkv's tier files"):
        prepare_dir(disk_args(tmp_path))
    assert (folder / "notes.txt").exists()


def test_the_run_records_the_flags_the_tiers_stats_log_lines_and_bytes(tmp_path):
    args = disk_args(tmp_path)
    one = tier_setup(args, "lru", tier_flags(args, "lru"))
    assert one["hkv_flags"]["argv"] == hkv_flags_argv(args, "lru")
    assert one["hkv_flags"]["env"] == {"PYTHONHASHSEED": "0"}
    record = one["disk_tier"]
    assert record["bound_bytes"] == 3 * GIB and record["dir_before"]["files"] == 0
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "hkv_tier.bin").write_bytes(b"\0" * 4096)
    tier = {"class": "HkvDiskTier", "written": 7, "file_bytes": 4096}
    before = {"secondary_tiers": [tier | {"written": 0}], "cascade_read_blocks": 2}
    note_workload(record, before, {"secondary_tiers": [tier], "cascade_read_blocks": 9})
    assert record["stats_after_workload"][0]["written"] == 7
    assert record["cpu_tier_counts"] == {"cascade_read_blocks": 7}
    assert record["dir_after_workload"]["file_bytes"] == 4096
    log = "\n".join([
        "INFO 12-03 hkv disk tier at /x: 10 chunks of 4096 bytes ..., 0 chunks found",
        "INFO 12-03 Created secondary tier #0 (HkvDiskTier)",
        "INFO 12-03 hkv disk tier: loads take 1.560 ms a chunk here; ...",
    ])  # fmt: skip
    note_stopped(record, log)
    assert [line.split(" ", 2)[2][:15] for line in record["log_lines"]] == [
        "hkv disk tier a",
        "hkv disk tier: ",
    ]
    assert record["dir_after_stop"]["files"] == 1 and record["within_bound"] is True


TIER_HOOK_PROBE = """
import json, os, sys, time, uuid
from vllm.v1.kv_offload.base import ReqContext, ScheduleEndContext
from vllm.v1.kv_offload.config import (OffloadingCacheConfig, OffloadingConfig,
    OffloadingGroupConfig, OffloadingModelConfig, OffloadingParallelConfig)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory

BLOCK = 16 * 1024
tier = {"type": "HkvDiskTier", "module_path": "hkv.integrations.vllm.tier", "path": sys.argv[1],
        "disk_bytes": 16 * (BLOCK + 4096) + 8192, "admission": "all"}
config = OffloadingConfig(
    groups=(OffloadingGroupConfig(16, ("layer0",), 0),), worker_kv_bytes_per_block=BLOCK,
    enable_kv_cache_events=False,
    extra_config={"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 8 * BLOCK,
                  "secondary_tiers": [tier]},
    engine_id=uuid.uuid4().hex[:8], model=OffloadingModelConfig("minimax-m2.5", "bfloat16"),
    cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
    parallel=OffloadingParallelConfig(0, 1, 1, 1, 1, 1, 0, 1, None, True))
manager = OffloadingSpecFactory.create_spec(config).get_manager()
ctx = ReqContext(req_id="r")
keys = [i.to_bytes(32, "big") + bytes(4) for i in range(3)]
for n, key in enumerate(keys, 1):
    ctx.set_offload_key_position(key, 16 * n)
manager.on_new_request(ctx)
out = manager.prepare_store(keys, ctx)
manager.complete_store(out.keys_to_store, ctx)
manager.on_request_finished(ctx)
step = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
for _ in range(5000):
    manager.on_schedule_end(step)
    if not manager.has_pending_work():
        break
    time.sleep(0.001)
time.sleep(1.2)
print(open(os.environ["HKV_SERVE_STATS"]).read())
manager.shutdown()
"""


@pytest.mark.slow
def test_the_engine_hook_reads_the_disk_tiers_stats_in_vllms_tiering_manager(tmp_path):
    pytest.importorskip("vllm.v1.kv_offload.tiering.manager")
    stats = tmp_path / "stats.json"
    env = os.environ | {"HKV_SERVE_STATS": str(stats)}
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", TIER_HOOK_PROBE, str(tmp_path / "tier")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["stored_blocks"] == 3  # the GPU's stores into the CPU tier, as before
    assert found["loaded_blocks"] == 0  # the CPU tier's rows read for the disk: counted apart
    assert (found["cascade_read_blocks"], found["promoted_blocks"]) == (3, 0)
    (tier,) = found["secondary_tiers"]
    assert (tier["class"], tier["written"], tier["resident_chunks"]) == ("HkvDiskTier", 3, 3)
    assert tier["disk_bytes"] == 16 * (16 * 1024 + 4096) + 8192
    assert found["late_stores_guarded"] is None  # vLLM's own spec: no 0.26 guard


@pytest.mark.slow
def test_vllms_serve_parser_reads_the_command_and_resolves_the_spec_and_tier(tmp_path):
    pytest.importorskip("vllm")
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    from hkv.integrations.vllm.args import vllm_engine_parser
    from hkv.integrations.vllm.tier import HkvDiskTier

    root = type(vllm_engine_parser())(prog="vllm")  # vLLM's FlexibleArgumentParser
    ServeSubcommand().subparser_init(root.add_subparsers(dest="subparser"))
    for policy in ("lru", "hkv_auto"):
        args = disk_args(tmp_path, "--variant", "long")
        command = serve_command(args, policy, 8431, tier_flags(args, policy))
        parsed = root.parse_args(command[command.index("serve") :])
        assert parsed.model_tag == str(tmp_path / "model") and parsed.max_model_len == 131072
        transfer = parsed.kv_transfer_config  # vLLM's KVTransferConfig
        assert (transfer.kv_connector, transfer.kv_role) == ("OffloadingConnector", "kv_both")
        extra = transfer.kv_connector_extra_config
        assert (
            extra
            == json.loads(value_of(command, "--kv-transfer-config"))["kv_connector_extra_config"]
        )
        assert OffloadingSpecFactory.get_spec_cls(extra).__name__ == extra["spec_name"]
        assert SecondaryTierFactory.get_tier_class(extra["secondary_tiers"][0]) is HkvDiskTier
