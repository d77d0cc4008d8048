"""Notebook 02's tables and figure: a model's config, its KV and weight bytes, plans on H200s.

Every function reads a `ModelSpec` (and plans made with `hkv.planning.plan`); pandas,
matplotlib and seaborn are imported by the functions that tabulate or draw.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hkv.models.model_spec import ModelSpec
from hkv.planning.plan import GIB, MemoryPlan, PlanInputs, plan, weights_bytes
from hkv.report.figures import save_figure

WEIGHTS_DTYPES = ("bf16", "fp8", "int4")
MULTIMODAL_WORDS = ("vision", "audio", "image", "video")
# config.json field -> how the tiny model's table names it
TINY_DIMS = {
    "num_hidden_layers": "decoder layers",
    "hidden_size": "hidden size",
    "num_attention_heads": "query heads",
    "num_key_value_heads": "KV heads",
    "head_dim": "head_dim",
    "rotary_dim": "rotary_dim",
    "num_local_experts": "routed experts",
    "num_experts_per_tok": "active experts",
    "intermediate_size": "expert intermediate size",
    "vocab_size": "vocabulary",
    "scoring_func": "router scoring",
    "use_routing_bias": "routing bias",
    "use_qk_norm": "qk-norm",
    "use_mtp": "MTP",
}


def multimodal_fields(raw: Mapping[str, Any]) -> list[str]:
    """The config.json keys that mention vision, audio, image or video."""
    return [k for k in raw if any(word in k for word in MULTIMODAL_WORDS)]


def _layer_kinds(spec: ModelSpec) -> str:
    return ", ".join(f"{g.num_layers} x {g.kind.value}" for g in spec.layer_groups)


def config_table(spec: ModelSpec):
    """A DataFrame, one row per config field that decides memory (index `field`)."""
    import pandas as pd

    raw, published = spec.raw, spec.published
    rows = [
        ("architecture", spec.architecture),
        ("decoder layers", spec.num_layers),
        ("layer kinds", _layer_kinds(spec)),
        ("hidden size", spec.hidden_size),
        ("query heads", spec.num_attention_heads),
        ("KV heads", spec.num_kv_heads),
        ("head_dim", spec.head_dim),
        ("rotary_dim (partial RoPE)", raw.get("rotary_dim", "-")),
        ("routed experts / active per token", f"{spec.num_experts} / {spec.num_experts_per_tok}"),
        ("expert intermediate size", raw.get("intermediate_size", "-")),
        ("router scoring", raw.get("scoring_func", "-")),
        ("MTP modules", spec.num_mtp_modules),
        ("vocabulary", spec.vocab_size),
        ("context (max_position_embeddings)", spec.max_position_embeddings),
        ("rope_theta", raw.get("rope_theta", "-")),
        (
            "checkpoint weights",
            f"{spec.native_weights_dtype} ({(raw.get('quantization_config') or {}).get('fmt')})",
        ),
        (
            "parameters, total (from dims / published)",
            f"{spec.total_params / 1e9:.1f}B / {published['published_total_params'] / 1e9:.1f}B",
        ),
        (
            "parameters, active per token (from dims / published)",
            f"{spec.active_params / 1e9:.1f}B / {published['published_active_params'] / 1e9:.1f}B",
        ),
    ]
    return pd.DataFrame(rows, columns=["field", "value"]).set_index("field")


def article_claims(spec: ModelSpec):
    """A DataFrame: the article's claim about the model against what config.json says."""
    import pandas as pd

    fields = multimodal_fields(spec.raw)
    attention = (
        "MLA"
        if spec.is_mla
        else f"GQA ({spec.num_attention_heads} query / {spec.num_kv_heads} KV heads), "
        + ", ".join(f"{g.kind.value} in {g.num_layers} layers" for g in spec.layer_groups)
    )
    rows = [
        (
            "parameters",
            "72B",
            f"{spec.total_params / 1e9:.0f}B total, {spec.active_params / 1e9:.0f}B active "
            f"(MoE: {spec.num_experts} experts, top-{spec.num_experts_per_tok})",
        ),
        ("context", "128K (131,072 tokens)", f"{spec.max_position_embeddings:,} tokens"),
        (
            "modalities",
            "12",
            ", ".join(fields) or "text only: no vision, audio, image or video field",
        ),
        ("attention", "MLA", attention),
    ]
    return pd.DataFrame(rows, columns=["", "article", "config.json"]).set_index("")


