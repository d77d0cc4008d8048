"""A seeded fuzz of every CLI verb, the config loaders and the trace loader.

Each invocation runs `hkv.cli.main.main` in-process with edge and malformed values (huge,
infinite and NaN numbers, wrong types, files that are empty, binary, nested a hundred thousand
deep, directories, missing or read-only). The contract: no traceback ever escapes; the exit
status is 0 or 2; a mistake is one line of at most ~300 characters on stderr; nothing runs for
more than a few seconds. Then one scenario per class of what fuzzing the CLI found: huge values
echoed, unreadable and malformed files, bad places to write, unbounded work, special files.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import random
import signal
import stat
from pathlib import Path

import pytest

from hkv.cli.main import main
from hkv.errors import HkvError
from hkv.outputs import write_atomic
from hkv.sim import workload

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


# -- one scenario per class of fuzz finding ------------------------------------------------------
LINE_CHARS = 320  # "at most ~300": the CLI's limit plus its `hkv VERB: error: ` prefix
HUGE = "x" * 100_000
GOOD_LINE = '{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1]}\n'
MODEL_CONFIG = json.dumps(
    {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 10,
        "intermediate_size": 128,
        "max_position_embeddings": 4096,
    }
)


def mistake(argv: list[str], *needles: str) -> str:
    """Run `argv`; assert exit 2 and one short line holding every needle; return the line."""
    code, _, err = run(argv)
    assert code == 2, (argv[:4], code, err[:300])
    assert err.count("\n") == 1 and len(err) <= LINE_CHARS, err[:400]
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, str]:
    """Inputs of the issue's classes, made on the spot from a fixed seed."""
    d = tmp_path_factory.mktemp("issue37")
    rng = random.Random(SEED)
    big = str(rng.randint(1, 9)) + "".join(rng.choice("0123456789") for _ in range(4999))
    texts = {
        "trace_u2028": GOOD_LINE.replace(
            '"hash_ids"', '"session": "a\\u2028b\\u0085c", "hash_ids"'
        ),
        "trace_bigint": GOOD_LINE.replace('"input_length": 40', f'"input_length": {big}'),
        "trace_e400": GOOD_LINE.replace('"input_length": 40', '"input_length": 1' + "0" * 400),
        "trace_long_request": '{"timestamp": 0, "input_length": 70000, "output_length": 1, '
        f'"hash_ids": {json.dumps(list(range(70_000)))}}}\n',
        "bigint.json": f'{{"hidden_size": {big}}}',
        "list.json": "[1, 2]",
        "wrong_types.json": '{"hidden_size": "big", "num_attention_heads": [1], '
        '"num_hidden_layers": {}, "vocab_size": null}',
        "profile_list.json": '[{"links": 1}]',
        "afile": "not a folder",
    }
    paths = {}
    for name, text in texts.items():
        (d / name).write_text(text, encoding="utf-8")
        paths[name] = str(d / name)
    (d / "binary").write_bytes(bytes(rng.randrange(128, 256) for _ in range(256)))
    paths |= {"binary": str(d / "binary"), "dir": str(d), "long_name": str(d / ("n" * 256))}
    paths["under_file"] = str(d / "afile" / "p.json")  # unreadable even for root
    for name, meta in {
        "meta_open": b"{",
        "meta_list": b"[1]",
        "meta_int": b'{"hub_id": 5}',
    }.items():
        (d / name).mkdir()
        (d / name / "config.json").write_text(MODEL_CONFIG)
        (d / name / "hkv.json").write_bytes(meta)
        paths[name] = str(d / name)
    (d / "meta_binary").mkdir()
    (d / "meta_binary" / "config.json").write_text(MODEL_CONFIG)
    (d / "meta_binary" / "hkv.json").write_bytes(b"\xff\xfe\x00\x9c" * 8)
    paths["meta_binary"] = str(d / "meta_binary")
    return paths


