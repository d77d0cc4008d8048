"""Tables from `vllm_h200_auto.json`: `auto` and `predictive` against vLLM's lru and arc in real
vLLM on the H200 (`python -m bench.vllm_gpu run ... --popularity`, folded with `fold`)."""

from __future__ import annotations

from typing import Any

POLICIES = ("lru", "arc", "hkv_auto", "hkv_predictive")


def _workload(run: dict[str, Any]) -> str:
    popularity = run.get("popularity", 0.0)
    return "anchor" if not popularity else f"skewed (Zipf {popularity:g})"


def runs_by_cell(results: dict[str, Any]) -> dict[tuple[str, float], dict[str, dict]]:
    """(workload, CPU tier GiB) -> policy -> its run's summary (the first repeat)."""
    cells: dict[tuple[str, float], dict[str, dict]] = {}
    for run in results["runs"]:
        cell = cells.setdefault((_workload(run), run["cpu_gib"]), {})
        cell.setdefault(run["policy"], run)
    return dict(sorted(cells.items(), key=lambda item: (item[0][0] != "anchor", item[0])))


def cached_table(results: dict[str, Any]) -> str:
    """Markdown: cached share of prompt tokens per policy (failed stores noted)."""
    lines = [
        "| workload | CPU tier | " + " | ".join(POLICIES) + " |",
        "|---|---|" + "---|" * len(POLICIES),
    ]
    for (workload, gib), runs in runs_by_cell(results).items():
        cells = []
        for name in POLICIES:
            run = runs[name]
            text = f"{100 * run['cached_frac']:.1f} %"
            if run["failed_stores"]:
                text += f" ({run['failed_stores']} failed stores)"
            cells.append(text)
        lines.append(f"| {workload} | {gib:g} GiB | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def policy_ms_per_step(results: dict[str, Any], workload: str, gib: float) -> dict[str, float]:
    """Each policy's own time per scheduler step, ms (net of the timer's cost)."""
    runs = runs_by_cell(results)[(workload, gib)]
    return {name: 1000 * runs[name]["policy_s_per_step_net"] for name in POLICIES}


def policy_time_table(results: dict[str, Any]) -> str:
    """Markdown: each policy's own time over the whole run (net of the timer) per engine, as a
    multiple of vLLM's lru in the same engine, and how often `auto` changed its leader (where
    the run recorded it)."""
    others = [name for name in POLICIES if name != "lru"]
    lines = [
        "| workload | CPU tier | lru (s) | "
        + " | ".join(f"{n} / lru" for n in others)
        + " | auto's switches |",
        "|---|---|---|" + "---|" * len(others) + "---|",
    ]
    for (workload, gib), runs in runs_by_cell(results).items():
        lru = runs["lru"]["policy_s_net"]
        ratios = [f"{runs[name]['policy_s_net'] / lru:.1f}x" for name in others]
        switches = runs["hkv_auto"].get("policy_switches")
        lines.append(
            f"| {workload} | {gib:g} GiB | {lru:.2f} | "
            + " | ".join(ratios)
            + f" | {'-' if switches is None else switches} |"
        )
    return "\n".join(lines)
