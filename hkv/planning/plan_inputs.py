"""What a memory plan is computed from (`PlanInputs`), with the constants and rules it rests on:
the host-RAM ceiling, vLLM's reserve and block size, weight bytes per dtype, valid
tensor-parallel sizes."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from hkv.errors import HkvError, is_number, shown
from hkv.models.model_spec import ModelSpec
from hkv.planning.sizes import GIB

MAX_GPUS = 4096
MAX_TOKENS = 1 << 31  # tokens in a context or a block: beyond any model's positions
MAX_SEQS = 1 << 20
MAX_GIB = float(1 << 30)  # an exbibyte: beyond any machine

HOST_RAM_FRACTION = 0.7
"""The article's ceiling on the CPU tier: at most 70 % of host RAM."""

DEFAULT_RESERVE_GIB = 2.0
"""Per-GPU memory for everything but weights and KV. Stated, not guessed: CUDA context (~0.5 GiB),
the activation peak of vLLM's profiling forward at its default 8,192 batched tokens (~1 GiB for
hidden sizes up to ~7K) and CUDA graph pools. Pass `reserve_gib` to use a value from your logs."""

VLLM_BLOCK_TOKENS = 16
"""vLLM's default KV block size on CUDA (`--block-size`); its offloading tier uses the same."""

DEFAULT_GPU_MEM_GIB = 140.0
"""One H200 (nvidia-smi reports 143,771 MiB = 140.4 GiB)."""

INT4_GROUP = 128
"""AWQ/GPTQ group size: one fp16 scale and one 4-bit zero point per 128 weights."""

WEIGHT_BYTES_PER_PARAM = {
    "bf16": 2.0,
    "fp8": 1.0 + 4 / (128 * 128),  # fp32 scale per 128 x 128 block
    "int4": 0.5 + 2.5 / INT4_GROUP,
}


def weights_bytes(spec: ModelSpec, weights_dtype: str) -> int:
    """Bytes of the model's weights; embeddings and the output head stay in bf16 when quantized."""
    if weights_dtype not in WEIGHT_BYTES_PER_PARAM:
        valid = ", ".join(WEIGHT_BYTES_PER_PARAM)
        raise HkvError(f"weights_dtype: got {weights_dtype!r}; use one of {valid}")
    body = spec.total_params - spec.embedding_params
    per_param = WEIGHT_BYTES_PER_PARAM[weights_dtype]
    return int(body * per_param + spec.embedding_params * WEIGHT_BYTES_PER_PARAM["bf16"])


def detected_host_ram_gib() -> float:
    """This machine's physical memory in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


def tensor_parallel_problem(spec: ModelSpec, tp: int) -> str | None:
    """Why vLLM would refuse to run `spec` on `tp` tensor-parallel ranks, or None.

    The rules of vLLM's model code (0.32; e.g. `minimax_m2.py`, `llama.py`, `deepseek_v2.py`):
    - every attention type: the query heads split evenly over the ranks
      (`num_attention_heads % tp == 0`, also checked by `ModelConfig`);
    - GQA/MHA, full or sliding-window: the KV heads split evenly when there are at least `tp`
      of them (`kv_heads % tp == 0`), else each rank keeps a replica (`tp % kv_heads == 0`);
    - MLA: one latent per token, replicated on every rank: no KV-head rule;
    - linear-attention (mamba / gated delta-net) layers have head counts of their own that
      this does not check.
    """
    if tp < 1:
        return f"got {tp} ranks; expected at least 1"
    heads, kv_heads = spec.num_attention_heads, spec.num_kv_heads
    if heads % tp:
        return f"{spec.name} has {heads} attention heads, which {tp} ranks cannot split evenly"
    if spec.is_mla or not kv_heads:
        return None
    if kv_heads >= tp and kv_heads % tp:
        return f"{spec.name} has {kv_heads} KV heads, which {tp} ranks cannot split evenly"
    if kv_heads < tp and tp % kv_heads:
        return (
            f"{spec.name} has {kv_heads} KV heads: {tp} ranks must be a multiple of them, so that "
            "each rank keeps whole replicas"
        )
    return None


def valid_tensor_parallel(spec: ModelSpec, gpus: int) -> bool:
    """Whether vLLM accepts `gpus` tensor-parallel ranks for `spec` (`tensor_parallel_problem`)."""
    return tensor_parallel_problem(spec, gpus) is None


def tensor_parallel_sizes(spec: ModelSpec, up_to: int = 16) -> list[int]:
    """The tensor-parallel sizes up to `up_to` that vLLM accepts for `spec`."""
    return [tp for tp in range(1, up_to + 1) if valid_tensor_parallel(spec, tp)]


@dataclass(frozen=True)
class PlanInputs:
    """What a plan is computed from; `cpu_ram_gib=None` means this machine's RAM."""

    gpus: int = 1
    gpu_mem_gib: float = DEFAULT_GPU_MEM_GIB
    cpu_ram_gib: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int = 16
    weights_dtype: str | None = None
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    offload_percent: float | None = None
    offload_gib: float | None = None
    reserve_gib: float = DEFAULT_RESERVE_GIB
    block_tokens: int = VLLM_BLOCK_TOKENS

    def __post_init__(self) -> None:
        _count("gpus", self.gpus, MAX_GPUS)
        _count("block_tokens", self.block_tokens, MAX_TOKENS)
        _count("max_num_seqs", self.max_num_seqs, MAX_SEQS)
        if self.max_model_len is not None:
            _count("max_model_len", self.max_model_len, MAX_TOKENS)
        check_gib("gpu_mem_gib", self.gpu_mem_gib, positive=True)
        if self.cpu_ram_gib is not None:
            check_gib("cpu_ram_gib", self.cpu_ram_gib, positive=True)
        _fraction("gpu_memory_utilization", self.gpu_memory_utilization, open_low=True)
        if self.offload_percent is not None:
            _fraction("offload_percent", self.offload_percent)
        if self.offload_gib is not None:
            check_gib("offload_gib", self.offload_gib)
        check_gib("reserve_gib", self.reserve_gib)


def _count(field: str, value: Any, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise HkvError(f"{field}: got {shown(value)}; expected an integer in [1, {high:,}]")


def check_gib(field: str, value: Any, *, positive: bool = False) -> None:
    """GiB: a finite number, >= 0 (> 0 if `positive`), at most `MAX_GIB`."""
    ok = is_number(value)
    ok = ok and math.isfinite(value) and (value > 0 if positive else value >= 0)
    if not ok or value > MAX_GIB:
        low = "> 0" if positive else ">= 0"
        raise HkvError(f"{field}: got {shown(value)}; expected GiB {low} and at most {MAX_GIB:,}")


def _fraction(field: str, value: Any, *, open_low: bool = False) -> None:
    ok = is_number(value) and math.isfinite(value)
    if not ok or not (0 < value <= 1 if open_low else 0 <= value <= 1):
        interval = "(0, 1]" if open_low else "[0, 1]"
        raise HkvError(f"{field}: got {shown(value)}; expected a fraction in {interval}")
