"""`hkv.sim.two_level`, `hkv.sim.disk_plan` and `hkv simulate --disk-size / --recommend-disk`:
a CPU tier in front of hkv's disk tier, as vLLM's tiering runs them, on hand-built traces.

Blocks are 16 tokens; the cost model is MiniMax-M2.5 on the default profile with its disk slowed
so that the disk crossover (the shortest prefix that loads faster than it recomputes) is exactly
`CROSSOVER_BLOCKS` blocks: shorter prompts are refused by the cost admission, longer ones taken.
"""

from __future__ import annotations

import argparse
import io
import json
import random

import pytest

from hkv.blocks import BlockMeta, Tier
from hkv.cli.sim import add_simulate_parser
from hkv.cost import CostModel
from hkv.errors import HkvError
from hkv.policies import policy_names
from hkv.sim import Request, trace_from_requests, write_trace
from hkv.sim.disk_plan import ceiling_bytes, recommend_disk_bytes, with_disk_gbps
from hkv.sim.two_level import chunk_bytes, simulate_two_level

BLOCK = 16
CROSSOVER_BLOCKS = 3


def slow_disk_gbps(blocks: int, block_tokens: int = BLOCK) -> float:
    """The disk bandwidth that puts the crossover at `blocks` chunks: a chunk's load lies
    between the mean recompute of the first `blocks - 1` chunks and that of the first `blocks`
    (the mean grows with the prefix: deeper tokens attend to more)."""
    model = CostModel.default()

    def mean(m: int) -> float:
        chunks = (BlockMeta(block_tokens, position=i * block_tokens) for i in range(m))
        return sum(map(model.recompute_s, chunks)) / m

    load_s = (mean(blocks - 1) + mean(blocks)) / 2
    latency_s = model.profile.links["disk"].latency_s
    return chunk_bytes(model, block_tokens) / ((load_s - latency_s) * 1e9)


GBPS = slow_disk_gbps(CROSSOVER_BLOCKS)
MODEL = with_disk_gbps(CostModel.default(), GBPS)
CHUNK = chunk_bytes(MODEL, BLOCK)


def trace(*prompts: tuple[int, ...]):
    """One request per prompt of block ids, each block a full 16 tokens."""
    requests = [Request(float(i), len(ids) * BLOCK, 1, ids) for i, ids in enumerate(prompts)]
    return trace_from_requests(requests, block_tokens=BLOCK)


def run(*prompts, cpu=8, disk_blocks=100, admission="cost", disk_policy="lru", cpu_policy="lru"):
    return simulate_two_level(
        trace(*prompts),
        cpu_policy,
        cpu,
        disk_blocks * CHUNK,
        cost_model=MODEL,
        disk_policy=disk_policy,
        admission=admission,
    )


def test_the_slowed_disk_puts_the_crossover_at_three_blocks():
    assert MODEL.disk_crossover_tokens(BLOCK) == CROSSOVER_BLOCKS * BLOCK


def test_write_through_offers_every_block_stored_in_the_cpu_tier_to_the_disk():
    result = run((1, 2, 3, 4))
    assert (result.cpu_hits, result.disk_hits) == (0, 0)
    assert result.cpu_inserts == result.disk_blocks_written == 4
    assert result.disk_bytes_written == result.disk_peak_bytes == 4 * CHUNK


def test_a_disk_hit_continues_the_cpu_prefix_and_is_promoted_not_written_again():
    # CPU holds 4: (5..8) pushes (1..4) out of it; on disk both stay. Then (1, 2, 3, 4) comes back
    # from disk (promoted into the CPU tier); the last request finds (1, 2, 3) in the CPU tier.
    result = run((1, 2, 3, 4), (5, 6, 7, 8), (1, 2, 3, 4), (1, 2, 3, 9), cpu=4)
    assert result.disk_hits == 4
    assert result.cpu_hits == 3
    assert result.disk_blocks_written == 9  # 1..8 once, then 9; promotions are not rewritten
    assert result.promotions_failed == 0
    # (4, 5) takes the CPU tier's lru victim, 3: vLLM gives a chain up from its tail
    mixed = run((1, 2, 3), (4, 5), (1, 2, 3, 6), cpu=4)
    assert (mixed.cpu_hits, mixed.disk_hits) == (2, 1)


