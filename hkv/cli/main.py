"""`hkv` on the command line: plan, flags, simulate, suite, workload, calibrate, doctor.

With `--json` a command prints exactly one JSON object (or list) on stdout. A user mistake prints
one line on stderr naming the flag or field, the value and what to do, and exits with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from hkv.cli import sim as cli_sim
from hkv.cli.sim_disk import add_plan_disk_arguments, plan_disk
from hkv.errors import FlagConflict, HkvError, one_line, shown
from hkv.inputs import json_or_text
from hkv.planning.sizes import GIB


def _emit(obj: Any, as_json: bool, render: Callable[[Any], str]) -> None:
    if as_json:
        json.dump(obj, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(obj) + "\n")


# -- hkv plan ------------------------------------------------------------------------------------
def add_plan_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="memory plan and vLLM arguments for a model on a machine")
    p.add_argument("--model", required=True, help="shipped name (minimax-m2.5) or config.json path")
    p.add_argument("--gpus", type=int, default=1, help="GPUs = tensor-parallel size (default 1)")
    p.add_argument("--gpu-mem", type=float, default=None, help="GiB per GPU (default: H200, 140)")
    p.add_argument(
        "--cpu-ram", type=float, default=None, help="host RAM in GiB (default: this one)"
    )
    p.add_argument("--max-model-len", type=int, default=None, help="tokens (default: the model's)")
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=16,
        help="sequences at once, written as vLLM's --max-num-seqs (default: hkv's 16)",
    )
    p.add_argument(
        "--weights-dtype", choices=("bf16", "fp8", "int4"), help="default: the model's own"
    )
    p.add_argument(
        "--kv-cache-dtype",
        choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"),
        help="default: auto",
    )
    p.add_argument(
        "--gpu-memory-utilization", type=float, default=0.9, help="vLLM's share of each GPU"
    )
    p.add_argument("--offload-percent", type=float, default=None, help="the article's percent")
    p.add_argument("--offload-size", type=float, default=None, help="CPU tier in GiB")
    p.add_argument("--reserve-gib", type=float, default=None, help="per-GPU non-KV reserve")
    p.add_argument("--block-size", type=int, default=16, help="tokens a KV block (vLLM's)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    add_plan_disk_arguments(p)
    p.set_defaults(handler=_run_plan)


def _run_plan(args: argparse.Namespace) -> None:
    from hkv.models.model_spec import ModelSpec
    from hkv.planning.plan import DEFAULT_GPU_MEM_GIB, DEFAULT_RESERVE_GIB, PlanInputs, plan

    spec = ModelSpec.load(args.model)
    inputs = PlanInputs(
        gpus=args.gpus,
        gpu_mem_gib=args.gpu_mem if args.gpu_mem is not None else DEFAULT_GPU_MEM_GIB,
        cpu_ram_gib=args.cpu_ram,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        weights_dtype=args.weights_dtype,
        kv_cache_dtype=args.kv_cache_dtype or "auto",
        gpu_memory_utilization=args.gpu_memory_utilization,
        offload_percent=args.offload_percent,
        offload_gib=args.offload_size,
        reserve_gib=args.reserve_gib if args.reserve_gib is not None else DEFAULT_RESERVE_GIB,
        block_tokens=args.block_size,
    )
    planned = plan(spec, inputs).to_dict()
    if (disk := plan_disk(args, spec, planned, cli_sim.load_replay_trace)) is not None:
        planned["disk_recommendation"] = disk
    _emit(planned, args.json, render_plan)


def render_plan(p: dict[str, Any]) -> str:
    """A plan as a few lines a person reads."""
    from hkv.planning.vllm_flags import serve_command

    lines = [
        f"{p['model']} on {p['gpus']} x {p['gpu_mem_gib']:g} GiB GPU(s), {p['cpu_ram_gib']:g} GiB "
        f"RAM, max-model-len {p['max_model_len']}, {p['max_num_seqs']} seqs",
        f"  weights ({p['weights_dtype']}): {p['weights_bytes'] / GIB:.1f} GiB "
        f"({p['weights_bytes_per_gpu'] / GIB:.1f} GiB per GPU)",
        f"  KV per token: {p['kv_bytes_per_token']:,} B; per sequence: "
        f"{p['kv_bytes_per_seq'] / GIB:.2f} GiB",
        f"  GPU KV budget: {p['gpu_kv_budget_bytes'] / GIB:.1f} GiB -> "
        f"{p['max_seqs_on_gpu']} full sequences on GPU ({p['gpu_kv_blocks']} blocks a GPU)",
        "  CPU tier: " + _cpu_tier_line(p),
        f"  fits: {'yes' if p['fits'] else 'NO'}",
    ]
    lines += [f"  reason: {r}" for r in p["reasons"]]
    lines += [f"  suggestion: {s}" for s in p["suggestions"]]
    lines += [f"  warning: {w}" for w in p["warnings"]]
    start = "  (no vllm serve command: vLLM would not start with these settings)"
    lines.append("  " + serve_command(p["vllm_args"]) if p["fits"] else start)
    if disk := p.get("disk_recommendation"):
        lines.append(f"  disk tier: {disk['disk_bytes'] / GIB:.1f} GiB ({disk['reason']})")
    return "\n".join(lines)


def _cpu_tier_line(p: dict[str, Any]) -> str:
    """The plan's CPU tier, or why it has none."""
    if p["offload_bound_by"] == "does_not_fit":
        return "none (vLLM would not start: the reason below)"
    if not p["offload_bytes"] and p["offload_bound_by"] == "gpu_overflow":
        return f"none needed (the GPUs hold all {p['max_num_seqs']} full-length sequences)"
    return (
        f"{p['offload_bytes'] / GIB:.1f} GiB (bound by {p['offload_bound_by']}); "
        f"{p['offload_blocks']} blocks, {p['offload_bytes_per_rank'] / GIB:.3f} GiB a rank"
    )