def kv_size_table(spec: ModelSpec, sizes: Mapping[str, int]):
    """A DataFrame indexed by `sizes`' names: bf16 and fp8 KV bytes and GiB of that many tokens."""
    import pandas as pd

    rows = [
        {
            "KV of": name,
            "bf16 bytes": spec.kv_bytes_per_seq(tokens),
            "bf16 GiB": spec.kv_bytes_per_seq(tokens) / GIB,
            "fp8 bytes": spec.kv_bytes_per_seq(tokens, "fp8"),
            "fp8 GiB": spec.kv_bytes_per_seq(tokens, "fp8") / GIB,
        }
        for name, tokens in sizes.items()
    ]
    return pd.DataFrame(rows).set_index("KV of")


def weights_table(spec: ModelSpec, dtypes: Iterable[str] = WEIGHTS_DTYPES):
    """A DataFrame indexed by weights dtype: GB, GiB, and GiB per GPU on 2 and on 8 GPUs."""
    import pandas as pd

    rows = [
        {
            "weights dtype": dtype,
            "GB": weights_bytes(spec, dtype) / 1e9,
            "GiB": weights_bytes(spec, dtype) / GIB,
            "GiB per GPU, 2 GPUs": weights_bytes(spec, dtype) / GIB / 2,
            "GiB per GPU, 8 GPUs": weights_bytes(spec, dtype) / GIB / 8,
        }
        for dtype in dtypes
    ]
    return pd.DataFrame(rows).set_index("weights dtype")


def plan_grid(
    spec: ModelSpec, gpu_counts: Iterable[int], contexts: Iterable[int], **inputs: Any
) -> dict[tuple[int, int], MemoryPlan]:
    """One plan per (GPU count, max_model_len); `inputs` are the other `PlanInputs` fields."""
    return {
        (gpus, tokens): plan(spec, PlanInputs(gpus=gpus, max_model_len=tokens, **inputs))
        for gpus in gpu_counts
        for tokens in contexts
    }


def plan_rows(plans: Mapping[tuple[int, int], MemoryPlan]) -> list[dict[str, Any]]:
    """One row per plan of `plan_grid`: fits, weights and KV budget per GPU, the CPU tier."""
    return [
        {
            "gpus": gpus,
            "max_model_len": tokens,
            "fits": p.fits,
            "weights GiB per GPU": round(p.weights_bytes_per_gpu / GIB, 1),
            "GPU KV budget GiB": round(p.gpu_kv_budget_bytes / GIB, 1),
            "max seqs on GPU": p.max_seqs_on_gpu,
            "CPU tier GiB": round(p.offload_bytes / GIB, 1),
            "CPU tier bound by": p.offload_bound_by,
            "offload_bytes": p.offload_bytes,
        }
        for (gpus, tokens), p in plans.items()
    ]


def kv_by_hand(spec: ModelSpec) -> tuple[str, int]:
    """A token's bf16 KV bytes worked out from the config's fields, and how: MLA keeps one
    latent (`kv_lora_rank`) and the rotary values (`qk_rope_head_dim`) a layer, shared by all
    heads; attention with KV heads keeps K and V of each head (a window bounds the tokens held,
    not a token's bytes)."""
    layers = spec.num_layers
    if spec.is_mla:
        rank, rope = int(spec.raw["kv_lora_rank"]), int(spec.raw["qk_rope_head_dim"])
        return f"{layers} x ({rank} + {rope}) x 2", layers * (rank + rope) * 2
    heads, dim = spec.num_kv_heads, spec.head_dim
    return f"{layers} x 2 x {heads} x {dim} x 2", layers * 2 * heads * dim * 2


def kv_budget_gib(plan_result: MemoryPlan, spec: ModelSpec, gpus: int) -> float:
    """A plan's GPU KV budget in GiB of whole KV, as `kv_curves` counts it: KV split over the
    GPUs by its heads counts in full, a replicated one (MLA's latent, or more GPUs than KV heads)
    only once for the copies every GPU holds."""
    return plan_result.gpu_kv_budget_bytes / (gpus * spec.kv_shard_fraction(gpus)) / GIB


