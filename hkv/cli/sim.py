"""`hkv simulate`, `hkv suite`, `hkv calibrate` and `hkv workload`: parsers and handlers for
`hkv.cli`.

Wire them with

    add_simulate_parser(subparsers)    # sets defaults(handler=run_simulate)
    add_calibrate_parser(subparsers)   # sets defaults(handler=run_calibrate)
    add_workload_parser(subparsers)    # sets defaults(handler=run_workload)
    add_suite_parser(subparsers)       # sets defaults(handler=run_suite)

and call `args.handler(args)`; each returns an exit status and raises `HkvError` for user
mistakes. With `--json`, stdout holds only JSON: one object, or for `simulate --policy all` (or
several names) a list of one object per policy.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from hkv.blocks import Tier
from hkv.cli import sim_disk
from hkv.errors import HkvError, shown
from hkv.inputs import json_or_text
from hkv.outputs import check_output, write_atomic_bytes
from hkv.policies import policy_names

TIERS = {"gpu": Tier.GPU, "host": Tier.HOST, "disk": Tier.DISK}
MAX_CAPACITY_BLOCKS = 1 << 40
MAX_BLOCK_TOKENS = 1 << 20
MAX_REQUEST_BLOCKS = 1 << 16
"""The longest request `simulate` and `suite` replay: a million-token prompt at vLLM's 16-token
blocks (`--policy all` takes ~5 s on one such request at a tiny capacity)."""


def check_count(flag: str, value: int, high: int) -> None:
    """`HkvError` unless `flag`'s `value` is an integer in [1, high]."""
    if not 1 <= value <= high:
        raise HkvError(f"{flag}: got {shown(value)}; expected an integer in [1, {high:,}]")


def load_replay_trace(path: str, block_tokens: int) -> Any:
    """A trace for `simulate` or `suite`: `--block-tokens` and each request's length capped."""
    from hkv.sim import load_trace

    check_count("--block-tokens", block_tokens, MAX_BLOCK_TOKENS)
    return load_trace(path, block_tokens=block_tokens, max_request_blocks=MAX_REQUEST_BLOCKS)


def add_profile_argument(parser: argparse.ArgumentParser) -> None:
    """`--profile FILE`: a calibration profile from `hkv calibrate` (default: the H200 one)."""
    parser.add_argument(
        "--profile",
        metavar="FILE",
        default=None,
        help="calibration profile written by `hkv calibrate` (default: the measured H200 host)",
    )


def add_simulate_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "simulate",
        help="replay a Mooncake-format trace through eviction policies",
        description=(
            "Replay a trace (docs/design.md §2 semantics) and report hits, costs and evictions."
        ),
    )
    parser.add_argument("--trace", required=True, metavar="FILE.jsonl", help="Mooncake JSONL")
    parser.add_argument(
        "--policy",
        nargs="+",
        default=["lru"],
        help=f"one or more of {', '.join(policy_names())} (space- or comma-separated), or `all` "
        "(default: lru)",
    )
    parser.add_argument(
        "--capacity-blocks", required=True, type=int, metavar="N", help="tier size in blocks"
    )
    parser.add_argument(
        "--block-tokens", type=int, default=512, metavar="N", help="tokens per hash id (512)"
    )
    parser.add_argument("--model", default="minimax-m2.5", help="shipped name or config.json")
    parser.add_argument("--kv-cache-dtype", default="auto", help="auto, fp8, bf16, ...")
    parser.add_argument("--tier", choices=list(TIERS), default="host", help="where hits load from")
    parser.add_argument(
        "--host-memory", choices=["pinned", "pageable"], default="pinned", help="the host link"
    )
    parser.add_argument(
        "--store-threshold",
        type=int,
        default=1,
        metavar="N",
        help="admit a block only on its N-th offer, like vLLM's store_threshold (default 1: off)",
    )
    parser.add_argument(
        "--store",
        choices=["per_block", "per_request"],
        default=None,
        help="per_block: docs/design.md §2 semantics (default); per_request: like vLLM's CPU tier",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="HybridKVCacheConfig (.py/.json/.yaml) for modality_aware"
    )
    add_profile_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw each policy's prefill seconds saved (and hit rate) into this PNG",
    )
    sim_disk.add_disk_arguments(parser)
    parser.set_defaults(handler=run_simulate)
    return parser


