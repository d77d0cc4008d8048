"""hkv's eviction policies inside vLLM's CPU offloading tier.

vLLM's `OffloadingConnector` keeps offloaded KV chunks in host memory and asks a `CachePolicy`
which chunks to give up. This module turns every hkv policy into such a `CachePolicy` — the same
implementation the simulator and the block manager use, wrapped, never copied. vLLM finds it by
class name and module path:

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"cpu_bytes_to_use": 17179869184,
        "eviction_policy": "hkv_cost_aware",
        "cache_policy_module_path": "hkv.integrations.vllm",
        "hkv_config": {"offload_strategy": "cost_aware"}}}'

`hkv_<name>` is generated on first access for every registered policy (`hkv_lru`,
`hkv_cost_aware`, ...); any other name raises at engine start with the list of hkv's policies.
vLLM 0.26 has no module-path loading: its built-in dictionary is filled by `register()`, the
`vllm.general_plugins` entry point hkv installs (vLLM calls it in every process).

What the adapter adds to the policy:
- Chunks being written (`ref_cnt == -1`) or read (`ref_cnt > 0`) are never offered for eviction:
  the adapter keeps them in a set (`busy`), filled at `insert` and by vLLM's `mark_non_evictable`
  and emptied by `mark_evictable` (both hooks exist in 0.26 and 0.32+; they are the set's own
  methods, so vLLM calls no Python code for them), and `evict` hands the policy `busy` plus
  vLLM's `protected` as one set: skipping a busy chunk is a set lookup, not a Python call.
- Inserts in batches: vLLM calls `insert` for every chunk it stores; without a request context
  (0.26 to 0.32) it is the chunk dictionary's own `__setitem__`, and the policy is told of the
  new chunks in one `insert_all` at its next decision (`sync`), in the same order and between
  the same decisions as one by one, so its decisions are unchanged.
- Admission control: vLLM has already allocated a chunk when it calls `insert`, so a block the
  policy declines is still stored, but outside the policy, and is the first to be evicted.
- Block metadata: the position comes from vLLM's per-request key positions (`ReqContext`), the
  modality from the request's `kv_transfer_params` (below), the token count from the config.
- One access per request: 0.32+ reports it when the request finishes (`on_request_finished`);
  0.26 touches a request's whole prompt at lookup and after every store, so there the first
  touch counts and later ones only note metadata (`_touch_request`). The request's resident
  blocks are touched in prefix order, or tail first for a policy that asks for it
  (`touches_tail_first`: `dip`/`bip` with `tail_first`): a prefix cache serves a block only
  when every block before it is served, so the head of a chain is then the most recent and the
  policy gives up chains from the tail. hkv's replay (`store="per_request"`) does the same,
  which is what lets the simulator predict the adapter inside vLLM.
- Hyperparameters: `hkv_policy_params` in the connector's extra config (or `HKV_POLICY_PARAMS`),
  e.g. `{"tail_first": true}`.

Modality per block: vLLM does not pass multimodal placeholder ranges to the policy. A client
marks the token spans that are images or audio in the request's `kv_transfer_params`:

    {"prompt": ..., "kv_transfer_params": {"hkv_modalities": [[0, 576, "vision"]]}}

(`[start, end, modality]`, token offsets into the prompt, end exclusive). A block whose tokens
overlap a marked span takes that span's modality; every other block is text. vLLM's multimodal
block hashes already include the image hash, so equal images still share blocks.
"""

from __future__ import annotations

import bisect
import inspect
import json
import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from functools import cache
from itertools import compress, islice
from operator import attrgetter
from typing import Any

from vllm.v1.kv_offload.cpu.policies.base import CachePolicy

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.errors import HkvError

PREFIX = "hkv_"
MODALITY_PARAM = "hkv_modalities"
DEFAULT_BLOCK_TOKENS = 16


def modality_at(spans: Sequence[Sequence[Any]] | None, start: int, end: int) -> Modality:
    """The modality of tokens `[start, end)` given a request's marked spans (text if none)."""
    for span_start, span_end, label in spans or ():
        if span_start < end and start < span_end:
            return Modality.parse(label, field=MODALITY_PARAM)
    return Modality.TEXT


