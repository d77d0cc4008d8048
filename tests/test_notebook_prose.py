"""Numbers in the notebooks' prose come from the data they cite.

Two halves, both fast (no notebook is executed here; `tests/test_notebooks.py` checks the
rendered sentences of an executed notebook against its own results):
- a Markdown cell of notebooks 04, 05, 06, 08 and 09 states no number but those listed in `STATED`,
  each with what makes it right (a parameter, a definition, or a check named here or in
  `tests/test_notebooks.py`); a measured number is rendered by `hkv.report.prose` instead;
- the sentences `hkv.report.prose` renders, on the committed results, say what the tables say,
  including every contradiction the notebooks once had.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from hkv import CostModel, ModelSpec, WorkloadSpec, generate
from hkv.report import bench_e2e, bench_results, bench_vllm, bench_vllm_tail, eviction, prose
from hkv.report.bench_results import load_result
from hkv.report.policy_choice import gap_closed_per_request, per_request_hit_rates, store_ranking
from hkv.report.suite import ranking_with_seconds

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CODE_SPAN = re.compile(r"`[^`]*`")
NUMBER = re.compile(r"(?<![A-Za-z_\d.])\d+(?:[.,]\d+)*(?:\s?%|\s?[KkMG](?:iB|B)?\b)?")

SECTION = "a section or notebook number, or an item of a numbered list"
STATED: dict[str, dict[str, str]] = {
    "04_policies": {
        **dict.fromkeys(["0", "1", "2", "5"], "the six-block example's block ids and steps"),
        "512": "BLOCK_TOKENS (parameters cell)",
        **dict.fromkeys(["3", "4", "6", "7", "05", "03", "08"], SECTION),
    },
    "05_predictive": {
        **dict.fromkeys(["0", "1", "3"], "the learned table's feature values and bounds"),
        "32": "bench.admission_ceiling's longest horizon, in tiers",
        "04": SECTION,
        **dict.fromkeys(["0.26", "8", "4 GiB", "8 GiB"], "vllm_h200_auto.json's rig and cell"),
    },
    "06_failure_modes": {
        **dict.fromkeys(["1", "2", "3", "07", "08"], SECTION),
        **dict.fromkeys(["0.8", "32 GB", "80 %"], "the article's quoted setup"),
        **dict.fromkeys(["70 %", "0.7"], "HOST_RAM_FRACTION (checked below)"),
        "16": "the 16-bit KV of fp16/bf16",
        "64": "KEY_GROUP_TOKENS (checked below)",
        "8": "the codec's padding (test_notebooks: 5 x 8 x 62 bytes at most)",
    },
    "08_vllm_benchmarks": {
        **dict.fromkeys(["1", "2", "3", "4", "7", "05", "09", "0"], SECTION + ", or zero"),
        **dict.fromkeys(["1 %", "5 %"], "policies.json's capacities (test_notebooks: mooncake)"),
        **dict.fromkeys(["32", "4", "8K", "16K", "4 GiB"], "the anchor workload (checked below)"),
        "0.26": "the vLLM version the files record (checked below)",
        **dict.fromkeys(["8 GiB", "16 GiB"], "COMPARE_CPU_GIB, FULL_CPU_GIB (parameters cell)"),
        "20 %": "the wall-time target of bench_vllm.targets_table (checked below)",
        **dict.fromkeys(["8", "2 GiB"], "the TP=2 setup: 8 KV heads, 2 GiB of GPU KV per GPU"),
        "95 %": "the interval engine_noise.pooled gives (its docstring)",
    },
    "09_end_to_end_benchmarks": {
        **dict.fromkeys(["1", "2", "3", "08"], SECTION),
        **dict.fromkeys(["68 %", "24 %", "6000", "32 %"], "the article's claim and hardware"),
        **dict.fromkeys(["512 MiB", "16", "512", "2 MiB"], "bench/transfer.py's block sizes"),
        **dict.fromkeys(["8", "16"], "e2e_h200.json's model: 8 layers, 16 routed experts"),
        **dict.fromkeys(["8K", "32"], "e2e_h200.json's sessions: 8K tokens, 32 decoded a turn"),
        **dict.fromkeys(["64", "25 %", "100 %", "2K"], "e2e_h200.json's turn and hot shares"),
    },
}


def stated_numbers(stem: str) -> dict[str, str]:
    """Every number in the notebook's Markdown cells (outside code spans and headings), with
    the line it is on."""
    found: dict[str, str] = {}
    for cell in nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        for line in CODE_SPAN.sub("", cell.source).splitlines():
            if not line.startswith("#"):
                for match in NUMBER.finditer(line):
                    found.setdefault(match.group(0).strip(), line.strip())
    return found


@pytest.mark.parametrize("stem", sorted(STATED))
def test_markdown_states_only_numbers_that_are_checked(stem: str) -> None:
    unchecked = {n: line for n, line in stated_numbers(stem).items() if n not in STATED[stem]}
    assert not unchecked, f"{stem}: render these from the results (hkv.report.prose): {unchecked}"


@pytest.mark.parametrize(
    "stem, phrase",
    [
        ("04_policies", "coincide on text-only"),
        ("04_policies", "eight generated"),
        ("04_policies", "largest of the capacities"),
        *((stem, "record no date") for stem in ("08_vllm_benchmarks", "09_end_to_end_benchmarks")),
        *((stem, "from e6 on") for stem in ("08_vllm_benchmarks", "09_end_to_end_benchmarks")),
        ("08_vllm_benchmarks", "before it became the default"),
        ("08_vllm_benchmarks", "default now"),
        ("09_end_to_end_benchmarks", "A later run"),
        ("09_end_to_end_benchmarks", "an earlier run"),
        ("05_predictive", "DESIGN"),
    ],
)
def test_contradicted_or_change_log_phrases_are_gone(stem: str, phrase: str) -> None:
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    assert not [c for c in nb.cells if phrase in c.source], (stem, phrase)


def test_constants_the_prose_states() -> None:
    from hkv.formats import KEY_GROUP_TOKENS
    from hkv.planning.plan import HOST_RAM_FRACTION

    assert HOST_RAM_FRACTION == 0.7 and KEY_GROUP_TOKENS == 64
    gpu = load_result("vllm_h200")
    assert gpu["versions"]["vllm"].startswith("0.26")
    facts = bench_vllm.workload_facts(gpu)  # the anchor workload notebook 08 describes
    assert facts.startswith("32 sessions x 4 turns") and "8K-16K tokens" in facts
    assert "GPU KV capped at 4 GiB" in facts
    assert ">= 20 %" in set(bench_vllm.targets_table(_acceptance())["wanted"])


# ---- notebooks 08 (vLLM) and 09 (end to end) --------------------------------------------------

BENCH_FILES = [  # the files the two notebooks read, together
    "transfer_h200.json",
    "policies.json",
    "vllm_replay.json",
    "vllm_h200.json",
    "vllm_h200_tail_first.json",
    "vllm_h200_tp2.json",
    "vllm_h200_sim.json",
    "e2e_h200.json",
    "vllm_serve_h200.json",
    "vllm_h200_mm_offline.json",
]


def _provenance() -> pd.DataFrame:
    return bench_results.provenance_table(bench_results.load_results(BENCH_FILES))


def test_provenance_names_only_the_files_without_a_date() -> None:
    table = _provenance()
    undated = [f for f in BENCH_FILES if not load_result(f)["date_utc"]]
    assert prose.provenance_gaps(table)["date"] == undated == ["transfer_h200.json"]
    assert table.loc["e2e_h200.json", "date"] == "2026-12-02T00:38:01Z"
    sentence = prose.provenance_sentence(table)
    assert "`transfer_h200.json` records no date" in sentence
    assert "`e2e_h200.json` records no date" not in sentence


def test_gpu_runs_are_never_labelled_cpu_only_and_no_version_reads_none() -> None:
    table = _provenance()
    for name in ("vllm_serve_h200.json", "vllm_h200_mm_offline.json"):
        assert table.loc[name, "accelerator"] == bench_results.NOT_RECORDED, name
    cpu_only = table.index[table["accelerator"] == "none (CPU only)"]
    assert set(cpu_only) == {"policies.json", "vllm_replay.json", "vllm_h200_sim.json"}
    assert not table["versions"].str.contains("None").any()
    hkv_missing = prose.provenance_gaps(table)["hkv"]
    assert hkv_missing == ["e2e_h200.json", "vllm_serve_h200.json", "vllm_h200_mm_offline.json"]


def _acceptance() -> dict:
    gpu = load_result("vllm_h200")
    runs = bench_vllm.gpu_runs(gpu)
    pairs = bench_vllm.sim_pairs(load_result("vllm_h200_sim"))
    return bench_vllm.acceptance(bench_vllm.gpu_table(runs), runs, pairs, "hkv_bip", 8.0, 16.0)


def test_lru_step_share_matches_the_worst_run_printed_beside_the_targets() -> None:
    runs = bench_vllm.gpu_runs(load_result("vllm_h200"))
    sentence = prose.lru_step_share_sentence(runs)
    worst = _acceptance()["policy_share_of_step_vllm_lru_max"]
    assert f"-{100 * worst:.1f} %" in sentence  # the range ends at the printed 1.8 %
    assert "1.2-1.8 %" in sentence
    assert "1.2-1.7" not in str(load_result("vllm_h200")["notes"])


def test_spread_sentence_gives_the_widest_spread_the_table_holds() -> None:
    table = bench_vllm_tail.tail_table(
        bench_vllm_tail.tail_runs(load_result("vllm_h200_tail_first"))
    )
    widest = bench_vllm_tail.widest_spread(table)
    sentence = prose.spread_sentence(table)
    assert f"{widest['16 GiB'].rstrip('%')} % at 16 GiB" in sentence
    assert widest["16 GiB"] == "24%"
    assert "20 % at 16 GiB" not in str(load_result("vllm_h200_tail_first")["notes"])


def test_eager_restore_speedup_is_one_number_in_both_tables() -> None:
    e2e = load_result("e2e_h200")
    eager = bench_e2e.ttft_table(e2e)["restore speed-up"]
    graphed = bench_e2e.ttft_graphed_table(e2e)["restore speed-up, eager"]
    assert eager.to_dict() == graphed.to_dict()
    assert (round(eager[32768], 2), round(eager[65536], 2)) == (18.74, 33.21)


# ---- notebook 04 ----------------------------------------------------------------------------


def test_suite_scope_counts_seven_generated_workloads() -> None:
    suite = load_result("policy_suite")
    scope = prose.suite_scope(suite)
    assert scope["generated"] == 7 == len(suite["workloads"]) - 1
    assert "Mooncake's trace and 7 generated workloads at 4 tier sizes" in (
        prose.suite_scope_sentence(suite)
    )


@pytest.fixture(scope="module")
def small_replay():
    """Notebook 04's replay, small: two workloads of 60 sessions at two capacities."""
    workloads = {
        name: generate(WorkloadSpec.preset(name, seed=0, num_sessions=60))
        for name in ("chat", "multimodal")
    }
    cost_model = CostModel.default("minimax-m2.5")
    kinds = eviction.policy_kinds(["random"])
    online = [name for name, kind in kinds.items() if kind == "online"]
    capacities = eviction.capacity_blocks(workloads, [2, 10])
    hit_rates = eviction.hit_rate_table(
        eviction.replay_runs(workloads, capacities, cost_model, kinds)
    )
    per_request = per_request_hit_rates(workloads, capacities, cost_model, online)
    return workloads, hit_rates, per_request


