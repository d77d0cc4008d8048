"""Replay a Mooncake-format trace through vLLM's own CPU offloading manager.

For each request, in file order, `drive` calls a `CPUOffloadingManager` (or a subclass) as the
OffloadingConnector's scheduler does: `lookup` of the prompt's blocks until the first miss (the
hits are the longest resident prefix), `prepare_load`/`complete_load` of the hits,
`prepare_store`/`complete_store` of the whole prompt (vLLM stores what is missing), then
`on_request_finished`. One chunk is one trace block; keys are the block ids as 8 bytes, KV group
0; each key's position is its block's end token; a request's non-text blocks are sent as the
`hkv_modalities` spans a client would send. `bench.vllm_replay` and `bench.policy_suite` use it.
"""

from __future__ import annotations

import time
from typing import Any

from hkv.sim.trace import Trace


def native_manager(policy: str, capacity: int, *, module: str | None = None, threshold: int = 1):
    """vLLM's manager with `capacity` chunks and cache policy `policy` (a built-in name such as
    `lru`, or a class in `module`, the `cache_policy_module_path` route)."""
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    return CPUOffloadingManager(
        num_chunks=capacity,
        cache_policy=policy,
        cache_policy_module_path=module,
        store_threshold=threshold,
    )


def hkv_manager(name: str, trace: Trace, capacity: int, *, threshold: int = 1, params=None):
    """vLLM's manager running hkv policy `name` (hyperparameters `params`, as a connector's
    `hkv_policy_params`) through `hkv.integrations.vllm`, its blocks of the trace's size
    (`block_size` in the connector config the policy reads while built)."""
    from hkv.integrations.vllm.settings import connector_extra_config

    extra = {"block_size": trace.block_tokens}
    if params:
        extra["hkv_policy_params"] = dict(params)
    with connector_extra_config(extra):
        return native_manager(
            f"hkv_{name}", capacity, module="hkv.integrations.vllm", threshold=threshold
        )


def drive(trace: Trace, manager: Any) -> dict[str, Any]:
    """Hit counts of `trace` through `manager` (fresh: nothing resident).

    Returns `block_hit_rate`, `prefix_token_hit_frac`, `failed_stores` (requests whose store
    vLLM refused: no room it could evict), `refs_per_s` and `num_hits` (per request, in order).
    """
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key

    block_tokens = trace.block_tokens
    num_hits: list[int] = []
    refs = hit_tokens = input_tokens = failed_stores = 0
    start = time.perf_counter()
    for index, request in enumerate(trace.requests):
        keys = [make_offload_key(int(h).to_bytes(8, "big"), 0) for h in request.hash_ids]
        ctx = ReqContext(
            req_id=str(index), kv_transfer_params=modality_params(request, block_tokens)
        )
        for position, key in enumerate(keys):  # the last block may be short
            ctx.set_offload_key_position(
                key, min((position + 1) * block_tokens, request.input_length)
            )
        manager.on_new_request(ctx)
        num_hit = 0
        for key in keys:
            if manager.lookup(key, ctx) != LookupResult.HIT:
                break
            num_hit += 1
        if num_hit:
            manager.prepare_load(keys[:num_hit], ctx)
            manager.complete_load(keys[:num_hit], ctx)
        out = manager.prepare_store(keys, ctx)
        if out is None:
            failed_stores += 1
        elif out.keys_to_store:
            manager.complete_store(out.keys_to_store, ctx)
        manager.on_request_finished(ctx)
        num_hits.append(num_hit)
        refs += len(keys)
        input_tokens += request.input_length
        hit_tokens += min(num_hit * block_tokens, request.input_length)
    return {
        "block_hit_rate": sum(num_hits) / refs if refs else 0.0,
        "prefix_token_hit_frac": hit_tokens / input_tokens if input_tokens else 0.0,
        "failed_stores": failed_stores,
        "refs_per_s": round(refs / max(time.perf_counter() - start, 1e-9)),
        "num_hits": num_hits,
    }


def modality_params(request, block_tokens: int) -> dict | None:
    """The `hkv_modalities` spans a client would send for a request's non-text blocks."""
    labels = getattr(request, "modalities", None)
    if not labels:
        return None
    spans = [
        [i * block_tokens, (i + 1) * block_tokens, str(label)]
        for i, label in enumerate(labels)
        if str(label) != "text"
    ]
    return {"hkv_modalities": spans} if spans else None
