"""`bench.trace_variants`: the traffics it draws from a trace, and how it judges a candidate."""

from __future__ import annotations

import json

import pytest

from bench import trace_variants as bench
from hkv.sim.trace import load_trace, write_trace
from hkv.sim.workload import WorkloadSpec, generate


@pytest.fixture(scope="module")
def trace():
    return generate(WorkloadSpec(seed=5, num_sessions=60))


def test_variants_are_the_source_requests_split_thinned_or_shuffled(trace):
    requests = list(trace.requests)
    n = len(requests)
    drawn = bench.variants(trace, seed=0)
    assert set(drawn) == {"even", "odd", "first_half", "second_half", "middle_third", "keep75",
                          "keep50", "jitter50"}  # fmt: skip
    parts = {name: list(t.requests) for name, t in drawn.items()}
    assert sorted(parts["even"] + parts["odd"], key=requests.index) == requests
    assert parts["first_half"] + parts["second_half"] == requests
    assert parts["middle_third"] == requests[n // 3 : 2 * n // 3]
    for name, share in (("keep75", 0.75), ("keep50", 0.5)):  # kept in order, about that share
        assert parts[name] == [r for r in requests if r in parts[name]]
        assert abs(len(parts[name]) / n - share) < 0.1
    jitter = parts["jitter50"]
    assert jitter != requests and len(jitter) == n
    for start in range(0, n, bench.WINDOW):  # each window holds its own requests, reordered
        window = slice(start, start + bench.WINDOW)
        assert sorted(map(id, jitter[window])) == sorted(map(id, requests[window]))
    assert all(t.block_tokens == trace.block_tokens for t in drawn.values())


def test_a_seed_draws_the_same_variants_and_another_seed_others(trace):
    again = bench.variants(trace, seed=0)["keep50"].requests
    assert bench.variants(trace, seed=0)["keep50"].requests == again
    assert bench.variants(trace, seed=1)["keep50"].requests != again


def test_a_trace_too_short_to_draw_from_is_refused(trace):
    short = type(trace)(requests=trace.requests[:10], block_tokens=trace.block_tokens)
    with pytest.raises(ValueError, match="10 requests; expected at least 100"):
        bench.variants(short)


def test_the_bar_is_half_a_point_below_the_best_of_vllms_three():
    natives = [
        {"variant": "odd", "capacity_frac": 0.01, "vllm:lru": 0.10, "vllm:arc": 0.12,
         "vllm:lru+st2": 0.11},
        {"variant": "odd", "capacity_frac": 0.05, "vllm:lru": 0.30, "vllm:arc": 0.20,
         "vllm:lru+st2": 0.25},
    ]  # fmt: skip
    rows = [
        {"variant": "odd", "capacity_frac": 0.01, "block_hit_rate": 0.116},  # 0.4 points below
        {"variant": "odd", "capacity_frac": 0.05, "block_hit_rate": 0.29},  # a point below
    ]
    judged = bench.judge(natives, rows)
    assert judged["missing_the_bar"] == 1
    assert [c["best_native"] for c in judged["cells"]] == ["vllm:arc", "vllm:lru"]
    assert judged["worst_points"] == pytest.approx(-1.0)
    assert judged["mean_points"] == pytest.approx(-0.7)


def test_a_run_writes_every_cell_of_every_candidate(trace, tmp_path):
    path = write_trace(trace.requests, tmp_path / "t.jsonl")
    out = tmp_path / "tv.json"
    argv = ["--trace", str(path), "--capacities", "0.05", "--workers", "1", "--out", str(out),
            "--candidate", 'lip={"experts": ["lip"]}']  # fmt: skip
    assert bench.main(argv) == 0
    data = json.loads(out.read_text())
    assert data["parameters"]["variants"] == list(bench.variants(load_trace(path)))
    assert len(data["natives"]) == 8
    for label in ("default", "lip"):
        cells = data["candidates"][label]["cells"]
        assert len(cells) == 8 and all(0.0 <= c["block_hit_rate"] <= 1.0 for c in cells)
    lip = data["candidates"]["lip"]
    assert lip["params"] == {"experts": ["lip"]}
    assert lip["missing_the_bar"] == sum(c["points"] < -0.5 for c in lip["cells"])


def test_bad_input_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.parse(["--trace", str(tmp_path / "absent.jsonl")])
    assert "no such file" in capsys.readouterr().err
    path = write_trace(
        generate(WorkloadSpec(seed=5, num_sessions=60)).requests, tmp_path / "t.jsonl"
    )
    with pytest.raises(SystemExit):
        bench.parse(["--trace", str(path), "--capacities", "0"])
    assert "expected shares in (0, 1]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse(["--trace", str(path), "--candidate", 'x={"margins": 0.01}'])
    assert "--candidate x:" in capsys.readouterr().err


def test_a_trace_that_is_not_one_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not a trace\n")
    with pytest.raises(SystemExit, match="--trace .*bad.jsonl"):
        bench.main(["--trace", str(bad), "--out", str(tmp_path / "out.json")])
    assert not (tmp_path / "out.json").exists()
