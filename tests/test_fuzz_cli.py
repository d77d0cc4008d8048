"""A seeded fuzz of every CLI verb, the config loaders and the trace loader.

Each invocation runs `hkv.cli.main.main` in-process with edge and malformed values (huge,
infinite and NaN numbers, wrong types, files that are empty, binary, nested a hundred thousand
deep, directories, missing or read-only). The contract: no traceback ever escapes; the exit
status is 0 or 2; a mistake is one line on stderr; nothing runs for more than a few seconds.
"""

from __future__ import annotations

import contextlib
import io
import random
import signal
from pathlib import Path

import pytest

from hkv.cli.main import main

SEED = 20261201
SECONDS_EACH = 10
NUMBERS = ["0", "-1", "1", "3", "16", "1e308", "inf", "-inf", "nan", "1e400", "10" * 200, "x", ""]
SIZES = ["16GiB", "0", "-1GB", "1e400GiB", "inf", "nanGiB", "16XB", "GiB", "9" * 400]


class Slow(Exception):
    pass


def _alarm(signum, frame):
    raise Slow


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Good and bad inputs on disk, by name."""
    d = tmp_path_factory.mktemp("fuzz")
    good_trace = '{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1, 2, 3]}\n'
    made = {
        "trace": good_trace,
        "trace_floats": '{"timestamp": 0, "input_length": 40.5, "output_length": 4, '
        '"hash_ids": [1.5, 2]}\n',
        "trace_huge_ids": "".join(
            f'{{"timestamp": {i}, "input_length": 16, "output_length": 1, '
            f'"hash_ids": [{10**30 + i}]}}\n'
            for i in range(50)
        ),
        "trace_nested": "[" * 100_000 + "]" * 100_000 + "\n",
        "empty": "",
        "list.json": "[1, 2, 3]",
        "scalar.json": "42",
        "nested.json": "[" * 100_000 + "]" * 100_000,
        "no_heads.json": '{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, '
        '"num_attention_heads": 0}',
        "bad.yaml": "a: &a [1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
        "raises.py": "raise RuntimeError('boom')\n",
        "nested_weights.json": '{"cost_weights": ' + '{"a": ' * 5000 + "1" + "}" * 5001,
    }
    paths = {}
    for name, text in made.items():
        (d / name).write_text(text)
        paths[name] = str(d / name)
    (d / "binary").write_bytes(b"\xff\xfe\x00\x9c" * 64)
    paths["binary"] = str(d / "binary")
    readonly = d / "readonly.jsonl"
    readonly.write_text("")
    readonly.chmod(0o444)
    paths |= {"readonly": str(readonly), "dir": str(d), "missing": str(d / "nope" / "x.jsonl")}
    return paths


def plan_argv(rng: random.Random, files: dict[str, str]) -> list[str]:
    model = rng.choice(
        [
            "minimax-m2.5",
            "deepseek-v3",
            files["list.json"],
            files["binary"],
            files["empty"],
            files["no_heads.json"],
            files["dir"],
            "nope",
        ]
    )
    argv = ["plan", "--model", model]
    for flag in rng.sample(
        [
            "--gpus",
            "--gpu-mem",
            "--cpu-ram",
            "--max-model-len",
            "--max-num-seqs",
            "--reserve-gib",
            "--offload-percent",
            "--offload-size",
            "--gpu-memory-utilization",
            "--block-size",
        ],
        3,
    ):
        argv += [flag, rng.choice(NUMBERS)]
    argv += rng.choice([[], ["--weights-dtype", "int8"], ["--weights-dtype", "fp8"], ["--json"]])
    return argv


def flags_argv(rng: random.Random, files: dict[str, str]) -> list[str]:
    argv = ["flags", "--", "vllm", "serve", "MiniMaxAI/MiniMax-M2.5"]
    choices = [
        ["--tensor-parallel-size", rng.choice(NUMBERS)],
        ["--hybrid-kv-cache-cpu-offload-size", rng.choice(SIZES)],
        ["--hybrid-kv-cache-cpu-offload-percent", rng.choice(NUMBERS)],
        ["--hybrid-kv-cache-policy", rng.choice(["lru", "belady", "nope", ""])],
        ["--hybrid-kv-cache-cost-weights", rng.choice(['{"text": 1}', "[1]", "{", "nan"])],
        ["--hybrid-kv-cache-config", rng.choice(list(files.values()))],
        ["--max-model-len", rng.choice(NUMBERS)],
        ["--enable-hybrid-kv-cache"],
    ]
    for extra in rng.sample(choices, 3):
        argv += extra
    return argv + rng.choice([[], ["--json"]])


def simulate_argv(rng: random.Random, files: dict[str, str]) -> list[str]:
    trace = rng.choice(
        [
            "trace",
            "trace_floats",
            "trace_huge_ids",
            "trace_nested",
            "empty",
            "binary",
            "dir",
            "missing",
            "list.json",
        ]
    )
    argv = ["simulate", "--trace", files[trace], "--capacity-blocks", rng.choice(NUMBERS[:5])]
    argv += ["--policy", rng.choice(["lru", "all", "belady", "nope"])]
    argv += rng.choice(
        [
            [],
            ["--block-tokens", rng.choice(NUMBERS)],
            ["--profile", files["binary"]],
            [
                "--config",
                files[rng.choice(["bad.yaml", "raises.py", "nested.json", "nested_weights.json"])],
            ],
        ]
    )
    return argv + rng.choice([[], ["--json"]])


def workload_argv(rng: random.Random, files: dict[str, str]) -> list[str]:
    out = rng.choice([files["dir"], files["readonly"], files["missing"], None])
    argv = ["workload", "--out", out or str(Path(files["dir"]) / f"w{rng.random()}.jsonl")]
    argv += rng.choice(
        [
            [],
            ["--sessions", rng.choice(["1", "0", "1000000000", "x"])],
            [
                "--set",
                rng.choice(
                    [
                        "session_rate_per_s=1e-300",
                        "num_documents=100000000",
                        "user_tokens_median=1e300",
                        "nope=1",
                        "x",
                        "turns_max=2",
                    ]
                ),
            ],
        ]
    )
    return argv + rng.choice([[], ["--json"], ["--preset", "nope"]])


def calibrate_argv(rng: random.Random, files: dict[str, str]) -> list[str]:
    return [
        "calibrate",
        "--out",
        rng.choice([files["dir"], files["missing"]]),
        "--size-mib",
        rng.choice(["0", "-1", "x", "1e9"]),
        "--disk-dir",
        files["missing"],
    ]


VERBS = [plan_argv, flags_argv, simulate_argv, workload_argv, calibrate_argv]


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(SECONDS_EACH)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: v.__name__.removesuffix("_argv"))
def test_fuzzed_invocations_end_in_0_or_one_line_and_2(verb, files):
    rng = random.Random(f"{SEED}-{verb.__name__}")
    failures = []
    for _ in range(40):
        argv = verb(rng, files)
        try:
            code, _, err = run(argv)
        except Slow:
            failures.append((argv, "ran past the time limit"))
            continue
        except Exception as exc:  # a traceback: the defect this test is for
            failures.append((argv, f"{type(exc).__name__}: {exc}"[:300]))
            continue
        if code not in (0, 2) or (code == 2 and err.count("\n") != 1):
            failures.append((argv, f"exit {code}, stderr {err[:300]!r}"))
    assert not failures, "\n".join(f"{' '.join(a)[:200]}\n    -> {why}" for a, why in failures)
