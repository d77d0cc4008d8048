"""What each of `auto`'s switches gained or lost against staying with the expert it left.

    python -m bench.auto_switches --out data/results/auto_switches.json
    python -m bench.auto_switches --workloads anchor_round_robin --capacities 0.1 --no-trace

`auto` switches when another expert's shadow has hit more lately, but its tier does not become
that shadow: it keeps what the leader it left had stored (set aside, evicted first) and lacks what
the new leader's shadow holds and it never stored (owed). So a switch can lose hits even where
its new leader is the better policy. This bench replays each cell as hkv's simulator does with
vLLM's per-request store (`VllmTier`, the same hits as `hkv.sim.replay`'s `per_request`) and
follows every switch for a window after it, until the next switch or two tier-sizes of block
references: the tier's prefix hits there against those of the shadow of the expert it left (what
staying would have hit, as near as a shadow that always ran that expert tells) and of the one it
joined. Per cell: its hit rate and, summed over its switches, the tier's hits less the left
shadow's (`gained`, in hits and in points of the windows' references; below zero: the switches
lost hits against staying) and less the joined shadow's (`behind_joined`), beside its
`block_refs`.

The cells: the policy suite's generated workloads (`--workloads`, at `--seed`) and, where a
Mooncake-format trace is given (`--trace`, read where it lies), the traffics
`bench.trace_variants` draws from it at `--draw-seed`, each at `--capacities` of its own distinct
blocks.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.auto_candidates import DEFAULT_TRACE, ROOT
from hkv.policies.auto import AutoPolicy
from hkv.policies.tier import VllmTier
from hkv.report import save_results
from hkv.sim.suite import capacity_for
from hkv.sim.suite_workloads import generated_workloads
from hkv.sim.trace import Trace, load_trace

FRACTIONS = (0.01, 0.02, 0.05, 0.1)
WINDOW_TIERS = 2  # a switch is followed for this many tier-sizes of references at most


class _Followed(AutoPolicy):
    """`auto` as shipped, each scored request's shadow hits and leaders kept in `scored`."""

    def reset(self) -> None:
        super().reset()
        self.scored: list[tuple[int, int, list[int], int]] = []

    def _score(self, hits_of: list[int], refs: int) -> None:
        before = self._leader
        super()._score(hits_of, refs)
        self.scored.append((before, self._leader, list(hits_of), refs))


def follow(trace: Trace, capacity_blocks: int, cost_model=None) -> dict[str, Any]:
    """One cell: `auto`'s hit rate and its switches, each with its window's hits (see the
    module docstring)."""
    policy = _Followed(capacity_blocks=capacity_blocks, cost_model=cost_model)
    if capacity_blocks > policy.sample_above:
        raise ValueError(f"{capacity_blocks} blocks: above auto's sample_above "
                         f"({policy.sample_above}), whose sampled shadows score a request late; "
                         "follow a smaller tier")  # fmt: skip
    tier, metas, tier_hits, scored_at = VllmTier(policy), {}, [], []
    refs = hits = 0
    for at, request in enumerate(trace.requests):
        pairs = []
        for index, key in enumerate(request.hash_ids):
            meta = metas.get(key)
            if meta is None:  # a block's meta is made where it is first seen, as the replay's
                meta = metas[key] = request.block_meta(index, trace.block_tokens)
            pairs.append((key, meta))
        found = tier.hits(request.hash_ids)
        before = len(policy.scored)
        tier.store(pairs)  # (an exact tier's shadows score the request at its end)
        if len(policy.scored) > before:
            tier_hits.append(found)
            scored_at.append(at)
        refs, hits = refs + len(pairs), hits + found
    switches = _windows(policy, tier_hits, WINDOW_TIERS * capacity_blocks, scored_at)
    gained = sum(s["tier_hits"] - s["left_hits"] for s in switches)
    window_refs = sum(s["refs"] for s in switches)
    return {
        "capacity_blocks": capacity_blocks,
        "block_refs": refs,
        "block_hit_rate": hits / refs if refs else 0.0,
        "switches": switches,
        "gained": gained,
        "gained_points": 100 * gained / window_refs if window_refs else 0.0,
        "behind_joined": sum(s["tier_hits"] - s["joined_hits"] for s in switches),
    }


