"""Sentences of the notebooks' prose that state a measured number, rendered from the results.

Each function returns Markdown text; a notebook shows it with `IPython.display.Markdown` and
saves it under `prose` in its results JSON, where `tests/test_notebooks.py` and
`tests/test_notebook_prose.py` check each number against the table it came from. Numbers are
never typed into a notebook's Markdown cells (`tests/test_notebook_prose.py` checks that too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hkv.report.bench_results import NOT_RECORDED

if TYPE_CHECKING:
    import pandas as pd


def names(items: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b and c`, each in backticks."""
    quoted = [f"`{item}`" for item in items]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def percent_range(values: Sequence[float]) -> str:
    """`1.2-1.8 %` from fractions: the lowest and highest, one decimal of a percent."""
    low, high = f"{100 * min(values):.1f}", f"{100 * max(values):.1f}"
    return f"{low} %" if low == high else f"{low}-{high} %"


# ---- notebooks 08 and 09 --------------------------------------------------------------------


def provenance_gaps(provenance: pd.DataFrame) -> dict[str, list[str]]:
    """Per provenance field (`date`, `accelerator`, `hkv`), the files that do not record it."""
    hkv_missing = provenance["versions"].str.contains(f"hkv {NOT_RECORDED}", regex=False)
    return {
        "date": list(provenance.index[provenance["date"] == NOT_RECORDED]),
        "accelerator": list(provenance.index[provenance["accelerator"] == NOT_RECORDED]),
        "hkv": list(provenance.index[hkv_missing]),
    }


def provenance_sentence(provenance: pd.DataFrame) -> str:
    """What the provenance table lacks, file by file: no date, no accelerator, no hkv version."""
    gaps = provenance_gaps(provenance)
    what = {
        "date": "record no date",
        "accelerator": "do not name the accelerator they ran on",
        "hkv": "do not record hkv's version",
    }
    parts = [
        f"{names(files)} {what[field] if len(files) > 1 else _singular(what[field])}"
        for field, files in gaps.items()
        if files
    ]
    if not parts:
        return "Every file records its date, accelerator and hkv version."
    return "Where the table says " + f'"{NOT_RECORDED}": ' + "; ".join(parts) + "."


def _singular(verb_phrase: str) -> str:
    """`record no date` -> `records no date`; `do not` -> `does not`."""
    first, _, rest = verb_phrase.partition(" ")
    return ("does" if first == "do" else first + "s") + " " + rest


def lru_step_share_sentence(runs: pd.DataFrame) -> str:
    """vLLM's own lru's share of a step in the policy, over its runs (net of the timer)."""
    shares = runs.loc[runs["policy"] == "lru", "policy_frac_of_step_net"].tolist()
    return (
        f"vLLM's own `lru`, timed the same way, spends {percent_range(shares)} of a step in "
        f"its policy over its {len(shares)} runs: a Python call per block that any policy in "
        "vLLM 0.26's manager pays."
    )


def spread_sentence(tail_table: pd.DataFrame) -> str:
    """The widest `wall_spread` per CPU tier, and the tier where runs spread most."""
    widest = tail_table["wall_spread"].groupby(level="CPU tier").max()
    tier = str(widest.idxmax())
    per_tier = ", ".join(f"{100 * value:.0f} % at {name}" for name, value in widest.items())
    return (
        f"Runs of one configuration in one engine spread by up to {100 * widest.max():.0f} % "
        f"(at {tier}; per CPU tier: {per_tier}), more than most differences between policies: "
        "compare policies within an engine only."
    )


# ---- notebook 04 ----------------------------------------------------------------------------


def twin_policies_sentence(
    gap: pd.DataFrame, first: str, second: str, unlabelled: Sequence[str]
) -> str:
    """On the `unlabelled` workloads (traces without modality labels): in how many cells two
    policies' shares of the gap differ (at 3 decimals), and by how much at most."""
    gap = gap.loc[list(unlabelled)]
    if gap.empty:
        return f"Every workload here has modality labels, which `{second}` weighs."
    difference = (gap[first] - gap[second]).abs()
    if difference.isna().all():  # (every cell's LRU -> Belady gap under half a point: no share)
        return (f"`{second}` is `{first}`'s priority with the config's per-modality treatment; "
                "here LRU and Belady are within half a point in every cell, so no share of the "
                "gap separates them.")  # fmt: skip
    differ = difference.round(3) > 0
    workload, capacity = difference.idxmax()
    return (
        f"`{second}` is `{first}`'s priority with the config's per-modality treatment, which it "
        f"applies to text blocks too (their offload priority and cold format), so the two differ "
        f"where a trace has no modality labels: on {names(list(unlabelled))} in "
        f"{int(differ.sum())} of {len(differ)} cells, by at most {difference.max():.3f} "
        f"({workload} at {capacity:g} %)."
    )


