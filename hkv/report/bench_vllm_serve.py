"""Tables from `vllm_serve_h200.json`: hkv's policies in a running `vllm serve` on the H200,
driven over HTTP by a multi-turn client (`python -m bench.vllm_serve`), beside the same sessions
run offline in one engine (`vllm_h200_mm_offline.json`, `python -m bench.vllm_gpu run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

SERVE_FORMAT = {
    "cached %": "{:.1f}",
    "TTFT p50 (s)": "{:.3f}",
    "TTFT p90 (s)": "{:.3f}",
    "TTFT p99 (s)": "{:.3f}",
    "requests/s": "{:.2f}",
    "prompt tokens/s": "{:,.0f}",
    "start (s)": "{:.0f}",
}


def serve_table(serve: dict[str, Any]) -> pd.DataFrame:
    """Per policy (one server each): cached share, TTFT percentiles, throughput, failed stores,
    time to start, the class that served the policy and its module (hkv's through the entry
    point), and the bad-input probe: answers, health afterwards, hkv's warnings in the log."""
    import pandas as pd

    rows = []
    for run in serve["runs"]:
        s, bad = run["summary"], run["bad_input"]
        statuses = sorted({r["status"] for r in bad["requests"].values()})
        by = run["served_by"]
        rows.append(
            {
                "policy": run["policy"],
                "cached %": 100 * s["cached_frac"],
                "TTFT p50 (s)": s["ttft_p50_s"],
                "TTFT p90 (s)": s["ttft_p90_s"],
                "TTFT p99 (s)": s["ttft_p99_s"],
                "requests/s": s["requests_per_s"],
                "prompt tokens/s": s["prompt_tokens_per_s"],
                "failed stores": s["failed_stores"],
                "requests ok": f"{s['requests_ok']}/{s['requests']}",
                "start (s)": run["start_s"],
                "served by": f"{by['policy_module']}.{by['policy_class']}",
                "bad-input answers": "/".join(map(str, statuses)),
                "healthy after": bad["healthy_after"],
                "hkv warnings": run["hkv_warnings_in_log"],
            }
        )
    return pd.DataFrame(rows).set_index("policy")


def served_vs_offline(serve: dict[str, Any], offline: dict[str, Any]) -> pd.DataFrame:
    """Cached share of each policy run both ways (same sessions, same machine), in points."""
    import pandas as pd

    served = {r["policy"]: 100 * r["summary"]["cached_frac"] for r in serve["runs"]}
    rows = [
        {
            "policy": run["policy"],
            "offline %": 100 * run["cached_frac"],
            "served %": served[run["policy"]],
            "served - offline (points)": served[run["policy"]] - 100 * run["cached_frac"],
        }
        for run in offline["runs"]
        if run["policy"] in served
    ]
    return pd.DataFrame(rows).set_index("policy")


def serve_summary(table: pd.DataFrame, comparison: pd.DataFrame) -> dict[str, Any]:
    """What notebook 08 saves: the table's rows and the served-versus-offline gaps."""
    return {
        "table": table.reset_index().to_dict(orient="records"),
        "served_minus_offline_points": comparison["served - offline (points)"].to_dict(),
    }
