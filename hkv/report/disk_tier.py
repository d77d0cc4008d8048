"""Notebook 07's disk-tier section: the cost model's disk crossover by bandwidth, the plot of
disk bytes against the bound, and the section's summary in words.

The runs themselves (`hkv.integrations.vllm.tier_demo`) need vLLM; what is here does not.
pandas, matplotlib and seaborn are imported by the functions that use them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hkv.cost import CostModel
from hkv.report.figures import save_figure
from hkv.sim.disk_plan import with_disk_gbps

H200_RESULTS = "data/results/vllm_h200_disk.json"
"""Where the same tier's runs in vLLM on the H200 are recorded (`python -m bench.vllm_gpu.disk`)."""
MAX_CONTEXT_TOKENS = 1 << 21


def crossover_table(
    cost: CostModel, disk_gbps: Iterable[float], chunk_tokens: Sequence[int]
) -> list[dict[str, Any]]:
    """Per disk read bandwidth (GB/s) and chunk size (tokens), the shortest prompt whose
    chunks load from disk faster than they recompute (`CostModel.disk_crossover_tokens`;
    None: no prompt up to 2M tokens)."""
    rows = []
    for gbps in disk_gbps:
        model = with_disk_gbps(cost, gbps)
        for tokens in chunk_tokens:
            crossover = model.disk_crossover_tokens(tokens, MAX_CONTEXT_TOKENS)
            rows.append({"disk GB/s": gbps, "chunk tokens": tokens, "crossover tokens": crossover})
    return rows


def plot_disk_bytes(
    rows: Sequence[Mapping[str, int]], bound_bytes: int, path: str | os.PathLike[str]
) -> Path:
    """Bytes on disk after each request, vLLM's `fs` tier against hkv's, with hkv's bound;
    returns the saved PNG. `rows`: `{"requests", "fs_bytes", "hkv_file_bytes",
    "hkv_chunk_bytes"}` each."""
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    names = {
        "fs_bytes": "vLLM fs tier",
        "hkv_file_bytes": "hkv disk tier (file)",
        "hkv_chunk_bytes": "hkv disk tier (chunks held)",
    }
    data = (
        pd.DataFrame(rows)
        .rename(columns=names)
        .melt(id_vars="requests", var_name="tier", value_name="bytes")
    )
    data["MiB"] = data["bytes"] / 2**20
    fig, ax = plt.subplots(figsize=(8, 4.2))
    sns.lineplot(data=data, x="requests", y="MiB", hue="tier", marker="o", ax=ax)
    ax.axhline(bound_bytes / 2**20, color="black", linestyle="--", label="hkv's bound")
    ax.set(xlabel="requests stored", ylabel="MiB on disk")
    ax.set_title("disk bytes as the workload streams through vLLM's tiering manager")
    ax.legend(title=None)
    fig.tight_layout()
    return save_figure(fig, path)


def tier_summary(tier: Mapping[str, Any]) -> str:
    """The section's findings in Markdown, from the section's results (`tier`)."""
    hits, restart, admitted = tier["hits"], tier["restart"], tier["admission"]
    refused = [r["prompt_tokens"] for r in admitted["requests"] if not r["written"]]
    written = [r["prompt_tokens"] for r in admitted["requests"] if r["written"]]
    return (
        f"After {tier['requests']} requests, vLLM's `fs` tier holds "
        f"{tier['fs_bytes'] / 2**20:.2f} MiB and grows with every request; hkv's file, "
        f"preallocated, never exceeds {tier['hkv_file_bytes'] / 2**20:.2f} MiB (bound "
        f"{tier['bound_bytes'] / 2**20:.2f} MiB): once the chunks it holds fill it, its policy "
        f"evicted {hits['disk_tier']['evicted']} of {hits['disk_tier']['written']} written. "
        f"On the second pass, of "
        f"{sum(hits[s] for s in ('cpu', 'disk', 'miss'))} chunk lookups, {hits['cpu']} were "
        f"served by the CPU tier, {hits['disk']} by the disk tier, {hits['miss']} missed. "
        f"After a restart the new tier found {restart['found']} chunks "
        f"({restart['resident_before']} before) and chunk {restart['chunk']} came back "
        f"{'byte for byte' if restart['bytes_equal'] else 'with OTHER bytes'}. With the cost "
        f"model's crossover of {_tokens(admitted['crossover_tokens'])} tokens, prompts of "
        f"{', '.join(f'{t:,}' for t in refused) or 'no length'} tokens were refused "
        f"({admitted['refused']} chunks) and prompts of "
        f"{', '.join(f'{t:,}' for t in written) or 'no length'} tokens written "
        f"({admitted['written']} chunks). The same tier in vLLM 0.26 on the H200, against "
        f"the `fs` tier and CPU-only, is recorded in `{H200_RESULTS}`."
    )


def _tokens(crossover: int | None) -> str:
    return "no number of" if crossover is None else f"{crossover:,}"
