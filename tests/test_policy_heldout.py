"""`bench.policy_heldout`: the suite's generated workloads at unseen seeds, scored as the suite
scores them and ranked by `hkv.report.suite.ranking`."""

from __future__ import annotations

import json

import pytest

from bench import policy_heldout
from hkv.report import suite as policy_suite
from hkv.sim.suite import SIM_NATIVES
from hkv.sim.suite_workloads import generated_workloads


@pytest.mark.slow
def test_unseen_seeds_are_scored_like_the_suite_and_ranked(tmp_path):
    out = tmp_path / "heldout.json"
    argv = ["--seeds", "3", "--size", "ci", "--no-vllm", "--capacities", "0.05", "--jobs", "1"]
    assert policy_heldout.main([*argv, "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert list(saved)[:5] == ["generated_by", "date_utc", "machine", "versions", "parameters"]
    assert saved["competitors"] == list(SIM_NATIVES)  # no peers without vLLM
    names = {f"{name} seed 3" for name in generated_workloads("ci", 3)}
    assert set(saved["workloads"]) == names
    for _, cell in policy_suite.cells(saved):
        rows = cell["policies"]
        best = max(rows[c]["block_hit_rate"] for c in saved["competitors"])
        assert cell["best_competitor_block_hit_rate"] == pytest.approx(best, abs=1e-6)
        assert rows["hkv:auto"]["regret_points"] == pytest.approx(
            100 * (best - rows["hkv:auto"]["block_hit_rate"]), abs=1e-3
        )
        # the simulator's lru is the model of vLLM's: one policy, two labels, one number
        assert rows["hkv:lru"]["block_hit_rate"] == rows["vllm:lru"]["block_hit_rate"]
    ranked = saved["ranking"]
    assert ranked == policy_suite.ranking(saved)
    assert {row["policy"] for row in ranked} >= {"hkv:auto", "vllm:lru", "vllm:lru+st2"}
    assert next(r for r in ranked if r["policy"] == "vllm:lru")["cells_below_lru"] == 0


@pytest.mark.parametrize(
    ("argv", "flag"), [(["--seeds", "0"], "--seeds"), (["--jobs", "0"], "--jobs")]
)
def test_the_suite_own_seed_and_no_workers_are_refused(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        policy_heldout.parse(argv)
    assert exit_.value.code == 2
    assert flag in capsys.readouterr().err
