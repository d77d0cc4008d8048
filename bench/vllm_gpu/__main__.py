"""`python -m bench.vllm_gpu run|capacity|drive|link|workload` (see the package docstring)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.vllm_gpu import ROOT, default_model, run_then_exit
from bench.vllm_gpu import __doc__ as DOC
from bench.vllm_gpu.capacity import run_capacity
from bench.vllm_gpu.driver import drive, measure_link
from bench.vllm_gpu.engine import run_config
from bench.vllm_gpu.steps import fold_traces
from bench.vllm_gpu.summary import fold
from hkv.sim.anchor import Workload, workload_summary


def parser() -> argparse.ArgumentParser:
    """The CLI: run, capacity, drive, link, workload."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.vllm_gpu", description=DOC.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="mode", required=True)
    one = sub.add_parser("run", help="one engine: its policies' runs, in this process")
    one.add_argument(
        "--policy", required=True, help="lru, arc, hkv_<policy>[+flag]; or several: a,b,c"
    )
    run_arguments(one)
    cap = sub.add_parser("capacity", help="the engine sized by utilization: its KV tiers")
    cap.add_argument("--cpu-gib", type=float, required=True, help="CPU tier, total over ranks")
    cap.add_argument("--tp", type=int, default=1)
    cap.add_argument("--utilization", type=float, default=0.9, help="gpu_memory_utilization")
    cap.add_argument("--model", type=Path, default=default_model())
    cap.add_argument("--out", type=Path, required=True)
    cap.set_defaults(gpu_kv_gib=0.0)
    many = sub.add_parser("drive", help="a plan of configurations, one subprocess each")
    many.add_argument("--plan", default="full", choices=("reduced", "full", "tp2"))
    many.add_argument("--best", default="bip", help="the hkv policy the simulator ranks best")
    many.add_argument("--devices", default="0", help="CUDA devices to use, e.g. 0,1")
    many.add_argument("--deadline-s", type=float, default=540.0)
    many.add_argument("--min-config-s", type=float, default=60.0)
    many.add_argument("--only", type=int, default=None, help="the plan's first N configurations")
    many.add_argument("--resume", action="store_true", help="keep --out's finished configs")
    many.add_argument("--model", type=Path, default=default_model())
    many.add_argument("--work-dir", type=Path, default=ROOT / "out" / "vllm_gpu")
    many.add_argument("--out", type=Path, default=ROOT / "data/results/vllm_h200.json")
    traced = sub.add_parser("fold-traces", help="run --trace files as one small results file")
    traced.add_argument("files", type=Path, nargs="+")
    traced.add_argument("--out", type=Path, required=True)
    folded = sub.add_parser("fold", help="several run files as one small results file")
    folded.add_argument("files", type=Path, nargs="+")
    folded.add_argument("--out", type=Path, required=True)
    folded.add_argument("--partial", action="store_true", help="keep a cut-off engine's runs")
    sub.add_parser("link", help="pinned host<->GPU bandwidth as one JSON line")
    sub.add_parser("workload", help="the request sequence's summary as JSON")
    return parser


def run_arguments(one: argparse.ArgumentParser) -> None:
    """`run`'s options beside `--policy`."""
    one.add_argument("--cpu-gib", type=float, required=True, help="CPU tier, total over ranks")
    one.add_argument("--variant", choices=("text", "mm"), default="text")
    one.add_argument(
        "--popularity", type=float, default=0.0, help="Zipf exponent of session popularity"
    )
    one.add_argument(
        "--seed", type=int, default=0, help="the workload's seed (0: the anchor's own requests)"
    )
    one.add_argument("--repeats", type=int, default=1)
    one.add_argument(
        "--warmup-runs", type=int, default=1, help="whole runs of the first policy, kept apart"
    )
    one.add_argument(
        "--order",
        choices=("rotate", "fixed"),
        default="rotate",
        help="the policies' order in each round: shifted by one a round, or always as given",
    )
    one.add_argument("--gpu-kv-gib", type=float, default=4.0, help="per GPU")
    one.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    one.add_argument("--model", type=Path, default=default_model())
    one.add_argument("--out", type=Path, required=True)
    one.add_argument(
        "--trace", action="store_true", help="per-step trace and its diagnosis (steps.py)"
    )
    one.add_argument(
        "--host-probe",
        action="store_true",
        help="the host's speed while idle around each run (probe.py: a second a run)",
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.mode == "run" and args.warmup_runs < 0:
        raise SystemExit(f"--warmup-runs {args.warmup_runs}: expected 0 or more")
    if args.mode in ("run", "capacity"):
        run_then_exit(run_config if args.mode == "run" else run_capacity, args)
    if args.mode == "drive":
        drive(args)
    elif args.mode == "fold":
        fold(args.files, args.out, args.partial)
    elif args.mode == "fold-traces":
        fold_traces(args.files, args.out)
    elif args.mode == "link":
        print(json.dumps(measure_link()))
    else:
        print(json.dumps({"text": workload_summary(Workload()),
                          "mm": workload_summary(Workload(images=True))}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
