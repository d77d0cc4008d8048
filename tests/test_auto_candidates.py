"""`bench.auto_candidates`: the bar it judges `auto`'s candidates by, on hand-made cells."""

from __future__ import annotations

import pytest

from bench import auto_candidates as bench


def cell(best: float, lru: float, net: bool = True) -> dict:
    key = "net_s_saved" if net else "recompute_s_saved"
    return {
        "capacity_frac": 0.01,
        "best_competitor_block_hit_rate": best,
        "policies": {"vllm:lru": {"block_hit_rate": lru, key: 1.0},
                     "peer:evoke": {"block_hit_rate": best, key: 3.0}},
    }  # fmt: skip


def row(c: dict, rate: float) -> dict:
    ours = {"block_hit_rate": rate, "net_s_saved": 2.0, "recompute_s_saved": 2.5}
    return {"block_hit_rate": rate, **bench._competitor_row(c, ours)}


def test_the_bar_is_half_a_point_behind_the_best_or_below_lru_counted_once():
    rows = [
        row(cell(0.30, 0.20), 0.298),  # 0.2 points behind: fine
        row(cell(0.30, 0.20), 0.290),  # a point behind
        row(cell(0.30, 0.31), 0.305),  # below lru (lru led the peers here)
        row(cell(0.30, 0.31), 0.200),  # both: one cell
    ]
    judged = bench.judge(rows)
    assert judged["cells"] == 4 and judged["missing_the_bar"] == 3
    assert judged["behind_best_by_over_half_a_point"] == 2 and judged["below_lru"] == 2
    assert judged["seconds"] == "net_s_saved" and judged["seconds_saved"] == 8.0
    assert judged["best_competitor_seconds_saved"] == 12.0


def test_seconds_are_compared_gross_where_the_file_keeps_no_loads():
    assert row(cell(0.3, 0.2, net=False), 0.3)["our_s"] == 2.5  # the held-out file's rows


def test_a_candidate_must_be_json():
    assert bench.parse(["--candidate", 'x={"margin": 0.01}']).candidates["x"] == {"margin": 0.01}
    with pytest.raises(SystemExit):
        bench.parse(["--candidate", "x={margin"])


def test_an_extra_expert_is_offered_to_candidates_not_added_to_the_default():
    from hkv.policies import make_policy
    from hkv.policies.auto import DEFAULT_EXPERTS
    from hkv.policies.shadow import EXPERTS

    assert "bip" not in EXPERTS
    try:
        bench._register(["bip"])
        assert make_policy("auto", 100).experts == DEFAULT_EXPERTS  # bip not among them
        assert "bip" in make_policy("auto", 100, experts=[*DEFAULT_EXPERTS, "bip"]).experts
    finally:
        EXPERTS.pop("bip", None)


def test_variants_add_other_skews_and_tier_sizes_to_the_two_tier_cells():
    args = bench.parse(["--variants"])
    assert args.variants and not bench.parse([]).variants
    cells = set(bench.VARIANT_CELLS)
    assert len(cells) == 12 and not cells & set(bench.ANCHOR_CELLS)


def test_a_wave_waits_for_its_earlier_requests_first_come_first_served():
    from bench.sim.two_tier import wave_waits

    assert wave_waits([1.0, 2.0, 3.0, 4.0, 5.0], [0, 0, 0, 1, 1]) == [1.0, 3.0, 6.0, 4.0, 9.0]
    assert wave_waits([], []) == []


def test_the_same_prefill_saved_first_in_its_wave_saves_more_waiting():
    from bench.sim.two_tier import prefill_frac, ttft_frac
    from hkv.cost import CostModel

    cost, prompt, waves = CostModel.default(), [4096, 4096], [0, 0]
    first, last = [4095, 0], [0, 4095]  # the first request cached, or the last
    assert prefill_frac(first, prompt, cost) == pytest.approx(prefill_frac(last, prompt, cost))
    # both wait for the first's prefill: caching it spares two waits, caching the last one
    assert ttft_frac(first, prompt, waves, cost) < ttft_frac(last, prompt, waves, cost) < 1.0
    assert ttft_frac([0, 0], prompt, waves, cost) == 1.0


