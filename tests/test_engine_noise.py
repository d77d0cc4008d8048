"""Seeing policies through an engine's run-to-run noise: the host probe beside the engine
(`bench.vllm_gpu.probe`) and the two readings of folded engine files that use it or pool
engines (`hkv.report.engine_noise`). No GPU, no vLLM."""

from __future__ import annotations

import math
import random

import pytest

from bench.vllm_gpu import probe
from hkv.report import engine_noise


def test_idle_rate_counts_chunks_a_second_and_around_brackets_the_run():
    rate = probe.idle_rate(0.05)
    assert 10 < rate < 1e6  # chunks a second (about a thousand)
    calls = []
    out, (before, after) = probe.around(lambda: calls.append("run") or "done", seconds=0.02)
    assert out == "done" and calls == ["run"] and before > 0 and after > 0
    out, rates = probe.around(lambda: "done", enabled=False)
    assert out == "done" and rates == (None, None)  # off: no time spent


def test_steal_is_read_from_proc_stat_and_missing_is_none(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 5 100 0 0 0 250 0 0\ncpu0 1 2 3\n")
    assert probe.steal_s(stat) == pytest.approx(250 / probe.os.sysconf("SC_CLK_TCK"))
    assert probe.steal_s(tmp_path / "none") is None
    stat.write_text("intr 1 2 3\n")
    assert probe.steal_s(stat) is None
    first = probe.process_cpu_s()
    sum(i * i for i in range(200_000))
    assert probe.process_cpu_s() > first


def _run(policy, wall, rate=None, stored=100, loaded=50, ttft=None, policy_s=1.0, cell=(8, 1)):
    return {"policy": policy, "cpu_gib": cell[0], "popularity": cell[1], "variant": "text",
            "wall_s": wall, "ttft_mean_s": ttft or wall / 100, "host_rate": rate,
            "stored_blocks": stored, "loaded_blocks": loaded, "policy_s": policy_s}  # fmt: skip


def test_speed_adjusted_finds_the_ratio_the_host_hid():
    draw = random.Random(3)
    runs = []
    for _ in range(8):  # the host's speed swings by a third; auto is truly 2 % slower
        for policy, truth in (("lru", 1.0), ("hkv_auto", 1.02)):
            rate = draw.uniform(750, 1000)
            wall = 12.0 * truth * (1000 / rate) ** 0.8 * math.exp(draw.gauss(0, 0.002))
            runs.append(_run(policy, wall, rate))
    fit = engine_noise.speed_adjusted({"runs": runs}, (8, 1))
    assert fit["ratio"] == pytest.approx(1.02, abs=0.005)
    assert fit["elasticity"] == pytest.approx(0.8, abs=0.05)
    assert fit["r"] < -0.9 and fit["se"] < 0.005 and fit["runs"] == 16
    assert fit["rate_gap"] == pytest.approx(1.0, abs=0.1)  # the host's speed: the policy's not
    runs[0]["host_rate"] = None  # a run with no probe: no fit
    assert engine_noise.speed_adjusted({"runs": runs}, (8, 1)) is None
    assert engine_noise.speed_adjusted({"runs": runs[1:3]}, (8, 1)) is None  # too few runs


def test_pooled_keeps_engines_that_decided_as_most_did_and_bounds_the_mean():
    files = []
    for i, change in enumerate((1.04, 0.97, 1.01, 1.02)):
        runs = [_run("lru", 10.0), _run("lru", 10.2),
                _run("hkv_auto", 10.0 * change), _run("hkv_auto", 10.2 * change)]  # fmt: skip
        files.append((f"e{i}", {"runs": runs, "machine": {"gpu_name": "H"}}))
    odd = [_run("lru", 10.0), _run("hkv_auto", 20.0, stored=99)]  # decided otherwise
    out = engine_noise.pooled([("odd", {"runs": odd}), *files], (8, 1))
    assert out["left_out"] == 1 and [e["file"] for e in out["engines"]] == ["e0", "e1", "e2", "e3"]
    wall = out["wall"]
    geo = math.exp(sum(map(math.log, (1.04, 0.97, 1.01, 1.02))) / 4)
    assert wall["mean"] == pytest.approx(geo) and wall["above_base"] == 3
    assert 0.97 <= wall["low"] <= wall["mean"] <= wall["high"] <= 1.04
    assert engine_noise.pooled(files, (12, 1)) is None  # no engine ran that cell
    assert engine_noise.pooled(files, (8, 1)) == engine_noise.pooled(files, (8, 1))  # seeded
    later = engine_noise.pooled([*files, ("odd", {"runs": odd})], (8, 1))  # the latest, alone
    assert later["left_out"] == 1 and len(later["engines"]) == 4
    pair = [("a", {"runs": odd}), ("b", {"runs": odd}), *files[:2]]  # two and two: the later
    assert [e["file"] for e in engine_noise.pooled(pair, (8, 1))["engines"]] == ["e0", "e1"]


def test_outcomes_group_the_engines_by_what_auto_decided_and_where_it_switched():
    def engine(change, stored, switched):
        mine = _run("hkv_auto", 10.0 * change, stored=stored, policy_s=2.0)
        mine["policy_leaders"] = ["lip", [73, switched, 0.01]] if switched else ["lip"]
        return {"runs": [_run("lru", 10.0), mine]}

    files = [("a", engine(1.02, 100, "lru")), ("b", engine(0.96, 90, "cost_aware")),
             ("c", engine(1.04, 100, "lru")), ("d", engine(0.98, 90, "cost_aware")),
             ("e", engine(1.10, 80, None))]  # fmt: skip
    got = engine_noise.outcomes(files, (8, 1))
    assert [(g["decided"], g["engines"], g["files"]) for g in got] == [
        ((90, 50), 2, ["b", "d"]),
        ((100, 50), 2, ["a", "c"]),
        ((80, 50), 1, ["e"]),
    ]  # two and two: the later first, as `pooled` keeps it
    assert got[0]["switched_to"] == {"cost_aware": 2} and got[2]["switched_to"] == {None: 1}
    assert got[0]["wall"] == pytest.approx(math.sqrt(0.96 * 0.98))
    assert got[1]["policy_s"] == pytest.approx(2.0) and got[1]["ttft"] == pytest.approx(
        1.03, abs=0.001
    )
    kept = engine_noise.pooled(files, (8, 1))["engines"]
    assert [e["file"] for e in kept] == got[0]["files"]  # the group `pooled` keeps comes first
    assert engine_noise.outcomes(files, (12, 1)) == []  # no engine ran that cell


def test_wave_changes_average_one_outcomes_engines_wave_by_wave():
    def run(policy, ttft, cached, stored=100):
        one = _run(policy, 10.0, stored=stored)
        one["by_wave"] = {"ttft_s": ttft, "cached_tokens": cached}
        return one

    a = {
        "runs": [
            run("lru", [1.0, 2.0], [0, 50]),
            run("lru", [1.2, 2.2], [0, 50]),
            run("hkv_auto", [1.0, 2.5], [0, 40]),
            run("hkv_auto", [1.0, 2.9], [0, 40]),
        ]
    }
    b = {"runs": [run("lru", [1.0, 2.0], [0, 50]), run("hkv_auto", [1.1, 2.1], [0, 40])]}
    other = {"runs": [run("lru", [1.0, 2.0], [0, 50]), run("hkv_auto", [9, 9], [0, 0], 90)]}
    old = {"runs": [_run("lru", 10.0), _run("hkv_auto", 10.0)]}  # no waves logged: left out
    got = engine_noise.wave_changes([("a", a), ("x", other), ("b", b), ("o", old)], (8, 1),
                                    (100, 50))  # fmt: skip
    assert got["engines"] == ["a", "b"]
    # a: medians 1.1 -> 1.0 and 2.1 -> 2.7; b: +0.1 and +0.1; the mean of the two engines
    assert got["ttft_s"] == pytest.approx([0.0, 0.35])
    assert got["cached_tokens"] == [0, -10]
    assert engine_noise.wave_changes([("o", old)], (8, 1), (100, 50)) is None


def test_each_timed_run_gets_the_idle_rates_around_it(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from bench.vllm_gpu import engine

    rates = iter([100.0, 400.0, 50.0, 200.0, 10.0, 40.0, 30.0, 30.0])

    def fake_run(llm, manager, name, workload, counters, result):
        return {"summary": {"wall_s": 1.0}}

    monkeypatch.setattr(engine, "run_policy", fake_run)
    monkeypatch.setattr(engine.probe, "idle_rate", lambda seconds=0.5: next(rates))
    args = SimpleNamespace(repeats=2, cpu_gib=8.0, variant="text", out=tmp_path / "r.json")
    result = {"policies": ["lru", "hkv_auto"], "order": "rotate", "repeats": [],
              "host_probe": True}  # fmt: skip
    engine.timed_rounds(args, (None, None, None), None, result)
    got = [(r["policy"], r["summary"]["host_rate_before"], r["summary"]["host_rate"])
           for r in result["repeats"]]  # fmt: skip
    assert got == [("lru", 100.0, 200.0), ("hkv_auto", 50.0, 100.0),
                   ("hkv_auto", 10.0, 20.0), ("lru", 30.0, 30.0)]  # fmt: skip
    result |= {"repeats": [], "host_probe": False}
    engine.timed_rounds(args, (None, None, None), None, result)  # off: no rates
    assert {r["summary"]["host_rate"] for r in result["repeats"]} == {None}


def test_follows_wall_reads_each_policys_runs_about_its_own_mean():
    runs = []
    for policy, level in (("lru", 10.0), ("hkv_auto", 20.0)):  # levels apart: not counted
        for speed in (1.0, 1.2, 0.9, 1.1):
            run = _run(policy, level * speed, rate=1000 / speed)
            runs.append(run | {"cpu_s": 0.8 * run["wall_s"], "odd": 1.0 + (speed == 1.2)})
    data = {"runs": runs}
    assert engine_noise.follows_wall(data, (8, 1), "cpu_s") == pytest.approx(1.0)
    assert engine_noise.follows_wall(data, (8, 1), "host_rate") == pytest.approx(-1.0)
    assert abs(engine_noise.follows_wall(data, (8, 1), "odd")) < 1
    runs[0]["cpu_s"] = None
    assert engine_noise.follows_wall(data, (8, 1), "cpu_s") is None  # a run without it
    assert engine_noise.follows_wall(data, (12, 1), "cpu_s") is None  # no such cell


def test_pooled_frames_read_a_folder_of_engine_files(tmp_path):
    import json

    for i, change in enumerate((1.04, 0.98)):
        runs = [_run("lru", 10.0), _run("hkv_auto", 10.0 * change), _run("hkv_lru", 9.9)]
        data = {"date_utc": f"2026-12-0{i + 1}", "runs": runs}
        (tmp_path / f"vllm_h200_time_e{i}.json").write_text(json.dumps(data))
    (tmp_path / "other.json").write_text("{}")  # not an engine file: not read
    frames = engine_noise.pooled_frames(tmp_path)
    assert [f.caption.split(" against")[0] for f in frames] == ["hkv_auto", "hkv_lru"]
    assert "2 engine files, vllm_h200_time_e0.json to vllm_h200_time_e1.json" in frames[0].caption
    table = frames[0].data
    assert list(table.index) == ["skewed, 8 GiB"] and table.loc["skewed, 8 GiB", "engines"] == 2
    assert engine_noise.pooled_frames(tmp_path, ["hkv_bip"]) == []  # never ran: no table
    split = engine_noise.outcomes_frame(tmp_path, (8, 1))  # one outcome: both engines in it
    assert "(8, 1)" in split.caption and "files" not in split.data.columns
    assert split.data["engines"].tolist() == [2]
    assert split.data.loc[0, "wall"] == pytest.approx(math.sqrt(1.04 * 0.98))


def test_another_draw_of_the_workload_stays_out_of_the_engines_cell():
    from hkv.report import bench_vllm_auto

    own = [_run("lru", 10.0), _run("hkv_auto", 9.0)]
    drawn = [{**r, "seed": 2} for r in (_run("lru", 10.0), _run("hkv_auto", 12.0))]
    data = {"runs": [{**r, "cached_frac": 0.5} for r in own + drawn], "machine": {}}
    assert [r["wall_s"] for r in engine_noise.cell_runs(data, (8, 1))] == [10.0, 9.0]
    assert [r["wall_s"] for r in engine_noise.cell_runs(data, (8, 1), seed=2)] == [10.0, 12.0]
    assert engine_noise.pooled([("e", data)], (8, 1))["wall"]["mean"] == pytest.approx(0.9)
    rows = {r["workload"]: r for r in bench_vllm_auto.time_rows(data) if r["policy"] != "lru"}
    assert rows["skewed (Zipf 1)"]["wall_vs_lru"] == pytest.approx(-0.1)
    assert rows["skewed (Zipf 1), seed 2"]["wall_vs_lru"] == pytest.approx(0.2)


def test_each_drawn_cell_is_set_beside_the_models_prediction_for_that_draw():
    runs = [
        {**r, "seed": 2} for r in (_run("lru", 10.0, ttft=0.2), _run("hkv_auto", 10.5, ttft=0.21))
    ]
    runs += [_run("lru", 10.0), _run("hkv_auto", 9.0)]  # the engines' own draw: not a drawn cell
    model_rows = [
        {"cpu_gib": 8, "popularity": 1, "seed": 2, "policy": "lru", "ttft_frac": 0.5,
         "prefill_frac": 0.4},
        {"cpu_gib": 8, "popularity": 1, "seed": 2, "policy": "auto", "ttft_frac": 0.52,
         "prefill_frac": 0.42},
    ]  # fmt: skip
    model = {"candidates": {"default": {"two_tier": model_rows}}}
    (row,) = engine_noise.drawn_against_model({"runs": runs}, model)
    assert row["seed"] == 2 and row["rounds"] == 1
    assert row["engine TTFT %"] == pytest.approx(5.0) and row["model TTFT %"] == pytest.approx(4.0)
    assert row["engine wall %"] == pytest.approx(5.0) and row["model prefill %"] == pytest.approx(
        5.0
    )
    assert engine_noise.drawn_against_model({"runs": runs[2:]}, model) == []


def test_each_candidate_over_the_draws_is_judged_against_lru_at_the_same_draw():
    def two(seed: int, gib: float, policy: str, ttft: float) -> dict:
        return {"popularity": 1.0, "cpu_gib": gib, "seed": seed, "policy": policy,
                "ttft_frac": ttft}  # fmt: skip

    lru = [two(6, 8.0, "lru", 0.5), two(7, 8.0, "lru", 0.4), two(6, 12.0, "lru", 0.2)]
    judged = {"suite": {"missing_the_bar": 1}, "heldout": {"missing_the_bar": 9}}
    shipped = [two(6, 8.0, "auto", 0.45), two(7, 8.0, "auto", 0.44), two(6, 12.0, "auto", 0.2)]
    held = [two(6, 8.0, "auto", 0.5), two(7, 8.0, "auto", 0.3), two(6, 12.0, "auto", 0.25)]
    model = {"candidates": {
        "default": {"two_tier": shipped + lru, **judged},  # lru beside the default only
        "held": {"two_tier": held, "suite": {"missing_the_bar": 22},
                 "heldout": {"missing_the_bar": 69}},
    }}  # fmt: skip
    first, second = engine_noise.candidates_over_draws(model)
    assert (first["candidate"], first["draws"], first["cells x draws"]) == ("default", "6 to 7", 3)
    assert first["mean TTFT %"] == pytest.approx((-10 + 10 + 0) / 3)
    assert first["worst TTFT %"] == pytest.approx(10.0) and first["over lru"] == 1
    assert first["worst at"] == "Zipf 1, 8 GiB, seed 7"
    assert second["worst TTFT %"] == pytest.approx(25.0) and second["over lru"] == 1
    assert second["worst at"] == "Zipf 1, 12 GiB, seed 6"
    assert (second["suite misses"], second["held-out misses"]) == (22, 69)
