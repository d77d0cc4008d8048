"""Where hkv's time goes inside the vLLM adapter on vLLM 0.26's calls, part by part, on CPU.

`bench.adapter_overhead` times each call vLLM makes into a policy; this bench times the hkv code
inside those calls (`PARTS`): the adapter's entry points, the metadata it notes for a policy
that reads it (0.26 sends it with the whole prompt's touch), and `auto`'s own parts, its end
of a request (its shadows' share of it on the caller's thread, the columns of the blocks it
held, its leader's own bookkeeping, a switch of leader) and its inserts. Same replay as
`bench.adapter_overhead` (the anchor workload's 128 requests through `bench.vllm026`'s
manager, 16-token blocks, the 8 GiB tier), the policies in rounds, each part's time the median
of the rounds. Parts nest (`PARTS` says in what): they do not add up to a policy's time.

    python -m bench.adapter_parts --popularity 1 0 --repeats 9 \\
        --out data/results/adapter_parts_cpu.json
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.adapter_overhead import make_cache_policy, replay, setup
from bench.sim.two_tier import blocks_for_gib
from bench.vllm026 import STORE_BLOCKS
from hkv.report import save_results
from hkv.sim.anchor import Workload

POLICIES = ("hkv_lru", "hkv_bip", "hkv_auto")
ADAPTER = "hkv.integrations.vllm.policy:HkvCachePolicy"
PARTS: dict[str, tuple[str, ...]] = {
    "touch": (ADAPTER, "touch"),  # 0.26's whole-prompt touch (the first: the one access)
    "noting": ("hkv.integrations.vllm.compat026", "_note_absent"),  # in touch: metas noted
    "note_split": ("hkv.integrations.vllm.compat026", "note_split"),  # in noting, C
    "note_misses": (ADAPTER, "note_misses"),  # in noting: the policy told, verdicts kept
    "noting.sync": (ADAPTER, "sync", "noting"),  # sync's time inside noting alone
    "sync": (ADAPTER, "sync"),  # vLLM's inserts handed to the policy (inside the others)
    "evict": (ADAPTER, "evict"),
    "auto.after_request": ("hkv.policies.auto:AutoPolicy", "after_request"),  # in touch
    "auto.known": ("hkv.policies.held:Held", "known"),  # in after_request: held blocks' columns
    "auto.shadows": ("hkv.policies.shadow:ShadowSet", "replay_columns"),  # in after_request
    "auto.switch": ("hkv.policies.auto:AutoPolicy", "_switch"),  # in after_request
    "auto.insert_each": ("hkv.policies.auto:AutoPolicy", "insert_each"),  # in sync
    "leader.after_request": ("hkv.policies.leader:NativeLeader", "after_request"),
    "leader.insert_each": ("hkv.policies.leader:NativeLeader", "insert_each"),
}
"""label -> (module or module:class, attribute[, part]) timed while a pass runs (with a part:
only its calls made inside that part); the comment says which part a part runs inside.
`leader.*`: a leader run in C (`hkv_lru`'s, and `auto`'s after `native_first`), `auto.*` inside
it where `auto` runs it."""


def owner_of(where: str) -> Any:
    module, _, name = where.partition(":")
    owner = importlib.import_module(module)
    return getattr(owner, name) if name else owner


def timed_parts() -> tuple[dict[str, list], list]:
    """Every part of `PARTS` wrapped in a timer: label -> [seconds, calls], and the
    (owner, attribute, original) to put back."""
    cells: dict[str, list] = {}
    active = dict.fromkeys(PARTS, 0)  # how deep each part is running now
    undo = []
    for label, (where, attr, *inside) in PARTS.items():
        owner, cell = owner_of(where), [0.0, 0]
        original = getattr(owner, attr)

        def timed(*args, __f=original, __cell=cell, __me=label, __in=inside, **kwargs):
            if __in and not active[__in[0]]:
                return __f(*args, **kwargs)
            active[__me] += 1
            start = time.perf_counter()
            try:
                return __f(*args, **kwargs)
            finally:
                __cell[0] += time.perf_counter() - start
                __cell[1] += 1
                active[__me] -= 1

        setattr(owner, attr, timed)
        cells[label] = cell
        undo.append((owner, attr, original))
    return cells, undo


def one_pass(name: str, requests, capacity: int, store_blocks: int = STORE_BLOCKS) -> dict:
    """One pass of `name` with its parts timed (nothing else): its wall time, part -> [seconds,
    calls], and what it decided (`replay`'s stored blocks and evictions' digest). Every part
    is put back afterwards."""
    cells, undo = timed_parts()
    try:
        start = time.perf_counter()
        out = replay(name, requests, capacity, False, store_blocks)
        wall = time.perf_counter() - start
    finally:
        for owner, attr, original in reversed(undo):
            setattr(owner, attr, original)
    decided = {k: out[k] for k in ("stored_blocks", "evictions_sha256")}
    return {"wall_s": wall, "parts": cells, **decided}


def measure(policies, workload: Workload, capacity: int, repeats: int) -> dict[str, Any]:
    """Each policy's parts in `repeats` rounds (a warm pass of each first): the median of
    the rounds, per request."""
    requests = setup(list(policies), workload, 0)
    n = len(requests)
    for name in policies:
        replay(name, requests, capacity, False)  # warm: imports, the extension, caches
    runs = {name: [] for name in policies}
    for _ in range(repeats):
        for name in policies:
            runs[name].append(one_pass(name, requests, capacity))
    rows = {}
    for name, passes in runs.items():
        parts = {}
        for label in PARTS:
            calls = passes[0]["parts"][label][1]
            if calls:
                us = statistics.median(1e6 * p["parts"][label][0] / n for p in passes)
                parts[label] = {"us_per_request": round(us, 1), "calls": calls}
        wall = statistics.median(1e6 * p["wall_s"] / n for p in passes)
        rows[name] = {"pass_us_per_request": round(wall, 1), "parts": parts}
    return {"popularity": workload.popularity, "capacity_blocks": capacity, "requests": n,
            "policies": rows}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.adapter_parts", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--popularity", type=float, nargs="+", default=[1.0])
    parser.add_argument("--cpu-gib", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: expected a whole number of 1 or more")
    for name in args.policies:
        try:
            make_cache_policy(name, 1)
        except (AttributeError, ValueError) as error:
            parser.error(f"--policies {name}: {error}")
    capacity = blocks_for_gib(args.cpu_gib)
    cells = [measure(args.policies, Workload(popularity=z), capacity, args.repeats)
             for z in args.popularity]  # fmt: skip
    for cell in cells:
        cell["cpu_gib"] = args.cpu_gib
        print(f"popularity {cell['popularity']:g}, {args.cpu_gib:g} GiB:")
        for name, row in cell["policies"].items():
            line = ", ".join(f"{k} {v['us_per_request']:.0f}" for k, v in row["parts"].items())
            print(f"  {name}: pass {row['pass_us_per_request']:.0f} us/request; {line}")
    if args.out is not None:
        command = " ".join(["python -m bench.adapter_parts", *(argv or sys.argv[1:])])
        save_results(args.out, {"cells": cells}, generated_by=command,
                     parameters=vars(args) | {"out": str(args.out)},
                     packages=("hkv", "vllm"))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