def simulate(trace: str, *extra: str) -> list[str]:
    return ["simulate", "--trace", trace, "--capacity-blocks", "64", "--block-tokens", "40", *extra]


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--model", HUGE],
        ["plan", "--model", "minimax-m2.5", "--gpus", HUGE],
        ["plan", "--model", "minimax-m2.5", "--max-model-len", "9" * 5000],
        [HUGE],
        [
            "flags",
            "--",
            "vllm",
            "serve",
            "MiniMaxAI/MiniMax-M2.5",
            "--hybrid-kv-cache-cpu-offload-size",
            HUGE,
        ],
        ["simulate", "--trace", HUGE, "--capacity-blocks", "4"],
        ["simulate", "--trace", "t", "--capacity-blocks", "4", "--policy", HUGE],
        ["workload", "--out", HUGE],
        ["workload", "--out", "w.jsonl", "--set", HUGE + "=1"],
        ["calibrate", "--size-mib", "1", "--disk-dir", HUGE],
        ["calibrate", "--out", HUGE],
    ],
    ids=lambda argv: " ".join(a[:12] for a in argv[:4]),
)
def test_a_huge_value_comes_back_shortened(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "characters)" in mistake(argv)


@pytest.mark.parametrize(
    "key, needle",
    [
        ("dir", "neither a config.json"),
        ("binary", "not UTF-8"),
        ("list.json", "holds a JSON list"),
        ("wrong_types.json", "'hidden_size'"),
        ("bigint.json", "4,300 digits"),
        ("under_file", "neither a config.json"),
        ("long_name", "neither a config.json"),
        ("meta_open", "not valid JSON"),
        ("meta_list", "holds a JSON list"),
        ("meta_int", "hub_id: got 5"),
        ("meta_binary", "not UTF-8"),
    ],
)
def test_a_bad_model_file_is_one_line(bad, key, needle):
    mistake(["plan", "--model", bad[key]], needle)


@pytest.mark.parametrize(
    "key, needle",
    [
        ("binary", "not UTF-8"),
        ("dir", "is a folder"),
        ("under_file", "not a folder"),
        ("long_name", "longer than the file system allows"),
        ("list.json", "expected a JSON object"),
        ("trace_bigint", "4,300 digits"),
        ("trace_e400", "an integer of 401 digits"),
    ],
)
def test_a_bad_trace_is_one_line(bad, key, needle):
    mistake(simulate(bad[key]), needle)


def test_json_nested_past_the_recursion_limit_is_one_line():
    weights = "[" * 100_000
    argv = ["flags", "--", "vllm", "serve", "MiniMaxAI/MiniMax-M2.5"]
    mistake([*argv, "--hybrid-kv-cache-cost-weights", weights], "not valid JSON")


def test_a_profile_of_the_wrong_shape_is_one_line(bad):
    mistake(simulate(bad["trace_u2028"], "--profile", bad["profile_list.json"]), "JSON list")


def test_a_trace_line_is_split_at_newlines_only(bad):
    code, out, err = run(simulate(bad["trace_u2028"], "--json"))
    assert (code, err) == (0, "")
    assert json.loads(out)["policy"] == "lru"


def test_dev_zero_as_a_trace_stops_at_the_line_cap():
    mistake(["simulate", "--trace", "/dev/zero", "--capacity-blocks", "4"], "64 MiB")


def test_a_request_too_long_to_replay_is_refused_with_the_cap(bad):
    argv = ["simulate", "--trace", bad["trace_long_request"], "--capacity-blocks", "64"]
    mistake([*argv, "--block-tokens", "1", "--policy", "belady"], "65,536")


@pytest.mark.parametrize("capacity", ["0", "1" + "0" * 400])
def test_capacity_outside_its_range_is_one_line(bad, capacity):
    argv = ["simulate", "--trace", bad["trace_u2028"], "--capacity-blocks", capacity]
    mistake([*argv, "--block-tokens", "40", "--policy", "all"], "--capacity-blocks")


@pytest.mark.parametrize(
    "flag, value, cap", [("--size-mib", "100000", "4,096"), ("--repeats", "1000000000", "20")]
)
def test_calibrate_sizes_and_repeats_are_capped(tmp_path, flag, value, cap):
    mistake(["calibrate", "--out", str(tmp_path / "p.json"), flag, value], cap)


@pytest.mark.parametrize(
    "out, needle",
    [
        ("", "empty path"),
        (".", "is a folder"),
        ("{dir}", "is a folder"),
        ("{dir}/afile/p.json", "not a folder"),
        ("{dir}/" + "n" * 256, "longer than the file system allows"),
        ("/proc/hkv-fuzz.json", "cannot write"),
    ],
)
@pytest.mark.parametrize("verb", ["workload", "calibrate"])
def test_an_unwritable_output_is_one_line_before_any_work(tmp_path, monkeypatch, verb, out, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("keep")
    out = out.format(dir=tmp_path)
    work = {"workload": ["--sessions", "3"], "calibrate": ["--size-mib", "1", "--repeats", "1"]}
    mistake([verb, *work[verb], "--out", out], needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_no_space_left_is_one_line_and_leaves_nothing(tmp_path):
    def chunks():
        yield "a line\n"
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(HkvError, match="No space left on device"):
        write_atomic(tmp_path / "t.jsonl", chunks())
    assert list(tmp_path.iterdir()) == []


def test_workload_out_never_replaces_a_symlink_or_a_device_node(tmp_path):
    (tmp_path / "target").write_text("target")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    mistake(["workload", "--sessions", "3", "--out", str(tmp_path / "link")], "symbolic link")
    mistake(["workload", "--sessions", "3", "--out", str(tmp_path / "dangling")], "symbolic link")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "target").read_text() == "target"
    assert not (tmp_path / "nowhere").exists()
    try:
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        return  # not root: /dev/null itself is then safe from us anyway
    mistake(["workload", "--sessions", "3", "--out", str(tmp_path / "null")], "not a regular")
    assert stat.S_ISCHR(os.lstat(tmp_path / "null").st_mode)


@pytest.mark.parametrize(
    "sets, needle",
    [
        (["burst_on_s=1e-6", "burst_off_s=1e-6"], "100,000"),
        (["long_doc_tokens_median=1048576", "block_tokens=1"], "20,000 block references"),
        (["rag_fraction=NaN"], "finite"),
        (["seed=" + "9" * 5000], "workload.seed"),
        (["nope=1"], "unknown field"),
        (["system_tokens_median=1048576", "max_input_tokens=1024"], "no prompt fits"),
    ],
)
def test_unbounded_workloads_are_refused_with_the_cap(tmp_path, monkeypatch, sets, needle):
    monkeypatch.setattr(workload, "MAX_BLOCK_REFS", 20_000)  # the same path, 50x sooner
    argv = ["workload", "--out", str(tmp_path / "w.jsonl"), "--sessions", "30"]
    if "block_tokens=1" in sets:
        argv = [*argv[:3], "--sessions", "100"]
    mistake([*argv, *(f"--set={s}" for s in sets)], needle)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "sets",
    [
        ["zipf_exponent=100"],
        ["rag_fraction=0", "long_doc_fraction=1", "length_sigma=10"],
        ["rag_fraction=0", "long_doc_fraction=1", "length_sigma=10", "max_input_tokens=1024"],
        ["max_input_tokens=1024"],
    ],
)
def test_extreme_workloads_finish_within_their_bound(tmp_path, sets):
    out = tmp_path / "w.jsonl"
    argv = ["workload", "--out", str(out), "--sessions", "200", *(f"--set={s}" for s in sets)]
    code, _, err = run(argv)
    assert (code, err) == (0, "")
    bound = 1024 if "max_input_tokens=1024" in sets else 131072
    lengths = [json.loads(line)["input_length"] for line in out.read_text().splitlines()]
    assert lengths and max(lengths) <= bound


def test_calibrate_leaves_no_temporary_file_however_it_ends(tmp_path, monkeypatch):
    from hkv import calibrate

    seen = []

    def interrupted(handle, data):
        seen.extend(tmp_path.iterdir())  # already unlinked: even SIGKILL leaves nothing
        raise KeyboardInterrupt

    monkeypatch.setattr(calibrate, "_time_disk", interrupted)
    code, _, err = run(
        [
            "calibrate",
            "--size-mib",
            "1",
            "--repeats",
            "1",
            "--disk-dir",
            str(tmp_path),
            "--out",
            str(tmp_path / "p.json"),
        ]
    )
    assert (code, err, seen) == (130, "hkv calibrate: interrupted\n", [])
    assert list(tmp_path.iterdir()) == []


def _model(tmp_path: Path, **fields) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(json.loads(MODEL_CONFIG) | fields))
    return str(path)