# -- hkv flags -----------------------------------------------------------------------------------
def add_flags_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "flags",
        help="translate the article's vllm flags into a real vLLM command",
        description="Everything after `--` is read as a `vllm serve` line, hybrid flags included.",
    )
    p.add_argument("--model", default=None, help="model, if the line after -- has none")
    p.add_argument("--cpu-ram", type=float, default=None, help="host RAM in GiB (default: this)")
    p.add_argument("--disk-size", default=None, help="hkv's disk tier behind the CPU tier: GiB")
    p.add_argument("--disk-dir", default=None, help="the disk tier's directory (with --disk-size)")
    p.add_argument("--disk-policy", default=None, help="the disk tier's policy (cost_aware)")
    p.add_argument("--disk-admission", default=None, help="cost (default) or all")
    p.add_argument("--disk-profile", default=None, help="an hkv calibrate JSON for the tier")
    p.add_argument("--policy-param", action="append", default=[], metavar="NAME=VALUE",
                   help="a hyperparameter of the CPU tier's hkv policy (hkv_policy_params; "
                        "repeatable; VALUE as JSON, else text): experts=lean")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("seed_flags", nargs=argparse.REMAINDER, help="-- then the article's flags")
    p.set_defaults(handler=_run_flags)


def policy_params(items: list[str]) -> dict[str, Any]:
    """`--policy-param NAME=VALUE`s as a dict: each VALUE read as JSON (a number, true/false, a
    list, a quoted string), else taken as text (`first=lru`)."""
    params: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise HkvError(f"--policy-param: got {item!r}; expected NAME=VALUE, e.g. first=lru")
        if name in params:
            raise HkvError(f"--policy-param {name}: given twice; keep one")
        params[name] = json_or_text(text, f"--policy-param {name}")
    return params


def _run_flags(args: argparse.Namespace) -> None:
    from hkv.planning.flags import translate
    from hkv.planning.offload_spec import disk_tier

    disk = None
    if args.disk_size is not None:
        disk = disk_tier(args.disk_size, args.disk_dir, policy=args.disk_policy,
                         admission=args.disk_admission, profile=args.disk_profile)  # fmt: skip
    else:
        given = [f for f in ("dir", "policy", "admission", "profile") if getattr(args, f"disk_{f}")]
        if given:
            raise HkvError(f"--disk-{given[0]}: given without --disk-size; add the tier's size")
    argv = list(args.seed_flags)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise HkvError("hkv flags: give the vllm flags after `--`, e.g. hkv flags -- --model X ...")
    if args.model is not None:
        argv = ["--model", args.model, *argv]
    params = policy_params(args.policy_param)
    translation = translate(argv, cpu_ram_gib=args.cpu_ram, disk=disk, policy_params=params)
    _emit(translation.to_dict(), args.json, render_flags)


def render_flags(t: dict[str, Any]) -> str:
    lines = [t["command"]]
    lines += [f"# dropped {d['flag']}: {d['reason']}" for d in t["dropped"]]
    lines += [f"# {d['flag']} -> {d['to']}" for d in t["translated"]]
    lines += [f"# note: {n}" for n in t["notes"]]
    lines += [f"# warning: {w}" for w in t["warnings"]]
    return "\n".join(lines)


# -- hkv doctor ----------------------------------------------------------------------------------
def add_doctor_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="versions, GPUs and memory of this machine")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=_run_doctor)


def _run_doctor(args: argparse.Namespace) -> None:
    from hkv.monitor import environment_report

    _emit(environment_report(), args.json, render_doctor)