def test_twin_sentence_counts_the_cells_where_cost_and_modality_aware_differ(small_replay):
    _, hit_rates, _ = small_replay
    gap = eviction.gap_closed(hit_rates)
    sentence = prose.twin_policies_sentence(gap, "cost_aware", "modality_aware", ["chat"])
    differ = ((gap.loc["chat", "cost_aware"] - gap.loc["chat", "modality_aware"]).abs()).round(3)
    assert f"in {int((differ > 0).sum())} of {len(differ)} cells" in sentence
    assert "coincide" not in sentence


def test_recommendation_says_where_the_live_replay_ranks_it_and_why(small_replay):
    _, hit_rates, per_request = small_replay
    gap = eviction.gap_closed(hit_rates)
    by_store = store_ranking(gap, gap_closed_per_request(per_request, hit_rates))
    suite = load_result("policy_suite")
    ranking = pd.DataFrame(ranking_with_seconds(suite)).set_index("policy")
    text = prose.recommendation(ranking, by_store, suite)
    assert text.startswith("**Recommended: `auto`**")
    behind = ranking.loc["hkv:auto", "cells_over_half_point"]
    assert f"in {behind} of 32 cells" in text and "7 generated workloads" in text
    rank = by_store.loc["auto", "rank, per block"]
    if rank == 1:
        assert "agrees" in text
    else:
        assert f"ranks it {rank} of {len(by_store)}" in text
        assert f"`auto` {by_store.loc['auto', 'rank, per request']} of" in text