def test_a_promotion_that_does_not_fit_the_cpu_tier_is_a_miss():
    # (1, 2, 3, 7) has four blocks to store in a CPU tier of three: vLLM's store fails, nothing
    # is promoted, and the disk hits are misses
    result = run((1, 2, 3), (4, 5, 6), (1, 2, 3, 7), cpu=3)
    assert result.disk_hits == 0 and result.promotions_failed == 3
    assert result.cpu_store_failed == 4


def test_cost_admission_refuses_prompts_shorter_than_the_crossover():
    result = run((1, 2), (3, 4, 5), (6, 7, 8, 9))
    assert result.crossover_tokens == CROSSOVER_BLOCKS * BLOCK
    assert result.disk_refused == 2
    assert result.disk_blocks_written == 7
    everything = run((1, 2), (3, 4, 5), (6, 7, 8, 9), admission="all")
    assert everything.disk_refused == 0 and everything.disk_blocks_written == 9


def test_a_short_disk_hit_costs_time_and_a_long_one_saves_it():
    # CPU tier of 3: each prompt is pushed out by the next, so the repeats hit on disk only
    short = run((1, 2), (10, 11, 12), (1, 2), cpu=3, admission="all")
    assert short.disk_hits == 2 and short.disk_s_saved < 0 < short.disk_load_s
    long = run((1, 2, 3), (10, 11, 12), (1, 2, 3), cpu=3, admission="all")
    assert long.disk_hits == 3 and long.disk_s_saved > 0
    chunks = [BlockMeta(BLOCK, position=i * BLOCK) for i in range(3)]
    recompute_s = sum(map(MODEL.recompute_s, chunks))
    load_s = sum(MODEL.load_s(chunk, Tier.DISK) for chunk in chunks)
    assert long.disk_s_saved == pytest.approx(recompute_s - load_s)
    assert long.prefill_s == pytest.approx(2 * recompute_s + sum(map(MODEL.recompute_s, chunks)))