def run_simulate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from hkv.cost import CostModel, HardwareProfile
    from hkv.models.model_spec import ModelSpec
    from hkv.policies import get_policy_class
    from hkv.sim import simulate

    out = out or sys.stdout
    check_count("--capacity-blocks", args.capacity_blocks, MAX_CAPACITY_BLOCKS)
    check_count("--store-threshold", args.store_threshold, MAX_CAPACITY_BLOCKS)
    args.policy = chosen_policies(args.policy)
    sim_disk.check_disk_arguments(args)
    if args.plot is not None:
        check_output(args.plot, "--plot", "policies.png")  # a bad place fails before the work
    for name in args.policy:
        if name != "all":
            get_policy_class(name)  # fail on a bad name before reading the trace
    trace = load_replay_trace(args.trace, args.block_tokens)
    cost_model = CostModel(
        ModelSpec.load(args.model),
        HardwareProfile.load(args.profile),
        kv_cache_dtype=args.kv_cache_dtype,
        host_memory=args.host_memory,
    )
    config = None
    if args.config:
        from hkv.planning.config import HybridKVCacheConfig

        config = HybridKVCacheConfig.from_file(args.config)
    if sim_disk.uses_disk(args):
        return sim_disk.run_disk(args, trace, cost_model, config, out)
    results = simulate(
        trace,
        "all" if args.policy == ["all"] else args.policy,
        args.capacity_blocks,
        cost_model=cost_model,
        config=config,
        tier=TIERS[args.tier],
        store_threshold=args.store_threshold,
        store=args.store or "per_block",
    )
    rows = [r.to_dict() for r in results]
    if args.plot is not None:
        _plot(rows, trace, args.plot)
    if args.json:
        payload: Any = rows[0] if sim_disk.one_policy(args) else rows
        json.dump(payload, out, indent=2)
        out.write("\n")
    else:
        _print_table(rows, trace, out)
    return 0


def chosen_policies(given: str | list[str]) -> list[str]:
    """`--policy`'s words as a list of names (comma- or space-separated, each once, in order),
    or `["all"]`."""
    words = [given] if isinstance(given, str) else given
    names = list(dict.fromkeys(n.strip() for w in words for n in w.split(",") if n.strip()))
    if not names:
        raise HkvError("--policy: got no name; give one or more policy names, or all")
    if "all" in names and len(names) > 1:
        raise HkvError("--policy: got all beside other names; give all alone, or the names")
    return names


def _plot(rows: list[dict[str, Any]], trace: Any, path: str) -> None:
    from hkv.report.figures import simulation_png

    title = (
        f"{Path(trace.source).name}: {len(trace)} requests, "
        f"tier of {rows[0]['capacity_blocks']} blocks ({rows[0]['tier']})"
    )
    write_atomic_bytes(path, simulation_png(rows, title), "--plot", "policies.png")


def _print_table(rows: list[dict[str, Any]], trace: Any, out: TextIO) -> None:
    out.write(
        f"{trace.source}: {len(trace)} requests, {trace.num_block_refs} block refs, "
        f"capacity {rows[0]['capacity_blocks']} blocks, tier {rows[0]['tier']}\n"
    )
    header = f"{'policy':<18}{'block hit':>10}{'token hit':>10}{'saved s':>10}{'load s':>9}"
    out.write(header + f"{'evictions':>11}{'declined':>10}{'refs/s':>10}\n")
    for row in rows:
        out.write(
            f"{row['policy']:<18}{row['block_hit_rate']:>10.4f}{row['prefix_token_hit_frac']:>10.4f}"
            f"{row['recompute_s_saved']:>10.1f}{row['load_s']:>9.1f}{row['evictions']:>11}"
            f"{row['declined']:>10}{row['refs_per_s']:>10}\n"
        )


def add_calibrate_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "calibrate",
        help="measure host, disk (and GPU link) bandwidth into a JSON profile",
        description="Measure this machine into a profile that `hkv simulate --profile` and "
        "`hkv suite --profile` read.",
    )
    parser.add_argument(
        "--out", default="hkv-profile.json", metavar="FILE", help="where to write the profile"
    )
    parser.add_argument("--disk-dir", default=None, metavar="DIR", help="directory on the disk")
    parser.add_argument("--size-mib", type=int, default=256, metavar="N", help="buffer size")
    parser.add_argument(
        "--repeats", type=int, default=3, metavar="N", help="timed runs; the best is kept"
    )
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")
    parser.set_defaults(handler=run_calibrate)
    return parser


def run_calibrate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from hkv.calibrate import calibrate

    out = out or sys.stdout
    check_output(args.out, "--out", example="hkv-profile.json")  # before minutes of measuring
    profile = calibrate(disk_dir=args.disk_dir, size_mib=args.size_mib, repeats=args.repeats)
    path = profile.save(args.out)
    if args.json:
        json.dump({**profile.to_dict(), "path": str(path)}, out, indent=2)
        out.write("\n")
        return 0
    out.write(f"wrote {path}\n")
    out.write(f"host memcpy      {profile.host_memcpy_gbps:8.2f} GB/s\n")
    for name, link in profile.links.items():
        flag = "measured" if f"links.{name}.to_gpu_gbps" in profile.measured else "default"
        ways = ("read  ", "write   ") if name == "disk" else ("to GPU", "from GPU")  # file I/O
        out.write(
            f"{name:<16} {ways[0]} {link.to_gpu_gbps:8.2f} GB/s, {ways[1]} "
            f"{link.from_gpu_gbps:8.2f} GB/s  ({flag})\n"
        )
    if profile.notes:
        out.write(profile.notes + "\n")
    return 0


