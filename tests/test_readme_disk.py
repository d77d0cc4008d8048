"""README's disk-tier section states only what `data/results/vllm_h200_disk.json` holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/policies.md", "docs/block_manager.md", "docs/vllm.md", "docs/layout.md")
"""The front page and the pages its benchmark narrative moved to: their numbers are checked."""
README = " ".join(" ".join((ROOT / name).read_text() for name in DOCS).split())  # breaks: spaces


def runs() -> dict[str, dict[str, Any]]:
    data = json.loads((ROOT / "data/results/vllm_h200_disk.json").read_text())
    return {run["file"]: run for run in data["runs"]}


def row(name: str) -> tuple[Any, ...]:
    summary = runs()[name]["summary"]
    cached = 100 * summary["cached_share"]
    return summary["wall_s"], summary["ttft_mean_s"], cached


def read_rates() -> tuple[float, float]:
    rates = [
        t["load_chunks"] * t["chunk_bytes"] / t["load_s"] / 1e9
        for run in runs().values()
        if (t := run.get("tier")) and t.get("load_s")
    ]
    return min(rates), max(rates)


def restart_found() -> tuple[int, int, int, int]:
    first, restart = runs()["long_hkv.json"], runs()["long_hkv_restart.json"]
    same, total = restart["outputs_equal_to_cpu_only"]
    return restart["tier_at_start"]["restored"], first["tier"]["resident_chunks"], same, total


def measured_restart() -> tuple[int, float, int, int]:
    run = runs()["long_hkv4_restart.json"]
    start = run["tier_at_start"]
    return (
        start["restored"],
        1e3 * start["measured_chunk_s"],
        start["crossover_tokens"],
        start["model_crossover_tokens"],
    )


def fs_logged_s() -> float:
    """Seconds between the first and last log line of the 4 GiB fs run (stopped unfinished)."""
    from datetime import datetime

    run = runs()["d4_fs.log"]
    first, last = (datetime.strptime(run[k], "%m-%d %H:%M:%S") for k in ("first_log", "last_log"))
    return (last - first).total_seconds()


def restarted() -> tuple[Any, ...]:
    return row("long_hkv_restart.json")


CLAIMS: list[tuple[str, Callable[[], tuple[Any, ...]]]] = [
    ("| anchor | none | {:.1f} | {:.3f} | {:.1f} % |", lambda: row("anchor_none.json")),
    ("| anchor | hkv | {:.1f} | {:.3f} | {:.1f} % |", lambda: row("anchor_hkv.json")),
    ("| long | none | {:.1f} | {:.2f} | {:.1f} % |", lambda: row("long_none.json")),
    ("| long | none, again | {:.1f} | {:.2f} | {:.1f} % |", lambda: row("long_none2.json")),
    ("| long | hkv | {:.1f} | {:.2f} | {:.1f} % |", lambda: row("long_hkv.json")),
    ("| long | hkv, restarted | {:.1f} | {:.2f} | {:.1f} % |", restarted),
    (
        "| long | hkv, restarted with its measured speed | {:.1f} | {:.2f} | {:.1f} % |",
        lambda: row("long_hkv4_restart.json"),
    ),
    ("| anchor, 4 GiB CPU tier | none | {:.1f} | {:.3f} | {:.1f} % |", lambda: row("d4_none.json")),
    ("| anchor, 4 GiB CPU tier | hkv | {:.1f} | {:.3f} | {:.1f} % |", lambda: row("d4_hkv.json")),
    (
        "ran the anchor to the end, {} of {} outputs",
        lambda: runs()["d4_hkv.json"]["outputs_equal_to_cpu_only"],
    ),
    (
        "nothing (every prompt below the crossover: {:,} chunks refused)",
        lambda: (runs()["d4_hkv.json"]["tier"]["refused_admission"],),
    ),
    (
        "its engine took {:.1f} % longer than the CPU-only one",
        lambda: (100 * (row("d4_hkv.json")[0] / row("d4_none.json")[0] - 1),),
    ),
    (
        "({} of prompt tokens from outside the GPU when its run was stopped)",
        lambda: (runs()["d4_fs.log"]["last_external_prefix_hit_rate"],),
    ),
    ("logged for {:.0f} s without the error", lambda: (fs_logged_s(),)),
    ("{:.2f}-{:.2f} GB/s", read_rates),
    ("found {:,} of the {:,} chunks on disk; {} of {} outputs", restart_found),
    (
        "found {:,} chunks, judged by loads measured at {:.2f} ms a chunk: crossover {:,} tokens "
        "(the profile's: {:,})",
        measured_restart,
    ),
]


@pytest.mark.parametrize(("snippet", "values"), CLAIMS, ids=[c[0][:40] for c in CLAIMS])
def test_readme_disk_number(snippet: str, values: Callable[[], tuple[Any, ...]]) -> None:
    text = " ".join(snippet.format(*values()).split())
    assert text in README, f"README should say: {text!r}"


def test_readme_disk_fresh_tier_run() -> None:
    assert f"took {runs()['long_hkv3.json']['summary']['wall_s']:.1f} s" in README


def test_readme_disk_profile_bandwidth() -> None:
    profile = json.loads((ROOT / "data/profiles/h200-calibrated.json").read_text())
    assert f"calibrated profile's {profile['links']['disk']['to_gpu_gbps']:.2f} GB/s" in README


# ---- the same engines with the slot I/O in C (vllm_h200_disk_native.json) -------------------


def native_runs() -> dict[str, dict[str, Any]]:
    data = json.loads((ROOT / "data/results/vllm_h200_disk_native.json").read_text())
    return {run["file"]: run for run in data["runs"]}


def native_row(name: str) -> tuple[Any, ...]:
    summary = native_runs()[name]["summary"]
    return summary["wall_s"], summary["ttft_mean_s"], 100 * summary["cached_share"]


def native_gain() -> tuple[float, float]:
    (none_wall, none_ttft, _), (wall, ttft, _) = (
        native_row("long_none.json"),
        native_row("long_hkv.json"),
    )
    return 100 * (1 - wall / none_wall), 100 * (1 - ttft / none_ttft)


def native_loads() -> tuple[Any, ...]:
    t = native_runs()["long_hkv.json"]["tier"]
    rate = t["load_chunks"] * t["chunk_bytes"] / t["load_s"] / 1e9
    return t["load_chunks"], t["load_s"], rate, t["model_load_s"], t["file_bytes"], t["disk_bytes"]


def native_restart() -> tuple[Any, ...]:
    first, again = native_runs()["long_hkv.json"], native_runs()["long_hkv_restart.json"]
    return (
        again["tier_at_start"]["restored"],
        first["tier"]["written"],
        *again["outputs_equal_to_cpu_only"],
        again["tier"]["lost"],
    )


def fixed_restart() -> tuple[Any, ...]:
    run = native_runs()["long_hkv_b_restart.json"]
    return run["tier_at_start"]["restored"], run["tier"]["lost"], *run["outputs_equal_to_cpu_only"]


def busy(file: str, threads: int, busy_: bool, field: str) -> float:
    data = json.loads((ROOT / "data/results" / file).read_text())
    (row,) = [r for r in data["rows"] if r["threads"] == threads and r["busy"] == busy_]
    return row[field]


def serve_runs() -> tuple[dict, dict]:
    data = json.loads((ROOT / "data/results/vllm_serve_disk_h200.json").read_text())
    fresh, again = data["runs"]
    return fresh, again


def serve_numbers() -> tuple[Any, ...]:
    fresh, again = serve_runs()
    f, a = fresh["summary"], again["summary"]
    before, after = (
        again["disk_tier"]["stats_before_workload"][0],
        again["disk_tier"]["stats_after_workload"][0],
    )
    return (
        fresh["start_s"], f["wall_s"], f["ttft_mean_s"], 100 * f["cached_frac"],
        fresh["disk_tier"]["stats_after_workload"][0]["written"], before["restored"],
        a["wall_s"], a["ttft_mean_s"], 100 * a["cached_frac"], before["written"], after["lost"],
        max(r["disk_tier"]["dir_after_workload"]["file_bytes"] for r in (fresh, again)),
        again["disk_tier"]["bound_bytes"],
    )  # fmt: skip


NATIVE_CLAIMS: list[tuple[str, Callable[[], tuple[Any, ...]]]] = [
    ("ready in {:.0f} s. The workload took {:.1f} s with a mean TTFT of {:.2f} s, {:.1f} % of "
     "prompt tokens cached, and the tier wrote {:,} chunks. A second server started on the same "
     "directory found {:,} of them and ran the workload in {:.1f} s, mean TTFT {:.2f} s, {:.1f} % "
     "cached. Its warm-up's {:,} new chunks landed on restored ones, and as many read as lost",
     serve_numbers),
    ("The directory's files stayed at most at {:,} bytes against the bound of {:,}",
     lambda: serve_numbers()[-2:]),
    ("| long | none | {:.1f} | {:.2f} | {:.1f} % |", lambda: native_row("long_none.json")),
    ("| long | hkv, slot I/O in C | {:.1f} | {:.2f} | {:.1f} % |",
     lambda: native_row("long_hkv.json")),
    ("| long | hkv, restarted | {:.1f} | {:.2f} | {:.1f} % |",
     lambda: native_row("long_hkv_restart.json")),
    ("| long | hkv, restarted after a killed run (6198b5a) | {:.1f} | {:.2f} | {:.1f} % |",
     lambda: native_row("long_hkv_b_restart.json")),
    ("| anchor, 4 GiB CPU tier | hkv | {:.1f} | {:.3f} | {:.1f} % |",
     lambda: native_row("d4_hkv.json")),
    ("wall time by {:.1f} % and mean TTFT by {:.1f} % against the CPU-only engine", native_gain),
    ("moved {:,} chunks in {:.2f} s of load jobs, {:.2f} GB/s, where the calibrated profile's "
     "disk estimated {:.1f} s. The tier file stayed at {:,} bytes against a bound of {:,}",
     native_loads),
    ("found {:,} of the {:,} chunks it had written; {} of {} outputs equal the CPU-only run's. "
     "That build (32b606f) still handed a reopened file's slots out again: {:,} restored",
     native_restart),
    ("{:,} chunks found, {} lost, {} of {} outputs equal", fixed_restart),
    ("its loads took {:.3f} ms a chunk over all their chunks, but its estimate, which weighed "
     "loads rather than chunks, came to {:.3f} ms", lambda: (
         1e3 * (t := native_runs()["long_hkv_b_restart.json"]["tier"])["load_s"]
         / t["load_chunks"], 1e3 * t["measured_chunk_s"])),
    ("counted {} late stores",
     lambda: (native_runs()["d4_hkv.json"]["tier"]["late_stores_guarded"],)),
    ("one Python reader took {:.2f} ms a chunk beside the busy thread, against {:.2f} ms idle; "
     "eight took {:.2f} ms", lambda: (
         busy("disk_busy_h200.json", 1, True, "python_ms_per_chunk"),
         busy("disk_busy_h200.json", 1, False, "python_ms_per_chunk"),
         busy("disk_busy_h200.json", 8, True, "python_ms_per_chunk"))),
    ("There one reader took {:.2f} ms a chunk beside the busy thread, and eight took {:.2f} ms",
     lambda: (busy("disk_busy_h200.json", 1, True, "c_ms_per_chunk"),
              busy("disk_busy_h200.json", 8, True, "c_ms_per_chunk"))),
    ("Idle, one reader was slower than Python's ({:.2f} against {:.2f} ms)",
     lambda: (busy("disk_busy_h200.json", 1, False, "c_ms_per_chunk"),
              busy("disk_busy_h200.json", 1, False, "python_ms_per_chunk"))),
    ("one idle reader takes {:.2f} ms a chunk against Python's {:.2f}, and {:.2f} against {:.2f} "
     "beside the busy thread", lambda: (
         busy("disk_busy_cpu.json", 1, False, "c_ms_per_chunk"),
         busy("disk_busy_cpu.json", 1, False, "python_ms_per_chunk"),
         busy("disk_busy_cpu.json", 1, True, "c_ms_per_chunk"),
         busy("disk_busy_cpu.json", 1, True, "python_ms_per_chunk"))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("snippet", "values"), NATIVE_CLAIMS, ids=[c[0][:40] for c in NATIVE_CLAIMS]
)
def test_docs_native_disk_number(snippet: str, values: Callable[[], tuple[Any, ...]]) -> None:
    text = " ".join(snippet.format(*values()).split())
    assert text in README, f"the docs should say: {text!r}"
