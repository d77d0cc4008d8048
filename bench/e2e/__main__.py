"""`python -m bench.e2e`: the CLI, the results file (provenance, model, sections as they end)."""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.e2e import __doc__ as DOC
from bench.e2e.decode import decode_bench, profile
from bench.e2e.model import FULL, HOT_FRACTIONS, QUICK, build_model
from bench.e2e.sessions import (
    sessions_bench,
    sessions_lockstep_bench,
    sessions_lockstep_graphed_bench,
)
from bench.e2e.ttft import link_gbps, ttft_bench
from hkv.report import provenance, write_json

BENCHES = {
    "decode": decode_bench,
    "sessions": sessions_bench,
    "sessions_lockstep": sessions_lockstep_bench,
    "sessions_lockstep_graphed": sessions_lockstep_graphed_bench,
    "multi_turn_ttft": ttft_bench,
}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=DOC.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="CPU-sized dims and contexts")
    parser.add_argument("--layers", type=int, default=None, help="model layers (8; quick: 2)")
    parser.add_argument("--decode-steps", type=int, default=None, help="32; quick: 8")
    parser.add_argument("--turn-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the sessions workload")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--disk-dir", default=None, help="where the disk tier's file goes")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), default=None)
    parser.add_argument("--prefixes", type=int, nargs="*", default=None, help="TTFT prefixes")
    parser.add_argument(
        "--hot-fractions",
        type=float,
        nargs="*",
        default=None,
        help="the lock-step sessions' hkv hot fractions (default 1 0.5 0.32 0.25 0.1)",
    )
    parser.add_argument("--contexts", type=int, nargs="*", default=None, help="decode contexts")
    parser.add_argument(
        "--profile", type=int, default=None, metavar="CONTEXT", help="profile decode steps only"
    )
    args = parser.parse_args(argv)
    args.decode_steps = args.decode_steps or (8 if args.quick else 32)
    return args


def model_fields(model, arch: str, num_layers: int, params: dict, device, weights) -> dict:
    """The results' `model` section: what was built, and how it runs attention and experts."""
    cudnn = torch.backends.cuda.cudnn_sdp_enabled() if device.type == "cuda" else None
    return {
        "architecture": arch,
        "layers": num_layers,
        **params["dims"],
        **params["experts"],
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "cudnn_sdpa": cudnn,
        "dtype": str(params["dtype"]).removeprefix("torch."),
        "weights": "random",
        "weights_bytes": weights,
    }


def result_head(args, params: dict, device, model_section: dict) -> dict[str, Any]:
    """Provenance (machine: the device and its measured link) and the `model` section."""
    parameters = {
        "quick": args.quick,
        "block_tokens": params["block_tokens"],
        "decode_steps": args.decode_steps,
        "hot_fractions": list(HOT_FRACTIONS),
        "sink_blocks": 1,
        "recent_blocks": 2,
        "cold_format": "passthrough (lossless)",
        "policy": "lru",
        "prefetch": True,
        "working_copy": True,
        "finished_sessions": "stay in the GPU pool until their slots are wanted",
    }
    machine = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "host_to_gpu_pinned_gbps": link_gbps(device),
    }
    command = "python -m bench.e2e" + (" --quick" if args.quick else "")
    packages = ("hkv", "torch", "transformers", "nvitop")
    head = provenance(command, parameters, packages=packages, machine=machine)
    return head | {"model": model_section}


def merged_with_earlier(out: Path, result: dict) -> dict:
    """With `--only`, a later process adds its sections to the same file (same model and
    parameters, else it refuses)."""
    earlier = json.loads(out.read_text())
    same_parameters = earlier.get("parameters") == result["parameters"]
    if earlier.get("model") != result["model"] or not same_parameters:
        raise SystemExit(f"{out}: written with another model or parameters; use a new --out")
    return {**earlier, **result}


def run_benches(result: dict, model, num_layers: int, params: dict, args, device) -> dict:
    """Each selected section in turn; the file is rewritten (atomically) after each."""
    started = time.time()
    for name, bench in BENCHES.items():
        if args.only is not None and name not in args.only:
            continue
        if device.type == "cuda":
            print(f"{name}: {torch.cuda.memory_allocated() / 2**30:.2f} GiB allocated", flush=True)
        try:
            result[name] = bench(model, num_layers, params, args, device)
        except Exception as exc:  # recorded in the results (one device run must say what broke)
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{name} failed: {exc!r}", file=sys.stderr)
        result.setdefault("wall_s", {})[name] = round(time.time() - started, 1)
        started = time.time()
        write_json(args.out, result)  # partial results survive a kill; never a torn file
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    params = QUICK if args.quick else FULL
    num_layers = args.layers or params["layers"]
    device = torch.device("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    if device.type == "cuda":
        # cuDNN's SDPA builds a plan per new sequence length (milliseconds of CPU per call here,
        # and a different plan may round differently): every decode step is a new length. Both
        # caches use PyTorch's flash / memory-efficient kernels instead.
        torch.backends.cuda.enable_cudnn_sdp(False)
    model, arch = build_model(num_layers, params, device)
    gc.collect()
    gc.freeze()  # as serving engines do: collections skip the model and the imports
    weights = torch.cuda.memory_allocated() if device.type == "cuda" else None
    if args.profile:
        result = profile(model, num_layers, params, args.profile, device)
        print(json.dumps(result, indent=1))
        return result
    section = model_fields(model, arch, num_layers, params, device, weights)
    result = result_head(args, params, device, section)
    if args.only and args.out.exists():
        result = merged_with_earlier(args.out, result)
    return run_benches(result, model, num_layers, params, args, device)


if __name__ == "__main__":
    main()
