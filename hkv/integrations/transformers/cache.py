"""transformers integration: a `Cache` whose layers keep KV in hkv blocks, hot and cold.

    cache = HkvCache(model.config, HkvCacheSettings(block_tokens=256, hot_blocks=32))
    model.generate(input_ids, past_key_values=cache, ...)

Each layer's KV lives in fixed-size token blocks of a `HybridKVCacheManager`; one manager block
is one layer's `block_tokens` tokens (`BlockLayout(num_layers=1)`), keyed
`key_base + block_index * num_layers + layer`. The tokens after the last full block (the tail,
fewer than `block_tokens`) stay a plain tensor on the layer; between turns it waits in a pinned
host buffer the layer allocates once, and comes back without the CPU waiting.

Hot on the device, per layer: the first `sink_blocks` (attention sinks) and the last
`recent_blocks` (both pinned), then a window of the `window_blocks` blocks before the recent ones
(the unpinned slots, less a quarter kept for streaming, shared equally by the layers). Older
blocks are "streamed": demoted to host RAM (and disk, when the manager has one) in their
modality's cold format, brought back through `manager.access` for each assembly, and the first
to be demoted again when slots are needed, so each step moves only the blocks outside the hot
set. (Leaving the choice to LRU would thrash: assembling layer after layer is a cyclic scan,
LRU's worst case, and every step would move the whole KV.) The manager's policy picks victims
only when streamed blocks cannot free enough slots.

`update(k, v)` of layer `i` appends to the tail, moves completed blocks into the manager, then
writes layer `i`'s whole K/V into one `[1, kv_heads, seq, head_dim]` pair, in batches of blocks
that fit the free and streamed slots. Only one layer's K/V is assembled at a time, so device
memory is the hot pool plus one layer.

- Working copy (`working_copy`, on by default): once every block of the sequence (all layers)
  is on the GPU, each layer gathers its blocks once into a `[2, kv_heads, capacity, head_dim]`
  copy with room to grow and from then on writes each step's new tokens into it in place and
  returns views of it: one `torch.cat` into the copy and two `as_strided` views a step
  (`HkvLayer._fast_append`), no gather, no per-block Python. A completed
  block is sealed from the copy into the pool. The copy stays while the whole sequence stays on
  the GPU (checked when any block departs: the manager's `gpu_departures`); it is dropped at
  `release`. Memory: the pool plus one copy of the running sequence (a sequence that streams
  through a smaller pool never has one).
- Gather path (a layer with blocks in host RAM, or `working_copy=False`): while every block of
  a layer stays in the GPU slot it had, the layer keeps its slot index on the device and
  assembles with one gather kernel (or, when the slots are consecutive, as after a restore, one
  strided copy read in place), no per-block Python; the policy hears of these blocks every
  `TOUCH_EVERY` updates instead of every step.
- Prefetch: after assembling layer `i`, the loads of layer `i + 1`'s cold blocks (layer 0's
  after the last layer) are launched on the transfer streams, so they overlap layer `i`'s
  attention and MLP; layer `i + 1`'s `update` completes them.
- Streamed blocks were loaded from host and are unchanged, so the manager kept their host
  copy: demoting them again frees the slot without a copy.

Exactness: with lossless cold formats (`fp16` / `bf16` passthrough: the block's own bytes, in
whatever dtype the layout has, float32 included) the returned K/V equal `DynamicCache`'s bit for
bit, so greedy tokens are identical. Quantized formats (q8/q6/q4) trade that for memory. A
sliding-window layer keeps its whole sequence (masked, as `DynamicCache()` without a config
keeps it): in bf16/fp16, attention over the longer masked K/V can round otherwise than over
`DynamicCache(config=...)`'s window, and tokens can then differ. The manager's cold tiers take
every block they have room for (`cold_admission=False`: a policy's admission never drops one,
which the cache could not recompute). Batch size 1 only; beam search, cropping and `reset`
are not supported.

`HkvSessionStore` keeps one `HkvCache` per conversation over one shared manager: `finish_turn`
unpins the session's blocks, which leave the GPU (to host RAM) only when their slots are wanted,
the sessions that finished longest ago first; `cache_for` on the next turn reuses them (the
prefix is loaded, not recomputed) unless the cost model says recomputing the prefix is cheaper;
`prefetch(next_session)` starts loading a waiting conversation while another one runs, making
room by demoting idle ones.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.errors import HkvError
from hkv.integrations.transformers.kv_blocks import (
    KEYS,
    LOSSLESS,
    TOUCH_EVERY,
    BlockStore,
    HkvCacheSettings,
    hot_blocks_for,
    in_storage_mode,
    new_manager,
)
from hkv.integrations.transformers.kv_layer import HkvLayer
from hkv.storage.manager import HybridKVCacheManager

__all__ = [
    "LOSSLESS",
    "TOUCH_EVERY",
    "HkvCache",
    "HkvCacheSettings",
    "HkvLayer",
    "HkvSessionStore",
    "hot_blocks_for",
]


def _num_layers(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = getattr(text, "num_hidden_layers", None)
    if not isinstance(layers, int):
        raise HkvError(
            f"HkvCache: config {config!r} has no num_hidden_layers; give the model's config "
            "(model.config) or its layer count"
        )
    return layers


class HkvCache(Cache):
    """A transformers `Cache` of `HkvLayer`s over one `HybridKVCacheManager` (module docstring).

    `config` is the model's config (for the layer count) or an int. Pass `manager` to share one
    across caches, with distinct `key_base`s; or `manager_factory`, called with the first K/V
    when the cache has no manager yet, to share one that does not exist yet (as
    `HkvSessionStore` does).
    """

    def __init__(
        self,
        config: Any,
        settings: HkvCacheSettings | None = None,
        *,
        manager: HybridKVCacheManager | None = None,
        key_base: int = 0,
        manager_factory: Callable[[torch.Tensor], HybridKVCacheManager] | None = None,
    ):
        num_layers = config if isinstance(config, int) else _num_layers(config)
        if isinstance(num_layers, bool) or num_layers < 1:
            raise HkvError(f"HkvCache: {num_layers!r} layers; give the model's config or its count")
        if settings is not None and not isinstance(settings, HkvCacheSettings):
            raise HkvError(
                f"HkvCache: settings is a {type(settings).__name__}; expected HkvCacheSettings"
                "(...), e.g. HkvCacheSettings(block_tokens=256, hot_blocks=64)"
            )
        self.settings = settings if settings is not None else HkvCacheSettings()
        self.store = BlockStore(self.settings, num_layers, manager, manager_factory)
        layers = [HkvLayer(self.store, i, key_base) for i in range(num_layers)]
        self.store.layers = [weakref.proxy(layer) for layer in layers]
        super().__init__(layers=layers)

    @property
    def manager(self) -> HybridKVCacheManager | None:
        return self.store.manager

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *a, **k):
        try:  # (free on the hot path: checked only where transformers' indexing failed)
            return super().update(key_states, value_states, layer_idx, *a, **k)
        except IndexError:
            if 0 <= layer_idx < len(self.layers):
                raise
            raise HkvError(
                f"HkvCache: layer {layer_idx} of a cache made for {len(self.layers)} layers; make "
                "it with the model's own config (HkvCache(model.config, ...))"
            ) from None

    def block_keys(self) -> list[int]:
        return [layer.block_key(i) for layer in self.layers for i in range(layer.num_blocks)]

    @in_storage_mode
    def release(self, demote: bool = True) -> None:
        """End of a turn: drop the working copies, unpin every block, move tails to host and,
        with `demote`, the GPU blocks too (else they stay until their slots are wanted)."""
        if self.manager is not None:
            self.store.settle()  # a layer's prefetch may be in flight: its blocks are pinned
        for layer in self.layers:
            layer.release()
        if demote:
            self.park()

    @in_storage_mode
    def park(self) -> int:
        """Demote this cache's unpinned GPU blocks to host RAM now; returns how many moved."""
        if self.manager is None or self.manager.host is None:
            return 0
        self.store.settle()
        hot = [k for k in self.block_keys() if self.manager.evictable(k)]
        if hot:
            self.manager.demote(hot)
        return len(hot)

    @in_storage_mode
    def resume(self) -> None:
        """Start of a turn: each layer pins its sink and recent blocks again at its next update,
        and the blocks in host RAM start loading now, all layers in one access, a chunk a layer
        (`BlockStore.prefetch_all`)."""
        for layer in self.layers:
            layer.needs_pins = layer.num_blocks > 0
        if self.manager is not None and self.layers:
            self.store.prefetch_all()


