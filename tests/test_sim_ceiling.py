"""The admission ceiling (`bench.sim.ceiling`, `bench.admission_ceiling`): `lru` behind an oracle
that stores only the blocks that come back within a horizon."""

from __future__ import annotations

import json
import math

import pytest

from bench.sim.ceiling import admission_ceiling, next_uses
from hkv.errors import HkvError
from hkv.policies import make_policy
from hkv.sim import Trace, replay
from hkv.sim.trace import Request


def _trace(requests: list[list[int]]) -> Trace:
    return Trace(
        tuple(Request(float(i), 16 * len(ids), 1, tuple(ids)) for i, ids in enumerate(requests)),
        block_tokens=16,
    )


def test_next_uses_name_the_next_reference_in_a_later_request():
    future = [[1, 2], [2, 3], [1]]
    never = math.inf
    assert next_uses(future) == [(0, {1: 4, 2: 2}), (2, {2: never, 3: never}), (4, {1: never})]


def test_one_off_blocks_are_never_stored_so_the_shared_prefix_survives():
    """A prefix revisited between one-off requests: lru lets the one-offs push it out, the
    oracle never stores them, so every revisit after the first hits in full."""
    shared = [1, 2]
    requests = []
    for turn in range(6):
        requests += [shared, [100 + 3 * turn, 101 + 3 * turn, 102 + 3 * turn]]
    trace = _trace(requests)
    lru = replay(trace, make_policy("lru", 4), store="per_request")
    ceiling = admission_ceiling(trace, 4, factors=(1.0, math.inf))
    assert ceiling["by_horizon"]["inf"] == 2 * 5 / trace.num_block_refs  # 5 revisits x 2 blocks
    assert ceiling["block_hit_rate"] == max(ceiling["by_horizon"].values())
    assert ceiling["block_hit_rate"] > lru.block_hit_rate
    assert set(ceiling["by_horizon"]) == {"1", "inf"}


def test_a_short_horizon_stores_only_what_comes_back_soon():
    """Horizon 1 x a 2-block tier: the prefix returns after 5 references, too late to store."""
    trace = _trace([[1, 2], [7, 8, 9], [1, 2]])
    short = admission_ceiling(trace, 2, factors=(1.0,))
    assert short["block_hit_rate"] == 0.0 and short["best_horizon_factor"] == "1"
    assert admission_ceiling(trace, 2, factors=(4.0,))["block_hit_rate"] == 2 / 7


@pytest.mark.parametrize(
    "capacity, factors, match",
    [(0, (1.0,), "capacity_blocks"), (True, (1.0,), "capacity_blocks"), (4, (), "factors"),
     (4, (-1.0,), "factors"), (4, ("x",), "factors")],
)  # fmt: skip
def test_bad_arguments_name_what_was_wrong(capacity, factors, match):
    with pytest.raises(HkvError, match=match):
        admission_ceiling(_trace([[1]]), capacity, factors)


def test_bench_writes_a_row_per_cell_and_compares_with_the_suite(tmp_path):
    """`bench.admission_ceiling` on CI-sized workloads: a row per workload and capacity, the
    ceiling at least `lru`'s (a horizon of "ever" only drops blocks that never return), and the
    suite's numbers beside it where a suite file has the same cell."""
    from bench import admission_ceiling as bench
    from bench import policy_suite

    suite = tmp_path / "suite.json"
    argv = ["--no-trace", "--size", "ci", "--capacities", "0.05", "--only", "bursty"]
    assert policy_suite.main([*argv, "--no-vllm", "--out", str(suite)]) == 0
    out = tmp_path / "ceiling.json"
    assert bench.main([*argv, "--suite", str(suite), "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["workloads"]["bursty"]
    cell = json.loads(suite.read_text())["workloads"]["bursty"]["cells"][0]
    (row,) = rows
    assert row["capacity_blocks"] == cell["capacity_blocks"]
    assert row["block_hit_rate"] >= cell["policies"]["hkv:lru"]["block_hit_rate"]
    assert row["belady_block_hit_rate"] == cell["belady_block_hit_rate"]
    assert row["hkv:auto"]["block_hit_rate"] == cell["policies"]["hkv:auto"]["block_hit_rate"]
    assert "inf" in row["by_horizon"] and len(row["by_horizon"]) == len(bench.FACTORS)