def test_the_caps_sentence_says_whether_a_cap_bound():
    from hkv.report.modality_manager import caps_sentence

    caps = {"text": 2048, "vision": 512, "audio": 256}
    free = caps_sentence({"text": 900, "vision": 40, "audio": 3}, caps)
    assert free.startswith("No cap binds") and "vision 40 of 512" in free
    bound = caps_sentence({"text": 2048, "vision": 512, "audio": 3}, caps)
    assert bound.startswith("The cap binds for text, vision at this size: their blocks")
    assert "audio 3 of 256" in bound
    one = caps_sentence({"text": 10, "vision": 512, "audio": 3}, caps)
    assert one.startswith("The cap binds for vision at this size: its blocks on the GPU reached it")


def test_where_tiers_pay_reads_the_curve():
    from hkv.report.failure_modes import where_tiers_pay

    curve = pd.DataFrame({"position": [0, 1000, 2000, 3000], "break-even GB/s": [4.0, 3, 2, 1]})
    tiers = {"fast": 50.0, "edge": 4.2, "deep": 2.5, "slow": 0.5}
    assert where_tiers_pay(curve, tiers) == (
        "At these settings fast (50 GB/s) pays at every position; edge (4.2 GB/s) pays at every "
        "position, by under 10 % at 0; deep (2.5 GB/s) pays from position 2,000 on; slow "
        "(0.5 GB/s) pays at no position up to 3,000."
    )
    bumpy = pd.DataFrame({"position": [0, 1, 2], "break-even GB/s": [1.0, 3, 1]})
    assert "pays at 2 of the 3 positions drawn" in where_tiers_pay(bumpy, {"mid": 2.0})


