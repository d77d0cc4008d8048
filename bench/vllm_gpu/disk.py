"""A disk tier behind vLLM's CPU tier on the GPU: none, vLLM's `fs`, or hkv's `HkvDiskTier`.

    python -m bench.vllm_gpu.disk run --tier hkv --variant long --disk-dir /tmp/d --out R.json
    python -m bench.vllm_gpu.disk fold R1.json R2.json ... --out data/results/vllm_h200_disk.json

One engine per process (the tier is part of the engine's config, so tiers cannot take turns in
one engine as policies do): vLLM 0.26's `TieringOffloadingSpec` (through hkv's
`HkvTieringOffloadingSpec`, which adds only the 0.26 guard of `compat026.guard_late_stores`;
runs before 2026-12-03 used vLLM's spec directly) with an lru CPU tier of
`--cpu-gib` and the disk tier, or the plain CPU tier (`--tier none`). The workload is the
anchor (`hkv.sim.anchor`: 32 sessions x 4 turns, 8-16K-token first turns) or `long`: 6 sessions
x 2 turns of 110-120K tokens, the context where the calibrated cost model says a disk load
beats recomputing (`CostModel.disk_crossover_tokens`). Each request's TTFT, cached tokens and
output token ids are kept; for hkv the tier's own counts (`HkvDiskTier.stats`: chunks written,
refused, evicted, lost; loads and their seconds against the cost model's estimate; file bytes
against the bound); for fs the bytes of its files. `--keep-dir` starts on the directory a
previous run left (the restart check: what was found, and whether every output matched).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from bench.vllm_gpu import ROOT, default_model, run_then_exit
from bench.vllm_gpu.engine import engine_kwargs, offloading_manager, warm_up, wave_requests
from hkv.report import provenance, write_json
from hkv.sim.anchor import Workload, build_sessions

PROFILE = ROOT / "data/profiles/h200-calibrated.json"
VARIANTS = {
    "anchor": Workload(),
    "long": Workload(
        sessions=6, turns=2, wave=2, first_min=110_000, first_max=120_000, delta_min=1024
    ),
}


def tier_config(args) -> list[dict]:
    """vLLM's `secondary_tiers` for `--tier`."""
    if args.tier == "fs":
        return [{"type": "fs", "root_dir": str(args.disk_dir)}]
    return [
        {
            "type": "HkvDiskTier",
            "module_path": "hkv.integrations.vllm.tier",
            "path": str(args.disk_dir),
            "disk_bytes": int(args.disk_gib * (1 << 30)),
            "admission": args.admission,
            "profile": str(PROFILE),
        }
    ]


def kwargs_for(args) -> dict:
    kwargs = engine_kwargs(args, "lru")
    if args.variant == "long":
        kwargs["max_model_len"] = 131072
    if args.tier != "none":
        extra = kwargs["kv_transfer_config"]["kv_connector_extra_config"]
        # hkv's spec: vLLM's own, whose manager on 0.26 survives a request's store after its
        # end (`compat026.guard_late_stores`; without it a 4 GiB CPU tier killed the engine)
        extra |= {
            "spec_name": "HkvTieringOffloadingSpec",
            "spec_module_path": "hkv.integrations.vllm.spec",
            "secondary_tiers": tier_config(args),
        }
    return kwargs


def tier_stats(llm, args) -> dict:
    _, manager = offloading_manager(llm)
    tiers = getattr(manager, "secondary_tiers", [])
    # stores the 0.26 guard let through after their request's end (None: no guard)
    late = {"late_stores_guarded": getattr(manager, "hkv_late_stores", None)}
    if args.tier == "hkv" and tiers:
        return tiers[0].stats() | late
    if args.tier == "fs":
        files = [p for p in Path(args.disk_dir).rglob("*") if p.is_file()]
        return {"files": len(files), "file_bytes": sum(p.stat().st_size for p in files)} | late
    return {}


def run_pass(llm, w: Workload, sessions, waves) -> tuple[float, list[dict]]:
    rows = []
    start = time.perf_counter()
    for wave in waves:
        prompts, params = wave_requests(w, sessions, wave, False)
        outputs = llm.generate(prompts, params, use_tqdm=False)
        for (session, turn), out in zip(wave, outputs, strict=True):
            rows.append(
                {
                    "session": session,
                    "turn": turn,
                    "prompt_len": sessions[session].prompt_lens[turn],
                    "ttft_s": getattr(out.metrics, "first_token_latency", None),
                    "cached_tokens": out.num_cached_tokens or 0,
                    "output": list(out.outputs[0].token_ids),
                }
            )
    return time.perf_counter() - start, rows


def summarize(wall_s: float, rows: list[dict]) -> dict:
    ttfts = [r["ttft_s"] for r in rows if r["ttft_s"] is not None]
    prompt = sum(r["prompt_len"] for r in rows)
    later = [r for r in rows if r["turn"] > 0]
    return {
        "wall_s": wall_s,
        "ttft_mean_s": sum(ttfts) / len(ttfts) if ttfts else None,
        "cached_share": sum(r["cached_tokens"] for r in rows) / prompt,
        "cached_share_later": sum(r["cached_tokens"] for r in later)
        / max(1, sum(r["prompt_len"] for r in later)),
        "requests": len(rows),
    }


