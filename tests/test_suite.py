"""The policy suite (`hkv.sim.suite`, `hkv suite`, `bench.policy_suite`) on CI-sized generated
workloads: structure and sanity, never tuned numbers."""

from __future__ import annotations

import json
import os

import pytest

from hkv.blocks import BlockMeta, Tier
from hkv.cli import main
from hkv.cost import CostModel
from hkv.errors import HkvError
from hkv.policies import policy_names
from hkv.report import suite as report
from hkv.report.bench_results import load_result
from hkv.sim import Request, Trace, simulate, write_trace
from hkv.sim.suite import (
    FRACTIONS,
    NATIVES,
    YARDSTICK,
    capacity_for,
    price_hits,
    run_cell,
    run_suite,
    sim_runner,
    sim_runners,
    suite_table,
)
from hkv.sim.suite_workloads import generated_workloads
from hkv.sim.zipf_sessions import ZipfSessionSpec, generate_zipf_sessions

SHAPES = ("anchor_round_robin", "zipf_sessions_a1", "multimodal")


@pytest.fixture(scope="module")
def cost_model():
    return CostModel.default()


@pytest.fixture(scope="module")
def results(cost_model):
    traces = {name: t for name, t in generated_workloads("ci").items() if name in SHAPES}
    return traces, run_suite(traces, sim_runners(cost_model), cost_model)


def test_every_workload_runs_every_policy_at_the_capacities_asked(results):
    traces, out = results
    assert list(out["workloads"]) == list(SHAPES)
    expected = {f"hkv:{n}" for n in policy_names(online_only=True)} | {*NATIVES, YARDSTICK}
    for name, entry in out["workloads"].items():
        assert [c["capacity_frac"] for c in entry["cells"]] == list(FRACTIONS)
        for cell in entry["cells"]:
            assert cell["capacity_blocks"] == capacity_for(traces[name], cell["capacity_frac"])
            assert set(cell["policies"]) == expected
            for row in cell["policies"].values():
                assert 0.0 <= row["block_hit_rate"] <= 1.0
                assert row["recompute_s_saved"] >= 0.0


def test_regret_is_measured_from_the_best_competitor(results):
    for entry in results[1]["workloads"].values():
        for cell in entry["cells"]:
            rows = cell["policies"]
            assert rows[cell["best_competitor"]]["regret_points"] == 0
            assert all(rows[c]["regret_points"] >= 0 for c in NATIVES)
            best = cell["best_hkv"]
            assert cell["best_hkv_regret_points"] == rows[best]["regret_points"]
            hkv = [r for k, r in rows.items() if k.startswith("hkv:") and k != "hkv:random"]
            assert rows[best]["block_hit_rate"] == max(r["block_hit_rate"] for r in hkv)


def test_belady_is_at_least_every_online_policy_in_every_cell(results):
    for entry in results[1]["workloads"].values():
        for cell in entry["cells"]:
            rows = cell["policies"]
            opt = rows[YARDSTICK]["block_hit_rate"]
            assert all(r["block_hit_rate"] <= opt + 1e-12 for r in rows.values()), cell
            assert cell["belady_block_hit_rate"] == opt


def test_the_table_has_a_line_per_policy_and_the_regret(results):
    table = suite_table(results[1])
    assert "best hkv regret (pts)" in table
    assert table.count("hkv:lru ") == len(SHAPES)


def test_the_table_in_seconds_puts_the_best_hkv_against_the_best_competitor(results):
    table = suite_table(results[1], ("seconds", "hits"))
    assert table.count("hkv:lru ") == 2 * len(SHAPES)
    assert "net prefill seconds saved" in table and "block hit rate, %" in table
    competitors = results[1]["competitors"]
    for name, entry in results[1]["workloads"].items():
        one = suite_table({"competitors": competitors, "workloads": {name: entry}}, ("seconds",))
        last = one.splitlines()[-1].split()
        assert last[:6] == ["best", "hkv", "over", "best", "competitor", "(s)"]
        for cell, shown in zip(entry["cells"], last[6:], strict=True):
            saved = {k: r["net_s_saved"] for k, r in cell["policies"].items()}
            mine = max(v for k, v in saved.items() if k.startswith("hkv:") and k != "hkv:random")
            assert float(shown) == pytest.approx(
                mine - max(saved[k] for k in competitors), abs=0.006
            )