def add_workload_parser(subparsers: Any) -> argparse.ArgumentParser:
    from hkv.sim.workload import PRESETS

    parser = subparsers.add_parser(
        "workload",
        help="generate a synthetic Mooncake-format workload",
        description="Sessions, shared prefixes, documents, bursts, images; one seed, one file.",
    )
    parser.add_argument(
        "--preset", default="chat", choices=list(PRESETS), help="the workload's kind (chat)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    parser.add_argument("--sessions", type=int, default=None, help="number of sessions")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help=f"override a WorkloadSpec field (repeatable); fields: {', '.join(_spec_fields())}",
    )
    parser.add_argument("--out", required=True, metavar="FILE.jsonl", help="the trace to write")
    parser.add_argument("--json", action="store_true", help="print a summary as JSON")
    parser.set_defaults(handler=run_workload)
    return parser


def run_workload(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from hkv.sim import WorkloadSpec, generate, write_trace

    out = out or sys.stdout
    check_output(args.out, "--out", example="trace.jsonl")  # before generating
    overrides: dict[str, Any] = {"seed": args.seed}
    if args.sessions is not None:
        overrides["num_sessions"] = args.sessions
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise HkvError(f"--set: got {shown(item)}; expected FIELD=VALUE")
        if name not in _spec_fields():
            close = difflib.get_close_matches(name, _spec_fields(), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise HkvError(
                f"--set: unknown field {shown(name)}; {hint}see `hkv workload -h` for the fields"
            )
        overrides[name] = json_or_text(value, f"--set {name}")
    spec = WorkloadSpec.preset(args.preset, **overrides)
    trace = generate(spec)
    path = write_trace(trace.requests, Path(args.out))
    summary = {
        "path": str(path),
        "requests": len(trace),
        "block_refs": trace.num_block_refs,
        "distinct_blocks": trace.distinct_blocks(),
        "spec": spec.to_dict(),
    }
    if args.json:
        json.dump(summary, out, indent=2)
        out.write("\n")
    else:
        out.write(
            f"wrote {path}: {summary['requests']} requests, {summary['block_refs']} block refs, "
            f"{summary['distinct_blocks']} distinct blocks\n"
        )
    return 0


def _spec_fields() -> list[str]:
    from hkv.sim import WorkloadSpec

    return list(WorkloadSpec.__dataclass_fields__)


def add_suite_parser(subparsers: Any) -> argparse.ArgumentParser:
    from hkv.sim.suite import FRACTIONS

    parser = subparsers.add_parser(
        "suite",
        help="every policy on traces and generated workloads at several capacities",
        description=(
            "Replay every online policy, the simulator's model of vLLM's lru, arc and "
            "lru+store_threshold 2, and belady, at fractions of each workload's distinct "
            "blocks (vLLM's per-request stores). The third-party peers and measurement inside "
            "vLLM's own manager: python -m bench.policy_suite."
        ),
    )
    parser.add_argument(
        "--trace", action="append", default=[], metavar="FILE.jsonl", help="repeatable"
    )
    parser.add_argument(
        "--generated",
        choices=["none", "ci", "full"],
        default=None,
        help="hkv's generated workloads (default: ci without --trace, none with)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated workloads")
    parser.add_argument(
        "--capacities",
        type=float,
        nargs="+",
        default=list(FRACTIONS),
        metavar="FRAC",
        help="fractions of each workload's distinct blocks (default: 0.01 0.02 0.05 0.1)",
    )
    parser.add_argument(
        "--block-tokens", type=int, default=512, metavar="N", help="tokens per hash id (512)"
    )
    parser.add_argument("--model", default="minimax-m2.5", help="shipped name or config.json")
    add_profile_argument(parser)
    parser.add_argument(
        "--metric",
        choices=["both", "seconds", "hits"],
        default="both",
        help="the table's view: net prefill seconds saved, block hit rate, or both (default)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run_suite)
    return parser


def run_suite(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from hkv.cost import CostModel, HardwareProfile
    from hkv.models.model_spec import ModelSpec
    from hkv.sim import suite
    from hkv.sim.suite_workloads import generated_workloads

    out = out or sys.stdout
    bad = [f for f in args.capacities if not 0 < f <= 1]
    if bad:
        raise HkvError(f"--capacities: got {bad[0]!r}; expected fractions in (0, 1]")
    if args.seed < 0:
        raise HkvError(f"--seed: got {args.seed}; expected an integer >= 0")
    traces = {Path(p).stem: load_replay_trace(p, args.block_tokens) for p in args.trace}
    generated = args.generated or ("none" if args.trace else "ci")
    if generated != "none":
        traces |= generated_workloads(generated, args.seed)
    cost_model = CostModel(ModelSpec.load(args.model), HardwareProfile.load(args.profile))
    results = suite.run_suite(traces, suite.sim_runners(cost_model), cost_model, args.capacities)
    if args.json:
        json.dump(results, out, indent=2)
        out.write("\n")
    else:
        metrics = ("seconds", "hits") if args.metric == "both" else (args.metric,)
        out.write(suite.suite_table(results, metrics) + "\n")
    return 0