def run(args, result: dict) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("PYTHONHASHSEED", "0")  # block hashes stable across processes
    if args.tier != "none" and not args.keep_dir:
        shutil.rmtree(args.disk_dir, ignore_errors=True)
    parameters = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    parameters.pop("out", None)
    result |= provenance("python -m bench.vllm_gpu.disk run", parameters, packages=("hkv", "vllm"))
    import torch

    result["machine"]["gpu_name"] = torch.cuda.get_device_name(0)
    from vllm import LLM

    from hkv.integrations.vllm import register

    register()  # vLLM 0.26 finds the tier by its registered name
    w = VARIANTS[args.variant]
    sessions, waves = build_sessions(w)
    t0 = time.perf_counter()
    llm = LLM(**kwargs_for(args))
    result["t_engine_init_s"] = time.perf_counter() - t0
    result["tier_at_start"] = tier_stats(llm, args)
    warm_up(llm, w)
    result["passes"] = []
    for _ in range(args.passes):
        wall_s, rows = run_pass(llm, w, sessions, waves)
        result["passes"].append({"summary": summarize(wall_s, rows), "requests": rows})
        result["tier"] = tier_stats(llm, args)
        print("SUMMARY", args.tier, args.variant, json.dumps(result["passes"][-1]["summary"]))
        write_json(args.out, result)
    result["status"] = "done"
    write_json(args.out, result)


def fold(files: list[str], out: Path) -> None:
    """The runs as one small file. Each of `files` is `PATH` or `PATH@COMMIT` (the hkv commit
    the run's code came from: the GPU machine runs a copy without git). Per run: settings,
    summary, tier counts, per-request TTFT, and how many outputs equal those of the first
    `--tier none` run of the same variant (greedy decoding: a wrong block would change them).
    A `.log` file is a run killed by its timeout: its first and last log times are kept."""
    runs, reference = [], {}
    for spec in files:
        path, _, commit = spec.partition("@")
        run = _killed_run(Path(path)) if path.endswith(".log") else _run(Path(path))
        run["hkv_commit"] = commit or None
        outputs = run.pop("outputs", None)
        variant = (run.get("parameters") or {}).get("variant")
        if outputs and (run.get("parameters") or {}).get("tier") == "none":
            reference.setdefault(variant, outputs)
        if outputs and variant in reference:
            same = sum(a == b for a, b in zip(outputs, reference[variant], strict=True))
            run["outputs_equal_to_cpu_only"] = [same, len(outputs)]
        runs.append(run)
    paths = [Path(f.partition("@")[0]) for f in files]
    read = [json.loads(p.read_text()) for p in paths if p.suffix == ".json"]
    last = max(read, key=lambda d: d.get("date_utc") or "")
    commits = sorted({r["hkv_commit"] for r in runs if r["hkv_commit"]})
    versions = dict(last.get("versions") or {}) | {"hkv": ", ".join(commits) or None}
    write_json(out, {
        "generated_by": "python -m bench.vllm_gpu.disk fold",
        "date_utc": last.get("date_utc"),
        "machine": last.get("machine"),
        "versions": versions,
        "runs": runs,
    })  # fmt: skip


def _run(path: Path) -> dict:
    data = json.loads(path.read_text())
    (one,) = data["passes"]
    return {
        "file": path.name,
        "date_utc": data.get("date_utc"),
        "versions": data.get("versions"),
        "parameters": {k: v for k, v in data["parameters"].items() if k != "model"},
        "status": data.get("status"),
        "t_engine_init_s": data.get("t_engine_init_s"),
        "tier_at_start": data.get("tier_at_start"),
        "tier": data.get("tier"),
        "summary": one["summary"],
        "ttft_s": [r["ttft_s"] for r in one["requests"]],
        "cached_tokens": [r["cached_tokens"] for r in one["requests"]],
        "outputs": [r["output"] for r in one["requests"]],
    }


def _killed_run(path: Path) -> dict:
    lines = path.read_text().splitlines()
    stamps = [line.split(" [")[0][5:] for line in lines if line.startswith(("INFO", "WARN"))]
    hits = [line.rsplit("External prefix cache hit rate: ", 1)[1] for line in lines
            if "External prefix cache hit rate" in line]  # fmt: skip
    return {
        "file": path.name,
        "status": "killed by its timeout before its one pass finished",
        "first_log": stamps[0] if stamps else None,
        "last_log": stamps[-1] if stamps else None,
        "last_external_prefix_hit_rate": hits[-1] if hits else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.vllm_gpu.disk")
    sub = parser.add_subparsers(dest="mode", required=True)
    one = sub.add_parser("run")
    one.add_argument("--tier", choices=("none", "fs", "hkv"), required=True)
    one.add_argument("--variant", choices=tuple(VARIANTS), default="anchor")
    one.add_argument("--cpu-gib", type=float, default=8.0)
    one.add_argument("--disk-gib", type=float, default=32.0)
    one.add_argument("--disk-dir", type=Path, default=Path("/tmp/hkv_disk_tier"))
    one.add_argument("--admission", choices=("cost", "all"), default="cost")
    one.add_argument("--gpu-kv-gib", type=float, default=4.0)
    one.add_argument("--passes", type=int, default=1)
    one.add_argument("--keep-dir", action="store_true", help="reuse what --disk-dir holds")
    one.add_argument("--model", type=Path, default=default_model())
    one.add_argument("--out", type=Path, required=True)
    folded = sub.add_parser("fold")
    folded.add_argument("files", nargs="+", help="PATH or PATH@COMMIT; a .log: a killed run")
    folded.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.mode == "fold":
        fold(args.files, args.out)
        return 0
    run_then_exit(run, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
