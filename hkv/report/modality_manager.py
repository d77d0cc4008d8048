"""Notebook 07's analysis: a multimodal trace served by `hkv.storage.manager.HybridKVCacheManager`
under a `HybridKVCacheConfig`, what it saves per modality, what quantization costs, and the
load-or-recompute decisions of the cost model.

A block's KV is standard-normal numbers seeded by its id (`block_kv`), so the original can be
regenerated to measure the error of a round trip. torch, pandas, matplotlib and seaborn are
imported by the functions that use them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.cost import CostModel
from hkv.report.figures import save_figure
from hkv.sim import Trace

# (tokens, position) of the blocks whose load-or-recompute decision notebook 07 shows
DECISION_BLOCKS = ((16, 4096), (512, 4096), (512, 131072))


def resolve_device(device: str) -> str:
    """`device`, or for "auto" "cuda" when torch sees a GPU and "cpu" otherwise."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def block_kv(key: int, layout):
    """The KV of block `key`: standard normal, seeded by `key`, in `layout`'s shape and dtype."""
    import torch

    kv = torch.randn(layout.shape, generator=torch.Generator().manual_seed(key))
    return kv.to(layout.torch_dtype)


def settings_table(config, layout, manager):
    """A DataFrame by modality: offload priority, cold format, hot cap, bits per value and the
    bytes a block takes in the manager's host arena."""
    import pandas as pd

    from hkv.storage.quant import codec

    rows = []
    for m in Modality:
        settings = config.modality(m)
        cold = codec(layout, settings.quantization)
        rows.append(
            {
                "modality": m.value,
                "offload_priority": settings.offload_priority,
                "cold format": settings.quantization,
                "max_keep_blocks": settings.max_keep_blocks,
                "bits per value": cold.bits_per_value,
                "host bytes per block": manager.host.stride_bytes(cold.payload_bytes),
            }
        )
    return pd.DataFrame(rows).set_index("modality")


def block_modalities(trace: Trace) -> dict[int, str]:
    """Block id -> the modality of most of its tokens (text where the trace has no labels)."""
    return {
        key: (r.modalities[i] if r.modalities else Modality.TEXT).value
        for r in trace.requests
        for i, key in enumerate(r.hash_ids)
    }


def workload_summary(trace: Trace) -> dict[str, int]:
    """Requests, block references, distinct blocks, the largest request and the distinct
    blocks of each modality."""
    modality = block_modalities(trace)
    return {
        "requests": len(trace),
        "block references": trace.num_block_refs,
        "distinct blocks": len(modality),
        "largest request (blocks)": max(len(r.hash_ids) for r in trace.requests),
        **{
            f"distinct {m.value} blocks": sum(v == m.value for v in modality.values())
            for m in Modality
        },
    }


def serve(manager, trace: Trace, block_tokens: int, kv=block_kv) -> dict[str, int]:
    """Serve `trace` request by request: pin its blocks (promoting cold ones), admit the
    missing ones with `kv(key, layout)`, unpin. Returns the peak hot blocks per modality,
    read between requests. Raises AssertionError when the manager refuses a request."""
    peak_hot = {m.value: 0 for m in Modality}
    for request in trace.requests:
        found = manager.access(request.hash_ids, pin=True)
        assert found.ok, found.reason
        for index, key in enumerate(request.hash_ids):
            if key not in manager:
                meta = request.block_meta(index, block_tokens)
                admitted = manager.admit(
                    key,
                    kv(key, manager.layout),
                    modality=meta.modality,
                    position=meta.position,
                    tokens=meta.tokens,
                    pin=True,
                )
                assert admitted.ok, admitted.reason
        manager.unpin(request.hash_ids)
        for m in Modality:
            peak_hot[m.value] = max(peak_hot[m.value], len(manager.block_ids(Tier.GPU, m)))
    return peak_hot