def test_hits_counted_elsewhere_are_priced_like_the_simulator(cost_model):
    trace = generate_zipf_sessions(ZipfSessionSpec(seed=3, num_sessions=5, num_requests=40))
    seen: set = set()
    num_hits = []
    for request in trace.requests:  # a tier holding everything: the longest seen prefix hits
        n = 0
        while n < len(request.hash_ids) and request.hash_ids[n] in seen:
            n += 1
        num_hits.append(n)
        seen.update(request.hash_ids)
    big = trace.distinct_blocks()
    sim = simulate(trace, ["lru"], big, cost_model=cost_model, store="per_request")[0]
    saved_s, load_s = price_hits(trace, num_hits, cost_model)
    assert sim.block_hits == sum(num_hits)
    assert saved_s == pytest.approx(sim.recompute_s_saved)
    assert load_s == pytest.approx(sim.load_s)


def test_seconds_saved_are_the_cost_models_recompute_less_load_of_each_hit(cost_model):
    """`net_s_saved`: per hit block, the cost model's prefill seconds at the block's position
    less its load from host RAM, for hits counted elsewhere (vLLM's) and in the simulator alike;
    no hits save nothing, more hits of the same blocks save more."""
    trace = Trace((Request(0.0, 3 * 512, 1, (1, 2, 3)), Request(1.0, 3 * 512, 1, (1, 2, 4))), 512)

    def counted(num_hits):  # a runner whose hits were counted outside hkv, as vLLM's are
        return lambda trace, capacity: {"block_hit_rate": sum(num_hits) / 6, "num_hits": num_hits}

    runners = {f"{n} hits": counted([0, n]) for n in (0, 1, 2)}
    rows = run_cell(trace, 4, runners | {"sim": sim_runner("lru", cost_model)}, cost_model)
    by_hand = 0.0
    for position in (0, 512):  # request 2 hits blocks 1 and 2, the first two of its prompt
        block = BlockMeta(512, position=position, tier=Tier.HOST)
        by_hand += cost_model.recompute_s(block) - cost_model.load_s(block, Tier.HOST)
    assert rows["0 hits"]["recompute_s_saved"] == rows["0 hits"]["net_s_saved"] == 0.0
    assert 0.0 < rows["1 hits"]["net_s_saved"] < rows["2 hits"]["net_s_saved"]
    assert rows["2 hits"]["net_s_saved"] == pytest.approx(by_hand, abs=1e-3)
    assert rows["sim"]["block_hit_rate"] == 2 / 6
    assert rows["sim"]["net_s_saved"] == rows["2 hits"]["net_s_saved"]
    sim = simulate(trace, ["lru"], 4, cost_model=cost_model, store="per_request")[0]
    assert sim.net_s_saved == pytest.approx(by_hand)
    failed = run_cell(trace, 4, {"x": lambda t, c: {"block_hit_rate": None}}, cost_model)
    assert failed["x"]["net_s_saved"] is None  # a failed runner's row has no price


def test_report_puts_seconds_saved_beside_hit_rates(results):
    out = results[1]
    lru = report.seconds_summary(out, "vllm:lru")
    assert lru["net_s_vs_lru"] == 1.0 and lru["cells_below_lru_s"] == 0
    belady = report.seconds_summary(out, "belady")
    assert belady["net_s_saved"] >= lru["net_s_saved"] > 0
    ranked = report.ranking_with_seconds(out)
    assert [row["policy"] for row in ranked] == [row["policy"] for row in report.ranking(out)]
    assert all(row["net_s_saved"] >= 0 for row in ranked)
    table = report.seconds_table(out, ["hkv:auto", "vllm:lru"])
    assert len(table) == len(SHAPES) * len(FRACTIONS)
    for row, (_, cell) in zip(table, report.cells(out), strict=True):
        best = cell["policies"][cell["best_competitor"]]
        assert row["best competitor net s"] == best["net_s_saved"]
        assert row["vllm:lru hit %"] == 100 * cell["policies"]["vllm:lru"]["block_hit_rate"]