def test_the_claim_verdict_compares_the_speed_kept_with_the_claims():
    from hkv.report.bench_claim import ArticleClaim, claim_verdict

    bound = pd.DataFrame({"tokens/s at most, link alone": [40.0, 5.25]}, index=["8K", "64K"])
    claim = ArticleClaim("2 x GPU", vram_saved=0.68, speed_lost=0.24)
    short = claim_verdict(claim, {"8K": 0.41, "64K": 0.12}, bound)
    assert "with 32% of its KV on the GPU kept 12% to 41% of" in short
    assert "falls short of the article's 76%" in short and "5.2 to 40.0 tokens/s" in short
    generous = ArticleClaim("2 x GPU", vram_saved=0.5, speed_lost=0.9)
    assert "reaches the article's 10%" in claim_verdict(generous, {"8K": 0.41}, bound)


def test_the_reliability_note_says_when_nothing_was_learned_yet():
    from hkv.report.predictive import reliability_note

    prior = pd.DataFrame({"p": [1.0, 1.0], "labels": [3.0, 5.0]})
    assert reliability_note(prior).startswith("Every bucket's p is still 1, the prior")
    learned = pd.DataFrame({"p": [0.05, 0.5, 0.95], "labels": [1.0, 2.0, 1.0]})
    assert reliability_note(learned) == (
        "50% of the 4 (decayed) labels sit at confident estimates (p below 0.1 or above 0.9)."
    )


@pytest.mark.parametrize("model", ["minimax-m2.5", "deepseek-v3", "gpt-oss-120b"])
def test_notebook_02s_kv_by_hand_and_budget_hold_for_every_shipped_model(model: str) -> None:
    from hkv import PlanInputs, plan
    from hkv.report.loading import kv_budget_gib, kv_by_hand

    spec = ModelSpec.load(model)
    how, by_hand = kv_by_hand(spec)
    assert by_hand == spec.kv_bytes_per_token(), how
    kept = plan(spec, PlanInputs(gpus=8, gpu_mem_gib=140, weights_dtype="fp8"))
    whole = kept.gpu_kv_budget_bytes / 2**30
    if spec.is_mla:  # each GPU holds the whole latent: one GPU's budget
        assert kv_budget_gib(kept, spec, 8) == pytest.approx(whole / 8)
    elif spec.num_kv_heads >= 8:  # split by heads: the whole budget
        assert kv_budget_gib(kept, spec, 8) == pytest.approx(whole)


