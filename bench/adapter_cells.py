"""The vLLM 0.26 stand-in's policy time at the H200 engine's cells, this hkv against another.

`bench.adapter_overhead` replays the anchor workload through one policy at a time the way vLLM
0.26's offloading manager drives it, and times every policy call as the GPU benchmark does. This
bench runs it at each of the engine benchmark's cells (`--cells`, CPU tier GiB and the skewed
variant's Zipf exponent: the anchor at 8, 12 and 16 GiB, the skewed variant at 8 and 12 GiB), in
a process of its own per run, for this checkout and, with `--against`, for another checkout of
hkv (an earlier commit), the two taking turns (`--rounds` rounds, every cell once a round in
each), so that a slow spell of the machine falls on both. Each run reports every policy's
policy time per request (net of the timer, best of `--repeats` passes); a cell's row keeps each
run's and the median ratio of each policy to `lru026` (vLLM 0.26's own `lru`, in the same run),
beside each policy's eviction digest and `auto`'s leaders (the same decisions where the
digests agree).

    python -m bench.adapter_cells --against /tmp/hkv-2e2ef46 \
        --out data/results/adapter_cells_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hkv.errors import HkvError
from hkv.report import save_results

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CELLS = ("8:0", "12:0", "16:0", "8:1", "12:1")
DEFAULT_POLICIES = ("lru026", "hkv_lru", "hkv_bip", "hkv_auto")


def cell(text: str) -> tuple[float, float]:
    """`GIB:POPULARITY` (`8:1`: the skewed variant at 8 GiB)."""
    try:
        gib, popularity = (float(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cell {text!r}: expected GIB:POPULARITY, e.g. 8:0 (the anchor at 8 GiB)"
        ) from None
    if gib <= 0 or popularity < 0:
        raise argparse.ArgumentTypeError(f"cell {text!r}: GiB must be > 0, popularity >= 0")
    return gib, popularity


def one_run(tree: Path, gib: float, popularity: float, policies, repeats: int) -> dict:
    """`bench.adapter_overhead` of checkout `tree` at one cell, in a process of its own: each
    policy's net time per request, eviction digest and (`auto`) leaders."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "run.json"
        command = [sys.executable, "-m", "bench.adapter_overhead", "--cpu-gib", f"{gib:g}",
                   "--popularity", f"{popularity:g}", "--repeats", str(repeats),
                   "--policies", *policies, "--out", str(out)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise HkvError(f"adapter_overhead failed in {tree}: " + " | ".join(tail))
        rows = json.loads(out.read_text())["policies"]
    return {
        row["policy"]: {
            "us_per_request_net": round(row["us_per_request_net"], 1),
            "us_per_request": round(row["us_per_request"], 1),
            "evictions_sha256": row["evictions_sha256"][:16],
            **({"leaders": row["leaders"]} if "leaders" in row else {}),
        }
        for row in rows
    }


def summarised(runs: list[dict], policies) -> dict[str, Any]:
    """A tree's runs at one cell: each policy's times, median ratio to lru026 and digests; net
    (a run whose lru026 came to no net time on a noisy host left out) and raw, the timer's
    cost left in (the same calls in both trees where the digests agree)."""
    out = {}
    for name in policies:
        times = [run[name]["us_per_request_net"] for run in runs]
        ratios = [run[name]["us_per_request_net"] / run["lru026"]["us_per_request_net"]
                  for run in runs if run["lru026"]["us_per_request_net"]]  # fmt: skip
        raw = [run[name]["us_per_request"] / run["lru026"]["us_per_request"] for run in runs]
        out[name] = {
            "us_per_request_net": times,
            "ratio_to_lru026": [round(r, 3) for r in ratios],
            "median_ratio_to_lru026": round(statistics.median(ratios), 3) if ratios else None,
            "raw_ratio_to_lru026": [round(r, 3) for r in raw],
            "median_raw_ratio_to_lru026": round(statistics.median(raw), 3),
            "evictions_sha256": sorted({run[name]["evictions_sha256"] for run in runs}),
        }
        if "leaders" in runs[0][name]:
            out[name]["leaders"] = runs[0][name]["leaders"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.adapter_cells", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--cells", nargs="+", type=cell, default=[cell(c) for c in DEFAULT_CELLS])
    parser.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES))
    parser.add_argument("--repeats", type=int, default=3, help="passes per run (best kept)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--against", type=Path, help="another checkout of hkv, run in turns")
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/adapter_cells_cpu.json")
    args = parser.parse_args(argv)
    if "lru026" not in args.policies:
        parser.error("--policies must include lru026, the yardstick of every ratio")
    trees = {"this": ROOT}
    if args.against is not None:
        if not (args.against / "bench" / "adapter_overhead.py").exists():
            parser.error(f"--against {args.against}: not a checkout of hkv with bench/")
        trees["against"] = args.against.resolve()
    runs: dict[tuple, list[dict]] = {}
    for _ in range(args.rounds):
        for gib, popularity in args.cells:
            for label, tree in trees.items():
                run = one_run(tree, gib, popularity, args.policies, args.repeats)
                runs.setdefault((gib, popularity, label), []).append(run)
                auto = run.get("hkv_auto", {}).get("us_per_request_net")
                base = run["lru026"]["us_per_request_net"]
                print(f"{gib:g} GiB, popularity {popularity:g}, {label}: hkv_auto {auto} "
                      f"us/request, lru026 {base}", flush=True)  # fmt: skip
    cells = []
    for gib, popularity in args.cells:
        row: dict[str, Any] = {"cpu_gib": gib, "popularity": popularity}
        for label in trees:
            row[label] = summarised(runs[(gib, popularity, label)], args.policies)
        cells.append(row)
    parameters = {"cells": [f"{g:g}:{p:g}" for g, p in args.cells], "policies": args.policies,
                  "repeats": args.repeats, "rounds": args.rounds,
                  "against": None if args.against is None else str(args.against)}  # fmt: skip
    command = " ".join(["python -m bench.adapter_cells", *(argv or sys.argv[1:])])
    save_results(args.out, {"cells": cells}, generated_by=command, parameters=parameters,
                 packages=("hkv", "vllm"))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