def test_the_committed_suite_prices_every_row_with_its_cost_model():
    suite = load_result("policy_suite")
    cost = suite["parameters"]["cost_model"]
    assert (cost["model"], cost["profile"], cost["host_memory"]) == (
        "minimax-m2.5",
        "h200-default",
        "pinned",
    )
    assert report.priced_by(suite).startswith("minimax-m2.5 on the h200-default profile")
    for _, cell in report.cells(suite):
        for row in cell["policies"].values():
            assert row["net_s_saved"] == round(row["recompute_s_saved"] - row["load_s"], 3)


def test_zipf_sessions_are_seeded_and_skewed():
    a = generate_zipf_sessions(ZipfSessionSpec(seed=1, zipf_exponent=1.5, num_requests=400))
    assert a == generate_zipf_sessions(ZipfSessionSpec(seed=1, zipf_exponent=1.5, num_requests=400))
    flat = generate_zipf_sessions(ZipfSessionSpec(seed=1, zipf_exponent=0.0, num_requests=400))

    def top_share(trace):
        counts: dict = {}
        for r in trace.requests:
            counts[r.session] = counts.get(r.session, 0) + 1
        return max(counts.values()) / len(trace)

    assert top_share(a) > 3 * top_share(flat)
    with pytest.raises(HkvError, match="zipf_sessions.zipf_exponent"):
        ZipfSessionSpec(zipf_exponent=-1)


