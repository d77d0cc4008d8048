"""How much a sampled `auto` depends on which keys its sample holds, in the two-tier model.

A tier larger than `sample_above` blocks gives `auto` sampled shadows: each holds the keys whose
64 bits fall below a threshold (`sample_blocks / capacity_blocks` of the hash space). Which keys
those are depends on the block hashes, and vLLM 0.26 seeds its prefix-cache hashes at random in
every process unless `PYTHONHASHSEED` is set: each engine samples other keys, so `auto` may lead
otherwise from one engine to the next on the same requests (on the H200, one engine's skewed
variant at 8 GiB switched to `cost_aware` at request 73 in all five repeats, a later engine's to
`lru`; vLLM's lru cached the same blocks in both).

This bench replays the H200 engine's workloads in the two-tier model (`bench.sim.two_tier`, as
`bench.auto_candidates` does; `--variants`: its other skews and tier sizes too) with the block
hashes salted (`--salts` seeds: every id mixed with the seed, a bijection, so the workload is the
same and only the sample differs), for `auto` as shipped and each `--candidate` (`NAME=JSON`,
`auto`'s hyperparameters), and reports per cell the spread of the modelled prefill seconds left
(`prefill_frac`) and of the cached share over the seeds, beside vLLM's lru (modelled by hkv's,
which no seed changes), and per candidate the sums over the cells of its mean and of its worst
seed.

    python -m bench.auto_sampling --salts 8 --variants \
        --candidate 'sample_4096={"sample_blocks": 4096}' \
        --candidate 'confirm_3={"confirm_rebuild": 3}' --out data/results/auto_sampling.json
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.auto_candidates import ANCHOR_CELLS, VARIANT_CELLS
from bench.auto_candidates import candidates as parse_candidates
from hkv.report import save_results

ROOT = Path(__file__).resolve().parent.parent
MASK = (1 << 64) - 1
MIX = 0x9E3779B97F4A7C15  # odd: multiplying by it mod 2**64 is a bijection


def salted(hash_ids: tuple[int, ...], salt: int) -> tuple[int, ...]:
    """The ids mixed with `salt` (0: as they are): equal ids stay equal, distinct ones distinct."""
    if not salt:
        return hash_ids
    return tuple((((h ^ salt) * MIX) & MASK) ^ (salt >> 1) for h in hash_ids)


def cell(job: tuple[str, dict, float, float, int]) -> dict[str, Any]:
    """One policy with hyperparameters `params` in one two-tier cell, its hashes salted with
    `salt`."""
    from dataclasses import replace

    from bench.sim.two_tier import blocks_for_gib, predict
    from hkv.cost import CostModel
    from hkv.sim.anchor import Workload, trace_requests

    policy, params, popularity, gib, salt = job
    requests, turns = trace_requests(workload=Workload(popularity=popularity))
    requests = [replace(r, hash_ids=salted(r.hash_ids, salt)) for r in requests]
    row = predict(policy, blocks_for_gib(gib), blocks_for_gib(4.0), requests, turns,
                  CostModel.default(), params)  # fmt: skip
    return {"policy": policy, "popularity": popularity, "cpu_gib": gib, "salt": salt,
            "cached_frac": round(row["cached_frac"], 6),
            "prefill_frac": round(row["prefill_frac"], 6)}  # fmt: skip


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def summarize(rows: list[dict], names: list[str], cells) -> list[dict[str, Any]]:
    """Per cell: lru's prefill left and cached share, and each candidate's over the seeds."""
    out = []
    for popularity, gib in cells:
        here = [r for r in rows if (r["popularity"], r["cpu_gib"]) == (popularity, gib)]
        lru = next(r for r in here if r["policy"] == "lru")
        entry = {"popularity": popularity, "cpu_gib": gib,
                 "lru": {k: lru[k] for k in ("prefill_frac", "cached_frac")}}  # fmt: skip
        for name in names:
            mine = [r for r in here if r.get("candidate") == name]
            entry[name] = {
                "prefill_frac": spread([r["prefill_frac"] for r in mine]),
                "cached_frac": spread([r["cached_frac"] for r in mine]),
                "seeds": len(mine),
            }
        out.append(entry)
    return out


def totals(summary: list[dict], names: list[str]) -> dict[str, dict[str, float]]:
    """Per candidate over the cells: the sum of its mean and of its worst prefill left (the
    fraction of a cell's prefill seconds, summed), and the cells where its worst seed leaves
    more than lru."""
    return {
        name: {
            "mean_sum": sum(e[name]["prefill_frac"]["mean"] for e in summary),
            "worst_sum": sum(e[name]["prefill_frac"]["max"] for e in summary),
            "cells_worst_above_lru": sum(
                e[name]["prefill_frac"]["max"] > e["lru"]["prefill_frac"] + 1e-9 for e in summary
            ),
        }
        for name in names
    }


def salted_parser(prog: str, doc: str, out: str) -> argparse.ArgumentParser:
    """The options this bench and `bench.auto_sampling026` share (`out`: the default results
    file, under data/results/)."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    parser.add_argument("--salts", type=int, default=8, help="seeds: 0 (unsalted) to N - 1")
    parser.add_argument("--candidate", action="append", default=[], help="NAME=JSON")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "data/results" / out)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = salted_parser("python -m bench.auto_sampling", __doc__, "auto_sampling.json")
    parser.add_argument("--variants", action="store_true", help="also the `VARIANT_CELLS`")
    args = parser.parse_args(argv)
    candidates = parse_candidates(parser, args.candidate)
    salts = [0] + [0x5EED0000 + i for i in range(1, args.salts)]
    cells = ANCHOR_CELLS + (VARIANT_CELLS if args.variants else ())
    jobs = [("lru", {}, p, g, 0) for p, g in cells]
    jobs += [("auto", params, p, g, salt) for params in candidates.values() for p, g in cells
             for salt in salts]  # fmt: skip
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(cell, jobs))
    named = iter([name for name in candidates for _ in cells for _ in salts])
    for row in rows[len(cells) :]:
        row["candidate"] = next(named)
    names = list(candidates)
    summary = summarize(rows, names, cells)
    for entry in summary:
        parts = [f"lru {100 * entry['lru']['prefill_frac']:.1f}"]
        for name in names:
            s = entry[name]["prefill_frac"]
            parts.append(f"{name} {100 * s['mean']:.1f} ({100 * s['min']:.1f}-"
                         f"{100 * s['max']:.1f})")  # fmt: skip
        print(f"popularity {entry['popularity']:g}, {entry['cpu_gib']:g} GiB: prefill left % "
              + ", ".join(parts))  # fmt: skip
    overall = totals(summary, names)
    for name, t in overall.items():
        print(f"{name}: mean {100 * t['mean_sum']:.1f}, worst {100 * t['worst_sum']:.1f} "
              f"(summed over cells, % of a cell's prefill), worst seed above lru in "
              f"{t['cells_worst_above_lru']} cells")  # fmt: skip
    parameters = {"salts": salts, "candidates": candidates, "cells": [list(c) for c in cells]}
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m bench.auto_sampling", *map(shlex.quote, given)])
    save_results(args.out, {"cells": summary, "totals": overall, "rows": rows},
                 parameters=parameters, generated_by=command)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