def test_no_share_is_taken_of_a_gap_under_half_a_point():
    from hkv.report.eviction import gap_closed

    rates = pd.DataFrame(
        {"lru": [0.30, 0.9800], "belady": [0.40, 0.9801], "arc": [0.35, 0.9900]},
        index=["tight tier", "roomy tier"],
    )
    shares = gap_closed(rates)
    assert shares.loc["tight tier", "arc"] == pytest.approx(0.5)
    assert shares.loc["roomy tier"].isna().all()  # (it read 99 x the gap: 9,900 %)
    per_request = pd.DataFrame({"lru": [0.30, 0.98], "arc": [0.35, 0.99]}, index=rates.index)
    closed = gap_closed_per_request(per_request, rates)
    assert closed.loc["tight tier", "arc"] == pytest.approx(0.5)
    assert closed.loc["roomy tier"].isna().all()


def test_a_claim_at_an_unmeasured_hot_fraction_is_named_not_an_index_error():
    from hkv.errors import HkvError
    from hkv.report import bench_e2e
    from hkv.report.bench_claim import ArticleClaim, claim_table

    e2e = load_result("e2e_h200.json")
    decode, lockstep = bench_e2e.decode_table(e2e), bench_e2e.lockstep_table(e2e)
    with pytest.raises(HkvError, match=r"keeps 40% of the KV .* did not measure \(they kept 10%"):
        claim_table(ArticleClaim("x", 0.6, 0.24), decode, lockstep, "H200")
    assert len(claim_table(ArticleClaim("x", 0.68, 0.24), decode, lockstep, "H200")) > 2
    for junk in (1.5, -0.1, "0.5", True):
        with pytest.raises(HkvError, match="ArticleClaim.vram_saved: got"):
            ArticleClaim("x", junk, 0.24)


def test_the_break_even_curve_wants_two_points_or_more():
    from hkv.errors import HkvError
    from hkv.report.failure_modes import break_even_curve

    spec = ModelSpec.load("minimax-m2.5")
    for junk in (0, 1, 2.0, True):
        with pytest.raises(HkvError, match="break-even points: got"):
            break_even_curve(spec, CostModel.default("minimax-m2.5"), 512, junk)
    assert len(break_even_curve(spec, CostModel.default("minimax-m2.5"), 512, 2)) == 2


def test_the_claim_verdict_with_all_the_kv_on_the_gpu_names_no_link_bound():
    from hkv.report.bench_claim import ArticleClaim, claim_verdict

    inf = float("inf")
    bound = pd.DataFrame({"tokens/s at most, link alone": [inf, inf]}, index=["8K", "64K"])
    text = claim_verdict(ArticleClaim("x", 0.0, 0.0), {"8K": 0.8, "64K": 1.36}, bound)
    assert text.endswith("100%; with no KV off the GPU nothing crosses the host link.")
    assert "inf" not in text


def test_parameters_naming_the_wrong_kind_of_file_or_an_empty_gap_are_said():
    from hkv.errors import HkvError
    from hkv.report.bench_results import section
    from hkv.report.bench_vllm_auto import band_sentence, noise_band
    from hkv.report.suite import priced_by

    with pytest.raises(HkvError, match=r"SUITE: its file holds no 'cost_model' \(written by "):
        priced_by(load_result("policy_heldout"))
    with pytest.raises(HkvError, match="TRACE_VARIANTS: its file holds no 'candidates'"):
        section(load_result("trace_variants_arc"), "candidates", "TRACE_VARIANTS", "a file")
    no_twin = load_result("vllm_h200_time_dccd834")  # lru and hkv_auto only
    assert band_sentence(noise_band(no_twin)).startswith("hkv_lru did not run in these engines")
    index = pd.MultiIndex.from_tuples([("chat", 100.0), ("chat", 50.0)])
    gap = pd.DataFrame({"a": [float("nan")] * 2, "b": [float("nan")] * 2}, index=index)
    sentence = prose.twin_policies_sentence(gap, "a", "b", ["chat"])
    assert "within half a point in every cell" in sentence


def test_no_ranking_is_made_of_gaps_that_were_all_under_half_a_point():
    from hkv.errors import HkvError

    index = pd.MultiIndex.from_tuples([("chat", 100.0)])
    empty = pd.DataFrame({"lru": [float("nan")], "arc": [float("nan")]}, index=index)
    with pytest.raises(HkvError, match=r"no capacity here .* \(CAPACITY_PERCENTS\)"):
        store_ranking(empty, empty)


