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
