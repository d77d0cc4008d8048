"""`python -m bench.vllm_serve run|fold` (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.vllm_gpu import ROOT, default_model
from bench.vllm_gpu.summary import percentile
from bench.vllm_serve import __doc__ as DOC
from bench.vllm_serve import disk
from bench.vllm_serve.client import metrics, probe_bad_input, reset_caches, run_waves, warm_up
from bench.vllm_serve.server import MODEL_NAME, Server, serve_command, server_env
from hkv.errors import HkvError
from hkv.integrations.vllm import REGISTERED_LOG
from hkv.integrations.vllm.request import IGNORED
from hkv.report import provenance, write_json
from hkv.sim.anchor import Workload, build_sessions, workload_summary

WARNING_MARK = IGNORED
"""What hkv's warning about a malformed `hkv_modalities` says, in a server's log."""
REGISTERED_MARK = REGISTERED_LOG.split("%d")[0]
"""What `hkv.integrations.vllm.register` logs in each process that loads the entry point."""
REQUEST_FIELDS = (
    *("wave", "session", "turn", "prompt_len", "status", "ttft_s", "e2e_s", "cached_tokens"),
)
SERVED_BY = ("policy_class", "policy_module", "hkv_file", "cpu_blocks", "hkv_hyperparameters")
"""What the engine hook says served the policy."""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.vllm_serve", description=DOC.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="mode", required=True)
    run = sub.add_parser("run", help="one server per policy, the anchor sessions over HTTP")
    run.add_argument("--policy", required=True, help="comma-separated: lru,arc,hkv_auto,...")
    run.add_argument("--cpu-gib", type=float, required=True)
    run.add_argument(
        "--variant",
        choices=("text", "mm", "long"),
        default="mm",
        help="text/mm: the anchor sessions (mm: with image spans); long: 6 sessions x 2 turns "
        "of 110-120K tokens, served with --max-model-len 131072",
    )
    run.add_argument("--gpu-kv-gib", type=float, default=4.0)
    run.add_argument("--model", type=Path, default=default_model())
    run.add_argument(
        "--hkv-package",
        type=Path,
        default=ROOT / ".hkvpkg",
        help="hkv installed with pip install --no-deps --target DIR .",
    )
    run.add_argument("--port", type=int, default=8431)
    run.add_argument("--start-timeout-s", type=float, default=300.0)
    run.add_argument("--deadline-s", type=float, default=560.0, help="start no policy after")
    run.add_argument("--min-policy-s", type=float, default=170.0)
    run.add_argument("--work-dir", type=Path, default=ROOT / "out" / "vllm_serve")
    run.add_argument("--out", type=Path, required=True, help="kept: finished policies skipped")
    disk.add_arguments(run)
    fold = sub.add_parser("fold", help="run files as one small results file")
    fold.add_argument("files", type=Path, nargs="+")
    fold.add_argument("--out", type=Path, required=True)
    return parser


def stats(path: Path) -> dict:
    """The engine's counters now (the hook rewrites the file twice a second)."""
    time.sleep(1.2)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def run_policy(args, policy: str, w: Workload, sessions, waves) -> dict:
    """One server with `policy`: start, warm up, empty the tiers, the workload, the probe."""
    work = args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    stats_file, log = work / f"{policy}.stats.json", work / f"{policy}.log"
    stats_file.unlink(missing_ok=True)
    flags = disk.tier_flags(args, policy)
    command = serve_command(args, policy, args.port, flags)
    one: dict = {"policy": policy}
    one["kv_transfer_config"] = json.loads(command[command.index("--kv-transfer-config") + 1])
    if flags is not None:
        disk.prepare_dir(args)
        one |= disk.tier_setup(args, policy, flags)
    server = Server(command, server_env(args, stats_file, flags), log)
    try:
        one["start_s"] = round(server.wait_ready(args.port, args.start_timeout_s), 1)
        one["warm_up_status"] = [r["status"] for r in warm_up(args.port, MODEL_NAME, w)]
        one["reset"] = reset_caches(args.port)
        before, metrics_before = stats(stats_file), metrics(args.port)
        rows, wall_s = run_waves(args.port, MODEL_NAME, w, sessions, waves)
        after, metrics_after = stats(stats_file), metrics(args.port)
        if flags is not None:
            disk.note_workload(one["disk_tier"], before, after)
        one["summary"] = summarize(rows, wall_s, before, after)
        one["metrics_delta"] = {k: v - metrics_before.get(k, 0.0) for k, v in metrics_after.items()}
        one["served_by"] = {k: after.get(k) for k in SERVED_BY}
        one["bad_input"] = probe_bad_input(args.port, MODEL_NAME, w)
        one["requests"] = [{k: r.get(k) for k in REQUEST_FIELDS} for r in rows]
        one["status"] = "done"
    except Exception as exc:  # recorded; the next policy still runs
        one["status"] = f"error: {exc}"
    finally:
        one["exit_status"] = server.stop()
        text = log.read_text(errors="replace") if log.exists() else ""
        one["hkv_warnings_in_log"] = text.count(WARNING_MARK)
        one["log_tail"] = text.splitlines()[-15:] if one["status"] != "done" else []
        one["plugin_lines"] = [  # hkv's entry point, once per vLLM process that loaded it
            line.strip()[-300:] for line in text.splitlines() if REGISTERED_MARK in line
        ][:6]
        if flags is not None:
            disk.note_stopped(one["disk_tier"], text)
    return one