def render_doctor(r: dict[str, Any]) -> str:
    """The environment report as lines a person reads."""
    lines = [f"python {r['python']} on {r['platform']}, {r['cpu_count']} CPUs"]
    lines.append(
        f"host memory {r['host_available_gib']:.1f} of {r['host_total_gib']:.1f} GiB available"
    )
    for gpu in r["gpus"] or [{"index": "-", "name": "no GPU visible"}]:
        used = gpu.get("used_bytes")
        memory = f", {used / GIB:.1f} of {gpu['total_bytes'] / GIB:.1f} GiB used" if used else ""
        lines.append(f"GPU {gpu['index']}: {gpu['name']}{memory}")
    native = r["native_shadows"]
    if native["built"]:
        lines.append(f"auto's shadows: in C ({', '.join(native['experts'])})")
        lines.append(f"auto's leaders in C inside vLLM: {', '.join(native['leaders'])}")
        lines.append(f"hkv policies in C inside vLLM: {', '.join(native['vllm_policies'])}")
        where = "a background thread" if native["threaded"] else "the caller (HKV_SHADOW_THREAD=0)"
        lines.append(f"a large tier's sampled shadows replay each request on {where}")
        where = (
            "a background thread beside the caller"
            if native["parallel"]
            else ("the caller (one CPU here)" if native["threaded"] else where)
        )
        lines.append(
            f"a small tier's exact shadows read each request's hits at once and store it on {where}"
        )
    else:
        lines.append(
            "auto's shadows: in Python (hkv's C extension is not built here; "
            "`pip install -e .` with a C compiler builds it; same decisions, slower)"
        )
    disk_io = r["native_disk_io"]
    where = (
        f"in C, without the GIL (crc32 from {disk_io['crc32_from']})"
        if disk_io["built"]
        else "in Python (C module not built)"
    )
    lines.append(f"disk tier slot I/O: {where}, {disk_io['checksum']} checksums")
    width = max(map(len, r["packages"]))
    lines += [f"{name:<{width}}  {v or 'not installed'}" for name, v in r["packages"].items()]
    return "\n".join(lines)


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its own mistakes (an unknown flag, a missing or malformed value) said in
    one line that names the flag, the value and where the accepted values are, exit 2."""

    def error(self, message: str) -> NoReturn:
        hint = f"see `{self.prog} -h` for the accepted flags and values"
        self.exit(2, one_line(f"{self.prog}: error: {one_line(message, 200)}; {hint}") + "\n")


def build_parser() -> argparse.ArgumentParser:
    from hkv import __version__

    parser = OneLineParser(prog="hkv", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"hkv {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_plan_parser(sub)
    add_flags_parser(sub)
    add_doctor_parser(sub)
    cli_sim.add_simulate_parser(sub)
    cli_sim.add_workload_parser(sub)
    cli_sim.add_calibrate_parser(sub)
    cli_sim.add_suite_parser(sub)
    return parser


# Library errors name fields (`max_model_len: got 0; ...`); the CLI says which flag set the
# field. A field is the flag's own dest (`--max-model-len`) or one of these.
FIELD_ALIASES = {
    "gpu_mem_gib": "gpu_mem",
    "cpu_ram_gib": "cpu_ram",
    "offload_gib": "offload_size",
    "disk_bytes": "disk_size",
    "block_tokens": ("block_size", "block_tokens"),
    "num_sessions": "sessions",
    "config file": "hybrid_kv_cache_config",
}


def flag_for(parser: argparse.ArgumentParser, field: str) -> str | None:
    """The option of `parser` that sets library field `field`, if it has one."""
    flags = {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings}
    alias = FIELD_ALIASES.get(field, field)
    for dest in alias if isinstance(alias, tuple) else (alias,):
        if dest in flags:
            return flags[dest]
    return None


def user_message(parser: argparse.ArgumentParser, exc: HkvError) -> str:
    """`exc`'s one line, its leading field (both fields of a conflict) replaced by the flag
    that set it."""
    if isinstance(exc, FlagConflict):
        first, second = (flag_for(parser, field) or field for field in exc.flags)
        return " ".join(f"{first} conflicts with {second}: {exc.reason}".split())
    message = " ".join(str(exc).split())
    field, sep, rest = message.partition(": ")
    flag = flag_for(parser, field) if sep else None
    return f"{flag}: {rest}" if flag else message


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = parser._subparsers._group_actions[0].choices[args.command]
    try:
        with _terminate_unwinds():
            return args.handler(args) or 0
    except HkvError as exc:
        message = user_message(command, exc)
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the machine's, not hkv's: a full disk, an I/O error
        where = f" ({shown(exc.filename)})" if exc.filename is not None else ""
        message = f"{exc.strerror or type(exc).__name__}{where}; check the disk and paths given"
    except KeyboardInterrupt:
        sys.stderr.write(f"hkv {args.command}: interrupted\n")
        return 130
    sys.stderr.write(one_line(f"hkv {args.command}: error: {message}") + "\n")
    return 2


@contextlib.contextmanager
def _terminate_unwinds() -> Iterator[None]:
    """SIGTERM raises `SystemExit` while a command runs, so that its cleanup (temporary files)
    runs as it does on Ctrl-C; the previous handler comes back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> NoReturn:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