def random_prompts(seed: int, num: int = 60) -> list[tuple[int, ...]]:
    """Prompts of 1-6 blocks over a few shared prefixes, so that blocks return."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(num):
        root = rng.randrange(8) * 100
        prompts.append(tuple(root + i for i in range(rng.randint(1, 6))))
    return prompts


@pytest.mark.parametrize("disk_policy", policy_names(online_only=True))
def test_disk_bytes_never_pass_the_bound_under_any_policy(disk_policy):
    result = run(*random_prompts(1), cpu=4, disk_blocks=5, disk_policy=disk_policy)
    assert result.disk_peak_bytes <= result.disk_bound_bytes == 5 * CHUNK
    assert result.disk_capacity_blocks == 5
    assert result.disk_bytes_written > result.disk_bound_bytes  # it had to evict to stay inside


def test_all_admission_writes_more_than_cost_admission():
    prompts = random_prompts(2)
    cost, everything = (run(*prompts, cpu=8, disk_blocks=6, admission=a) for a in ("cost", "all"))
    assert everything.disk_bytes_written > cost.disk_bytes_written > 0
    assert cost.disk_refused > 0 == everything.disk_refused


def test_a_request_with_more_new_chunks_than_the_disk_keeps_its_head():
    # as HkvDiskTier's store: the room is evicted in one call or not at all; when not, the free
    # slots take the head of the request and the tail is refused
    result = run((1, 2, 3), (4, 5, 6), cpu=3, disk_blocks=2)
    assert result.disk_blocks_written == 2 and result.disk_store_failed == 1 + 3
    assert result.disk_evictions == 0
    # with room for all but two, lru evicts 1 and 2: the head of (1, 2, 3) is gone, so 3 on
    # disk is no hit, and the next store evicts 3 and 4 for 1 and 2
    result = run((1, 2, 3), (4, 5, 6), (1, 2, 3), cpu=3, disk_blocks=4)
    assert result.disk_hits == 0 and result.disk_evictions == 4


def test_a_disk_smaller_than_one_chunk_holds_nothing():
    result = run((1, 2, 3), (4, 5, 6), (1, 2, 3), cpu=3, disk_blocks=0)
    assert result.disk_capacity_blocks == 0 and result.disk_blocks_written == 0
    assert result.disk_hits == 0 and result.disk_store_failed == 9  # (1, 2, 3) offered twice


def test_replay_rejects_bad_arguments():
    with pytest.raises(HkvError, match="disk policy.*belady"):
        run((1,), disk_policy="belady")
    with pytest.raises(HkvError, match="admission"):
        run((1,), admission="some")
    with pytest.raises(HkvError, match="disk_bytes"):
        simulate_two_level(trace((1,)), "lru", 4, -1, cost_model=MODEL)


def test_recommendation_is_the_smallest_size_near_the_best():
    # twelve prompts of 4-6 blocks over four prefixes, each back after the CPU tier lost it
    prompts = [tuple(range(s * 100, s * 100 + 4 + i % 3)) for i in range(12) for s in (i % 4,)]
    found = recommend_disk_bytes(trace(*prompts), MODEL, 6 * CHUNK, disk_policy="lru")
    gains = {row["disk_bound_bytes"]: row["gain_s"] for row in found.rows}
    best = max(gains.values())
    assert best > 0 and found.disk_bytes in gains
    assert gains[found.disk_bytes] >= 0.95 * best
    assert all(gain < 0.95 * best for size, gain in gains.items() if size < found.disk_bytes)
    assert found.ceiling_bytes == ceiling_bytes(trace(*prompts), MODEL) == 4 * 6 * CHUNK


def test_no_disk_is_recommended_where_no_prompt_reaches_the_crossover():
    found = recommend_disk_bytes(trace((1, 2), (3, 4), (1, 2)), MODEL, 2 * CHUNK)
    assert found.disk_bytes == 0 and found.ceiling_bytes == 0
    assert "crossover" in found.reason
    with pytest.raises(HkvError, match="fraction"):
        recommend_disk_bytes(trace((1,)), MODEL, CHUNK, fraction=0)
    with pytest.raises(HkvError, match="disk_gbps"):
        recommend_disk_bytes(trace((1,)), MODEL, CHUNK, disk_gbps=float("nan"))


# -- the CLI --------------------------------------------------------------------------------------
def cli(*argv: str) -> str:
    parser = argparse.ArgumentParser(prog="hkv")
    add_simulate_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["simulate", *argv])
    out = io.StringIO()
    assert args.handler(args, out=out) == 0
    return out.getvalue()


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(trace((1, 2), (3, 4, 5), (6, 7, 8, 9), (1, 2), (3, 4, 5)).requests, path)
    return str(path)


def base_argv(trace_file: str) -> list[str]:
    return ["--trace", trace_file, "--block-tokens", "16", "--capacity-blocks", "4"]


def test_cli_disk_flags_end_to_end(trace_file):
    argv = [*base_argv(trace_file), "--disk-size", str(100 * CHUNK / 2**30)]
    argv += ["--disk-gbps", repr(GBPS), "--disk-policy", "lru", "--json"]
    cost = json.loads(cli(*argv))
    everything = json.loads(cli(*argv, "--disk-admission", "all"))
    assert cost["crossover_tokens"] == CROSSOVER_BLOCKS * BLOCK
    assert (cost["disk_refused"], cost["disk_blocks_written"]) == (4, 7)  # (1, 2) twice
    assert everything["disk_bytes_written"] > cost["disk_bytes_written"]
    assert cost["disk_policy"] == "lru" and cost["cpu_policy"] == "lru"
    assert cost["disk_hits"] == 3 and cost["disk_s_saved"] > 0  # (3, 4, 5) again, from disk
    table = cli(*base_argv(trace_file), "--disk-size", "1", "--disk-gbps", repr(GBPS))
    assert "disk tier 1.0 GiB (cost_aware, admission cost, crossover 48 tokens)" in table
    listed = json.loads(
        cli(*base_argv(trace_file), "--disk-size", "1", "--policy", "all", "--json")
    )
    assert [row["cpu_policy"] for row in listed] == policy_names(online_only=True)


def test_cli_recommend_disk(trace_file):
    argv = [*base_argv(trace_file), "--recommend-disk", "--disk-gbps", repr(GBPS)]
    found = json.loads(cli(*argv, "--json"))
    assert found["ceiling_bytes"] == 7 * CHUNK and found["rows"][0]["disk_bound_bytes"] == 0
    assert "recommended disk tier" in cli(*argv)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--disk-size", "-1"], "--disk-size: got -1.0"),
        (["--disk-size", "nan"], "--disk-size: got nan"),
        (["--disk-size", "inf"], "--disk-size"),
        (["--disk-policy", "lru"], "--disk-policy: needs --disk-size"),
        (["--disk-admission", "all"], "--disk-admission: needs --disk-size"),
        (["--disk-size", "1", "--disk-policy", "belady"], "--disk-policy: 'belady'"),
        (["--disk-size", "1", "--disk-policy", "nope"], "nope"),
        (["--disk-size", "1", "--disk-gbps", "0"], "--disk-gbps: got 0.0"),
        (["--disk-size", "1", "--recommend-disk"], "conflicts"),
        (["--recommend-disk", "--policy", "all"], "one CPU policy"),
        (["--disk-size", "1", "--store", "per_block"], "--store"),
        (["--disk-size", "1", "--tier", "disk"], "--tier"),
        (["--disk-size", "1", "--store-threshold", "2"], "--store-threshold"),
    ],
)
def test_cli_disk_mistakes_are_one_line_errors(trace_file, extra, message):
    with pytest.raises(HkvError, match=message) as caught:
        cli(*base_argv(trace_file), *extra)
    assert "\n" not in str(caught.value)


# -- hkv plan --disk-trace ------------------------------------------------------------------------
PLAN = ["plan", "--model", "minimax-m2.5", "--gpus", "8", "--cpu-ram", "512"]


def test_plan_recommends_a_disk_tier_behind_its_cpu_tier(trace_file, capsys):
    from hkv.cli.main import main

    argv = [*PLAN, "--offload-size", "64", "--disk-trace", trace_file, "--disk-gbps", "7"]
    argv += ["--disk-trace-block-tokens", "16", "--json"]
    assert main(argv) == 0
    disk = json.loads(capsys.readouterr().out)["disk_recommendation"]
    assert disk["disk_gbps"] == 7 and disk["disk_bytes"] >= 0 and disk["reason"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--disk-gbps", "2"], "--disk-gbps: needs --disk-trace"),
        (["--offload-size", "64", "--disk-trace", "T", "--disk-gbps", "0"], "--disk-gbps: got 0"),
    ],
)
def test_plan_disk_flags_fail_in_one_line(extra, message, trace_file, capsys):
    from hkv.cli.main import main

    argv = [*PLAN, *[trace_file if a == "T" else a for a in extra]]
    assert main(argv) != 0
    assert message in capsys.readouterr().err


def test_plan_disk_trace_for_a_model_that_does_not_fit_says_so(trace_file, capsys):
    """Not 'give --offload-size' when it was given: the plan has no CPU tier because the model
    does not fit the machine."""
    from hkv.cli.main import main

    argv = ["plan", "--model", "minimax-m2.5", "--gpus", "1", "--offload-size", "16"]
    assert main([*argv, "--disk-trace", trace_file]) == 2
    err = capsys.readouterr().err
    assert "does not fit" in err and "give --offload-size" not in err
    assert err.count("\n") == 1 and len(err) <= 300
