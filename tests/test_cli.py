"""The CLI contract: one JSON object with --json, one line and exit 2 for a user mistake."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PLAN_KEYS = {
    "kv_bytes_per_token",
    "kv_bytes_per_seq",
    "weights_bytes",
    "gpu_kv_budget_bytes",
    "max_seqs_on_gpu",
    "offload_bytes",
    "fits",
    "vllm_args",
    "warnings",
}


def hkv(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hkv.cli", *args], capture_output=True, text=True, timeout=120,
        env=None if env is None else os.environ | env,
    )  # fmt: skip


def test_plan_json_contract():
    result = hkv("plan", "--model", "minimax-m2.5", "--max-model-len", "32768", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out.keys() >= PLAN_KEYS
    assert out["kv_bytes_per_token"] == 253_952
    assert out["kv_bytes_per_seq"] == 8_321_499_136
    assert isinstance(out["fits"], bool) and isinstance(out["vllm_args"], list)


def test_plan_fp8_kv():
    out = json.loads(
        hkv("plan", "--model", "minimax-m2.5", "--kv-cache-dtype", "fp8", "--json").stdout
    )
    assert out["kv_bytes_per_token"] == 126_976


def test_article_setup_is_reported_as_not_fitting_in_plain_text():
    article = "--gpus 2 --gpu-mem 48 --max-model-len 32768 --weights-dtype int4 --cpu-ram 64"
    result = hkv("plan", "--model", "minimax-m2.5", *article.split())
    assert result.returncode == 0
    assert "fits: NO" in result.stdout
    assert "reason: weights alone" in result.stdout
    assert "suggestion: 4 x 48 GiB GPUs" in result.stdout
    assert "CPU tier: none (vLLM would not start" in result.stdout
    assert "vllm serve" not in result.stdout.replace("no vllm serve command", "")


def test_plan_says_no_cpu_tier_is_needed_where_the_gpus_hold_every_sequence():
    roomy = "--gpus 1 --max-model-len 131072 --max-num-seqs 8 --cpu-ram 64"
    result = hkv("plan", "--model", "gpt-oss-120b", *roomy.split())
    assert result.returncode == 0, result.stderr
    assert "CPU tier: none needed (the GPUs hold all 8 full-length sequences)" in result.stdout
    assert "\n  vllm serve openai/gpt-oss-120b --tensor-parallel-size 1" in result.stdout


def test_suite_prints_seconds_saved_beside_hit_rates_or_either_alone():
    both = hkv("suite", "--capacities", "0.1")
    assert both.returncode == 0, both.stderr
    assert both.stdout.count("net prefill seconds saved") == both.stdout.count("block hit rate")
    assert both.stdout.count("best hkv over best competitor (s)") >= 1
    seconds = hkv("suite", "--capacities", "0.1", "--metric", "seconds").stdout
    assert "net prefill seconds saved" in seconds and "block hit rate" not in seconds


def test_flags_json_contract():
    result = hkv("flags", "--cpu-ram", "128", "--json", "--", "--model", "minimax-m2.5",
                 "--swap-space", "64", "--enable-hybrid-kv-cache",
                 "--hybrid-kv-cache-cpu-offload-size", "16GiB")  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert {"vllm_args", "hkv_config", "dropped", "warnings"} <= out.keys()
    assert out["dropped"][0]["flag"] == "--swap-space 64"
    assert "--kv-transfer-config" in out["vllm_args"]  # no policy named: hkv_auto
    assert (
        '"eviction_policy":"hkv_auto"'
        in out["vllm_args"][out["vllm_args"].index("--kv-transfer-config") + 1]
    )


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["plan", "--model", "nope"], ["--model", "shipped models"]),
        (["plan", "--model", "minimax-m2.5", "--gpus", "5"], ["--gpus", "48 attention heads"]),
        (
            ["flags", "--", "--model", "minimax-m2.5", "--hybrid-kv-cache-policy", "lru",
             "--hybrid-kv-cache-cost-weights", '{"text": 1}'],
            ["--hybrid-kv-cache-cost-weights", "--hybrid-kv-cache-policy"],
        ),
        (["flags"], ["after `--`"]),
    ],
)  # fmt: skip
def test_user_mistakes_exit_2_with_one_line_and_no_traceback(args, needles):
    result = hkv(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    for needle in needles:
        assert needle in result.stderr
    assert result.stdout == ""


def test_core_and_plan_import_no_heavy_framework():
    code = (
        "import sys, io, contextlib\n"
        "import hkv\n"
        "from hkv.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plan', '--model', 'minimax-m2.5', '--json'])\n"
        "    main(['flags', '--', '--model', 'minimax-m2.5', '--swap-space', '4'])\n"
        "print([m for m in ('torch', 'vllm', 'transformers') if m in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_doctor_reports_this_machine():
    out = json.loads(hkv("doctor", "--json").stdout)
    assert out["packages"]["hkv"] == "0.1.0"
    assert out["host_total_gib"] > 0
    assert isinstance(out["gpus"], list)
    from hkv.policies import native

    leaders = ["cost_aware", "depth_lfu", "depth_lfu_static", "lip", "lru", "lru+st2", "s3fifo"]
    leaders = leaders if native.built() else []
    assert out["native_shadows"] == {
        "built": native.built(),
        "experts": sorted(native.LABELS),
        "leaders": leaders,
        "vllm_policies": ["lru"] if native.built() else [],
        "threaded": native.threaded(),
        "parallel": native.parallel(),
    }
    text = hkv("doctor").stdout
    if native.built():
        assert "sampled shadows replay each request on a background thread" in text
        off = hkv("doctor", env={"HKV_SHADOW_THREAD": "0"}).stdout
        assert "sampled shadows replay each request on the caller" in off
        assert "exact shadows read each request's hits at once and store it on the caller" in off
    assert ("auto's shadows: in C" if native.built() else "auto's shadows: in Python") in text
    assert ("auto's leaders in C inside vLLM: cost_aware" in text) == native.built()
    assert ("hkv policies in C inside vLLM: lru" in text) == native.built()
    from hkv.storage import slot_io

    assert out["native_disk_io"]["built"] == slot_io.built()
    assert ("slot I/O: in C" if slot_io.built() else "slot I/O: in Python") in text


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["plan", "--model", "minimax-m2.5", "--max-num-seqs", "0"], "--max-num-seqs: got 0"),
        (["plan", "--model", "minimax-m2.5", "--gpu-mem", "-1"], "--gpu-mem: got -1.0"),
        (["plan", "--model", "minimax-m2.5", "--block-size", "0"], "--block-size: got 0"),
        (["plan", "--model", "no-such-model"], "--model: 'no-such-model' is neither"),
        (["plan", "--model", "minimax-m2.5", "--gpus", "3"], "--gpus: minimax-m2.5 has 8 KV heads"),
        (
            [
                "flags",
                "--",
                "vllm",
                "serve",
                "MiniMaxAI/MiniMax-M2.5",
                "--tensor-parallel-size",
                "3",
            ],
            "--tensor-parallel-size conflicts with --model: minimax-m2.5 has 8 KV heads",
        ),
        (["plan", "--model", "minimax-m2.5", "--weights-dtype", "int8"], "invalid choice: 'int8'"),
        (
            [
                "simulate",
                "--trace",
                "/nonexistent.jsonl",
                "--policy",
                "lru",
                "--capacity-blocks",
                "4",
            ],
            "--trace: no such file",
        ),
    ],
)
def test_library_fields_are_reported_as_the_flags_that_set_them(argv, line):
    result = hkv(*argv)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and line in result.stderr, result.stderr


def test_python_m_hkv_is_the_hkv_command():
    result = subprocess.run(
        [sys.executable, "-m", "hkv", "plan", "--model", "minimax-m2.5", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["kv_bytes_per_token"] == 253_952


def test_version_and_every_option_has_help():
    from hkv import __version__
    from hkv.cli.main import build_parser
    from hkv.policies import policy_names

    assert hkv("--version").stdout.strip() == f"hkv {__version__}"
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    bare = [
        f"{name} {action.option_strings[0]}"
        for name, command in commands.items()
        for action in command._actions
        if action.option_strings and not action.help
    ]
    assert not bare, bare
    policy_help = next(a.help for a in commands["simulate"]._actions if a.dest == "policy")
    assert all(name in policy_help for name in policy_names())