def _profile(tmp_path: Path, **fields) -> str:
    from hkv.cost import HardwareProfile

    path = tmp_path / "profile.json"
    path.write_text(json.dumps(HardwareProfile.default().to_dict() | fields))
    return str(path)


SERVE = ["--", "vllm", "serve", "MiniMaxAI/MiniMax-M2.5", "--enable-hybrid-kv-cache",
         "--hybrid-kv-cache-policy", "cost_aware",
         "--hybrid-kv-cache-cpu-offload-size", "16GiB"]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "needles"),
    [  # what a second fuzz of the CLI (2026-12-07) found: each ended in a traceback, or 0
        (
            lambda d: ["flags", "--policy-param", "modality_weights=-1", *SERVE],
            ["modality_weights"],
        ),
        (lambda d: ["flags", "--policy-param", "history_factor=1e300", *SERVE], ["history_factor"]),
        (lambda d: ["plan", "--model", _model(d, num_key_value_heads=0)], ["num_kv_heads", ">= 1"]),
        (lambda d: ["plan", "--model", _model(d, head_dim=-8)], ["head_dim comes out -8"]),
        (lambda d: ["plan", "--model", _model(d, intermediate_size=-1000)], ["params comes out"]),
        (
            lambda d: simulate(_trace(d), "--profile", _profile(d, machine="x")),
            ["not a calibration"],
        ),
        (
            lambda d: simulate(_trace(d), "--profile", _profile(d, prefill_tflops=1e-320)),
            [">= 1e-6"],
        ),
        (lambda d: simulate(_trace(d), "--disk-size", "1", "--plot", str(d / "p.png")), ["--plot"]),
    ],
)
def test_what_a_second_fuzz_found_is_one_line(argv, needles, tmp_path):
    mistake(argv(tmp_path), *needles)
    assert not (tmp_path / "p.png").exists()


def _trace(d: Path) -> str:
    path = d / "t.jsonl"
    path.write_text(GOOD_LINE * 8)
    return str(path)


def test_a_workload_of_one_or_two_documents_is_drawn(tmp_path):
    """RAG sessions drew up to three documents without replacement (a numpy ValueError)."""
    for documents in (1, 2):
        out = tmp_path / f"w{documents}.jsonl"
        code, _, err = run(["workload", "--out", str(out), "--sessions", "50",
                            "--set", f"num_documents={documents}"])  # fmt: skip
        assert code == 0 and out.stat().st_size > 0, err