def caps_sentence(peak_hot: Mapping[str, int], caps: Mapping[str, int]) -> str:
    """Whether a modality's `max_keep_blocks` bound its blocks on the GPU (`serve`'s peaks: the
    manager never holds more hot blocks of a modality than its cap)."""
    bound = [m for m, cap in caps.items() if peak_hot.get(m, 0) >= cap]
    peaks = ", ".join(f"{m} {peak_hot.get(m, 0):,} of {cap:,}" for m, cap in caps.items())
    if not bound:
        return f"No cap binds at this size: each modality's peak stays below it ({peaks})."
    its, it = ("their", "them") if len(bound) > 1 else ("its", "it")
    return (f"The cap binds for {', '.join(bound)} at this size: {its} blocks on the GPU reached "
            f"{it} and the manager demoted the next ones ({peaks}).")  # fmt: skip


def stats_summary(stats: Mapping[str, Any]) -> dict[str, float]:
    """The manager's counters in words: hits per tier, misses, demotions, drops, MB moved and
    transfer seconds."""
    return {
        "hits on the GPU": stats["hits"]["gpu"],
        "hits in host RAM (promoted)": stats["hits"]["host"],
        "hits on disk (promoted)": stats["hits"]["disk"],
        "computed (not held)": stats["misses"],
        "demoted GPU -> host": stats["demoted"]["host"],
        "demoted host -> disk": stats["demoted"]["disk"],
        "dropped from a full disk": stats["dropped"],
        "MB moved GPU -> host": stats["bytes_moved"]["gpu_to_host"] / 1e6,
        "MB moved host -> disk": stats["bytes_moved"]["host_to_disk"] / 1e6,
        "transfer seconds, all links": sum(stats["transfer_s"].values()),
    }


def memory_table(usage: Mapping[str, Mapping[str, Mapping[str, int]]]):
    """A DataFrame by modality of `manager.usage()`: held blocks, MB all hot in bf16, on the
    GPU, in host RAM as stored and as bf16, disk blocks, and the shares of GPU memory and of
    host memory saved."""
    import pandas as pd

    memory = pd.DataFrame(
        [
            {
                "modality": m,
                "held blocks": sum(t["blocks"] for t in tiers.values()),
                "all hot, bf16 (MB)": sum(t["raw_bytes"] for t in tiers.values()) / 1e6,
                "on GPU (MB)": tiers["gpu"]["stored_bytes"] / 1e6,
                "host, as stored (MB)": tiers["host"]["stored_bytes"] / 1e6,
                "host, if bf16 (MB)": tiers["host"]["raw_bytes"] / 1e6,
                "disk blocks": tiers["disk"]["blocks"],
            }
            for m, tiers in usage.items()
        ]
    ).set_index("modality")
    memory["GPU memory saved"] = 1 - memory["on GPU (MB)"] / memory["all hot, bf16 (MB)"]
    memory["host memory saved by quantization"] = (
        1 - memory["host, as stored (MB)"] / memory["host, if bf16 (MB)"]
    )
    return memory


def quant_errors(manager, config, sample_blocks: int, kv=block_kv):
    """A DataFrame by modality: `quantization_error` of up to `sample_blocks` cold blocks (half
    from host RAM, half from disk) brought back through `manager`, against `kv(key, layout)`,
    with how many came from each tier (a modality with no cold block: its format, no error)."""
    import pandas as pd
    import torch

    from hkv.storage.quant import quantization_error

    rows, half, layout = [], sample_blocks // 2, manager.layout
    for m in Modality:
        sample = manager.block_ids(Tier.HOST, m)[:half] + manager.block_ids(Tier.DISK, m)[:half]
        fmt = config.modality(m).quantization
        if not sample:  # (no cold block of this modality: a workload without it; no error read)
            rows.append({"modality": m.value, "fmt": fmt, "blocks": 0, "from host": 0,
                         "from disk": 0})  # fmt: skip
            continue
        sources = pd.Series([manager.where(k).name.lower() for k in sample]).value_counts()
        back = manager.access(sample)
        assert back.ok and not back.to_compute, back
        restored = torch.stack([manager.gpu_view(k) for k in sample]).cpu()
        original = torch.stack([kv(k, layout) for k in sample])
        error = quantization_error(original, fmt, layout, restored=restored)
        rows.append(
            {
                "modality": m.value,
                **error.to_dict(),
                "blocks": len(sample),
                "from host": int(sources.get("host", 0)),
                "from disk": int(sources.get("disk", 0)),
            }
        )
    return pd.DataFrame(rows).set_index("modality")


