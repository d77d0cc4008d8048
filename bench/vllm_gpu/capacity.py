"""`capacity`: the engine sized by `gpu_memory_utilization`, and its KV tiers against `hkv plan`."""

from __future__ import annotations

import os
import re
from dataclasses import asdict

from bench.vllm_gpu import RIG
from bench.vllm_gpu.engine import engine_kwargs, offloading_manager
from hkv.report import write_json


def run_capacity(args, result: dict) -> None:
    """Start the engine sized by `gpu_memory_utilization` (no KV cap) and record its KV tiers.

    vLLM's rule (0.26, `Worker.determine_available_memory`): KV per GPU = total x utilization -
    (weights + the profiling forward's peak activations + non-torch memory such as the CUDA
    context and NCCL buffers), CUDA graphs not counted unless opted in (this runs eager). The
    workers log "Available KV cache memory" and "Model loading took"; the driver reads them.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    result |= {"tp": args.tp, "cpu_gib": args.cpu_gib, "model": str(args.model)}
    result["gpu_memory_utilization"] = args.utilization
    from vllm import LLM

    kwargs = engine_kwargs(args, "lru")
    del kwargs["kv_cache_memory_bytes"]
    kwargs["gpu_memory_utilization"] = args.utilization
    llm = LLM(**kwargs)
    import torch  # after the engine: CUDA first used here would force its workers to spawn

    result["gpu_total_bytes"] = torch.cuda.mem_get_info(0)[1]
    config = llm.llm_engine.vllm_config
    _, manager = offloading_manager(llm)
    result["gpu_blocks"] = config.cache_config.num_gpu_blocks
    result["block_tokens"] = config.cache_config.block_size
    result["cpu_blocks"] = manager._num_blocks
    result["max_model_len"] = config.model_config.max_model_len
    result["max_num_seqs"] = config.scheduler_config.max_num_seqs
    result["status"] = "done"
    write_json(args.out, result)


VLLM_LOG_LINES = {
    "kv_available_gib": r"Available KV cache memory: ([0-9.]+) GiB",
    "weights_gib": r"Model loading took ([0-9.]+) GiB",
}


def plan_check(capacity: dict, log: str) -> dict:
    """vLLM's KV tiers at this configuration against `hkv plan` for the same inputs.

    GPU: KV bytes per GPU (vLLM's block count x tokens a block x bytes a token on one GPU)
    against the plan's per-GPU budget. CPU: the tier per rank (vLLM's CPU block count x one
    rank's share of a block) against the plan's offload bytes over the GPUs.
    """

    from hkv.models.model_spec import ModelSpec
    from hkv.planning.plan import GIB, PlanInputs
    from hkv.planning.plan import plan as hkv_plan

    tp = capacity["tp"]
    spec = ModelSpec.load(capacity.get("model", RIG / "minimax_m2_8l"))  # a folder or a name
    inputs = PlanInputs(
        gpus=tp,
        gpu_mem_gib=capacity["gpu_total_bytes"] / GIB,
        max_model_len=capacity["max_model_len"],
        max_num_seqs=capacity["max_num_seqs"],
        gpu_memory_utilization=capacity["gpu_memory_utilization"],
        offload_gib=capacity["cpu_gib"],
        cpu_ram_gib=max(64.0, capacity["cpu_gib"] * 4),  # so that host RAM never caps the tier
        block_tokens=capacity["block_tokens"],
    )
    predicted = hkv_plan(spec, inputs)
    block_gpu = capacity["block_tokens"] * predicted.kv_bytes_per_token_per_gpu
    vllm_gpu = capacity["gpu_blocks"] * block_gpu
    plan_gpu = predicted.gpu_kv_blocks * block_gpu
    vllm_cpu_rank = capacity["cpu_blocks"] * block_gpu
    plan_cpu_rank = predicted.offload_bytes_per_rank
    logged = {}
    for name, pattern in VLLM_LOG_LINES.items():
        found = [float(x) for x in re.findall(pattern, log)]
        logged[name] = found or None
    usable = int(inputs.gpu_mem_gib * GIB * inputs.gpu_memory_utilization)
    return {
        "tp": tp,
        "inputs": asdict(inputs),
        "vllm_gpu_blocks": capacity["gpu_blocks"],
        "plan_gpu_blocks": predicted.gpu_kv_blocks,
        "vllm_kv_bytes_per_gpu": vllm_gpu,
        "plan_kv_bytes_per_gpu": plan_gpu,
        "gpu_kv_error_frac": (plan_gpu - vllm_gpu) / vllm_gpu,
        "vllm_non_kv_bytes_per_gpu": usable - vllm_gpu,
        "plan_weights_bytes_per_gpu": predicted.weights_bytes_per_gpu,
        "plan_reserve_bytes_per_gpu": predicted.reserve_bytes_per_gpu,
        "vllm_logged": logged,
        "vllm_cpu_blocks": capacity["cpu_blocks"],
        "plan_cpu_blocks": predicted.offload_blocks,
        "vllm_cpu_bytes_per_rank": vllm_cpu_rank,
        "plan_cpu_bytes_per_rank": plan_cpu_rank,
        "cpu_exact": vllm_cpu_rank == plan_cpu_rank,
        "vllm_rule": "KV per GPU = total x gpu_memory_utilization - weights - peak activation "
        "of the profiling forward - non-torch memory (CUDA context, NCCL); eager, so no CUDA "
        "graph term (vLLM 0.26 Worker.determine_available_memory)",
    }
