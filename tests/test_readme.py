"""Every number the README states, recomputed from the committed results in data/results (or
from a constant: MiniMax-M2.5's config, the pinned requirements).

Each claim is a README snippet with `{}` fields and a function that returns the fields' values
from the files; the README must contain the snippet filled in. A claim that is a bound rather
than a value ("under a fifth") has a function that asserts it and returns no fields.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hkv import ModelSpec
from hkv.report import bench_claim, bench_e2e, bench_results, bench_vllm, eviction

ROOT = Path(__file__).resolve().parent.parent
README = " ".join((ROOT / "README.md").read_text().split())  # line breaks as spaces
RESULTS = ROOT / "data" / "results"


@functools.cache
def result(name: str) -> dict[str, Any]:
    return bench_results.load_results([name], RESULTS)[name]


@functools.cache
def spec() -> ModelSpec:
    return ModelSpec.load("minimax-m2.5")


def _targets(workloads: tuple[str, ...]) -> list[dict[str, Any]]:
    runs = result("policies.json")["workloads"]
    return [cap["target"] for w in workloads for cap in runs[w]["capacities"].values()]


GENERATED = ("gen_multimodal_chat", "gen_multimodal_doc_qa")


def _pct_range(values: list[float], digits: tuple[int, int] = (0, 0)) -> tuple[str, str]:
    return f"{100 * min(values):.{digits[0]}f}", f"{100 * max(values):.{digits[1]}f}"


def mooncake() -> dict[str, Any]:
    return result("policies.json")["workloads"]["mooncake"]


def mooncake_rate(capacity: str, policy: str) -> float:
    """A policy's block hit rate on Mooncake, in percent."""
    return 100 * mooncake()["capacities"][capacity]["policies"][policy]["block_hit_rate"]


def mooncake_rates() -> tuple[float, ...]:
    best = eviction.mooncake_best(mooncake())
    return tuple(
        100 * best[c][key]
        for c in ("0.01", "0.05")
        for key in ("best_online_block_hit_rate", "lru_block_hit_rate")
    )


def static_oracle_under_a_fifth() -> tuple[()]:
    shares = [
        c["static_top_oracle_gap_closed"] for c in eviction.mooncake_best(mooncake()).values()
    ]
    assert max(shares) < 0.2, shares
    return ()


def lru_serves_under_half() -> tuple[()]:
    best = eviction.mooncake_best(mooncake())
    _, served = eviction.mooncake_reuse(mooncake(), best)
    assert max(served.values()) < 0.5, served
    return ()


def replay_speed() -> tuple[str, str, int]:
    policies = result("policies.json")
    rates = [w["lru_replay_refs_per_s"] for w in policies["workloads"].values()]
    return f"{min(rates) / 1e6:.2f}", f"{max(rates) / 1e6:.2f}", policies["machine"]["cpu_count"]


def transfer_links() -> list[dict[str, Any]]:
    return [row[d] for row in result("transfer_h200.json")["links"] for d in DIRECTIONS]


DIRECTIONS = ("gpu_to_host", "host_to_gpu")


def transfer_block_range() -> tuple[str, str]:
    sizes = [row["block_bytes"] for row in result("transfer_h200.json")["links"]]
    return f"{min(sizes) // 1024} KiB", f"{max(sizes) // 2**20} MiB"


def disk_ratios() -> tuple[str, str]:
    rows = result("transfer_h200.json")["disk"]
    return _pct_range([r[k] for r in rows for k in ("write_vs_sequential", "read_vs_sequential")])


def replay_lru() -> tuple[float, ...]:
    rows = bench_vllm.replay_table(result("vllm_replay.json"))
    lru = rows[rows["label"] == "vllm:lru"].sort_values("capacity_frac")
    pairs = zip(lru["vllm_block_hit_rate"], lru["sim_block_hit_rate"], strict=True)
    return tuple(100 * rate for pair in pairs for rate in pair)


def replay_max_diff() -> tuple[float]:
    rows = bench_vllm.replay_table(result("vllm_replay.json"))
    return (bench_vllm.replay_summary(result("vllm_replay.json"), rows)["max_abs_diff_points"],)


def session_row(hot_fraction: float) -> tuple[float, float]:
    row = bench_e2e.session_table(result("e2e_h200.json")).reset_index()
    row = row[row["hot_fraction"] == hot_fraction].iloc[0]
    return round(100 * row["kv_resident_saved"]), 100 * row["slowdown (lock-step)"]


