"""`bench.auto_sampling` in vLLM 0.26's call order: salted keys through hkv's adapter, on CPU.

The two-tier model feeds `auto` a request at a time; vLLM 0.26's offloading manager touches a
request's whole prompt at its lookup and after each store, and has no GPU prefix cache in
`bench.vllm026`'s stand-in (`Manager026`, the replay `bench.adapter_overhead` times). This
bench replays the anchor and its skewed variant at the engine's tier sizes there, every
request's offload keys salted per seed (a keyed blake2b of each key: equal keys stay equal),
for `auto` as shipped and each `--candidate` (hyperparameters through `HKV_POLICY_PARAMS`), and
reports per cell the blocks loaded from the tier (its hits) over the seeds and how many seeds
made `auto` switch to another leader and back to the first.

    python -m bench.auto_sampling026 --candidate 'sample_4096={"sample_blocks": 4096}' \\
        --out data/results/auto_sampling_vllm026.json
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.auto_candidates import ANCHOR_CELLS
from bench.auto_candidates import candidates as parse_candidates
from bench.auto_sampling import salted_parser, spread
from hkv.report import save_results


def salted_key(key: bytes, salt: int) -> bytes:
    """`key` mixed with `salt` (0: as it is), its length kept."""
    if not salt:
        return key
    return hashlib.blake2b(key, digest_size=len(key), key=salt.to_bytes(8, "big")).digest()


def cell(job: tuple[str, dict, float, float, int]) -> dict[str, Any]:
    """`auto` with `params` (under candidate `name`) through the 0.26 stand-in, keys salted."""
    from dataclasses import replace

    name, params, popularity, gib, salt = job
    os.environ["HKV_POLICY_PARAMS"] = json.dumps(params)  # read when the policy is made
    from bench.adapter_overhead import replay
    from bench.sim.two_tier import blocks_for_gib
    from bench.vllm026 import prompts
    from hkv.sim.anchor import Workload

    requests = [replace(p, keys=[salted_key(k, salt) for k in p.keys])
                for p in prompts(Workload(popularity=popularity))]  # fmt: skip
    out = replay("hkv_auto", requests, blocks_for_gib(gib), timed=True)
    leaders = out.get("leaders") or []
    switches = [tuple(s[:2]) for s in leaders[1:]]
    back = any(label == leaders[0] for _, label in switches) if leaders else False
    return {"candidate": name, "popularity": popularity, "cpu_gib": gib, "salt": salt,
            "loaded_blocks": out["loaded_blocks"], "switches": switches,
            "switched_back": back}  # fmt: skip


def summarize(rows: list[dict], names: list[str]) -> list[dict[str, Any]]:
    """Per cell and candidate: loaded blocks over the seeds, and the seeds that switched back."""
    out = []
    for popularity, gib in ANCHOR_CELLS:
        entry: dict[str, Any] = {"popularity": popularity, "cpu_gib": gib}
        for name in names:
            mine = [r for r in rows if r["candidate"] == name
                    and (r["popularity"], r["cpu_gib"]) == (popularity, gib)]  # fmt: skip
            entry[name] = {"loaded_blocks": spread([r["loaded_blocks"] for r in mine]),
                           "switched_back": sum(r["switched_back"] for r in mine),
                           "seeds": len(mine)}  # fmt: skip
        out.append(entry)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = salted_parser(
        "python -m bench.auto_sampling026", __doc__, "auto_sampling_vllm026.json"
    )
    args = parser.parse_args(argv)
    candidates = parse_candidates(parser, args.candidate)
    salts = list(range(args.salts))
    jobs = [(name, params, p, g, salt) for name, params in candidates.items()
            for p, g in ANCHOR_CELLS for salt in salts]  # fmt: skip
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(cell, jobs))
    summary = summarize(rows, list(candidates))
    for entry in summary:
        parts = [f"{name} {entry[name]['loaded_blocks']['mean']:,.0f} loaded, "
                 f"{entry[name]['switched_back']} of {entry[name]['seeds']} switched back"
                 for name in candidates]  # fmt: skip
        print(f"popularity {entry['popularity']:g}, {entry['cpu_gib']:g} GiB: " + "; ".join(parts))
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m bench.auto_sampling026", *map(shlex.quote, given)])
    save_results(args.out, {"cells": summary, "rows": rows}, generated_by=command,
                 parameters={"salts": salts, "candidates": candidates,
                             "cells": [list(c) for c in ANCHOR_CELLS]})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