def _windows(policy: _Followed, tier_hits: list[int], limit: int,
             scored_at: list[int] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Each switch of `policy.scored` and the window after it (`tier_hits`: the tier's hits of
    each scored request; `scored_at`: its index in the trace, where not every one is scored)."""
    scored, experts, out = policy.scored, policy.experts, []
    for at, (left, joined, _, _) in enumerate(scored):
        if left == joined:
            continue
        request = at if scored_at is None else scored_at[at]
        row = {"request": request, "left": experts[left], "joined": experts[joined], "refs": 0,
               "tier_hits": 0, "left_hits": 0, "joined_hits": 0}  # fmt: skip
        for later in range(at + 1, len(scored)):
            before, after, hits_of, refs = scored[later]
            row["refs"] += refs
            row["tier_hits"] += tier_hits[later]
            row["left_hits"] += hits_of[left]
            row["joined_hits"] += hits_of[joined]
            if after != before or row["refs"] >= limit:
                break
        out.append(row)
    return out


def _cell(job: tuple[str, str, str, int, float]) -> dict[str, Any]:
    source, where, name, seed, fraction = job
    trace = _traces(source, where, seed)[name]
    return {"source": source, "workload": name, "capacity_frac": fraction} | follow(
        trace, capacity_for(trace, fraction)
    )


_LOADED: dict[tuple, dict[str, Trace]] = {}


def _traces(source: str, where: str, seed: int) -> dict[str, Trace]:
    """The suite's generated workloads, or the traffics drawn from the trace at `where`, made
    once per process."""
    if (source, where, seed) not in _LOADED:
        if source == "suite":
            traces = generated_workloads("full", seed)
        else:
            from bench.trace_variants import variants

            traces = variants(load_trace(where), seed)
        _LOADED[source, where, seed] = traces
    return _LOADED[source, where, seed]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.auto_switches", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="a Mooncake-format trace")
    parser.add_argument("--no-trace", dest="trace", action="store_const", const=None)
    parser.add_argument("--workloads", nargs="*", default=None, help="the suite's (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="the suite's workloads' seed")
    parser.add_argument("--draw-seed", type=int, default=0, help="the drawn traffics' seed")
    parser.add_argument("--capacities", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/auto_switches.json")
    args = parser.parse_args(argv)
    if args.trace is not None and not args.trace.is_file():
        parser.error(f"--trace {args.trace}: no such file; give a Mooncake-format trace, or "
                     "--no-trace for the suite's workloads alone")  # fmt: skip
    if any(not 0 < f <= 1 for f in args.capacities):
        parser.error(f"--capacities {args.capacities}: expected shares in (0, 1]")
    known = list(generated_workloads("ci", args.seed))
    unknown = sorted(set(args.workloads or ()) - set(known))
    if unknown:
        parser.error(f"--workloads {' '.join(unknown)}: unknown; valid: {', '.join(known)}")
    args.workloads = known if args.workloads is None else args.workloads
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    jobs = [("suite", "", n, args.seed, f) for n in args.workloads for f in args.capacities]
    if args.trace is not None:
        from bench.trace_variants import variants

        drawn = variants(load_trace(args.trace), args.draw_seed)
        where = str(args.trace)
        jobs += [("drawn", where, n, args.draw_seed, f) for n in drawn for f in args.capacities]
    with ProcessPoolExecutor(args.workers) as pool:
        cells = list(pool.map(_cell, jobs))
    for c in cells:
        print(f"{c['source']:>5} {c['workload']:<20} {c['capacity_frac']:<5} "
              f"{100 * c['block_hit_rate']:6.2f} % {len(c['switches']):3d} switches, "
              f"gained {c['gained']:+6d} hits ({c['gained_points']:+.2f} points)")  # fmt: skip
    command = ["python -m bench.auto_switches", *(sys.argv[1:] if argv is None else argv)]
    parameters = {"trace": args.trace.name if args.trace else None, "seed": args.seed,
                  "draw_seed": args.draw_seed, "capacities": args.capacities,
                  "window_tiers": WINDOW_TIERS}  # fmt: skip
    save_results(args.out, {"cells": cells}, generated_by=" ".join(command), parameters=parameters)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
