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

Exactness: with lossless cold formats (`fp16` / `bf16` passthrough: the block's own bytes, in
whatever dtype the layout has, float32 included) the returned K/V equal `DynamicCache`'s bit for
bit, so greedy tokens are identical. Quantized formats (q8/q6/q4) trade that for memory.
Batch size 1 only; beam search and cropping are not supported.

`HkvSessionStore` keeps one `HkvCache` per conversation over one shared manager: `finish_turn`
demotes the session's blocks to host; `cache_for` on the next turn reuses them (the prefix is
loaded, not recomputed) unless the cost model says recomputing the prefix is cheaper.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.config import HybridKVCacheConfig
from hkv.errors import HkvError
from hkv.manager import HybridKVCacheManager
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
    host arena (blocks of the layout's dtype). `config` picks the policy and cold formats
    (default: LRU, lossless).
    """

    block_tokens: int = 256
    hot_blocks: int = 64
    host_blocks: int = 4096
    sink_blocks: int = 1
    recent_blocks: int = 2
    config: HybridKVCacheConfig = field(default_factory=lambda: LOSSLESS)

    def __post_init__(self) -> None:
        for name, low in (("block_tokens", 1), ("hot_blocks", 1), ("host_blocks", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise HkvError(f"HkvCacheSettings.{name}: got {value!r}; expected an int >= {low}")
        for name in ("sink_blocks", "recent_blocks"):
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
                config=self.settings.config,
                device=keys.device,
            )
        return self.manager

    def room(self) -> int:
        """Blocks one access may touch: every slot not pinned by this cache."""
        return self.manager.gpu.capacity_blocks - self.num_pinned

    def available(self) -> int:
        """GPU slots a batch of loads can take without evicting a window block."""
        on_gpu = sum(1 for k in self.streamed if self.manager.where(k) is Tier.GPU)
        return self.manager.gpu.num_free + on_gpu

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
            del self.streamed[key]
            if self.manager.where(key) is Tier.GPU:
                victims.append(key)
                if len(victims) == short:
                    break
        if victims:
            self.manager.demote(victims)


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

    def block_key(self, index: int) -> int:
        return self.key_base + index * self.store.num_layers + self.layer_idx

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
        self.store.ensure_manager(key_states)
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
        return kv[0:1], kv[1:2]

    def _is_pinned(self, index: int) -> bool:
        s = self.store.settings
        return index < s.sink_blocks or index >= self.num_blocks - s.recent_blocks

    def _seal_full_blocks(self) -> None:
        """Admit every complete block of the tail; keep sinks and the most recent pinned."""
        manager, b = self.store.manager, self.store.settings.block_tokens
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
            admission = manager.admit(
                self.block_key(index), kv, position=index * b, tokens=b, pin=pin
            )
            if not admission.ok:
                raise HkvError(
                    f"HkvCache: block {index} of layer {self.layer_idx} refused: {admission.reason}"
                )
            self.store.num_pinned += pin
            self.tail_keys = self.tail_keys[:, :, b:]
            self.tail_values = self.tail_values[:, :, b:]

    def _assemble_into(self, kv: torch.Tensor) -> None:
        """Write this layer's blocks, in order, into `kv` `[2, heads, tokens, dim]` (one copy;
        the only other memory is one chunk's gather)."""
        manager, b = self.store.manager, self.store.settings.block_tokens
        gpu = manager.gpu.kv[:, 0]  # [slots, 2, b, heads, dim]
        start = 0
        for chunk, cold in self._chunks():
            self.store.make_room(len(cold), set(chunk))
            result = manager.access(chunk, pin=True)
            hot_from = self.num_blocks - self.store.settings.recent_blocks
            hot_from -= self.store.window_blocks
            sinks = self.store.settings.sink_blocks
            streamed = [self.block_key(i) for i in cold if sinks <= i < hot_from]
            self.store.streamed.update(dict.fromkeys(streamed))
            if not result.ok or result.to_compute:
                raise HkvError(
                    f"HkvCache: layer {self.layer_idx} could not bring back its blocks "
                    f"({result.reason or f'{len(result.to_compute)} blocks lost'})"
                )
            index = torch.tensor([result.gpu_slots[k] for k in chunk], device=gpu.device)
            blocks = gpu.index_select(0, index)  # [n, 2, b, heads, dim]
            n = len(chunk)
            out = kv[:, :, start * b : (start + n) * b].unflatten(2, (n, b))
            out.copy_(blocks.permute(1, 3, 0, 2, 4))  # -> [2, heads, n, b, dim]
            manager.unpin(chunk)
            start += n

    def _chunks(self):
        """This layer's keys in order, cut so that each cut's cold blocks fit in the slots free
        or held by streamed blocks, and all of it in the unpinned slots: (keys, indices of the
        cold ones) pairs."""
        manager = self.store.manager
        chunk, cold, budget = [], [], self.store.available()
        for index in range(self.num_blocks):
            key = self.block_key(index)
            is_cold = manager.where(key) is not Tier.GPU
            full = len(chunk) >= self.store.room() or (is_cold and cold and len(cold) >= budget)
            if full:
                yield chunk, cold
                chunk, cold, budget = [], [], None
            if budget is None:
                budget = self.store.available()
            chunk.append(key)
            if is_cold:
                cold.append(index)
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
        if pinned:
            manager.unpin(pinned)
            self.store.num_pinned -= len(pinned)
        if self.tail_keys is not None:
            self.tail_keys, self.tail_values = self.tail_keys.cpu(), self.tail_values.cpu()

    def repin(self) -> None:
        """Pin the sink and recent blocks again (a new turn starts); brings them to the GPU."""
        pinned = [self.block_key(i) for i in range(self.num_blocks) if self._is_pinned(i)]
        if pinned:
            result = self.store.manager.access(pinned, pin=True)
            if not result.ok or result.to_compute:
                raise HkvError(f"HkvCache: layer {self.layer_idx} could not restore its pins")
            self.store.num_pinned += len(pinned)

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
        super().__init__(layers=layers)

    @property
    def manager(self) -> HybridKVCacheManager | None:
        return self.store.manager

    def block_keys(self) -> list[int]:
        return [layer.block_key(i) for layer in self.layers for i in range(layer.num_blocks)]

    def release(self) -> None:
        """End of a turn: unpin every block, move tails to host, demote GPU blocks to host."""
        for layer in self.layers:
            layer.release()
        if self.manager is not None:
            hot = [k for k in self.block_keys() if self.manager.where(k) is Tier.GPU]
            if hot and self.manager.host is not None:
                self.manager.demote(hot)

    def resume(self) -> None:
        for layer in self.layers:
            layer.repin()


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
            key_base=next(self._next_base) << 40,
        )
        self._sessions[session_id] = _Session(cache, ids)
        return cache

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
