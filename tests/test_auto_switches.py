"""`bench.auto_switches`: its replay is hkv's per-request replay, and each switch's window."""

from __future__ import annotations

import json
from itertools import pairwise
from types import SimpleNamespace

import pytest

from bench import auto_switches as bench
from hkv.policies import make_policy
from hkv.sim.replay import replay
from hkv.sim.suite import capacity_for
from hkv.sim.suite_workloads import generated_workloads


@pytest.fixture(scope="module")
def zipf():
    return generated_workloads("ci", 0)["zipf_sessions_a1"]


def test_its_replay_hits_what_the_per_request_replay_hits_and_switches_as_often(zipf):
    capacity = capacity_for(zipf, 0.05)
    cell = bench.follow(zipf, capacity)
    policy = make_policy("auto", capacity)
    expected = replay(zipf, policy, store="per_request")
    assert cell["block_hit_rate"] == expected.block_hit_rate
    assert len(cell["switches"]) == policy.switches > 0
    for before, after in pairwise(cell["switches"]):
        assert before["joined"] == after["left"] and before["request"] < after["request"]
    assert cell["gained"] == sum(s["tier_hits"] - s["left_hits"] for s in cell["switches"])


def test_a_window_runs_to_the_next_switch_or_its_references_and_sums_each_side():
    scored = [  # (leader before, leader after, each expert's hits, references)
        (0, 0, [5, 1], 10),
        (0, 1, [2, 6], 10),  # a switch to expert 1: the window starts after it
        (1, 1, [3, 4], 10),
        (1, 1, [1, 2], 10),
        (1, 0, [9, 1], 10),  # the next switch ends the window, its request counted
        (0, 0, [7, 7], 10),
        (0, 0, [7, 7], 10),
    ]
    policy = SimpleNamespace(scored=scored, experts=("lip", "lru"))
    tier = [4, 2, 3, 2, 1, 6, 6]
    rows = bench._windows(policy, tier, limit=100)
    assert rows[0] == {"request": 1, "left": "lip", "joined": "lru", "refs": 30,
                       "tier_hits": 3 + 2 + 1, "left_hits": 3 + 1 + 9,
                       "joined_hits": 4 + 2 + 1}  # fmt: skip
    assert rows[1]["refs"] == 20 and rows[1]["left_hits"] == 14  # to the end of the requests
    capped = bench._windows(policy, tier, limit=15)  # two tier-sizes of references reached
    assert capped[0]["refs"] == 20 and capped[0]["tier_hits"] == 5
    at = [0, 2, 3, 5, 6, 8, 9]  # the requests' places in the trace (one unscored: no blocks)
    assert [r["request"] for r in bench._windows(policy, tier, 100, at)] == [2, 6]


def test_a_sampled_tier_is_refused_with_what_to_do_instead(zipf):
    with pytest.raises(ValueError, match="above auto's sample_above .* follow a smaller tier"):
        bench.follow(zipf, 10_000)


def test_the_command_writes_each_cell_and_refuses_unknown_workloads(tmp_path, capsys):
    out = tmp_path / "switches.json"
    argv = ["--no-trace", "--workloads", "bursty", "--capacities", "0.1", "--workers", "1",
            "--out", str(out)]  # fmt: skip
    assert bench.main(argv) == 0
    cells = json.loads(out.read_text())["cells"]
    assert [(c["source"], c["workload"], c["capacity_frac"]) for c in cells] == [
        ("suite", "bursty", 0.1)
    ]
    assert "switches, gained" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main(["--no-trace", "--workloads", "nope", "--out", str(out)])
    assert "--workloads nope: unknown; valid: anchor_round_robin" in capsys.readouterr().err
