"""Notebook 06's analysis: the CPU tier's formula term by term, load against recompute per
tier and position, the break-even bandwidth, LRU at two cache sizes, cold formats' bytes and
round-trip error.

pandas is imported by the functions that tabulate; torch only by `quant_round_trip`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hkv.blocks import BlockMeta, Tier
from hkv.cost import CostModel, HardwareProfile
from hkv.errors import HkvError
from hkv.models.model_spec import ModelSpec
from hkv.planning.plan import GIB, HOST_RAM_FRACTION, MemoryPlan
from hkv.policies import make_policy
from hkv.sim import Trace, replay

LOSSLESS = ("fp16", "bf16")


BOUND_BY = {
    "host_ram": "host RAM (0.7 x {ram:g} GiB)",
    "offload_percent": "the requested {percent:g} of the KV cache (under the RAM cap)",
    "offload_size": "the size given",
    "gpu_overflow": "what the GPUs cannot hold",
}
"""`MemoryPlan.offload_bound_by` in words (`tier_sentence`); `does_not_fit` has its own sentence."""


def tier_sentence(p: MemoryPlan, offload_percent: float) -> str:
    """What the GPUs and the CPU tier hold of `p.max_num_seqs` full-length sequences, which term
    bounds the tier, and the host RAM `offload_percent` of the KV cache would need."""
    need = p.kv_demand_bytes * offload_percent / HOST_RAM_FRACTION / GIB
    ram = f"{offload_percent:g} of the KV cache would need {need:.0f} GiB of host RAM."
    if p.offload_bound_by == "does_not_fit":
        return f"vLLM would not start at these settings, so the plan sizes no CPU tier; {ram}"
    if p.max_seqs_on_gpu >= p.max_num_seqs:
        gpus = f"all {p.max_num_seqs} full-length sequences (room for {p.max_seqs_on_gpu})"
    else:
        gpus = f"{p.max_seqs_on_gpu} of {p.max_num_seqs} full-length sequences"
    bound = BOUND_BY[p.offload_bound_by].format(ram=p.cpu_ram_gib, percent=offload_percent)
    return (
        f"GPUs hold {gpus}; the CPU tier of {p.offload_bytes / GIB:.1f} GiB "
        f"holds {p.offload_bytes // p.kv_bytes_per_seq} more ({p.kv_bytes_per_seq / GIB:.2f} GiB "
        f"each), bound by {bound}. {ram}"
    )


def formula_table(p: MemoryPlan, offload_percent: float):
    """The CPU tier's `min(RAM x 0.7, total_KV x percent)`, one row per term: where it comes
    from, its bytes and GiB (index `term`)."""
    import pandas as pd

    unsized = " (not sized: vLLM would not start)" if p.offload_bound_by == "does_not_fit" else ""
    rows = [
        ("RAM", f"--cpu-ram {p.cpu_ram_gib:g} GiB", p.cpu_ram_gib * GIB),
        ("RAM x 0.7", f"x {HOST_RAM_FRACTION}", p.host_offload_limit_bytes),
        (
            "total_KV",
            f"{p.max_num_seqs} seqs x {p.kv_bytes_per_seq:,} bytes "
            f"({p.max_model_len:,} tokens x {p.kv_bytes_per_token:,} bytes)",
            p.kv_demand_bytes,
        ),
        ("total_KV x percent", f"x {offload_percent}{unsized}", p.offload_requested_bytes),
        ("min(RAM x 0.7, total_KV x percent)", f"bound by {p.offload_bound_by}", p.offload_bytes),
    ]
    table = pd.DataFrame(rows, columns=["term", "from", "bytes"]).set_index("term")
    table["GiB"] = table["bytes"] / GIB
    return table


def check_formula(
    p: MemoryPlan, cpu_ram_gib: float, offload_percent: float
) -> dict[str, bool | None]:
    """Each term of the plan recomputed by hand: check name -> whether the plan's field agrees
    (None for the tier's terms where vLLM would not start: the plan sizes no tier then)."""
    checks = {
        "RAM x 0.7 == host_offload_limit_bytes": int(cpu_ram_gib * GIB * HOST_RAM_FRACTION)
        == p.host_offload_limit_bytes,
        "seqs x KV per seq == kv_demand_bytes": p.max_num_seqs * p.kv_bytes_per_seq
        == p.kv_demand_bytes,
        "total_KV x percent == offload_requested_bytes": int(p.kv_demand_bytes * offload_percent)
        == p.offload_requested_bytes,
        "min(...) == offload_bytes": min(p.host_offload_limit_bytes, p.offload_requested_bytes)
        == p.offload_bytes,
    }
    if p.offload_bound_by == "does_not_fit":
        checks.update(dict.fromkeys(list(checks)[2:]))
    return checks


def translation_table(translations: Mapping[str, Any]):
    """A DataFrame by case: the outcome's type, what hkv says (the error, or the warnings) and
    the vLLM command (empty for an error)."""
    import pandas as pd

    rows = [
        {
            "case": case,
            "outcome": type(outcome).__name__,
            "hkv says": str(outcome)
            if isinstance(outcome, Exception)
            else "; ".join(outcome.warnings),
            "vLLM command": "" if isinstance(outcome, Exception) else outcome.command,
        }
        for case, outcome in translations.items()
    ]
    return pd.DataFrame(rows).set_index("case")


def conflict_result(outcome: Any, size: str, cpu_ram_gib: float) -> tuple[str, dict | None]:
    """The size case's outcome in words and as results: the `FlagConflict`'s flags and message,
    or (a size that fits 0.7 x RAM) that these settings have no conflict to show."""
    if not isinstance(outcome, Exception):
        limit = cpu_ram_gib * HOST_RAM_FRACTION
        return (
            f"{size} fits 0.7 x {cpu_ram_gib:g} GiB of RAM ({limit:g} GiB): no conflict at these "
            "settings (the size line is translated above); a size over it is refused",
            None,
        )
    flags = list(getattr(outcome, "flags", ()))
    text = f"flags named: {tuple(flags)}\n{outcome}"
    return text, {"error": type(outcome).__name__, "flags": flags, "message": str(outcome)}


def with_disk_gbps(
    profile: HardwareProfile,
    to_gpu_gbps: float,
    from_gpu_gbps: float | None = None,
    name: str | None = None,
) -> HardwareProfile:
    """`profile` with its disk link's bandwidth replaced (and its name, when given)."""
    return profile.with_disk(to_gpu_gbps, from_gpu_gbps or None, name=name)


def tier_models(
    spec: ModelSpec, cost_model: CostModel, slow_gbps: float
) -> dict[str, tuple[CostModel, Tier]]:
    """Tier label (with its GB/s) -> the cost model and tier that price a load from it: pinned
    and pageable host RAM, the profile's disk, and a disk at `slow_gbps`."""
    profile = cost_model.profile
    slow = with_disk_gbps(
        profile, slow_gbps, slow_gbps, name=f"{profile.name}, disk at {slow_gbps:g} GB/s"
    )
    links = profile.links
    return {
        f"host RAM, pinned ({links['host_pinned'].to_gpu_gbps:g} GB/s)": (cost_model, Tier.HOST),
        f"host RAM, pageable ({links['host_pageable'].to_gpu_gbps:g} GB/s)": (
            CostModel(spec, profile=profile, host_memory="pageable"),
            Tier.HOST,
        ),
        f"disk ({links['disk'].to_gpu_gbps:g} GB/s)": (cost_model, Tier.DISK),
        f"slow device ({slow_gbps:g} GB/s)": (CostModel(spec, profile=slow), Tier.DISK),
    }


def tier_bandwidths(profile: HardwareProfile, slow_gbps: float) -> dict[str, float]:
    """Tier name -> its bandwidth to the GPU, GB/s."""
    return {
        "host RAM, pinned": profile.links["host_pinned"].to_gpu_gbps,
        "host RAM, pageable": profile.links["host_pageable"].to_gpu_gbps,
        "disk": profile.links["disk"].to_gpu_gbps,
        "slow device": slow_gbps,
    }


def price_tiers(
    tiers: Mapping[str, tuple[CostModel, Tier]], blocks: Mapping[int, BlockMeta]
) -> list[dict[str, Any]]:
    """One row per (tier, block position): load_s, recompute_s, their ratio, the decision."""
    return [
        {
            "tier": tier_name,
            "position": pos,
            "load_s": decision.load_s,
            "recompute_s": decision.recompute_s,
            "load / recompute": decision.load_s / decision.recompute_s,
            "decision": decision.action,
        }
        for tier_name, (model, tier) in tiers.items()
        for pos, meta in blocks.items()
        for decision in [model.decide(meta, tier)]
    ]


def break_even_gbps(cost_model: CostModel, meta: BlockMeta) -> float:
    """The disk bandwidth (GB/s) at which loading `meta` costs what recomputing it does:
    bytes / (recompute_s - the disk link's latency)."""
    latency_s = cost_model.profile.links["disk"].latency_s
    return cost_model.block_bytes(meta) / (cost_model.recompute_s(meta) - latency_s) / 1e9


def break_even_table(spec: ModelSpec, cost_model: CostModel, blocks: Mapping[int, BlockMeta]):
    """A DataFrame by position: recompute_s, the break-even GB/s, and load_s / recompute_s of a
    disk at exactly that bandwidth (1.0 when the formula is right)."""
    import pandas as pd

    rows = []
    for pos, meta in blocks.items():
        gbps = break_even_gbps(cost_model, meta)
        at_break_even = CostModel(spec, profile=with_disk_gbps(cost_model.profile, gbps))
        rows.append(
            {
                "position": pos,
                "recompute_s": cost_model.recompute_s(meta),
                "break-even GB/s": gbps,
                "load_s / recompute_s at break-even": at_break_even.load_s(meta, Tier.DISK)
                / cost_model.recompute_s(meta),
            }
        )
    return pd.DataFrame(rows).set_index("position")


def break_even_curve(spec: ModelSpec, cost_model: CostModel, block_tokens: int, points: int):
    """A DataFrame of the break-even GB/s at `points` positions evenly spaced over the context."""
    import pandas as pd

    if not isinstance(points, int) or isinstance(points, bool) or points < 2:
        raise HkvError(f"break-even points: got {points!r}; expected a whole number of 2 or more")

    positions = np.linspace(0, spec.max_position_embeddings - block_tokens, points)
    rows = [
        {
            "position": int(pos),
            "break-even GB/s": break_even_gbps(
                cost_model, BlockMeta(tokens=block_tokens, position=int(pos))
            ),
        }
        for pos in positions
    ]
    return pd.DataFrame(rows)


def where_tiers_pay(curve, tier_gbps: Mapping[str, float]) -> str:
    """Where each tier's bandwidth beats the break-even `curve` (`break_even_curve`'s), in words:
    at every position, from a position on (the curve falls as a block sits deeper), at none."""
    positions = curve["position"].tolist()
    needed = curve["break-even GB/s"].tolist()
    parts = []
    for name, gbps in tier_gbps.items():
        pays = [gbps > need for need in needed]
        if all(pays):
            tight = min(range(len(needed)), key=lambda i: gbps / needed[i])
            close = gbps / needed[tight] < 1.1  # (within 10 % of the curve there)
            where = "at every position" + (f", by under 10 % at {positions[tight]:,}" * close)
        elif not any(pays):
            where = f"at no position up to {positions[-1]:,}"
        elif pays == sorted(pays):  # (False ... True: from a position on)
            where = f"from position {positions[pays.index(True)]:,} on"
        else:
            where = f"at {sum(pays)} of the {len(pays)} positions drawn"
        parts.append(f"{name} ({gbps:g} GB/s) pays {where}")
    return "At these settings " + "; ".join(parts) + "."


def replay_lru(
    trace: Trace, cost_model: CostModel, percents: Iterable[float]
) -> dict[float, dict[str, Any]]:
    """Capacity % of distinct blocks -> LRU's replay of `trace` at that size, as a dict."""
    return {
        pct: replay(
            trace,
            make_policy("lru", max(1, round(trace.distinct_blocks() * pct / 100))),
            cost_model=cost_model,
        ).to_dict()
        for pct in percents
    }


def cold_format_rows(
    cost_model: CostModel, block: BlockMeta, formats: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per cold format: bits per value, bytes per block, share saved against fp16,
    load_s from pinned host RAM and from disk, whether it is lossless."""
    fp16 = cost_model.block_bytes(block, "fp16")
    return [
        {
            "format": fmt,
            "bits per value": cost_model.bits_per_value(block, fmt),
            "bytes per block": cost_model.block_bytes(block, fmt),
            "saved vs fp16": 1 - cost_model.block_bytes(block, fmt) / fp16,
            "load_s, pinned host": cost_model.load_s(block, Tier.HOST, fmt),
            "load_s, disk": cost_model.load_s(block, Tier.DISK, fmt),
            "lossless": fmt in LOSSLESS,
        }
        for fmt in formats
    ]


def article_formats_table(config, cost_model: CostModel, block: BlockMeta):
    """A DataFrame by modality of a `HybridKVCacheConfig`: cold format, lossless, offload
    priority, and the bytes of `block` in that format."""
    import pandas as pd

    rows = [
        {
            "modality": name,
            "cold format": modality.quantization,
            "lossless": modality.lossless,
            "offload_priority": modality.offload_priority,
            "bytes per block, cold": cost_model.block_bytes(block, modality.quantization),
        }
        for name, modality in config.modality_configs.items()
    ]
    return pd.DataFrame(rows).set_index("modality")


def round_trip_table(
    spec: ModelSpec,
    cost_model: CostModel,
    formats: Sequence[str],
    block_tokens: int,
    sample_layers: int,
    seed: int,
):
    """A DataFrame by format: `hkv.storage.quant.quantization_error` of one standard-normal
    bf16 block over `sample_layers` layers, the codec's bytes for a whole block of `spec` (each
    attention layer group's, summed) and the cost model's count of them. A model whose KV is an
    MLA latent alone (no K and V heads, which the codec lays out) gets the cost model's count and
    a column saying so instead."""
    import pandas as pd
    import torch

    from hkv.storage.layout import BlockLayout
    from hkv.storage.quant import codec, quantization_error

    block = BlockMeta(tokens=block_tokens, position=0)
    if not any(g.kv_heads for g in spec.layer_groups):
        why = f"not run: {spec.name}'s KV is an MLA latent; the codec lays out K and V heads"
        rows = [
            {
                "fmt": fmt,
                "hkv.storage.quant": why,
                "bytes per block, cost model": cost_model.block_bytes(block, fmt),
            }
            for fmt in formats
        ]
        return pd.DataFrame(rows).set_index("fmt")
    layouts = BlockLayout.groups_from_spec(spec, block_tokens)  # a hybrid model's groups, summed
    sample_layout = dataclasses.replace(layouts[0], num_layers=sample_layers)
    generator = torch.Generator().manual_seed(seed)
    sample = torch.randn((1, *sample_layout.shape), generator=generator)
    sample = sample.to(sample_layout.torch_dtype)
    rows = [
        {
            **quantization_error(sample, fmt, sample_layout).to_dict(),
            "bytes per block, hkv.storage.quant": sum(codec(x, fmt).payload_bytes for x in layouts),
            "bytes per block, cost model": cost_model.block_bytes(block, fmt),
        }
        for fmt in formats
    ]
    return pd.DataFrame(rows).set_index("fmt")
