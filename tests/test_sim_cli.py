"""`hkv simulate / calibrate / workload` handlers, driven through their own parsers."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from hkv.cli.sim import add_calibrate_parser, add_simulate_parser, add_workload_parser
from hkv.errors import HkvError
from hkv.policies import policy_names


def run(*argv: str) -> str:
    parser = argparse.ArgumentParser(prog="hkv")
    sub = parser.add_subparsers(dest="command", required=True)
    add_simulate_parser(sub)
    add_calibrate_parser(sub)
    add_workload_parser(sub)
    args = parser.parse_args(argv)
    out = io.StringIO()
    assert args.handler(args, out=out) == 0
    return out.getvalue()


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "w.jsonl"
    run("workload", "--preset", "multimodal", "--sessions", "30", "--out", str(path))
    return path


def test_simulate_json_is_one_object(trace_file):
    out = json.loads(
        run(
            "simulate",
            "--trace",
            str(trace_file),
            "--policy",
            "lru",
            "--capacity-blocks",
            "20",
            "--json",
        )
    )
    assert out["policy"] == "lru" and 0 <= out["block_hit_rate"] <= 1


def test_simulate_all_is_a_list_per_policy(trace_file):
    out = json.loads(
        run(
            "simulate",
            "--trace",
            str(trace_file),
            "--policy",
            "all",
            "--capacity-blocks",
            "20",
            "--json",
        )
    )
    assert [row["policy"] for row in out] == policy_names()


def test_simulate_several_policies_is_a_list_in_the_order_given(trace_file):
    args = ("simulate", "--trace", str(trace_file), "--capacity-blocks", "20", "--json")
    spaced = json.loads(run(*args, "--policy", "auto", "lru"))
    commas = json.loads(run(*args, "--policy", "auto,lru,auto"))
    assert [row["policy"] for row in spaced] == [row["policy"] for row in commas] == ["auto", "lru"]
    alone = json.loads(run(*args, "--policy", "auto"))
    timed = {"elapsed_s", "refs_per_s"}  # the same replay, one object where one policy is named
    assert {k: v for k, v in alone.items() if k not in timed} == {
        k: v for k, v in spaced[0].items() if k not in timed
    }
    table = run("simulate", "--trace", str(trace_file), "--capacity-blocks", "20", "--policy",
                "bip", "s3fifo")  # fmt: skip
    assert "\nbip " in table and "\ns3fifo " in table


def test_simulate_table_without_json(trace_file):
    assert "block hit" in run("simulate", "--trace", str(trace_file), "--capacity-blocks", "9")


def test_simulate_plot_draws_every_policy_into_a_png(trace_file, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "figs" / "policies.png"
    args = ("simulate", "--trace", str(trace_file), "--capacity-blocks", "20", "--json")
    rows = json.loads(run(*args, "--policy", "all", "--plot", str(png)))
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000 and len(rows) == len(policy_names())
    assert not list(png.parent.glob(".*"))  # written atomically: no temporary file left
    with pytest.raises(HkvError, match="--plot: .* is a folder"):
        run(*args, "--policy", "lru", "--plot", str(tmp_path))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policy", "lfu", "--capacity-blocks", "5"], "unknown policy 'lfu'; valid:"),
        (["--capacity-blocks", "0"], "--capacity-blocks: got 0"),
        (["--policy", "lru", "lfu", "--capacity-blocks", "5"], "unknown policy 'lfu'; valid:"),
        (["--policy", "all", "lru", "--capacity-blocks", "5"], "all beside other names"),
        (["--policy", ",", "--capacity-blocks", "5"], "--policy: got no name"),
        (
            ["--policy", "lru", "auto", "--capacity-blocks", "5", "--recommend-disk"],
            "--recommend-disk takes one CPU policy",
        ),
        (["--capacity-blocks", "5", "--profile", "/nonexistent.json"], "profile: no such file"),
    ],
)
def test_simulate_user_mistakes_raise_hkv_error(trace_file, argv, message):
    with pytest.raises(HkvError, match=message):
        run("simulate", "--trace", str(trace_file), *argv)


def test_calibrate_writes_a_profile_simulate_accepts(tmp_path, trace_file):
    profile = tmp_path / "me.json"
    out = json.loads(
        run(
            "calibrate",
            "--out",
            str(profile),
            "--size-mib",
            "2",
            "--repeats",
            "1",
            "--disk-dir",
            str(tmp_path),
            "--json",
        )
    )
    assert out["path"] == str(profile) and "host_memcpy_gbps" in out["measured"]
    run(
        "simulate",
        "--trace",
        str(trace_file),
        "--capacity-blocks",
        "5",
        "--profile",
        str(profile),
        "--tier",
        "disk",
    )


def test_workload_set_overrides_and_rejects_unknown_fields(tmp_path):
    out = json.loads(
        run(
            "workload",
            "--sessions",
            "5",
            "--set",
            "mean_turns=2",
            "--out",
            str(tmp_path / "a.jsonl"),
            "--json",
        )
    )
    assert out["spec"]["mean_turns"] == 2
    with pytest.raises(HkvError, match="--set"):
        run("workload", "--set", "turns=2", "--out", str(tmp_path / "b.jsonl"))