def suite_scope(suite: Mapping[str, Any]) -> dict[str, Any]:
    """What the policy suite measured: workloads (generated and traces), tier sizes, cells."""
    workloads = list(suite["workloads"])
    traces = [name for name in workloads if name == "mooncake"]
    sizes = suite["parameters"]["capacities_frac_of_distinct_blocks"]
    return {
        "workloads": len(workloads),
        "generated": len(workloads) - len(traces),
        "tier_sizes": [100 * frac for frac in sizes],
        "cells": sum(len(w["cells"]) for w in suite["workloads"].values()),
    }


def suite_scope_sentence(suite: Mapping[str, Any]) -> str:
    scope = suite_scope(suite)
    sizes = ", ".join(f"{size:g}" for size in scope["tier_sizes"])
    return (
        f"Mooncake's trace and {scope['generated']} generated workloads at "
        f"{len(scope['tier_sizes'])} tier sizes ({sizes} % of each workload's distinct blocks): "
        f"{scope['cells']} cells"
    )


def recommendation(ranking: pd.DataFrame, by_store: pd.DataFrame, suite: Mapping[str, Any]) -> str:
    """What notebook 04 recommends, the suite's safest policy, and whether this notebook's own
    replay agrees: if not, how its rank moves with vLLM's store discipline and what else
    differs. `by_store`: `hkv.report.policy_choice.store_ranking`'s table."""
    best = str(ranking.index[0])
    name = best.split(":", 1)[-1]
    row = ranking.loc[best]
    behind, cells = int(row["cells_over_half_point"]), int(row["cells"])
    text = (
        f"**Recommended: `{name}`**, the suite's safest policy: more than half a point behind the "
        f"best competitor in {behind} of {cells} cells, mean regret "
        f"{row['mean_regret']:+z.2f} points, over {suite_scope_sentence(suite)}."
    )
    if name not in by_store.index:
        return text
    return text + " " + _live_agreement(name, by_store, suite)


def _live_agreement(name: str, by_store: pd.DataFrame, suite: Mapping[str, Any]) -> str:
    per_block, per_request = by_store["rank, per block"], by_store["rank, per request"]
    first_block = str(per_block.idxmin())
    if per_block[name] == 1:
        return f"This notebook's replay agrees: `{name}` closes the most of the gap here too."
    first_request = str(per_request.idxmin())
    share = by_store.loc[name]
    text = (
        f"This notebook's replay ranks it {per_block[name]} of {len(by_store)} by mean share of "
        f"the gap ({share['per block']:.3f}; first `{first_block}`, "
        f"{by_store.loc[first_block, 'per block']:.3f}). It stores every block as it is "
        "referenced (per block, docs/design.md §2); the suite measured vLLM's tier, which stores "
        "a request's blocks after it ran. Replayed that way, per request, the same cells rank "
        f"`{name}` {per_request[name]} of {len(by_store)} ({share['per request']:.3f}; first "
        f"`{first_request}`, {by_store.loc[first_request, 'per request']:.3f})."
    )
    if per_request[name] > 1:
        scope = suite_scope(suite)
        text += (
            f" The rest is scope: the suite's {scope['cells']} cells over {scope['workloads']} "
            f"workloads against these {by_store.attrs.get('cells', '?')} cells over "
            f"{by_store.attrs.get('workloads', '?')} small generated ones."
        )
    return text


# ---- notebook 05 ----------------------------------------------------------------------------


def heldout_sentence(suite: Mapping[str, Any], heldout: Mapping[str, Any]) -> str:
    """What the held-out file measured, against the suite `auto`'s defaults were chosen on."""
    seed, seeds = suite["parameters"]["seed"], heldout["parameters"]["seeds"]
    generators = {name.rsplit(" seed ", 1)[0] for name in heldout["workloads"]}
    sim_diff = max(
        abs(row.get("sim_diff_points") or 0.0)
        for workload in suite["workloads"].values()
        for cell in workload["cells"]
        for policy, row in cell["policies"].items()
        if policy.startswith("hkv:")
    )
    return (
        "`auto`'s defaults (its experts, half-life, margin and first expert) were chosen while "
        f"looking at the suite above, whose generated workloads all come from seed {seed}, and, "
        f"for its experts and its first one, at seeds {seed + 1} to {min(seeds) - 1} of the same "
        "generators as well. `data/results/policy_heldout.json` is the committed output of "
        f"`python -m bench.policy_heldout`: the same {len(generators)} generators at seeds "
        f"{min(seeds)} to {max(seeds)}, which none of that looked at (new sessions, lengths, "
        "popularity ranks, bursts and documents), the same capacities and competitors (vLLM's "
        "options in its own manager, the peers), and every hkv policy in the simulator, which "
        f"matches hkv's adapter in vLLM's manager to {sim_diff:.2f} points in every suite cell. "
        f"A policy tuned to seed {seed} would slide down this ranking; one that holds up keeps "
        "its place."
    )