def serve_zeros(manager, trace: Trace, block_tokens: int) -> int:
    """Serve `trace` with all-zero blocks (only placement matters); returns the peak of vision
    blocks on the GPU between requests."""
    import torch

    zeros = torch.zeros(manager.layout.shape, dtype=manager.layout.torch_dtype)
    peak_vision = 0
    for request in trace.requests:
        access = manager.access(request.hash_ids, pin=True)
        assert access.ok, access.reason
        for index, key in enumerate(request.hash_ids):
            if key not in manager:
                meta = request.block_meta(index, block_tokens)
                admitted = manager.admit(
                    key, zeros, modality=meta.modality, position=meta.position, pin=True
                )
                assert admitted.ok, admitted.reason  # (not an unpin of a block never held)
        manager.unpin(request.hash_ids)
        peak_vision = max(peak_vision, len(manager.block_ids(Tier.GPU, Modality.VISION)))
    return peak_vision


def decision_table(cost: CostModel, config, blocks: Iterable[tuple[int, int]] = DECISION_BLOCKS):
    """A DataFrame by (modality, tokens, position, tier): load and recompute ms of a block in
    its modality's cold format from host RAM and from disk, and the cheaper action."""
    import pandas as pd

    rows = [
        {
            "modality": m.value,
            "tokens": tokens,
            "position": position,
            "tier": tier.name.lower(),
            "load ms": d.load_s * 1e3,
            "recompute ms": d.recompute_s * 1e3,
            "decision": d.action,
        }
        for m in Modality
        for tokens, position in blocks
        for tier in (Tier.HOST, Tier.DISK)
        for d in [
            cost.decide(
                BlockMeta(tokens=tokens, position=position, modality=m),
                tier,
                config.modality(m).quantization,
            )
        ]
    ]
    return pd.DataFrame(rows).set_index(["modality", "tokens", "position", "tier"])


def plot_savings(memory, errors, device: str, path: str | os.PathLike[str]) -> Path:
    """Two panels: memory saved per modality, and the relative L2 errors of K, V and attention
    after a round trip; returns the saved PNG."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    fig, (ax_mem, ax_err) = plt.subplots(1, 2, figsize=(12, 4.8))
    labels = {m: f"{m} ({errors.loc[m, 'fmt']})" for m in errors.index}
    saved = (
        memory[["GPU memory saved", "host memory saved by quantization"]]
        .rename(index=labels)
        .reset_index()
        .melt(id_vars="modality", var_name="saving", value_name="fraction")
    )
    sns.barplot(data=saved, x="modality", y="fraction", hue="saving", palette="crest", ax=ax_mem)
    ax_mem.set(
        ylim=(0, 1.25), xlabel="modality (cold format)", ylabel="fraction of bf16 bytes saved"
    )
    ax_mem.set_title("memory saved per modality")
    ax_mem.legend(title=None, loc="upper center", ncol=2, fontsize="small")
    error_long = (
        errors[["key_rel_l2", "value_rel_l2", "attention_rel_l2"]]
        .rename(columns={"key_rel_l2": "K", "value_rel_l2": "V", "attention_rel_l2": "attention"})
        .rename(index=labels)
        .reset_index()
        .melt(id_vars="modality", var_name="of", value_name="relative L2 error")
    )
    sns.barplot(
        data=error_long, x="modality", y="relative L2 error", hue="of", palette="flare", ax=ax_err
    )
    ax_err.set(
        ylim=(0, error_long["relative L2 error"].max() * 1.3), xlabel="modality (cold format)"
    )
    ax_err.set_title("error after a round trip through host RAM and disk")
    ax_err.legend(title=None, loc="upper left", ncol=3, fontsize="small")
    fig.suptitle(f"the article's HybridKVCacheConfig on hkv's block manager ({device})")
    fig.tight_layout()
    return save_figure(fig, path)
