"""vLLM 0.26: whole-prompt touches.

0.26 has no `on_request_finished` and passes no context to `insert`: its scheduler touches a
request's whole prompt when it looks the request up and again after each store, and it finds
policies only in the manager's `_CACHE_POLICIES` dictionary. This module stands in for the
newer hooks there (`register` fills the dictionary); delete it, its caller in `policy` and
`register`'s fallback when 0.26 is no longer served.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hkv.integrations.vllm.request import extend_text_metas, request_spans, span_metas
from hkv.policies.native import note_split

MAX_REQUESTS = 4096  # requests whose key count is remembered (oldest forgotten first)


def touch_request(adapter: Any, keys: Sequence[Any], req_context: Any) -> None:
    """`keys` are all of a request's keys, in prefix order, at every touch.

    The first touch is the request's one access (resident blocks are touched once, as in hkv's
    replay, through `after_request`, tail first; 0.26 reports no end of request, so the blocks
    the request stores keep their insertion order) and notes position and modality of the
    absent keys for their `insert`; a later
    touch only looks at keys the request did not have before (its list only grows), so it
    usually costs nothing but this bookkeeping.
    """
    seen = _note_request(adapter, req_context.req_id, len(keys))
    start = seen or 0
    if start >= len(keys):
        return
    first = seen is None  # the request's one access, reported even when nothing is resident:
    # a request's end is where `auto` replays its misses in its shadows and where `predictive`
    # starts its next request
    resident = None
    if adapter.shared_meta is None:  # note the metadata of blocks about to be stored
        resident = _note_absent(adapter, keys, start, req_context, first)
    if first:
        if resident is None:
            resident = list(filter(adapter.chunks.__contains__, keys))
        adapter.sync()
        if isinstance(resident, tuple):  # text, a policy that takes them: their metas too
            adapter.policy.after_request((), *resident)
        else:
            adapter.policy.after_request((), resident)


def _note_request(adapter: Any, req_id: str, num_keys: int) -> int | None:
    """Remember the request's key count; return the count seen before (None: first touch)."""
    touched = adapter.touched_requests
    seen = touched.get(req_id)
    if seen is None and len(touched) >= MAX_REQUESTS:
        touched.popitem(last=False)
    touched[req_id] = num_keys
    if len(adapter.pending_meta) > 4 * adapter.cache_capacity:
        adapter.pending_meta.clear()  # stores that never happened (a refused prepare_store)
        adapter.decided.clear()  # their verdicts with them, as `on_store_miss` clears them
    return seen


def _note_absent(adapter: Any, keys: Sequence[Any], start: int, req_context: Any, held: bool):
    """Note the metas of `keys[start:]` that are neither resident nor noted yet, and tell the
    policy of them; the request's resident keys where `held` (one pass, `native.note_split`),
    as `(keys, metas)` for a text request to a policy that takes them (`auto`)."""
    spans, blocks, tokens = request_spans(req_context), len(keys), adapter.block_tokens
    if spans:  # (a marked prompt's resident blocks go to the policy as keys, their metas held)
        metas = span_metas(spans, blocks, tokens, adapter.text_metas, adapter.span_metas)
    else:
        metas = extend_text_metas(adapter.text_metas, blocks, tokens)
    chunks, pending = adapter.chunks, adapter.pending_meta
    with_metas = held and not spans and getattr(adapter.policy, "takes_reused_metas", False)
    noted, resident = note_split(keys, start, chunks, pending, metas, held, with_metas)
    if noted[0]:
        pending.update(zip(*noted, strict=True))
        adapter.note_misses(*noted)
    return resident


def needs_late_store_guard() -> bool:
    """Whether this vLLM's offloading scheduler tells the tiering manager that a request
    finished before it stores the request's last blocks: 0.26's `request_finished` does
    (`manager.on_request_finished`, then the final store jobs at the next step), and the
    manager, which dropped the request's state when it finished with no store pending, fails
    that store with a `KeyError` in `TieringOffloadingManager.prepare_store` (vLLM #49635; on
    the H200 it killed the engine at a 4 GiB CPU tier with a disk tier behind it). 0.32 and
    later signal the end after the last `prepare_store`."""
    import vllm

    major, minor = (int(part) for part in vllm.__version__.split(".")[:2])
    return (major, minor) < (0, 27)


def guard_late_stores(manager: Any) -> None:
    """vLLM 0.26 (`needs_late_store_guard`): `manager.prepare_store` for a request whose state
    the manager already dropped gives it a finished state back first, so the store runs and its
    completion finalizes the request again (secondary tiers hear `on_request_finished` twice for
    it; vLLM's `fs` and hkv's tier treat that as once). A store that stores nothing drops the
    state again. `manager.hkv_late_stores` counts the stores it let through. Delete with this
    module when 0.26 is no longer served."""
    from vllm.v1.kv_offload.tiering.manager import RequestState

    if getattr(manager, "_hkv_late_store_guard", False):
        return  # `get_manager` hands out one manager, maybe more than once
    manager._hkv_late_store_guard = True
    manager.hkv_late_stores = 0
    store = manager.prepare_store
    states = manager._req_state

    def prepare_store(keys, req_context):
        req_id = req_context.req_id
        if req_id in states:
            return store(keys, req_context)
        states[req_id] = RequestState(req_context=req_context, is_finished=True)
        manager.hkv_late_stores += 1
        try:
            result = store(keys, req_context)
        finally:
            state = states.get(req_id)
            if state is not None and state.pending_primary_stores == 0:
                del states[req_id]  # nothing in flight: nothing will finalize it
        return result

    manager.prepare_store = prepare_store