class HkvCachePolicy(CachePolicy):
    """A vLLM `CachePolicy` that delegates every decision to an hkv `EvictionPolicy`.

    Subclasses set `hkv_policy` (a registered name); `hkv_<name>` classes are made on demand.
    Works with the `insert(key, status)` of vLLM 0.26-0.32 and with a `req_context` argument,
    with 0.32+'s access hooks (`on_store_miss`, `on_request_finished`) and with 0.26's
    whole-request `touch` (`_touch_request`), which stands in for them there.
    """

    hkv_policy: str = "lru"

    def __init__(self, cache_capacity: int, **settings: Any):
        super().__init__(cache_capacity)
        self.cache_capacity = cache_capacity  # vLLM 0.26's base __init__ does not keep it
        from hkv.policies import make_policy

        self.settings = _settings() | settings
        self.block_tokens = int(self.settings.get("block_tokens", DEFAULT_BLOCK_TOKENS))
        self.chunks: dict[Any, Any] = {}
        self.busy: set[Any] = set()  # chunks being written or read: never eviction candidates
        # vLLM calls these for every block of every request: they are the containers' own
        # methods (a third of the cost of a Python method around them); neither is rebound.
        self.get = self.chunks.get
        self.mark_evictable = self.busy.discard  # ref_cnt became 0: a store or the loads ended
        self.mark_non_evictable = self.busy.add  # ref_cnt left 0: a load began
        self.synced = 0  # chunks the policy has been told of (`sync`): the first `synced`
        if _insert_takes_no_context():
            self.insert = self.chunks.__setitem__  # the policy learns of it at `sync`
        self.bypassed: OrderedDict[Any, None] = OrderedDict()
        self.pending_meta: dict[Any, BlockMeta] = {}
        self._text_metas: list[BlockMeta] = []  # `_text_metas_to`
        self.touched_requests: OrderedDict[str, int] = OrderedDict()  # vLLM 0.26: keys seen
        self.policy = make_policy(
            self.hkv_policy,
            cache_capacity,
            cost_model=self.settings.get("cost_model"),
            config=self.settings.get("config"),
            **self.settings.get("policy_params", {}),
        )
        self.admits_all = self.policy.admits_everything  # then no `admit` call per insert
        # A policy that reads no metadata gets one shared meta: no position or modality is
        # worked out for its blocks, at lookup or at insert.
        self.shared_meta = (
            None if self.policy.reads_meta else BlockMeta(self.block_tokens, tier=Tier.HOST)
        )

    # -- what vLLM calls ------------------------------------------------------------------------
    def get(self, key):
        return self.chunks.get(key)

    def insert(self, key, chunk, req_context=None) -> None:
        """vLLM with `req_context` at insert: hand the chunk over at once. Without it (0.26 to
        0.32), `insert` is the chunk dictionary's own `__setitem__` (see `sync`)."""
        self.sync()
        self.chunks[key] = chunk
        self.synced += 1
        if chunk.ref_cnt:  # -1: vLLM inserts a chunk before writing it
            self.busy.add(key)
        self._hand_over([key], req_context)

    def sync(self) -> None:
        """Tell the policy of the chunks vLLM inserted since its last decision, in order.

        vLLM inserts every chunk it stores, one call each; the policy need not hear of them
        until it next decides (`touch`, `evict`, `remove`), so `insert` costs vLLM no Python
        and the policy gets them in one `insert_all`. It is told the same inserts in the same
        order between the same decisions as if told one by one. New chunks are the last ones
        of `chunks` (a dict keeps insertion order; removal leaves the others' order alone), and
        those still being written or already being read (`ref_cnt != 0`) are busy.
        """
        chunks = self.chunks
        new = len(chunks) - self.synced
        if new <= 0:
            return
        newest_first = list(islice(reversed(chunks), new))
        self.synced = len(chunks)
        refs = map(_REF_CNT, islice(reversed(chunks.values()), new))
        self.busy.update(compress(newest_first, refs))
        newest_first.reverse()
        self._hand_over(newest_first, None)

    def _hand_over(self, keys: list[Any], req_context) -> None:
        """Insert new chunks into the policy (or set them aside when it declines them)."""
        shared = self.shared_meta
        if shared is not None and self.admits_all:
            self.policy.insert_all(keys, shared)
            return
        policy, pending = self.policy, self.pending_meta
        for key in keys:
            meta = shared
            if meta is None:
                meta = pending.pop(key, None)
                if meta is None or req_context is not None:
                    meta = self.meta(key, req_context)
            if self.admits_all or policy.admit(key, meta):
                policy.insert(key, meta)
            else:
                self.bypassed[key] = None

    def remove(self, key) -> None:
        self.sync()
        if self.chunks.pop(key, None) is not None:
            self.synced -= 1
        self.busy.discard(key)
        self.bypassed.pop(key, None)
        self.policy.remove(key)

    def touch(self, keys: Iterable[Any], req_context=None) -> None:
        if req_context is not None and not hasattr(req_context, "get_offload_key_position"):
            self._touch_request(keys if isinstance(keys, list | tuple) else list(keys), req_context)
            return
        self.sync()
        self.policy.touch_all(keys)

    def _touch_request(self, keys: Sequence[Any], req_context) -> None:
        """vLLM 0.26: `keys` are all of a request's keys, in prefix order, at every touch.

        Its scheduler touches a request's whole prompt when it looks the request up and again
        after each store, and passes no context to `insert`. The first touch is the request's
        one access (resident blocks are touched once, as in hkv's replay) and notes
        position and modality of the absent keys for their `insert`; a later touch only looks
        at keys the request did not have before (its list only grows), so it usually costs
        nothing but this bookkeeping.
        """
        seen = self.touched_requests.get(req_context.req_id)
        if seen is None and len(self.touched_requests) >= 4096:
            self.touched_requests.popitem(last=False)
        self.touched_requests[req_context.req_id] = len(keys)
        if len(self.pending_meta) > 4 * self.cache_capacity:
            self.pending_meta.clear()  # stores that never happened (a refused prepare_store)
        start = seen or 0
        if start >= len(keys):
            return
        chunks, pending = self.chunks, self.pending_meta
        absent = []
        if self.shared_meta is None:  # note the metadata of blocks about to be stored
            new_keys = keys[start:] if start else keys
            absent = [
                i
                for i, key in enumerate(new_keys, start)
                if key not in chunks and key not in pending
            ]
        if absent:
            spans = (req_context.kv_transfer_params or {}).get(MODALITY_PARAM)
            if spans:
                meta = self._span_meta(spans)
                pending.update([(keys[i], meta(i)) for i in absent])
            else:
                metas = self._text_metas_to(len(keys))
                pending.update([(keys[i], metas[i]) for i in absent])
        if seen is None:  # the first touch is the request's one access
            resident = list(filter(chunks.__contains__, keys))
            if resident:
                self.sync()
                policy = self.policy
                policy.touch_all(resident[::-1] if policy.touches_tail_first else resident)

    def _text_metas_to(self, blocks: int) -> list[BlockMeta]:
        """The metadata of full text blocks at block index 0, 1, ... (at least `blocks` of
        them): one shared instance per position, never mutated, so that noting a prompt's
        absent blocks allocates nothing."""
        metas, tokens = self._text_metas, self.block_tokens
        for index in range(len(metas), blocks):
            metas.append(BlockMeta(tokens, index * tokens, Modality.TEXT, Tier.HOST))
        return metas

    def _span_meta(self, spans):
        """`index -> BlockMeta` for a prompt with marked modality spans."""
        tokens = self.block_tokens

        def meta(index: int) -> BlockMeta:
            position = index * tokens
            return BlockMeta(tokens, position, modality_at(spans, position, position + tokens))

        return meta

    def on_store_miss(self, keys: Iterable[Any], req_context=None) -> None:
        """Keys about to be inserted: note their metadata, since vLLM's `insert` has no context.

        A store miss is not a reference to a resident block, so nothing is touched.
        """
        if self.shared_meta is not None:
            return  # the policy reads no metadata
        pending, meta = self.pending_meta, self.meta
        if len(pending) > 4 * self.cache_capacity:
            pending.clear()  # stores that never happened (a refused prepare_store)
        for key in keys:
            pending[key] = meta(key, req_context)

    def on_request_finished(
        self, key_groups: Sequence[Sequence[Any]], insertion_only_keys, reused_keys, req_context
    ) -> None:
        """One access per request, as in hkv's replay: blocks that were resident before the
        request are touched (in prefix order, or tail first if the policy asks); blocks it only
        inserted are not (their insert was their reference), or frequency-based policies would
        count them twice."""
        tail_first = self.policy.touches_tail_first
        for keys in key_groups:
            reused = [k for k in keys if k not in insertion_only_keys]
            ordered = _in_prefix_order(reused, req_context)
            self.touch(ordered[::-1] if tail_first else ordered, req_context)

    def evict(self, n: int, protected):
        if n <= 0:
            return []
        # The resident ones of `protected` join `busy` for this call only: O(len(protected)),
        # where a union would copy `busy` (thousands of chunks in flight) on every eviction.
        self.sync()
        busy = self.busy
        added = (self.chunks.keys() & _as_set(protected)) - busy if protected else ()
        busy.update(added)
        try:
            first = self._bypassed_victims(n, busy) if self.bypassed else []
            rest = self.policy.evict(n - len(first), busy) if len(first) < n else []
        finally:
            busy.difference_update(added)
        if rest is None:
            return None  # nothing changed: the policy refused and no bypassed key was taken
        for key in first:
            del self.bypassed[key]
        victims = first + rest if first else rest
        self.synced -= len(victims)
        return list(zip(victims, map(self.chunks.pop, victims), strict=True))

    def _bypassed_victims(self, n: int, unevictable: set[Any]) -> list[Any]:
        """Up to `n` evictable blocks that the policy declined, oldest first."""
        victims = []
        for key in self.bypassed:
            if key not in unevictable:
                victims.append(key)
                if len(victims) == n:
                    break
        return victims

    def clear(self) -> None:
        self.synced = 0
        self.chunks.clear()
        self.busy.clear()
        self.bypassed.clear()
        self.pending_meta.clear()
        self.touched_requests.clear()
        self.policy.clear()

    # -- block metadata ---------------------------------------------------------------------------
    def meta(self, key, req_context) -> BlockMeta:
        end = None
        if req_context is not None and hasattr(req_context, "get_offload_key_position"):
            end = req_context.get_offload_key_position(key)
        if end is None:
            return BlockMeta(tokens=self.block_tokens, tier=Tier.HOST)
        start = max(0, end - self.block_tokens, _previous_end(req_context, end))
        params = getattr(req_context, "kv_transfer_params", None) or {}
        return BlockMeta(
            tokens=end - start,
            position=start,
            modality=modality_at(params.get(MODALITY_PARAM), start, end),
            tier=Tier.HOST,
        )


