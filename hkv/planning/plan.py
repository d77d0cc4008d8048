"""From a model and a machine to a memory plan and the vLLM arguments that realise it.

The arithmetic follows how vLLM sizes its KV cache: each GPU may use `gpu_memory_utilization` of
its memory; from that come the weights' share of the GPU, and a reserve for everything vLLM
needs besides weights and KV (CUDA context, the activation peak of the profiling run, CUDA graphs,
NCCL buffers). What is left is the GPU KV budget. vLLM refuses to start when one sequence of
`max_model_len` tokens does not fit in it; hkv reports that as `fits = False` with the reason.

The CPU tier follows the article's formula, `min(CPU_RAM x 0.7, total_KV x offload_percent)`,
where total_KV is the KV of `max_num_seqs` sequences of `max_model_len` tokens. Without a percent,
hkv offloads what overflows the GPU budget, under the same 0.7 x RAM ceiling (the rest of the host
RAM stays for the OS, the engine and pinned staging buffers). A size given in GiB is taken as
given or refused, as `hkv flags` does (`hkv.planning.offload_spec`'s rules): above 0.7 x RAM, or
beside a percent that says otherwise, it raises `FlagConflict`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from hkv.errors import HkvError, reject_unknown
from hkv.models.model_spec import ModelSpec
from hkv.planning.offload_spec import (
    OffloadSpec,
    SizeNames,
    check_size_and_percent,
    check_size_fits_ram,
)
from hkv.planning.plan_inputs import (
    DEFAULT_GPU_MEM_GIB,
    DEFAULT_RESERVE_GIB,
    HOST_RAM_FRACTION,
    VLLM_BLOCK_TOKENS,
    WEIGHT_BYTES_PER_PARAM,
    PlanInputs,
    detected_host_ram_gib,
    tensor_parallel_problem,
    tensor_parallel_sizes,
    valid_tensor_parallel,
    weights_bytes,
)
from hkv.planning.sizes import GIB

__all__ = [  # the plan's inputs and constants are re-exported: callers read them from here
    "DEFAULT_GPU_MEM_GIB",
    "DEFAULT_RESERVE_GIB",
    "GIB",
    "HOST_RAM_FRACTION",
    "VLLM_BLOCK_TOKENS",
    "WEIGHT_BYTES_PER_PARAM",
    "MemoryPlan",
    "PlanInputs",
    "detected_host_ram_gib",
    "plan",
    "tensor_parallel_problem",
    "tensor_parallel_sizes",
    "valid_tensor_parallel",
    "weights_bytes",
]


@dataclass(frozen=True)
class MemoryPlan:
    """A model on a machine: where its weights and KV go, and the vLLM arguments for it.

    Byte counts are totals over all GPUs unless the name says `_per_gpu` or `_per_rank`. Block
    counts are vLLM's: `gpu_kv_blocks` on each GPU (a block holds `block_tokens` tokens of one
    rank's KV heads), `offload_blocks` in the CPU tier (each holds the block of every rank), so
    `offload_bytes_per_rank` is what each rank's share of the tier really holds: the requested
    size rounded down to whole blocks, over the ranks (vLLM's `CPUOffloadingSpec`).
    """

    model: str
    gpus: int
    gpu_mem_gib: float
    cpu_ram_gib: float
    max_model_len: int
    max_num_seqs: int
    weights_dtype: str
    kv_cache_dtype: str
    gpu_memory_utilization: float
    reserve_bytes_per_gpu: int
    kv_bytes_per_token: int
    kv_bytes_per_token_by_group: dict[str, int]
    kv_bytes_per_token_per_gpu: int
    kv_bytes_per_seq: int
    weights_bytes: int
    weights_bytes_per_gpu: int
    gpu_kv_budget_bytes: int
    gpu_kv_blocks: int
    max_seqs_on_gpu: int
    kv_demand_bytes: int
    offload_bytes: int
    offload_blocks: int
    offload_bytes_per_rank: int
    offload_requested_bytes: int
    offload_bound_by: str
    host_offload_limit_bytes: int
    fits: bool
    block_tokens: int = VLLM_BLOCK_TOKENS
    reasons: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    vllm_args: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(
    spec: ModelSpec, inputs: PlanInputs | None = None, *, suggest: bool = True, **overrides: Any
) -> MemoryPlan:
    """Compute the memory plan of `spec` on the machine `inputs` describes.

    `plan(spec, gpus=2, gpu_mem_gib=48)` is shorthand for `plan(spec, PlanInputs(gpus=2, ...))`;
    with `inputs` given too, the keywords override its fields.
    """
    if inputs is None:
        inputs = PlanInputs(**_known_fields(overrides))
    elif overrides:
        inputs = replace(inputs, **_known_fields(overrides))
    ram = "cpu_ram_gib" if inputs.cpu_ram_gib is not None else "host RAM"
    names = SizeNames(size="offload_gib", percent="offload_percent", ram=ram)
    inputs = _resolve(spec, inputs)
    problem = tensor_parallel_problem(spec, inputs.gpus)
    if problem:
        sizes = ", ".join(map(str, tensor_parallel_sizes(spec)))
        raise HkvError(f"gpus: {problem}; use one of {sizes}")
    return _Planner(spec, inputs, suggest, names).build()


def _known_fields(overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides`, each a field of PlanInputs (else one HkvError naming it, as PlanInputs'
    own constructor would not)."""
    reject_unknown("plan", overrides, [f.name for f in fields(PlanInputs) if f.init])
    return overrides


def _resolve(spec: ModelSpec, inputs: PlanInputs) -> PlanInputs:
    """Fill the defaults that depend on the model or the machine."""
    return replace(
        inputs,
        max_model_len=inputs.max_model_len or spec.max_position_embeddings,
        weights_dtype=inputs.weights_dtype or spec.native_weights_dtype,
        cpu_ram_gib=inputs.cpu_ram_gib or round(detected_host_ram_gib(), 1),
    )


class _Planner:
    def __init__(self, spec: ModelSpec, inputs: PlanInputs, suggest: bool, names: SizeNames):
        self.spec = spec
        self.i = inputs
        self.suggest = suggest
        self.names = names
        self.warnings: list[str] = []

    def build(self) -> MemoryPlan:
        spec, i = self.spec, self.i
        tp = i.gpus
        shard = spec.kv_shard_fraction(tp)
        per_token = spec.kv_bytes_per_token(i.kv_cache_dtype)
        per_seq = spec.kv_bytes_per_seq(i.max_model_len, i.kv_cache_dtype)
        per_seq_per_gpu = math.ceil(per_seq * shard)
        w_total = weights_bytes(spec, i.weights_dtype)
        w_per_gpu = math.ceil(w_total / tp)
        reserve = int(i.reserve_gib * GIB)
        usable_per_gpu = int(i.gpu_mem_gib * GIB * i.gpu_memory_utilization)
        budget_per_gpu = max(0, usable_per_gpu - w_per_gpu - reserve)
        max_seqs = budget_per_gpu // per_seq_per_gpu if per_seq_per_gpu else i.max_num_seqs
        demand = per_seq * i.max_num_seqs
        gpu_held = min(max_seqs, i.max_num_seqs) * per_seq
        reasons = self.reasons(usable_per_gpu, w_per_gpu, reserve, max_seqs, per_seq_per_gpu)
        offload, requested, bound = self.cpu_tier(reasons, demand, demand - gpu_held)
        self.check_context()
        block_per_gpu = i.block_tokens * math.ceil(per_token * shard)
        offload_blocks = offload // (block_per_gpu * tp) if block_per_gpu else 0
        if tp > spec.num_kv_heads and not spec.is_mla:
            self.warnings.append(
                f"{tp} GPUs > {spec.num_kv_heads} KV heads: each GPU keeps a replicated copy "
                "of one KV head, so KV per GPU stops shrinking with more GPUs"
            )
        partial = MemoryPlan(
            model=spec.name,
            gpus=tp,
            gpu_mem_gib=i.gpu_mem_gib,
            cpu_ram_gib=i.cpu_ram_gib,
            max_model_len=i.max_model_len,
            max_num_seqs=i.max_num_seqs,
            weights_dtype=i.weights_dtype,
            kv_cache_dtype=i.kv_cache_dtype,
            gpu_memory_utilization=i.gpu_memory_utilization,
            reserve_bytes_per_gpu=reserve,
            kv_bytes_per_token=per_token,
            kv_bytes_per_token_by_group=spec.kv_bytes_per_token_by_group(i.kv_cache_dtype),
            kv_bytes_per_token_per_gpu=math.ceil(per_token * shard),
            kv_bytes_per_seq=per_seq,
            weights_bytes=w_total,
            weights_bytes_per_gpu=w_per_gpu,
            gpu_kv_budget_bytes=budget_per_gpu * tp,
            gpu_kv_blocks=budget_per_gpu // block_per_gpu if block_per_gpu else 0,
            max_seqs_on_gpu=int(max_seqs),
            kv_demand_bytes=demand,
            offload_bytes=offload,
            offload_blocks=offload_blocks,
            offload_bytes_per_rank=offload_blocks * block_per_gpu,
            offload_requested_bytes=requested,
            offload_bound_by=bound,
            host_offload_limit_bytes=self.host_limit(),
            fits=not reasons,
            block_tokens=i.block_tokens,
            reasons=reasons,
        )
        return _finish(spec, partial, self.warnings, self.suggest)

    def host_limit(self) -> int:
        return int(self.i.cpu_ram_gib * GIB * HOST_RAM_FRACTION)

    def cpu_tier(self, reasons: list[str], demand: int, overflow: int) -> tuple[int, int, str]:
        """`offload`, or nothing where vLLM would not start (a CPU tier for it would be
        meaningless); a size given in GiB is checked either way."""
        if self.i.offload_gib is not None:
            self.checked_size(demand)
        return (0, 0, "does_not_fit") if reasons else self.offload(demand, overflow)

    def offload(self, demand: int, overflow: int) -> tuple[int, int, str]:
        """(offload bytes, bytes asked for, which term of the formula bound it).

        A size in GiB is taken as given or refused; a percent or the GPU overflow is capped at
        0.7 x RAM by the formula (`hkv.planning.offload_spec`'s rules)."""
        i, limit = self.i, self.host_limit()
        if i.offload_gib is not None:
            requested = self.checked_size(demand)
            return requested, requested, "offload_size"
        if i.offload_percent is not None:
            requested, source = int(demand * i.offload_percent), "offload_percent"
        else:
            requested, source = max(0, overflow), "gpu_overflow"
        if requested > limit:
            self.warnings.append(
                f"asked for {requested / GIB:.1f} GiB of CPU tier ({source}) but the formula caps "
                f"it at 0.7 x {i.cpu_ram_gib:g} GiB RAM = {limit / GIB:.1f} GiB"
            )
            return limit, requested, "host_ram"
        return requested, requested, source

    def checked_size(self, demand: int) -> int:
        """The size given in GiB, refused beside a percent that says otherwise or above
        0.7 x RAM (whether the plan fits or not: a typed size is checked as typed)."""
        i = self.i
        requested = int(i.offload_gib * GIB)
        if i.offload_percent is not None:
            from_percent = min(self.host_limit(), int(demand * i.offload_percent))
            check_size_and_percent(requested, i.offload_percent, from_percent, self.names)
        check_size_fits_ram(requested, i.cpu_ram_gib, self.names)
        return requested

    def reasons(
        self, usable: int, w_per_gpu: int, reserve: int, max_seqs: int, seq_per_gpu: int
    ) -> list[str]:
        i = self.i
        if w_per_gpu + reserve > usable:
            return [
                f"weights alone: {w_per_gpu / GIB:.1f} GiB per GPU ({i.weights_dtype}, "
                f"{i.gpus} GPU{'s' * (i.gpus > 1)}) + {reserve / GIB:.1f} GiB reserve exceed the "
                f"{usable / GIB:.1f} GiB usable per GPU ({i.gpu_mem_gib:g} GiB x "
                f"{i.gpu_memory_utilization:g})"
            ]
        if max_seqs < 1:
            return [
                f"KV of one {i.max_model_len}-token sequence ({seq_per_gpu / GIB:.2f} GiB per "
                f"GPU) exceeds the GPU KV budget left after weights "
                f"({(usable - w_per_gpu - reserve) / GIB:.2f} GiB per GPU); vLLM refuses to start"
            ]
        return []

    def check_context(self) -> None:
        limit = self.spec.max_position_embeddings
        if limit and self.i.max_model_len > limit:
            self.warnings.append(
                f"--max-model-len {self.i.max_model_len} exceeds the model's "
                f"max_position_embeddings {limit}; vLLM rejects it unless "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
            )


def _finish(
    spec: ModelSpec, partial: MemoryPlan, warnings: list[str], with_suggestions: bool
) -> MemoryPlan:
    args = vllm_args_for(spec, partial, warnings)
    if partial.fits:
        suggestions = _offload_note(partial)
    else:
        suggestions = suggest_fixes(spec, partial) if with_suggestions else []
    return replace(partial, vllm_args=args, suggestions=suggestions, warnings=warnings)


def vllm_args_for(spec: ModelSpec, p: MemoryPlan, warnings: list[str]) -> list[str]:
    """The `vllm serve` arguments (after `vllm serve`) that realise plan `p`."""
    args = [
        "--model",
        spec.hub_id or spec.name,
        "--tensor-parallel-size",
        str(p.gpus),
        "--gpu-memory-utilization",
        f"{p.gpu_memory_utilization:g}",
        "--max-model-len",
        str(p.max_model_len),
        "--max-num-seqs",
        str(p.max_num_seqs),
    ]
    if p.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", p.kv_cache_dtype]
    args += quantization_args(spec, p.weights_dtype, warnings)
    if p.block_tokens != VLLM_BLOCK_TOKENS:  # the blocks the plan counts are vLLM's blocks
        args += ["--block-size", str(p.block_tokens)]
    if p.offload_bytes > 0:  # vLLM's own lru: the plan names no policy
        args += OffloadSpec(p.offload_bytes, p.block_tokens, policy="lru").vllm_args()
    return args


def quantization_args(spec: ModelSpec, weights_dtype: str, warnings: list[str]) -> list[str]:
    """vLLM's flag for running `spec` with `weights_dtype` weights, and what it presumes."""
    native = spec.native_weights_dtype
    if weights_dtype == native:
        return []
    if weights_dtype == "fp8":
        return ["--quantization", "fp8"]  # online per-tensor fp8 from a bf16 checkpoint
    if weights_dtype == "int4":
        warnings.append(
            "int4 weights need a checkpoint already quantized with AWQ (or GPTQ): point --model "
            f"at such a copy of {spec.name}; vLLM does not quantize to 4 bits at load time"
        )
        return ["--quantization", "awq"]
    warnings.append(
        f"{spec.name} ships {native} weights; running it in {weights_dtype} needs a "
        f"{weights_dtype} copy of the checkpoint (vLLM does not up-cast a quantized checkpoint)"
    )
    return []


def suggest_fixes(spec: ModelSpec, p: MemoryPlan) -> list[str]:
    """Smallest changes that make the plan fit: more GPUs of the same size, or smaller weights."""
    out = []
    for dtype in _dtypes_from(p.weights_dtype):
        for gpus in (1, 2, 4, 8):
            if gpus < p.gpus or not valid_tensor_parallel(spec, gpus):
                continue
            alt = plan(
                spec,
                PlanInputs(
                    gpus=gpus,
                    gpu_mem_gib=p.gpu_mem_gib,
                    cpu_ram_gib=p.cpu_ram_gib,
                    max_model_len=p.max_model_len,
                    max_num_seqs=p.max_num_seqs,
                    weights_dtype=dtype,
                    kv_cache_dtype=p.kv_cache_dtype,
                    gpu_memory_utilization=p.gpu_memory_utilization,
                    reserve_gib=p.reserve_bytes_per_gpu / GIB,
                ),
                suggest=False,
            )
            if alt.fits:
                out.append(
                    f"{gpus} x {p.gpu_mem_gib:g} GiB GPUs with {dtype} weights fit: "
                    f"{alt.max_seqs_on_gpu} sequence(s) of {p.max_model_len} tokens on GPU"
                )
                break
    if not out:
        out.append(f"no configuration of up to 8 x {p.gpu_mem_gib:g} GiB GPUs fits {spec.name}")
    return out


def _dtypes_from(dtype: str) -> list[str]:
    order = ["bf16", "fp8", "int4"]
    return order[order.index(dtype) :]


def _offload_note(p: MemoryPlan) -> list[str]:
    if p.max_seqs_on_gpu >= p.max_num_seqs:
        return []
    return [
        f"{p.max_seqs_on_gpu} of {p.max_num_seqs} full-length sequences fit on the GPUs; "
        f"the CPU tier holds {p.offload_bytes / GIB:.1f} GiB of the rest"
    ]