def summarize(rows: list[dict], wall_s: float, before: dict, after: dict) -> dict:
    ok = [r for r in rows if r["status"] == 200]
    ttft = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    later = [r for r in ok if r["turn"] > 0]
    prompt = sum(r["prompt_len"] for r in ok)
    cached = [r["cached_tokens"] for r in ok]
    counted = {
        k: after.get(k, 0) - before.get(k, 0)
        for k in (
            "loaded_blocks",
            "stored_blocks",
            "evicted_blocks",
            "failed_stores",
            "policy_switches",
        )
    }
    return {
        "requests": len(rows),
        "requests_ok": len(ok),
        "wall_s": wall_s,
        "ttft_mean_s": sum(ttft) / len(ttft) if ttft else None,
        "ttft_p50_s": percentile(ttft, 0.5),
        "ttft_p90_s": percentile(ttft, 0.9),
        "ttft_p99_s": percentile(ttft, 0.99),
        "cached_frac": (sum(c or 0 for c in cached) / prompt) if prompt else None,
        "cached_reported": sum(c is not None for c in cached),
        "turn_gt0_cached_frac": (
            sum(r["cached_tokens"] or 0 for r in later) / sum(r["prompt_len"] for r in later)
        )
        if later
        else None,
        "requests_per_s": len(ok) / wall_s,
        "prompt_tokens_per_s": prompt / wall_s,
        "output_tokens_per_s": sum(r.get("completion_tokens") or 0 for r in ok) / wall_s,
        **counted,
    }


def parameters_of(args, policies: list[str], w: Workload) -> dict:
    disk_tier = None
    if args.disk_gib is not None:
        disk_tier = {
            "gib": args.disk_gib,
            "dir": str(args.disk_dir),
            "admission": args.disk_admission,
            "keep_dir": args.keep_dir,
            "profile": str(disk.PROFILE.relative_to(ROOT)),
        }
    return {
        "policies": policies,
        "cpu_gib": args.cpu_gib,
        "variant": args.variant,
        "max_model_len": disk.max_model_len(args.variant),
        "gpu_kv_gib": args.gpu_kv_gib,
        "wave_concurrency": w.wave,
        "disk_tier": disk_tier,
    }


def run(args) -> dict:
    deadline = time.time() + args.deadline_s
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    disk.check_options(args)
    for policy in policies:  # refused before any server starts
        disk.tier_flags(args, policy)
    w = disk.workload(args.variant)
    sessions, waves = build_sessions(w)
    parameters = parameters_of(args, policies, w)
    result: dict = {}
    if args.out.exists():
        result = json.loads(args.out.read_text())
    same = ("variant", "disk_tier")  # another workload or tier: the file starts again
    old = result.get("parameters", {})
    if not result or any(old.get(k) != parameters[k] for k in same):
        import torch
        import vllm

        machine = {"gpu_name": torch.cuda.get_device_name(0)} if torch.cuda.is_available() else {}
        packages = ("hkv", "vllm", "torch")
        command = "python -m bench.vllm_serve run"
        result = provenance(command, parameters, packages=packages, machine=machine)
        result |= {
            "vllm_version": vllm.__version__,
            "workload": workload_summary(w),
            "runs": [],
            "skipped": [],
        }
    done = {r["policy"] for r in result["runs"] if r.get("status") == "done"}
    result["runs"] = [r for r in result["runs"] if r["policy"] in done]
    for policy in policies:
        if policy in done:
            continue
        if deadline - time.time() < args.min_policy_s:
            result["skipped"].append(policy)
            print("SKIPPED (deadline)", policy, flush=True)
            continue
        one = run_policy(args, policy, w, sessions, waves)
        result["runs"].append(one)
        print("SUMMARY", policy, one["status"], json.dumps(one.get("summary")), flush=True)
        write_json(args.out, result)
    write_json(args.out, result)
    return result


FOLD_DROP = ("log_tail",)
FOLD_METRICS = (
    *("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
    *("vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_hits_total"),
    *("vllm:kv_offload_load_bytes_total", "vllm:kv_offload_store_bytes_total"),
    "vllm:kv_offload_allocation_failure_total",
)
"""vLLM's counters a folded run keeps (token counts, bytes, refused allocations)."""


def fold(files: list[Path], out: Path) -> dict:
    """The runs of several files (one per call of `run`), per-request rows kept short."""
    runs, head = [], None
    for path in files:
        data = json.loads(path.read_text())
        head = head or {
            k: data[k]
            for k in ("date_utc", "machine", "versions", "parameters", "vllm_version", "workload")
            if k in data
        }
        for one in data["runs"]:
            one = {k: v for k, v in one.items() if k not in FOLD_DROP}
            delta = one.get("metrics_delta") or {}
            one["metrics_delta"] = {k: delta[k] for k in FOLD_METRICS if k in delta}
            one["requests"] = [
                [
                    r["session"],
                    r["turn"],
                    r["status"],
                    None if r["ttft_s"] is None else round(r["ttft_s"], 4),
                    r["cached_tokens"],
                ]
                for r in one["requests"]
            ]
            runs.append(one)
    result = {
        "generated_by": "python -m bench.vllm_serve run ..., then fold",
        **(head or {}),
        "request_columns": ["session", "turn", "status", "ttft_s", "cached_tokens"],
        "runs": runs,
    }
    write_json(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.mode == "run":
        try:
            result = run(args)
        except HkvError as exc:
            print(f"python -m bench.vllm_serve run: error: {exc}", file=sys.stderr)
            return 2
        return 0 if all(r.get("status") == "done" for r in result["runs"]) else 3
    fold(args.files, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