_REF_CNT = attrgetter("ref_cnt")


@cache
def _insert_takes_no_context() -> bool:
    """Whether the running vLLM calls `CachePolicy.insert(key, chunk)` (0.26 to 0.32)."""
    try:
        parameters = inspect.signature(CachePolicy.insert).parameters
    except (TypeError, ValueError):
        return False
    return len(parameters) == 3  # self, key, chunk


def _as_set(keys: Iterable[Any]) -> set[Any] | frozenset[Any]:
    return keys if isinstance(keys, set | frozenset) else set(keys)


class _EndPositions(list):
    """A request's sorted block end positions, kept in its `ReqContext` state."""


def _previous_end(req_context, end: int) -> int:
    """End of the block before the one ending at `end` (0 if first): a short last block of a
    prompt then gets its true token count."""
    positions = getattr(req_context, "_offload_key_positions", None)
    if positions is None or not hasattr(req_context, "get_state"):
        return 0
    ends = req_context.get_state(_EndPositions)
    if ends is None or len(ends) != len(positions):
        ends = _EndPositions(sorted(positions.values()))
        req_context.set_state(ends)
    at = bisect.bisect_left(ends, end)
    return ends[at - 1] if at > 0 else 0


def _in_prefix_order(keys: Sequence[Any], req_context) -> list[Any]:
    get = getattr(req_context, "get_offload_key_position", None)
    if get is None:
        return list(keys)
    positions = {key: get(key) for key in keys}
    if any(p is None for p in positions.values()):
        return list(keys)
    return sorted(keys, key=positions.__getitem__)