def test_the_model_says_when_the_cpu_tier_first_evicted_and_what_was_cached_before():
    from bench.sim.two_tier import predict
    from hkv.sim.anchor import TurnRequest
    from hkv.sim.trace import Request

    ids = [range(0, 4), range(0, 6), range(10, 14), range(20, 24), range(0, 6)]
    requests = [Request(0.0, 16 * len(r), 1, tuple(r)) for r in ids]
    turns = [TurnRequest(i, i, 0, int(i > 0), 16 * len(r), []) for i, r in enumerate(ids)]
    # a CPU tier of 8 blocks behind a GPU cache of 1: 4, 6, then 10 distinct blocks to store
    row = predict("lru", 8, 1, requests, turns)
    assert row["filled_at"] == 2 and row["evictions"] > 0
    # before it, request 1 found blocks 0-3 in the CPU tier, request 0 nothing
    assert row["cached_before_fill"] == pytest.approx(4 * 16 / (16 * (4 + 6)))
    roomy = predict("lru", 64, 1, requests, turns)
    assert roomy["filled_at"] is None and roomy["evictions"] == 0


def test_seeds_are_judged_each_against_lru_at_the_same_seed():
    def two(seed: int, policy: str, prefill: float, ttft: float) -> dict:
        return {"popularity": 1.0, "cpu_gib": 8.0, "seed": seed, "policy": policy,
                "prefill_frac": prefill, "ttft_frac": ttft}  # fmt: skip

    lru = [two(0, "lru", 0.5, 0.5), two(1, "lru", 0.4, 0.4)]
    auto = [two(0, "auto", 0.45, 0.55), two(1, "auto", 0.44, 0.36)]
    bip = [two(0, "bip", 0.5, 0.5), two(1, "bip", 0.4, 0.4)]  # beside lru: not the yardstick
    entry, _ = bench.seed_spread(auto + lru + bip, bip + lru)
    assert entry["policy"] == "auto" and entry["seeds"] == 2
    assert entry["prefill_frac"]["mean_pct"] == pytest.approx(0.0)  # -10 % and +10 %
    assert entry["prefill_frac"]["worst_pct"] == pytest.approx(10.0)
    assert entry["ttft_frac"]["worst_pct"] == pytest.approx(10.0)
    assert entry["ttft_frac"]["above_lru"] == 1 and entry["prefill_frac"]["above_lru"] == 1


def test_seeds_default_to_the_engines_alone_and_must_be_positive():
    assert bench.parse([]).seeds == 1 and bench.parse(["--seeds", "4"]).seeds == 4
    with pytest.raises(SystemExit):
        bench.parse(["--seeds", "0"])


def test_seed_from_draws_other_seeds_and_the_summary_reads_the_first_of_them():
    args = bench.parse(["--seeds", "2", "--seed-from", "6"])
    assert (args.seeds, args.seed_from) == (2, 6) and bench.parse([]).seed_from == 0
    with pytest.raises(SystemExit):
        bench.parse(["--seed-from", "-1"])

    class Pool:  # the jobs as the process pool would get them
        @staticmethod
        def map(fn, jobs):
            return [
                {"popularity": j[3], "cpu_gib": j[4], "seed": j[5], "policy": j[1]} for j in jobs
            ]

    rows = bench.two_tier_rows(Pool, args, "default", {})
    assert {r["seed"] for r in rows} == {6, 7}
    assert len(rows) == 2 * 3 * len(bench.ANCHOR_CELLS)  # auto, lru and bip beside the default
    judged = {"cells": 1, "missing_the_bar": 0}
    lines = [{**r, "prefill_frac": 0.5, "ttft_frac": 0.4} for r in rows]
    line = bench.summary_line("x", {"two_tier": lines, "suite": judged, "heldout": judged})
    assert line.startswith("x: prefill/TTFT left 8GiB:50.0/40.0%")  # seed 6's rows, not none