def kv_curves(spec: ModelSpec, concurrency: Iterable[int], points: int):
    """A long DataFrame: KV GiB (bf16) of `concurrency` sequences at `points` context lengths
    spaced geometrically from 1K to the model's context."""
    import numpy as np
    import pandas as pd

    context_tokens = np.unique(np.geomspace(1024, spec.max_position_embeddings, points).astype(int))
    rows = [
        {
            "context tokens": int(tokens),
            "concurrent sequences": str(seqs),
            "KV GiB": seqs * spec.kv_bytes_per_seq(int(tokens)) / GIB,
        }
        for seqs in concurrency
        for tokens in context_tokens
    ]
    return pd.DataFrame(rows)


def plot_kv_memory(
    curves,
    budgets_gib: Mapping[int, float],
    spec: ModelSpec,
    seq_tokens: int,
    path: str | os.PathLike[str],
) -> Path:
    """Draw `kv_curves` with the GPU KV budgets as horizontal lines; returns the saved PNG."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import StrMethodFormatter

    sns.set_theme(style="whitegrid", context="notebook")
    model = (spec.hub_id or spec.name).split("/")[-1]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    sns.lineplot(
        data=curves,
        x="context tokens",
        y="KV GiB",
        hue="concurrent sequences",
        palette="viridis",
        linewidth=2.2,
        ax=ax,
    )
    colors = sns.color_palette("Reds_d", len(budgets_gib))
    for (gpus, gib), color in zip(budgets_gib.items(), colors, strict=True):
        ax.axhline(gib, color=color, linestyle="--", linewidth=1.5)
        ax.annotate(
            f"GPU KV budget, {gpus} x H200: {gib:,.0f} GiB", (1100, gib * 1.12), color=color
        )
    ax.axvline(seq_tokens, color="grey", linestyle=":", linewidth=1.2)
    ax.text(
        seq_tokens / 1.06,
        0.97,
        "the article's\n--max-model-len",
        color="grey",
        ha="right",
        va="top",
        transform=ax.get_xaxis_transform(),
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = [1024, 4096, 16384, seq_tokens, 131072, spec.max_position_embeddings]
    ax.set_xticks(ticks, labels=[f"{t // 1024}K" for t in ticks])
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,g}"))
    ax.set(
        xlabel="context length (tokens)",
        ylabel="KV cache (GiB, bf16)",
        title=f"{model} KV cache: {spec.kv_bytes_per_token():,} bytes per token",
    )
    ax.legend(title="concurrent sequences", loc="lower right")
    fig.tight_layout()
    return save_figure(fig, path)


def spec_results(spec: ModelSpec, seq_tokens: int) -> dict[str, Any]:
    """The config's numbers notebook 02 records: shape, parameters, KV and weight bytes."""
    return {
        "model": spec.name,
        "num_layers": spec.num_layers,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "max_position_embeddings": spec.max_position_embeddings,
        "is_mla": spec.is_mla,
        "multimodal_fields": multimodal_fields(spec.raw),
        "total_params": spec.total_params,
        "active_params": spec.active_params,
        "kv_bytes_per_token": spec.kv_bytes_per_token(),
        "kv_bytes_per_token_fp8": spec.kv_bytes_per_token("fp8"),
        "seq_tokens": seq_tokens,
        "kv_bytes_per_seq_32k": spec.kv_bytes_per_seq(seq_tokens),
        "kv_bytes_per_seq_max_context": spec.kv_bytes_per_seq(spec.max_position_embeddings),
        "weights_bytes": {dtype: weights_bytes(spec, dtype) for dtype in WEIGHTS_DTYPES},
    }


def tiny_dims_table(raw: Mapping[str, Any], tiny_raw: Mapping[str, Any]):
    """A DataFrame of `TINY_DIMS`, as strings: the full model's value next to the tiny one's."""
    import pandas as pd

    return pd.DataFrame(
        {
            "MiniMax-M2.5": [raw.get(k) for k in TINY_DIMS],
            "tiny": [tiny_raw.get(k) for k in TINY_DIMS],
        },
        index=list(TINY_DIMS.values()),
    ).astype(str)


def tokens_table(
    prompts: list[str], hf_tokens: list[list[int]], vllm_tokens: list[list[int]], texts
):
    """A DataFrame, one row per prompt: each engine's greedy tokens, whether they agree, text."""
    import pandas as pd

    return pd.DataFrame(
        {
            "prompt": prompts,
            "transformers": [str(ids) for ids in hf_tokens],
            "vLLM (CPU)": [str(ids) for ids in vllm_tokens],
            "equal": [a == b for a, b in zip(hf_tokens, vllm_tokens, strict=True)],
            "text (random weights)": texts,
        }
    )