def _settings() -> dict[str, Any]:
    """hkv settings for the policies, from the running vLLM's connector config (`hkv_config`,
    `hkv_policy_params`, `block_size`) or else the environment (`HKV_CONFIG` and
    `HKV_POLICY_PARAMS` as JSON, `HKV_BLOCK_TOKENS`), plus a cost model for the served model.
    `hkv_policy_params` are the policy's hyperparameters (`{"tail_first": true}` for `hkv_bip`);
    an unknown one fails at engine start with the policy's valid ones."""
    extra = _connector_extra_config()
    raw = extra.get("hkv_config")
    if raw is None and os.environ.get("HKV_CONFIG"):
        raw = json.loads(os.environ["HKV_CONFIG"])
    settings: dict[str, Any] = {}
    if raw:
        from hkv.config import HybridKVCacheConfig

        settings["config"] = HybridKVCacheConfig.from_dict(raw, source="hkv_config")
    params = extra.get("hkv_policy_params")
    if params is None and os.environ.get("HKV_POLICY_PARAMS"):
        try:
            params = json.loads(os.environ["HKV_POLICY_PARAMS"])
        except json.JSONDecodeError as exc:
            msg = f"HKV_POLICY_PARAMS: not JSON ({exc}); e.g. '{{\"tail_first\": true}}'"
            raise HkvError(msg) from None
    if params:
        if not isinstance(params, dict):
            raise HkvError(f"hkv_policy_params: got {params!r}; expected an object of name: value")
        settings["policy_params"] = params
    block_tokens = extra.get("block_size") or os.environ.get("HKV_BLOCK_TOKENS")
    if block_tokens:
        settings["block_tokens"] = int(block_tokens)
    if (model := _model_cost()) is not None:
        settings["cost_model"] = model
    return settings


