"""transformers integration: a `Cache` whose layers keep KV in hkv blocks, hot and cold.

    cache = HkvCache(model.config, HkvCacheSettings(block_tokens=256, hot_blocks=32))
    model.generate(input_ids, past_key_values=cache, ...)

Each layer's KV lives in fixed-size token blocks of a `HybridKVCacheManager`; one manager block
is one layer's `block_tokens` tokens (`BlockLayout(num_layers=1)`), keyed
`key_base + block_index * num_layers + layer`. The tokens after the last full block (the tail,
fewer than `block_tokens`) stay a plain tensor on the layer.

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

- Fast path: while every block of a layer stays in the GPU slot it had (the manager's
  `gpu_departures` unchanged), the layer keeps its slot index on the device and assembles with
  one gather kernel, no per-block Python; the policy hears of these blocks every `TOUCH_EVERY`
  updates instead of every step.
- Prefetch: after assembling layer `i`, the loads of layer `i + 1`'s cold blocks (layer 0's
  after the last layer) are launched on the transfer streams, so they overlap layer `i`'s
  attention and MLP; layer `i + 1`'s `update` completes them.
- Streamed blocks were loaded from host and are unchanged, so the manager kept their host
  copy: demoting them again frees the slot without a copy.

Exactness: with lossless cold formats (`fp16` / `bf16` passthrough: the block's own bytes, in
whatever dtype the layout has, float32 included) the returned K/V equal `DynamicCache`'s bit for
bit, so greedy tokens are identical. Quantized formats (q8/q6/q4) trade that for memory.
Batch size 1 only; beam search and cropping are not supported.

`HkvSessionStore` keeps one `HkvCache` per conversation over one shared manager: `finish_turn`
demotes the session's blocks to host; `cache_for` on the next turn reuses them (the prefix is
loaded, not recomputed) unless the cost model says recomputing the prefix is cheaper;
`prefetch(next_session)` starts loading a waiting conversation while another one runs.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.config import HybridKVCacheConfig
from hkv.errors import HkvError
from hkv.manager import AccessResult, HybridKVCacheManager
from hkv.tiers import BlockLayout

LOSSLESS = HybridKVCacheConfig(
    offload_strategy="lru",
    modality_configs={m.value: {"quantization": "bf16"} for m in Modality},
)
"""A manager config whose cold blocks keep their own bytes (token-identical to DynamicCache)."""

_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


@dataclass(frozen=True)
class HkvCacheSettings:
    """How an `HkvCache` lays out and places KV.

    `hot_blocks` is the manager's GPU pool in blocks, all layers together (one block = one layer's
    `block_tokens` tokens); it must exceed the pinned blocks, `(sink_blocks + recent_blocks) *
    num_layers`, so that cold blocks have slots to come back through. `host_blocks` sizes the
    host arena (blocks of the layout's dtype); `disk_blocks` slots in a file at `disk_path` take
    what the arena cannot hold. `prefetch` loads the next layer's cold blocks while the current
    layer computes. `config` picks the policy and cold formats (default: LRU, lossless).
    """

    block_tokens: int = 256
    hot_blocks: int = 64
    host_blocks: int = 4096
    sink_blocks: int = 1
    recent_blocks: int = 2
    disk_blocks: int = 0
    disk_path: str | None = None
    prefetch: bool = True
    config: HybridKVCacheConfig = field(default_factory=lambda: LOSSLESS)

    def __post_init__(self) -> None:
        for name, low in (("block_tokens", 1), ("hot_blocks", 1), ("host_blocks", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise HkvError(f"HkvCacheSettings.{name}: got {value!r}; expected an int >= {low}")
        for name in ("sink_blocks", "recent_blocks", "disk_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise HkvError(f"HkvCacheSettings.{name}: got {value!r}; expected an int >= 0")

    def check_room(self, num_layers: int) -> None:
        pinned = (self.sink_blocks + self.recent_blocks) * num_layers
        if self.hot_blocks <= pinned:
            raise HkvError(
                f"HkvCacheSettings.hot_blocks: got {self.hot_blocks}; with {num_layers} layers, "
                f"sink_blocks={self.sink_blocks} and recent_blocks={self.recent_blocks} pin "
                f"{pinned} blocks, so hot_blocks must be > {pinned}"
            )


def hot_blocks_for(
    fraction: float, seq_tokens: int, num_layers: int, settings: HkvCacheSettings
) -> int:
    """GPU blocks that hold `fraction` of a `seq_tokens` sequence's KV (at least the pinned + 1)."""
    per_layer = -(-seq_tokens // settings.block_tokens)
    pinned = (settings.sink_blocks + settings.recent_blocks) * num_layers
    return max(round(fraction * per_layer * num_layers), pinned + 1)


class _BlockStore:
    """The manager shared by an `HkvCache`'s layers (created on the first update)."""

    def __init__(self, settings: HkvCacheSettings, num_layers: int, manager: Any = None):
        settings.check_room(num_layers)
        self.settings = settings
        self.num_layers = num_layers
        self.manager: HybridKVCacheManager | None = manager
        self.num_pinned = 0  # pins this cache holds (the manager's other users must hold none)
        self.streamed: dict[int, None] = {}  # blocks loaded back for an assembly, oldest first
        self.layers: list[HkvLayer] = []  # weak proxies, set by HkvCache (no reference cycle)
        self.prefetch_for: int | None = None  # the layer whose blocks are in flight
        self.prefetch_pending: Any = None  # and the manager's pending access that loads them
        self.prefetched = 0  # blocks loaded ahead of their layer
        unpinned = (
            settings.hot_blocks - (settings.sink_blocks + settings.recent_blocks) * num_layers
        )
        slack = max(1, unpinned // 4)  # slots kept for streaming cold blocks through
        self.window_blocks = max(0, (unpinned - slack) // num_layers)

    def ensure_manager(self, keys: torch.Tensor) -> HybridKVCacheManager:
        if self.manager is None:
            dtype = _DTYPE_NAMES.get(keys.dtype)
            if dtype is None:
                raise HkvError(f"HkvCache: KV dtype {keys.dtype}; expected one of {_DTYPE_NAMES}")
            layout = BlockLayout(self.settings.block_tokens, keys.shape[1], keys.shape[3], 1, dtype)
            self.manager = HybridKVCacheManager(
                layout,
                gpu_blocks=self.settings.hot_blocks,
                host_blocks=self.settings.host_blocks,
                disk_blocks=self.settings.disk_blocks,
                disk_path=self.settings.disk_path,
                config=self.settings.config,
                device=keys.device,
            )
        return self.manager

    def room(self) -> int:
        """Blocks one access may touch: every slot not pinned by this cache."""
        return self.manager.gpu.capacity_blocks - self.num_pinned

    def available(self, layer: HkvLayer | None = None) -> int:
        """GPU slots a batch of loads can take without evicting a window block (or a block of
        `layer`, which the loads are for)."""
        evictable, owns = self.manager.evictable, layer.owns if layer else lambda k: False
        on_gpu = sum(1 for k in self.streamed if evictable(k) and not owns(k))
        return self.manager.gpu.num_free + on_gpu

    def settle(self) -> None:
        """Complete the manager's pending access (a prefetch) before one that moves blocks."""
        pending = self.manager.pending
        if pending is not None:
            self.manager.complete_access(pending)
        self.prefetch_for = self.prefetch_pending = None

    def prefetch_next(self, layer_idx: int) -> int:
        """Launch the loads of the next layer's cold blocks (the layer after `layer_idx`, the
        first after the last) as far as slots free or held by streamed blocks allow, on the
        transfer streams, and return; that layer's next `update` completes them, so the copies
        overlap this layer's attention and MLP. Returns the number of blocks launched."""
        manager = self.manager
        if not self.settings.prefetch or manager is None or manager.pending is not None:
            return 0
        layer = self.layers[(layer_idx + 1) % self.num_layers]
        cached = layer._slot_map
        if cached is not None and cached[:2] == (manager.gpu_departures, layer.num_blocks):
            return 0  # all of it is on the GPU where it was
        keys = layer._keys
        cold = [k for k in keys if manager.where(k) is Tier.HOST]
        if not cold:
            return 0
        cold = cold[: max(0, self.available(layer) - self.settings.recent_blocks)]
        if not cold:
            return 0
        self.make_room(len(cold), set(keys))
        cold = cold[: manager.gpu.num_free]
        if not cold:
            return 0
        pending = manager.prepare_access(cold)
        if isinstance(pending, AccessResult):
            return 0
        self.prefetch_for, self.prefetch_pending = layer.layer_idx, pending
        self.prefetched += len(cold)
        return len(cold)

    def make_room(self, count: int, protected: set[int]) -> None:
        """Free GPU slots for `count` blocks by demoting streamed blocks first.

        Blocks brought back for one layer's assembly are the first to leave again: otherwise
        LRU would evict the other layers' hot blocks, which are used next (a cyclic scan is
        LRU's worst case), and every step would move the whole KV instead of its cold part.
        """
        short = count - self.manager.gpu.num_free
        if short <= 0 or not self.streamed:
            return
        victims = []
        for key in list(self.streamed):
            if key in protected:
                continue
            if not self.manager.evictable(key):
                if self.manager.where(key) is not Tier.GPU:
                    del self.streamed[key]
                continue  # in use or still arriving: stays listed for later
            del self.streamed[key]
            victims.append(key)
            if len(victims) == short:
                break
        if victims:
            self.manager.demote(victims)


TOUCH_EVERY = 16
"""Updates between the policy's touches of a layer whose blocks all stay on the GPU: recency at
a granularity of 16 steps, for a fraction of the per-step Python cost of touching every block."""

KEYS = 1 << 40
"""Keys per cache: `HkvSessionStore` gives each session's cache the next multiple as its base."""


class HkvLayer(DynamicLayer):
    """One model layer's KV: full blocks in the manager, the tail as a tensor (module docstring)."""

    is_croppable = False

    def __init__(self, store: _BlockStore, layer_idx: int, key_base: int = 0):
        super().__init__()
        self.store = store
        self.layer_idx = layer_idx
        self.key_base = key_base
        self.num_blocks = 0
        self.tail_keys: torch.Tensor | None = None
        self.tail_values: torch.Tensor | None = None
        self.new_tokens: list[int] = []  # tokens each update brought (a prefill shows here)
        self._keys: list[int] = []  # block_key(i) for every sealed block
        self._slot_map: tuple[int, int, torch.Tensor] | None = None  # (departures, n, slots)
        self.needs_pins = False  # a turn resumed: pin sinks and recent blocks at next update
        self._since_touch = 0  # fast-path updates since the policy last heard of these blocks

    def block_key(self, index: int) -> int:
        return self.key_base + index * self.store.num_layers + self.layer_idx

    def owns(self, key: int) -> bool:
        offset = key - self.key_base - self.layer_idx
        return offset >= 0 and offset % self.store.num_layers == 0 and key < self.key_base + KEYS

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        if key_states.shape[0] != 1:
            raise HkvError(f"HkvCache: batch size {key_states.shape[0]}; only 1 is supported")
        self.dtype, self.device = key_states.dtype, key_states.device
        empty = key_states[:, :, :0]
        self.tail_keys, self.tail_values = empty.clone(), value_states[:, :, :0].clone()
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append `[1, kv_heads, new, head_dim]` K/V; return the layer's whole K/V."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        manager = self.store.ensure_manager(key_states)
        store = self.store
        own = manager.pending is not None and manager.pending is store.prefetch_pending
        if own and store.prefetch_for == self.layer_idx:
            store.settle()  # this layer's own prefetch
        if self.needs_pins:
            self.repin()
        self.new_tokens.append(key_states.shape[-2])
        self.tail_keys = torch.cat([self.tail_keys.to(key_states.device), key_states], dim=-2)
        self.tail_values = torch.cat([self.tail_values.to(value_states.device), value_states], -2)
        self._seal_full_blocks()
        if not self.num_blocks:
            return self.tail_keys, self.tail_values
        _, heads, tail, dim = self.tail_keys.shape
        sealed = self.num_blocks * self.store.settings.block_tokens
        shape = (2, heads, sealed + tail, dim)
        kv = torch.empty(shape, dtype=self.tail_keys.dtype, device=self.tail_keys.device)
        self._assemble_into(kv)
        kv[0, :, sealed:] = self.tail_keys[0]
        kv[1, :, sealed:] = self.tail_values[0]
        self.store.prefetch_next(self.layer_idx)  # overlaps this layer's attention and MLP
        return kv[0:1], kv[1:2]

    def _is_pinned(self, index: int) -> bool:
        s = self.store.settings
        return index < s.sink_blocks or index >= self.num_blocks - s.recent_blocks

    def _seal_full_blocks(self) -> None:
        """Admit every complete block of the tail; keep sinks and the most recent pinned."""
        manager, b = self.store.manager, self.store.settings.block_tokens
        sealed_any = self.tail_keys.shape[-2] >= b
        while self.tail_keys.shape[-2] >= b:
            kv = torch.stack([self.tail_keys[0, :, :b], self.tail_values[0, :, :b]])
            kv = kv.permute(0, 2, 1, 3).unsqueeze(0)  # [1, 2, b, heads, dim]
            index = self.num_blocks
            leaving = index - self.store.settings.recent_blocks  # drops out of the recent window
            if leaving >= self.store.settings.sink_blocks and self.store.settings.recent_blocks:
                manager.unpin([self.block_key(leaving)])
                self.store.num_pinned -= 1
            aged = leaving - self.store.window_blocks  # drops out of the hot window
            if aged >= self.store.settings.sink_blocks:
                self.store.streamed[self.block_key(aged)] = None
            self.num_blocks += 1
            pin = self._is_pinned(index)
            self.store.make_room(1, set())
            if not manager.gpu.num_free:
                self.store.settle()  # the admission may evict: no block may be in flight
            admission = manager.admit(
                self.block_key(index), kv, position=index * b, tokens=b, pin=pin
            )
            if not admission.ok:
                raise HkvError(
                    f"HkvCache: block {index} of layer {self.layer_idx} refused: {admission.reason}"
                )
            self.store.num_pinned += pin
            self._keys.append(self.block_key(index))
            self.tail_keys = self.tail_keys[:, :, b:]
            self.tail_values = self.tail_values[:, :, b:]
        if sealed_any:  # a view would keep the whole prefill's K/V alive
            self.tail_keys, self.tail_values = self.tail_keys.clone(), self.tail_values.clone()

    def _assemble_into(self, kv: torch.Tensor) -> None:
        """Write this layer's blocks, in order, into `kv` `[2, heads, tokens, dim]` (one copy;
        the only other memory is one chunk's gather)."""
        manager = self.store.manager
        departures, n = manager.gpu_departures, self.num_blocks
        cached = self._slot_map
        if cached is None or cached[0] != departures or cached[1] != n:
            slots = manager.gpu_slots_of(self._keys)  # None unless every block is on the GPU
            cached = None if slots is None else (departures, n, self._index(slots))
            self._slot_map = cached
            if cached is not None:
                manager.touch(self._keys)
                self._since_touch = 0
        if cached is not None:  # all on the GPU where they were: gather, tell the policy
            self._since_touch += 1
            if self._since_touch >= TOUCH_EVERY:
                manager.touch(self._keys)
                self._since_touch = 0
            self._gather(kv, 0, cached[2])
            return
        self.store.settle()
        hot_from = self.num_blocks - self.store.settings.recent_blocks - self.store.window_blocks
        passing = set(self._keys[self.store.settings.sink_blocks : hot_from])
        start = 0
        for chunk, cold in self._chunks():
            self.store.make_room(len(cold), set(chunk))
            result = manager.access(chunk, pin=True)
            # outside the hot window a block on the GPU is passing through: first to leave
            self.store.streamed.update(dict.fromkeys(k for k in chunk if k in passing))
            if not result.ok or result.to_compute:
                raise HkvError(
                    f"HkvCache: layer {self.layer_idx} could not bring back its blocks "
                    f"({result.reason or f'{len(result.to_compute)} blocks lost'})"
                )
            self._gather(kv, start, self._index([result.gpu_slots[k] for k in chunk]))
            manager.unpin(chunk)
            start += len(chunk)

    def _index(self, slots: list[int]) -> torch.Tensor:
        return torch.tensor(slots, dtype=torch.long).to(self.store.manager.device)

    def _gather(self, kv: torch.Tensor, start: int, index: torch.Tensor) -> None:
        """Copy the blocks in GPU slots `index` into `kv`'s blocks from `start` on, in one
        kernel: the pool `[slots, 2, b, heads, dim]` read as `[2, heads, slots, b, dim]`."""
        b, n = self.store.settings.block_tokens, len(index)
        pool = self.store.manager.gpu.kv[:, 0].permute(1, 3, 0, 2, 4)
        out = kv[:, :, start * b : (start + n) * b].unflatten(2, (n, b))
        torch.index_select(pool, 2, index, out=out)

    def _chunks(self):
        """This layer's keys in order, cut so that each cut's cold blocks fit in the slots free
        or held by streamed blocks, and all of it in the unpinned slots: (keys, indices of the
        cold ones) pairs."""
        manager, streamed = self.store.manager, self.store.streamed
        chunk, cold, budget = [], [], self.store.available()
        for index, key in enumerate(self._keys):
            is_cold = manager.gpu_slots_of((key,)) is None
            full = len(chunk) >= self.store.room() or (is_cold and cold and len(cold) >= budget)
            if full:
                yield chunk, cold
                chunk, cold, budget = [], [], None
            if budget is None:
                budget = self.store.available()
            chunk.append(key)
            if is_cold:
                cold.append(index)
            elif key in streamed and manager.evictable(key):
                budget -= 1  # its slot counted as available, but the chunk protects it
        if chunk:
            yield chunk, cold

    def get_seq_length(self) -> int:
        if not self.is_initialized:
            return 0
        return self.num_blocks * self.store.settings.block_tokens + self.tail_keys.shape[-2]

    def release(self) -> None:
        """Unpin this layer's blocks and move its tail to host memory (the turn ended)."""
        manager = self.store.manager
        pinned = [self.block_key(i) for i in range(self.num_blocks) if self._is_pinned(i)]
        if pinned and not self.needs_pins:
            manager.unpin(pinned)
            self.store.num_pinned -= len(pinned)
        self.needs_pins = False
        if self.tail_keys is not None:
            self.tail_keys, self.tail_values = self.tail_keys.cpu(), self.tail_values.cpu()

    def repin(self) -> None:
        """Pin the sink and recent blocks again (a turn resumed): those on the GPU (the usual
        case: the layer before prefetched them) in place, the others brought back."""
        manager = self.store.manager
        pinned = [self.block_key(i) for i in range(self.num_blocks) if self._is_pinned(i)]
        here = [k for k in pinned if manager.evictable(k)]
        away = [k for k in pinned if not manager.evictable(k)]
        manager.pin(here)
        if away:
            self.store.settle()
            result = manager.access(away, pin=True)
            if not result.ok or result.to_compute:
                manager.unpin(here)
                raise HkvError(f"HkvCache: layer {self.layer_idx} could not restore its pins")
        self.store.num_pinned += len(pinned)
        self.needs_pins = False

    def crop(self, tokens_to_remove: int) -> None:
        raise HkvError("HkvCache: crop is not supported (blocks are shared with the manager)")

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise HkvError("HkvCache: beam search is not supported (batch size 1)")

    def batch_repeat_interleave(self, repeats: int) -> None:
        if repeats != 1:
            raise HkvError("HkvCache: batch size 1 only (num_return_sequences must be 1)")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise HkvError("HkvCache: batch size 1 only")


def _num_layers(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(text.num_hidden_layers)


class HkvCache(Cache):
    """A transformers `Cache` of `HkvLayer`s over one `HybridKVCacheManager` (module docstring).

    `config` is the model's config (for the layer count) or an int. Pass `manager` to share one
    across caches (as `HkvSessionStore` does), with distinct `key_base`s.
    """

    def __init__(
        self,
        config: Any,
        settings: HkvCacheSettings | None = None,
        *,
        manager: HybridKVCacheManager | None = None,
        key_base: int = 0,
    ):
        num_layers = config if isinstance(config, int) else _num_layers(config)
        self.settings = settings if settings is not None else HkvCacheSettings()
        self.store = _BlockStore(self.settings, num_layers, manager)
        layers = [HkvLayer(self.store, i, key_base) for i in range(num_layers)]
        self.store.layers = [weakref.proxy(layer) for layer in layers]
        super().__init__(layers=layers)

    @property
    def manager(self) -> HybridKVCacheManager | None:
        return self.store.manager

    def block_keys(self) -> list[int]:
        return [layer.block_key(i) for layer in self.layers for i in range(layer.num_blocks)]

    def release(self) -> None:
        """End of a turn: unpin every block, move tails to host, demote GPU blocks to host."""
        if self.manager is not None:
            self.store.settle()  # a layer's prefetch may be in flight: its blocks are pinned
        for layer in self.layers:
            layer.release()
        if self.manager is not None:
            hot = [k for k in self.block_keys() if self.manager.evictable(k)]
            if hot and self.manager.host is not None:
                self.manager.demote(hot)

    def resume(self) -> None:
        """Start of a turn: each layer pins its sink and recent blocks again at its next update,
        and the first layer's blocks start loading now (the others load a layer ahead)."""
        for layer in self.layers:
            layer.needs_pins = layer.num_blocks > 0
        if self.manager is not None and self.layers:
            self.store.prefetch_next(len(self.layers) - 1)


@dataclass
class _Session:
    cache: HkvCache
    token_ids: list[int]


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
    """

    def __init__(self, config: Any, settings: HkvCacheSettings | None = None, cost_model=None):
        self.config = config
        self.settings = settings if settings is not None else HkvCacheSettings()
        self.cost_model = cost_model
        self.num_layers = config if isinstance(config, int) else _num_layers(config)
        self._manager: HybridKVCacheManager | None = None
        self._sessions: dict[str, _Session] = {}
        self._next_base = itertools.count()
        self.last_decision: dict[str, Any] = {}

    def cache_for(self, session_id: str, input_ids: Any) -> HkvCache:
        ids = _token_list(input_ids)
        session = self._sessions.get(session_id)
        if session is not None:
            cached = session.cache.get_seq_length()
            prefix_ok = session.token_ids[:cached] == ids[:cached] and cached < len(ids)
            load_s, recompute_s = self._prefix_costs(cached)
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
        )
        self._sessions[session_id] = _Session(cache, ids)
        return cache

    def prefetch(self, session_id: str) -> int:
        """Start loading a waiting session's blocks from host RAM back to the GPU, on the
        transfer streams, and return at once; call it when the session is next in line, while
        another one runs. Only free slots are used (less two per layer kept for the running
        session's new blocks): nothing is evicted for a prefetch. The session's `cache_for`,
        or any access that must move blocks, completes it. Returns the blocks launched."""
        session, manager = self._sessions.get(session_id), self._manager
        if session is None or manager is None:
            return 0
        if manager.pending is not None:  # launched a turn ago (this one's own): done by now
            manager.complete_access(manager.pending)
        room = manager.gpu.num_free - 2 * self.num_layers
        cold = [k for k in session.cache.block_keys() if manager.where(k) is Tier.HOST]
        cold = cold[: max(0, room)]
        if not cold or isinstance(manager.prepare_access(cold), AccessResult):
            return 0
        session.cache.store.prefetched += len(cold)
        return len(cold)

    def finish_turn(self, session_id: str, cache: HkvCache, token_ids: Any) -> None:
        """Record the turn's tokens (prompt + reply) and demote the session's blocks to host."""
        session = self._sessions.get(session_id)
        if session is None or session.cache is not cache:
            raise HkvError(f"finish_turn: {session_id!r} is not the session of this cache")
        session.token_ids = _token_list(token_ids)
        self._manager = self._manager or cache.manager
        cache.release()

    def _prefix_costs(self, tokens: int) -> tuple[float, float]:
        if self.cost_model is None:
            return 0.0, float("inf")
        load = recompute = 0.0
        b = self.settings.block_tokens
        for start in range(0, tokens, b):
            meta = BlockMeta(tokens=min(b, tokens - start), position=start, tier=Tier.HOST)
            fmt = self.settings.config.modality(Modality.TEXT).quantization
            decision = self.cost_model.decide(meta, Tier.HOST, fmt)
            load, recompute = load + decision.load_s, recompute + decision.recompute_s
        return load, recompute

    def _drop(self, session_id: str) -> None:
        session = self._sessions.pop(session_id)
        if session.cache.manager is not None:
            session.cache.manager.free(session.cache.block_keys())


def _token_list(input_ids: Any) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise HkvError(f"HkvSessionStore: batch size {input_ids.shape[0]}; expected 1")
            input_ids = input_ids[0]
        return input_ids.tolist()
    return list(input_ids)