@dataclass
class _Session:
    cache: HkvCache
    token_ids: torch.Tensor  # 1-D, on the device the turn's ids came on


class HkvSessionStore:
    """Conversations' KV across turns, over one manager (hot pool + host arena).

        store = HkvSessionStore(model.config, settings, cost_model=CostModel.default())
        cache = store.cache_for("chat-1", input_ids)      # restored prefix, or a fresh cache
        out = model.generate(input_ids, past_key_values=cache, ...)
        store.finish_turn("chat-1", cache, out[0])        # demote the session's KV to host

    `cache_for` reuses the session's cache when its tokens are a prefix of `input_ids` and
    loading that prefix from host costs less than recomputing it (`cost_model.decide` summed over
    the prefix's blocks; without a cost model it always loads); otherwise it frees the session's
    blocks and returns a fresh cache. `last_decision` says which and why.

    A finished session's blocks stay in the GPU pool until their slots are wanted: `prefetch`
    demotes the sessions that finished longest ago first (never the running one), and so does
    the manager's policy when a running session needs room. A pool that holds every session
    moves nothing. `park` demotes a session to host RAM at once.

    The model may run under `torch.inference_mode` and these calls outside it, or the reverse:
    hkv works in the mode its pool was made in (`kv_blocks.storage_mode`).
    """

    def __init__(self, config: Any, settings: HkvCacheSettings | None = None, cost_model=None):
        self.config = config
        self.settings = settings if settings is not None else HkvCacheSettings()
        self.cost_model = cost_model
        self.num_layers = config if isinstance(config, int) else _num_layers(config)
        self._manager: HybridKVCacheManager | None = None
        self._sessions: dict[str, _Session] = {}
        self._next_base = itertools.count()
        self._running: str | None = None  # the session between its cache_for and finish_turn
        self._idle: dict[str, None] = {}  # finished sessions, the longest finished first
        self.last_decision: dict[str, Any] = {}

    @property
    def manager(self) -> HybridKVCacheManager | None:
        """The manager every session shares (None until the first session's first update)."""
        return self._manager

    def cache_for(self, session_id: str, input_ids: Any) -> HkvCache:
        ids = _token_tensor(input_ids)
        self._running = session_id
        self._idle.pop(session_id, None)
        session = self._sessions.get(session_id)
        if session is not None:
            cached = session.cache.get_seq_length()
            known = session.token_ids[:cached]
            prefix_ok = cached < len(ids) and torch.equal(known, ids[:cached].to(known.device))
            load_s, recompute_s = self._prefix_costs(cached, session.cache)
            if prefix_ok and load_s <= recompute_s:
                self.last_decision = {
                    "action": "load",
                    "tokens": cached,
                    "load_s": load_s,
                    "recompute_s": recompute_s,
                }
                session.cache.resume()
                return session.cache
            self._drop(session_id)
            self.last_decision = {
                "action": "recompute",
                "tokens": cached,
                "load_s": load_s,
                "recompute_s": recompute_s,
                "prefix_matches": prefix_ok,
            }
        else:
            self.last_decision = {"action": "new", "tokens": 0}
        cache = HkvCache(
            self.num_layers,
            self.settings,
            manager=self._manager,
            key_base=next(self._next_base) * KEYS,
            manager_factory=self._shared_manager,
        )
        self._sessions[session_id] = _Session(cache, ids)
        return cache

    def _shared_manager(self, keys: torch.Tensor) -> HybridKVCacheManager:
        """The store's one manager, made by the first cache that needs it (sessions opened
        before any ran share it too)."""
        if self._manager is None:
            self._manager = new_manager(self.settings, keys)
        return self._manager

    @in_storage_mode
    def prefetch(self, session_id: str) -> int:
        """Start loading a waiting session's blocks from host RAM back to the GPU, on the
        transfer streams, and return at once; call it when the session is next in line, while
        another one runs. Only free slots are used, less those the running session still needs
        (its blocks not yet back on the GPU, and two a layer for its new blocks): nothing is
        evicted for a prefetch, and the running session is never short of room because of one.
        The session's `cache_for`, or any access that must move blocks, completes it. Returns
        the blocks launched."""
        session, manager = self._sessions.get(session_id), self._manager
        if session is None or manager is None or session_id == self._running:
            return 0
        if manager.pending is not None:  # launched a turn ago (this one's own): done by now
            manager.complete_access(manager.pending)
        reserve = 2 * self.num_layers
        running = self._sessions.get(self._running) if self._running is not None else None
        if running is not None:
            where = manager.where
            reserve += sum(1 for k in running.cache.block_keys() if where(k) is not Tier.GPU)
        store = session.cache.store
        wanted, starts = store.in_host_by_layer()
        if len(wanted) > manager.gpu.num_free - reserve:
            self._demote_idle(len(wanted) - manager.gpu.num_free + reserve, session_id)
        return store.launch(wanted[: max(0, manager.gpu.num_free - reserve)], starts=starts)

    def _demote_idle(self, count: int, keep: str) -> None:
        """Demote up to `count` GPU blocks of finished sessions (not `keep`), the sessions that
        finished longest ago first."""
        manager, victims = self._manager, []
        for name in self._idle:
            if name == keep:
                continue
            keys = self._sessions[name].cache.block_keys()
            victims += [k for k in keys if manager.evictable(k)][: count - len(victims)]
            if len(victims) >= count:
                break
        if victims:
            manager.demote(victims)

    def park(self, session_id: str) -> int:
        """Demote a finished session's GPU blocks to host RAM now; returns how many moved."""
        session = self._sessions.get(session_id)
        if session is None or session_id == self._running:
            raise HkvError(f"park: {session_id!r} is not a finished session of this store")
        return session.cache.park()

    def finish_turn(self, session_id: str, cache: HkvCache, token_ids: Any) -> None:
        """Record the turn's tokens (prompt + reply) and release the session's blocks: unpinned,
        they stay on the GPU until their slots are wanted (the class docstring)."""
        session = self._sessions.get(session_id)
        if session is None or session.cache is not cache:
            raise HkvError(f"finish_turn: {session_id!r} is not the session of this cache")
        session.token_ids = _token_tensor(token_ids)
        if self._running == session_id:
            self._running = None
        cache.release(demote=False)
        self._idle[session_id] = None

    def _prefix_costs(self, tokens: int, cache: HkvCache) -> tuple[float, float]:
        """Loading the prefix's blocks that left the GPU (its share of the load of all of them)
        against recomputing the prefix, by the cost model."""
        if self.cost_model is None:
            return 0.0, float("inf")
        keys = cache.block_keys()
        away = sum(1 for k in keys if self._manager.where(k) is not Tier.GPU) / max(1, len(keys))
        load = recompute = 0.0
        b = self.settings.block_tokens
        for start in range(0, tokens, b):
            meta = BlockMeta(tokens=min(b, tokens - start), position=start, tier=Tier.HOST)
            fmt = self.settings.config.modality(Modality.TEXT).quantization
            decision = self.cost_model.decide(meta, Tier.HOST, fmt)
            load, recompute = load + decision.load_s, recompute + decision.recompute_s
        return load * away, recompute

    def _drop(self, session_id: str) -> None:
        session = self._sessions.pop(session_id)
        self._idle.pop(session_id, None)
        if session.cache.manager is not None:
            session.cache.manager.free(session.cache.block_keys())


def _token_tensor(input_ids: Any) -> torch.Tensor:
    """A turn's token ids as a 1-D tensor (compared on their device: no copy to Python)."""
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise HkvError(f"HkvSessionStore: batch size {input_ids.shape[0]}; expected 1")
            input_ids = input_ids[0]
        return input_ids
    return torch.tensor(list(input_ids), dtype=torch.long)