def decode_speeds() -> tuple[float, ...]:
    decode = bench_e2e.decode_table(result("e2e_h200.json"))
    speeds = bench_claim.speed_at_hot_fraction(decode, 0.32)
    return tuple(speeds[c] for c in ("8K", "32K", "128K"))


def restore_speedups() -> tuple[float, ...]:
    e2e = result("e2e_h200.json")
    speedup = bench_e2e.e2e_summary(e2e, *_e2e_tables(e2e), bench_e2e.ttft_table(e2e), {})[
        "restore_speedup"
    ]
    return tuple(speedup[p] for p in ("2048", "8192", "32768", "65536"))


def _e2e_tables(e2e: dict[str, Any]) -> tuple[Any, Any]:
    return bench_e2e.decode_table(e2e), bench_e2e.session_table(e2e)


def gpu_row(tier: str, policy: str) -> tuple[float, float, int]:
    gpu = result("vllm_h200.json")
    table = bench_vllm.gpu_table(bench_vllm.gpu_runs(gpu)).reset_index()
    row = table[
        (table["variant"] == "text") & (table["CPU tier"] == tier) & (table["policy"] == policy)
    ].iloc[0]
    return 100 * row["cached_share"], row["wall_s"], int(row["failed_stores"])


def tp2_plan() -> tuple[str, str, float]:
    check = result("vllm_h200_tp2.json")["plan_check"]
    return (
        f"{check['plan_gpu_blocks']:,}",
        f"{check['vllm_gpu_blocks']:,}",
        -100 * check["gpu_kv_error_frac"],
    )


