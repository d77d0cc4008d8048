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
