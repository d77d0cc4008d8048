"""`hkv simulate`'s disk tier: `--disk-size`, `--disk-admission`, `--disk-policy`, `--disk-gbps`
and `--recommend-disk` (`hkv.sim.two_level`, `hkv.sim.disk_plan`).

`add_disk_arguments(parser)` adds the flags; `check_disk_arguments(args)` validates them before
the trace is read; `uses_disk(args)` says whether the run has a disk tier, and then
`run_disk(args, trace, cost_model, config, out)` replaces the one-tier replay. Without
`--disk-size` or `--recommend-disk`, `hkv simulate` is unchanged.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, TextIO

from hkv.errors import HkvError, shown

GIB = 1 << 30
MAX_DISK_GIB = float(1 << 20)
"""1 PiB: past any disk tier a node holds."""
MAX_DISK_GBPS = 1e6
DISK_FLAGS = ("--disk-admission", "--disk-policy", "--disk-gbps")


def add_disk_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "disk tier",
        "a disk tier behind the CPU tier (--capacity-blocks, --policy), as vLLM's tiering runs "
        "it: write-through, disk hits promoted to the CPU tier, the CPU tier storing per request",
    )
    group.add_argument("--disk-size", type=float, metavar="GIB", help="disk tier size in GiB")
    group.add_argument(
        "--disk-admission",
        choices=["cost", "all"],
        default=None,
        help="cost: only prompts past the disk crossover (default); all: everything (vLLM's fs)",
    )
    group.add_argument("--disk-policy", metavar="NAME", help="disk eviction (default cost_aware)")
    group.add_argument(
        "--disk-gbps",
        type=float,
        metavar="GBPS",
        help="disk read bandwidth in GB/s (default: the profile's)",
    )
    group.add_argument(
        "--recommend-disk",
        action="store_true",
        help="replay several disk sizes and recommend the smallest near the best",
    )


def uses_disk(args: argparse.Namespace) -> bool:
    return args.disk_size is not None or args.recommend_disk


def check_disk_arguments(args: argparse.Namespace) -> None:
    """`HkvError` for a disk flag out of range or given where it means nothing."""
    if not uses_disk(args):
        for flag in DISK_FLAGS:
            if getattr(args, flag[2:].replace("-", "_")) is not None:
                raise HkvError(f"{flag}: needs --disk-size GIB or --recommend-disk")
        return
    if getattr(args, "plot", None) is not None:
        raise HkvError(
            "--plot: draws one tier's policies; not with --disk-size or --recommend-disk"
        )
    if args.disk_size is not None and args.recommend_disk:
        raise HkvError("--disk-size conflicts with --recommend-disk: it tries sizes itself")
    _check_number("--disk-size", args.disk_size, 0.0, MAX_DISK_GIB, "GiB")
    _check_number("--disk-gbps", args.disk_gbps, 0.0, MAX_DISK_GBPS, "GB/s", open_low=True)
    if args.tier != "host":
        raise HkvError(f"--tier: got {args.tier!r}; with a disk tier the CPU tier is host")
    if args.store not in (None, "per_request"):
        raise HkvError(f"--store: got {args.store!r}; a disk tier runs behind per_request stores")
    if args.store_threshold != 1:
        raise HkvError("--store-threshold: not modelled with a disk tier; leave it at 1")
    if args.recommend_disk and not one_policy(args):
        given = ", ".join(args.policy)
        raise HkvError(f"--policy: got {given!r}; --recommend-disk takes one CPU policy")
    from hkv.policies.registry import online_policy_class

    for flag, name in [
        *(("--policy", n) for n in args.policy),
        ("--disk-policy", args.disk_policy),
    ]:
        if name not in (None, "all"):
            try:
                online_policy_class(name, runner="a disk tier replay")
            except HkvError as exc:
                raise HkvError(f"{flag}: {exc}") from None


def one_policy(args: argparse.Namespace) -> bool:
    """Whether `--policy` (a list, as `sim.chosen_policies` leaves it) names one policy."""
    return len(args.policy) == 1 and args.policy != ["all"]


def _check_number(flag: str, value: float | None, low: float, high: float, unit: str, **kw):
    if value is None:
        return
    bad = not math.isfinite(value) or value < low or value > high
    if bad or (kw.get("open_low") and value == low):
        bracket = "(" if kw.get("open_low") else "["
        raise HkvError(
            f"{flag}: got {shown(value)}; expected {unit} in {bracket}{low:g}, {high:g}]"
        )


def run_disk(
    args: argparse.Namespace, trace: Any, cost_model: Any, config: Any, out: TextIO
) -> int:
    """The CPU + disk replay (or `--recommend-disk`) for checked `args`; prints and returns 0."""
    from hkv.policies import policy_names
    from hkv.sim.disk_plan import recommend_disk_bytes, with_disk_gbps
    from hkv.sim.two_level import chunk_bytes, simulate_two_level

    disk_policy = args.disk_policy or "cost_aware"
    admission = args.disk_admission or "cost"
    if args.recommend_disk:
        cpu_bytes = args.capacity_blocks * chunk_bytes(cost_model, trace.block_tokens)
        found = recommend_disk_bytes(
            trace,
            cost_model,
            cpu_bytes,
            cpu_policy=args.policy[0],
            disk_policy=disk_policy,
            admission=admission,
            disk_gbps=args.disk_gbps,
        )
        _emit(found.to_dict(), args.json, out, lambda: _recommendation_table(found, out))
        return 0
    if args.disk_gbps is not None:
        cost_model = with_disk_gbps(cost_model, args.disk_gbps)
    names = policy_names(online_only=True) if args.policy == ["all"] else args.policy
    rows = [
        simulate_two_level(
            trace,
            name,
            args.capacity_blocks,
            int(args.disk_size * GIB),
            cost_model=cost_model,
            disk_policy=disk_policy,
            admission=admission,
            config=config,
        ).to_dict()
        for name in names
    ]
    payload = rows[0] if one_policy(args) else rows
    _emit(payload, args.json, out, lambda: _table(rows, trace, out))
    return 0


def _emit(payload: Any, as_json: bool, out: TextIO, table) -> None:
    if as_json:
        json.dump(payload, out, indent=2)
        out.write("\n")
    else:
        table()


def _table(rows: list[dict[str, Any]], trace: Any, out: TextIO) -> None:
    first = rows[0]
    crossover = first["crossover_tokens"]
    out.write(
        f"{trace.source}: {len(trace)} requests, {trace.num_block_refs} block refs; CPU tier "
        f"{first['cpu_capacity_blocks']} blocks, disk tier {first['disk_bound_bytes'] / GIB:.1f} "
        f"GiB ({first['disk_policy']}, admission {first['admission']}, crossover "
        f"{'none' if crossover is None else f'{crossover:,}'} tokens); prefill "
        f"{first['prefill_s']:.1f} s uncached\n"
    )
    out.write(
        f"{'cpu policy':<16}{'cpu hits':>9}{'disk hits':>10}{'token hit':>10}{'cpu s':>9}"
        f"{'disk s':>9}{'load s':>9}{'written GB':>11}{'peak GiB':>9}{'refused':>9}\n"
    )
    for row in rows:
        out.write(
            f"{row['cpu_policy']:<16}{row['cpu_hits']:>9}{row['disk_hits']:>10}"
            f"{row['cached_token_frac']:>10.4f}{row['cpu_s_saved']:>9.1f}"
            f"{row['disk_s_saved']:>9.1f}{row['disk_load_s']:>9.1f}"
            f"{row['disk_bytes_written'] / 1e9:>11.1f}{row['disk_peak_bytes'] / GIB:>9.1f}"
            f"{row['disk_refused']:>9}\n"
        )


def _recommendation_table(found: Any, out: TextIO) -> None:
    out.write(
        f"recommended disk tier: {found.disk_bytes / GIB:.1f} GiB at {found.disk_gbps:g} GB/s "
        f"(ceiling {found.ceiling_bytes / GIB:.1f} GiB): {found.reason}\n"
    )
    out.write(f"{'disk GiB':>10}{'gain s':>10}{'disk hits':>10}{'disk s':>9}{'written GB':>11}\n")
    for row in found.rows:
        out.write(
            f"{row['disk_bound_bytes'] / GIB:>10.1f}{row['gain_s']:>10.1f}{row['disk_hits']:>10}"
            f"{row['disk_s_saved']:>9.1f}{row['disk_bytes_written'] / 1e9:>11.1f}\n"
        )


# -- hkv plan --disk-trace ----------------------------------------------------------------------
def add_plan_disk_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "disk tier", "recommend a disk tier behind the planned CPU tier (hkv.sim.disk_plan)"
    )
    group.add_argument(
        "--disk-trace", metavar="FILE.jsonl", help="a Mooncake trace of the traffic to serve"
    )
    group.add_argument(
        "--disk-gbps", type=float, metavar="GBPS", help="the disk's read GB/s (default: profile's)"
    )
    group.add_argument(
        "--disk-trace-block-tokens", type=int, default=512, metavar="N",
        help="tokens per hash id in --disk-trace (Mooncake's: 512)",
    )  # fmt: skip


def plan_disk(
    args: argparse.Namespace, spec: Any, planned: dict[str, Any], read_trace: Any
) -> dict | None:
    """`recommend_disk_bytes` on `--disk-trace` (read by `read_trace(path, block_tokens)`)
    behind the plan's CPU tier; None without it."""
    if args.disk_trace is None:
        if args.disk_gbps is not None:
            raise HkvError("--disk-gbps: needs --disk-trace FILE.jsonl")
        return None
    _check_number("--disk-gbps", args.disk_gbps, 0.0, MAX_DISK_GBPS, "GB/s", open_low=True)
    if not planned["offload_bytes"]:
        if not planned.get("fits", True):  # --offload-size or not: a CPU tier needs a fit first
            raise HkvError(
                "--disk-trace: the model does not fit (hkv plan without --disk-trace says why "
                "and what would), so there is no CPU tier for a disk tier to sit behind"
            )
        raise HkvError(
            "--disk-trace: the plan has no CPU tier for a disk tier to sit behind; give "
            "--offload-size GIB"
        )
    from hkv.cost import CostModel
    from hkv.sim.disk_plan import recommend_disk_bytes

    trace = read_trace(args.disk_trace, args.disk_trace_block_tokens)
    cost = CostModel(spec, kv_cache_dtype=args.kv_cache_dtype or "auto")
    found = recommend_disk_bytes(trace, cost, planned["offload_bytes"], disk_gbps=args.disk_gbps)
    return {k: v for k, v in found.to_dict().items() if k != "rows"}