def test_notebook_06_says_what_the_plan_says_at_any_settings():
    from hkv import PlanInputs, plan
    from hkv.cli.main import render_plan
    from hkv.report.failure_modes import check_formula, tier_sentence

    spec = ModelSpec.load("minimax-m2.5")
    article = dict(gpu_mem_gib=140, cpu_ram_gib=32, offload_percent=0.8, max_model_len=32_768)
    capped = plan(spec, PlanInputs(gpus=2, max_num_seqs=16, **article))
    assert tier_sentence(capped, 0.8).startswith("GPUs hold 4 of 16 full-length sequences; the CPU")
    assert "bound by host RAM (0.7 x 32 GiB)" in tier_sentence(capped, 0.8)
    roomy = plan(spec, PlanInputs(gpus=8, max_num_seqs=16, **article))
    assert "GPUs hold all 16 full-length sequences (room for 100)" in tier_sentence(roomy, 0.8)
    long = {**article, "max_model_len": 196_608}
    refused = plan(spec, PlanInputs(gpus=2, max_num_seqs=4, **long))
    lines = render_plan(refused.to_dict())  # what notebook 06 prints, as `hkv plan` does
    assert "CPU tier: none (vLLM would not start" in lines and "exceeds the GPU KV budget" in lines
    assert "vllm serve MiniMaxAI" not in lines and "suggestion:" in lines
    assert tier_sentence(refused, 0.8).startswith("vLLM would not start at these settings")
    assert "would need 213 GiB of host RAM" in tier_sentence(refused, 0.8)
    checks = check_formula(refused, 32, 0.8)
    assert list(checks.values()) == [True, True, None, None]
    last = render_plan(capped.to_dict()).splitlines()[-1].strip()
    assert last.startswith("vllm serve MiniMaxAI/MiniMax")


def test_the_codec_counts_a_hybrid_models_block_as_the_cost_model_does():
    from hkv.report.failure_modes import round_trip_table
    from hkv.storage.layout import BlockLayout

    spec = ModelSpec.load("gpt-oss-120b")
    groups = BlockLayout.groups_from_spec(spec, 512)
    assert sum(g.num_layers for g in groups) == spec.num_layers
    assert BlockLayout.from_spec(spec, 512) in groups
    table = round_trip_table(spec, CostModel.default("gpt-oss-120b"), ["fp16", "q8"], 512, 1, 0)
    codec, model = table["bytes per block, hkv.storage.quant"], table["bytes per block, cost model"]
    assert codec["fp16"] == model["fp16"]
    assert 0 <= codec["q8"] - model["q8"] <= 8 * 2 * spec.num_layers


def test_notebook_06_has_no_conflict_to_show_where_the_size_fits():
    from hkv import try_translate
    from hkv.report.failure_modes import conflict_result

    line = "vllm serve MiniMaxAI/MiniMax-M2.5 --enable-hybrid-kv-cache "
    line += "--hybrid-kv-cache-cpu-offload-size 64GiB"
    text, result = conflict_result(try_translate(line.split(), cpu_ram_gib=512), "64GiB", 512)
    assert result is None and text.startswith("64GiB fits 0.7 x 512 GiB of RAM (358.4 GiB)")
    text, result = conflict_result(try_translate(line.split(), cpu_ram_gib=32), "64GiB", 32)
    assert result["error"] == "FlagConflict" and "--cpu-ram" in result["flags"]
    assert text.startswith("flags named: ('--hybrid-kv-cache-cpu-offload-size', '--cpu-ram')")


def test_notebook_06_says_why_an_mla_models_blocks_are_not_round_tripped():
    from hkv.report.failure_modes import round_trip_table

    spec = ModelSpec.load("deepseek-v3")
    table = round_trip_table(spec, CostModel.default("deepseek-v3"), ["fp16", "q8"], 64, 1, 0)
    assert list(table.index) == ["fp16", "q8"]
    assert table["hkv.storage.quant"].str.startswith("not run: deepseek-v3's KV is an MLA").all()
    assert table["bytes per block, cost model"]["q8"] < table["bytes per block, cost model"]["fp16"]