def test_cli_suite_json_is_one_object(tmp_path, capsys):
    trace = generate_zipf_sessions(ZipfSessionSpec(seed=2, num_sessions=10, num_requests=80))
    path = write_trace(trace.requests, tmp_path / "small.jsonl")
    code = main(["suite", "--trace", str(path), "--capacities", "0.05", "0.1", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"competitors", "workloads"}
    assert list(out["workloads"]) == ["small"]
    assert [c["capacity_frac"] for c in out["workloads"]["small"]["cells"]] == [0.05, 0.1]


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--capacities", "1.5"], "--capacities"),
        (["--seed", "-1"], "--seed"),
        (["--trace", "/no/such/trace.jsonl"], "--trace"),
    ],
)
def test_cli_suite_mistakes_are_one_line_and_exit_2(argv, flag, capsys):
    assert main(["suite", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err


@pytest.mark.slow
def test_bench_drives_vllm_natives_and_reports_missing_peers(tmp_path):
    pytest.importorskip("vllm")
    from bench import policy_suite
    from bench.peers import PEERS, peer_status

    assert set(peer_status()) == set(PEERS)
    out = tmp_path / "suite.json"
    argv = ["--size", "ci", "--no-trace", "--only", "zipf_sessions_a1", "--capacities", "0.1"]
    assert policy_suite.main([*argv, "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert list(saved)[:5] == ["generated_by", "date_utc", "machine", "versions", "parameters"]
    rows = saved["workloads"]["zipf_sessions_a1"]["cells"][0]["policies"]
    assert rows["vllm:lru"]["measured_in"].startswith("vllm")
    assert abs(rows["vllm:lru"]["sim_diff_points"]) < 1.0  # the simulator models vLLM's lru
    for label, why in peer_status().items():
        assert (label in rows) == (why is None)
        assert (label in saved["missing"]["peers"]) == (why is not None)


def test_shards_run_side_by_side_merge_into_one_suite(tmp_path):
    """`--merge`: shards of one suite (`--only`) joined, their commands kept; a workload in
    two shards is refused."""
    from bench import policy_suite

    base = ["--size", "ci", "--no-trace", "--no-vllm", "--capacities", "0.1"]
    shards = []
    for name in ("bursty", "multimodal"):
        shard = tmp_path / f"{name}.json"
        assert policy_suite.main([*base, "--only", name, "--out", str(shard)]) == 0
        shards.append(shard)
    out = tmp_path / "merged.json"
    assert policy_suite.main(["--merge", *map(str, shards), "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert list(merged["workloads"]) == ["bursty", "multimodal"]
    assert [s["generated_by"] for s in merged["shards"]] == [
        json.loads(s.read_text())["generated_by"] for s in shards
    ]
    assert list(merged)[:5] == ["generated_by", "date_utc", "machine", "versions", "parameters"]
    with pytest.raises(SystemExit, match="repeats"):
        policy_suite.main(["--merge", str(shards[0]), str(shards[0]), "--out", str(out)])


def test_replay_speed_bench_pairs_each_policy_with_lru_in_the_same_rounds(tmp_path):
    """`bench.replay_speed`: a row per policy and cell, the ratio to lru taken round by round
    (lru's own is 1), the slowest cell named, provenance with the CPU model; a missing trace is
    a one-line exit."""
    from bench import replay_speed

    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    out = tmp_path / "speed.json"
    argv = ["--no-trace", "--size", "ci", "--repeats", "2", "--capacities", "0.05"]
    policies = ["--policies", "predictive", "auto+experts=lean"]  # a name, or with hyperparameters
    assert replay_speed.main([*argv, *policies, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["machine"]["cpu_model"] and result["parameters"]["repeats"] == 2
    cells = result["cells"]
    assert {c["workload"] for c in cells} == set(generated_workloads("ci", 0))
    for cell in cells:
        assert set(cell["policies"]) == {"lru", "predictive", "auto+experts=lean"}
        lru = cell["policies"]["lru"]
        assert lru["vs_lru_median"] == 1.0 and lru["refs_per_s_best"] >= lru["refs_per_s_median"]
        assert cell["policies"]["predictive"]["refs_per_s_best"] > 0
    slowest = result["slowest_cell_refs_per_s"]["predictive"]
    assert slowest == min(c["policies"]["predictive"]["refs_per_s_best"] for c in cells)
    with pytest.raises(SystemExit, match="no such file"):
        replay_speed.main(["--trace", str(tmp_path / "absent.jsonl"), "--out", str(out)])
    if hasattr(os, "sched_getaffinity"):  # the bench pinned itself to one core, then let go
        assert os.sched_getaffinity(0) == before


def test_replay_benches_freeze_the_heap_while_they_time_and_let_it_go():
    """`bench.replay_speed.frozen_heap`: inside, what existed before is frozen (out of the
    collector's reach, as vLLM's engine freezes its heap after start-up); after, nothing is."""
    import gc

    from bench import replay_speed

    assert gc.get_freeze_count() == 0
    made = {"a": [1]}  # a tracked object made before
    with replay_speed.frozen_heap():
        assert gc.get_freeze_count() > 0 and gc.is_tracked(made)
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize(
    ("results_file", "seed", "field", "digits"),
    [("policy_suite", 0, "sim_block_hit_rate", None), ("policy_heldout", 9, "block_hit_rate", 6)],
)
def test_the_committed_suite_holds_what_auto_decides_now(
    results_file, seed, field, digits, cost_model
):
    """The committed suite's and held-out seeds' `auto` rows are what this code decides, cell
    for cell (the simulator's replay, a few seconds): a change to `auto`'s decisions fails here
    until those files are re-run (`bench.policy_suite`, `bench.policy_heldout`), so the docs'
    numbers never describe a build that no longer exists (the 2026-12-05 files outlived a change
    to what a switch owes by a day). The held-out file keeps rates to 6 decimals."""
    committed = load_result(results_file)
    rows = {(name, cell["capacity_frac"]): cell for name, cell in report.cells(committed)}
    suffix = f" seed {seed}" if seed else ""
    checked = 0
    for name, trace in generated_workloads("full", seed).items():
        for fraction in FRACTIONS:
            cell = rows[(name + suffix, fraction)]
            result = simulate(
                trace, ["auto"], capacity_for(trace, fraction), cost_model=cost_model,
                store="per_request",
            )[0]  # fmt: skip
            rate = result.block_hit_rate if digits is None else round(result.block_hit_rate, digits)
            assert rate == cell["policies"]["hkv:auto"][field], (name, fraction)
            checked += 1
    assert checked == 28


def test_a_capacity_fraction_that_is_no_share_is_one_error():
    trace = generated_workloads("ci", 0)["bursty"]
    for bad in (float("nan"), 0, -0.05, float("inf"), "0.05"):
        with pytest.raises(HkvError, match="capacity fraction: got"):
            capacity_for(trace, bad)
    assert capacity_for(trace, 1e-9) == 1