def _connector_extra_config() -> dict[str, Any]:
    try:
        from vllm.config import get_current_vllm_config_or_none
    except ImportError:
        return {}
    config = get_current_vllm_config_or_none()
    transfer = getattr(config, "kv_transfer_config", None)
    return dict(getattr(transfer, "kv_connector_extra_config", None) or {})


def _model_cost():
    """A cost model for the served model when vLLM's config is at hand, else None (default)."""
    try:
        from vllm.config import get_current_vllm_config_or_none
    except ImportError:
        return None
    config = get_current_vllm_config_or_none()
    hf_config = getattr(getattr(config, "model_config", None), "hf_config", None)
    if hf_config is None:
        return None
    from hkv.cost import CostModel
    from hkv.model_spec import ModelSpec

    try:
        spec = ModelSpec.from_hf_config(hf_config.to_dict(), name="served")
    except HkvError:
        return None
    return CostModel(spec)


@cache
def policy_class(name: str) -> type[HkvCachePolicy]:
    """The vLLM `CachePolicy` class for hkv policy `name` (`hkv_` prefix optional)."""
    from hkv.policies import get_policy_class, policy_names

    bare = name.removeprefix(PREFIX)
    if bare not in policy_names():
        valid = ", ".join(PREFIX + n for n in policy_names())
        raise AttributeError(
            f"hkv has no vLLM eviction policy {name!r}; set eviction_policy to one of {valid} "
            "with cache_policy_module_path 'hkv.integrations.vllm'"
        )
    if get_policy_class(bare).offline:
        raise AttributeError(
            f"{name!r} is an offline yardstick that needs the future requests; vLLM cannot "
            "run it. Use an online policy such as hkv_cost_aware"
        )
    return type(PREFIX + bare, (HkvCachePolicy,), {"hkv_policy": bare, "__module__": __name__})


def __getattr__(name: str) -> type[HkvCachePolicy]:
    if name.startswith("__"):
        raise AttributeError(name)
    return policy_class(name)


def register() -> None:
    """Entry point (`vllm.general_plugins`): make `hkv_<name>` known to vLLM by name alone.

    vLLM >= 0.32 resolves names through `CachePolicyFactory` (lazily: an offline policy fails
    with hkv's message when chosen); 0.26 through the manager's `_CACHE_POLICIES` dictionary of
    classes, which gets the online policies only. Calling this twice is harmless.
    """
    from hkv.policies import policy_names

    names = [PREFIX + n for n in policy_names()]
    try:
        from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory
    except ImportError:
        import vllm.v1.kv_offload.cpu.manager as manager

        for name in policy_names(online_only=True):
            manager._CACHE_POLICIES.setdefault(PREFIX + name, policy_class(name))
        return
    known = getattr(CachePolicyFactory, "_registry", {})
    for name in names:
        if name not in known:
            CachePolicyFactory.register_cache_policy(name, __name__, name)