CLAIMS: list[tuple[str, Callable[[], tuple[Any, ...]]]] = [
    # MiniMax-M2.5's config (data/models/minimax-m2.5)
    ("{:.0f} KiB per token", lambda: (spec().kv_bytes_per_token() / 1024,)),
    (
        "{:.2f} GiB for one 32K-token conversation",
        lambda: (spec().kv_bytes_per_seq(32_768) / 2**30,),
    ),
    ("spec.kv_bytes_per_token()                    # {}", lambda: (spec().kv_bytes_per_token(),)),
    (
        "{:.0f}B-parameter MoE (~{:.0f}B active), {:,}-token context",
        lambda: (
            spec().total_params / 1e9,
            spec().active_params / 1e9,
            spec().max_position_embeddings,
        ),
    ),
    # policies.json
    (
        "closes {}-{} % of the gap between the best of vLLM's native options and Belady",
        lambda: _pct_range([t["native_to_belady_gap_closed"] for t in _targets(GENERATED)]),
    ),
    ("{:.1f} % vs LRU's {:.1f} % at 1 % capacity, {:.1f} % vs {:.1f} % at 5 %", mooncake_rates),
    (
        "closing {}-{} % of the gap between the best native option",
        lambda: _pct_range(
            [t["native_to_belady_gap_closed"] for t in _targets(("mooncake",))], (1, 0)
        ),
    ),
    (
        "{:.1f} % and {:.1f} % of the LRU → Belady gap",
        lambda: tuple(100 * c["gap_closed"] for c in eviction.mooncake_best(mooncake()).values()),
    ),
    (
        "at {} or {:,} blocks",
        lambda: tuple(c["capacity_blocks"] for c in mooncake()["capacities"].values()),
    ),
    ("would close under a fifth of the LRU → Belady gap", static_oracle_under_a_fifth),
    ("LRU turns under half of the trace's re-references into hits", lru_serves_under_half),
    ("replayed {}-{} M block references/s with `lru`", lambda: replay_speed()[:2]),
    ("on the {}-CPU VM that ran it", lambda: replay_speed()[2:]),
    (
        "On Mooncake's trace it loses to LRU ({:.1f} % vs {:.1f} %)",
        lambda: (mooncake_rate("0.01", "bip"), mooncake_rate("0.01", "lru")),
    ),
    (
        "`dip` is for: {:.1f} %, and {:.1f} % against LRU's {:.1f} % at 5 %",
        lambda: (
            mooncake_rate("0.01", "dip"),
            mooncake_rate("0.05", "dip"),
            mooncake_rate("0.05", "lru"),
        ),
    ),
    # transfer_h200.json
    ("moves {}-{} MiniMax-M2.5 blocks", transfer_block_range),
    ("at {}-{} % of a bulk", lambda: _pct_range([d["hkv_vs_bulk"] for d in transfer_links()])),
    (
        "({:.1f}-{:.1f} GB/s",
        lambda: tuple(f(d["hkv_gbps"] for d in transfer_links()) for f in (min, max)),
    ),
    (
        "against {:.1f} GB/s for one copy",
        lambda: (min(d["per_block_gbps"] for d in transfer_links()),),
    ),
    ("at {}-{} % of plain sequential file I/O", disk_ratios),
    # vllm_replay.json
    ("agrees within {:.1f} points", replay_max_diff),
    (
        "(vLLM's `lru` {:.2f} % vs simulated {:.2f} % at 1 % capacity, {:.2f} % vs {:.2f} % at 5 %",
        replay_lru,
    ),
    # e2e_h200.json
    *[
        (
            f"| {hot:.0%} | {{}} % | {{:+.1f}} % |".replace("%", " %", 1),
            functools.partial(session_row, hot),
        )
        for hot in (1.0, 0.5, 0.32, 0.25, 0.1)
    ],
    ("{:.2f}x (8K), {:.2f}x (32K) and {:.2f}x (128K)", decode_speeds),
    ("{:.1f}x at 2K, {:.1f}x at 8K, {:.1f}x at 32K and {:.1f}x at 64K", restore_speedups),
    # vllm_h200.json, text variant
    *[
        (f"{label} | {{:.1f}} % | {{:.1f}} s | {{}} |", functools.partial(gpu_row, tier, policy))
        for tier, policy, label in (
            ("8 GiB", "lru", "| 8 GiB (half the working set) | vLLM lru"),
            ("8 GiB", "arc", "| | vLLM arc"),
            ("8 GiB", "hkv_bip", "| | hkv `bip`"),
            ("12 GiB", "lru", "| 12 GiB | vLLM lru"),
            ("12 GiB", "arc", "| | vLLM arc"),
            ("12 GiB", "hkv_bip", "| | hkv `bip`"),
            ("16 GiB", "lru", "| 16 GiB (all of it) | vLLM lru"),
            ("16 GiB", "hkv_bip", "| | hkv `bip`"),
        )
    ],
    # vllm_h200_tp2.json
    (
        "The plan predicts {} KV blocks per GPU; vLLM allocated {}, so the plan is {:.2f} % low",
        tp2_plan,
    ),
    (
        "it measured {:.2f} GiB for everything but weights, against the plan's {:.0f} GiB reserve",
        lambda: tuple(x / 2**30 for x in tp2_non_kv()),
    ),
    (
        "{:,} blocks, {:.0f} GiB a rank",
        lambda: (tp2_check()["vllm_cpu_blocks"], tp2_check()["vllm_cpu_bytes_per_rank"] / 2**30),
    ),
]


def tp2_non_kv() -> tuple[int, int]:
    """(what vLLM measured for everything but weights, the plan's reserve), bytes per GPU."""
    check = tp2_check()
    non_kv = check["vllm_non_kv_bytes_per_gpu"] - check["plan_weights_bytes_per_gpu"]
    return non_kv, check["plan_reserve_bytes_per_gpu"]


def tp2_check() -> dict[str, Any]:
    check = result("vllm_h200_tp2.json")["plan_check"]
    assert check["vllm_cpu_blocks"] == check["plan_cpu_blocks"]
    assert check["vllm_cpu_bytes_per_rank"] == check["plan_cpu_bytes_per_rank"]
    return check


@pytest.mark.parametrize(("snippet", "values"), CLAIMS, ids=[c[0][:40] for c in CLAIMS])
def test_readme_number(snippet: str, values: Callable[[], tuple[Any, ...]]) -> None:
    text = " ".join(snippet.format(*values()).split())
    assert text in README, f"README should say: {text!r}"


def test_pinned_versions_in_setup() -> None:
    pins = (ROOT / "requirements.txt").read_text() + (ROOT / "constraints.txt").read_text()
    for package, version in (
        ("vllm-cpu", "0.32.0"),
        ("torch", "2.13.0"),
        ("transformers", "5.19.0"),
    ):
        assert f"{package}=={version}" in pins, package
        assert version in README, version
    assert json.loads(json.dumps(result("vllm_h200.json")["versions"]))["vllm"].startswith("0.26")
    assert result("transfer_h200.json")["versions"]["torch"].startswith("2.11")
