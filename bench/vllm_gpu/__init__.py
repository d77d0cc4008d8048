"""Real vLLM on one GPU: a multi-turn workload through vLLM's CPU offloading tier, per policy.

The workload is the rig's anchor (`hkv.sim.anchor`: ../shared/gpu-vllm/anchor_bench.py's seed
and random stream, so the token sequences are identical). The GPU KV cache is capped (4 GiB) so
that a session's prefix has left the GPU before it returns: what comes back comes from the CPU
tier or is recomputed. The multimodal variant marks spans of each turn's new tokens as images
through the adapter's documented channel, `kv_transfer_params = {"hkv_modalities": [[start, end,
"vision"]]}` (the tokens stay random ids: the served model is text-only; only the policies see
the labels).

Modes, each one process:

    python -m bench.vllm_gpu run --policy lru,arc,hkv_bip --cpu-gib 8 --repeats 2 --out R.json
    python -m bench.vllm_gpu capacity --tp 2 --cpu-gib 8 --out C.json   # KV tiers vs hkv plan
    python -m bench.vllm_gpu drive --plan full --devices 0,1 --out data/results/vllm_h200.json
    python -m bench.vllm_gpu drive --plan tp2 --devices 0,1 --out data/results/vllm_h200_tp2.json
    python -m bench.vllm_gpu workload                 # the request sequence's summary (CPU)
    python -m bench.vllm_gpu fold R1.json R2.json --out data/results/vllm_h200_auto.json

`run` (`engine`) measures one engine (CPU tier x variant x tensor-parallel size) in this
process, engine core in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, which also lets hkv's
policies register into vLLM 0.26's built-in dictionary). Its policies share the engine: before
each run of the workload the GPU prefix cache and the CPU tier are emptied and the offloading
manager gets a new, empty policy object; the policies' runs alternate, `repeats` rounds, after
`--warmup-runs` (default 1) runs of the first policy kept apart (an engine's first run of the
workload is slower than its later ones: `hkv.report.bench_vllm.first_run_penalty`), and each
round starts one policy later than the last (`--order rotate`, the default; `fixed` keeps the
given order in every round), so that no policy always runs first in its round.
`capacity` starts the engine sized by `gpu_memory_utilization` and records its KV tiers for the
check against `hkv plan`. `drive` (`driver`) runs a plan's (`plans`) configurations one
subprocess each, on free GPUs of `--devices`, until a deadline, and rewrites the results JSON
atomically after each.

Per run (`summary`): workload wall time, TTFT mean / p50 / p90, cached share of prompt tokens
(all turns and turns > 0; vLLM's `num_cached_tokens`, GPU prefix hits plus CPU-tier hits), GB
loaded from and stored into the CPU tier, failed stores (`prepare_store` refused: no room could
be made), the policy's own time per scheduler step (`timers`: every `CachePolicy` method
timed, over every engine step), the engine process's CPU seconds and the host's steal seconds
over the run (`probe`), and with `run --host-probe` the host's speed while the engine is idle
just before and after it.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIG = ROOT.parent / "shared" / "gpu-vllm"
UNPACKED_RIG = Path("/tmp/rig")
"""Where the rig's `setup.sh` unpacks its folders on the GPU machine (the model config too)."""


def default_model(rigs: tuple[Path, ...] = (RIG, UNPACKED_RIG)) -> Path:
    """The 8-layer model config of the first rig folder that holds it: the shared kit beside
    the repository, else the copy `setup.sh` unpacked on the GPU machine (where the shared
    folder is not carried); the shared kit's path when neither does."""
    for rig in rigs:
        if (rig / "minimax_m2_8l").is_dir():
            return rig / "minimax_m2_8l"
    return rigs[0] / "minimax_m2_8l"


VLLM_POLICIES = ("lru", "arc")
"""vLLM's own policies; every other name is `hkv_<online policy>` or `oracle`."""
ORACLE, ORACLE_PARAM = "oracle", "hkv_oracle"
"""bench.vllm_oracle: eviction that knows the workload's future (a yardstick, vLLM 0.26)."""


def run_then_exit(measure, args) -> None:
    """`measure(args, result)`, `result` written to `args.out` (with the traceback if it
    raised), then leave the process at once: vLLM's teardown is slow and can hang on exit."""
    import os
    import sys
    import traceback

    from hkv.report import write_json

    result: dict = {}
    code = 0
    try:
        measure(args, result)
    except BaseException:
        traceback.print_exc()
        write_json(args.out, result | {"status": "error", "error": traceback.format_exc()})
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
