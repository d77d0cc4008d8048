"""The block store behind `HkvCache` (`hkv.integrations.transformers` says how it works):
settings, the shared manager, streamed blocks, room-making, the next layer's prefetch, and the
gather of a layer's blocks from the pool."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from hkv.blocks import Modality, Tier
from hkv.errors import HkvError
from hkv.planning.config import HybridKVCacheConfig
from hkv.storage.layout import BlockLayout
from hkv.storage.manager import AccessResult, HybridKVCacheManager
from hkv.storage.transfer import as_words, consecutive

if TYPE_CHECKING:
    from hkv.integrations.transformers.kv_layer import HkvLayer

TOUCH_EVERY = 16
"""Updates between the policy's touches of a layer whose blocks all stay on the GPU: recency at
a granularity of 16 steps, for a fraction of the per-step Python cost of touching every block."""

ALL_LAYERS = -1
"""`BlockStore.prefetch_for` when the access in flight loads every layer (`prefetch_all`)."""

KEYS = 1 << 40
"""Keys per cache: `HkvSessionStore` gives each session's cache the next multiple as its base."""


LOSSLESS = HybridKVCacheConfig(
    offload_strategy="lru",
    modality_configs={m.value: {"quantization": "bf16"} for m in Modality},
)
"""A manager config whose cold blocks keep their own bytes (token-identical to DynamicCache)."""

_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def storage_mode(manager: HybridKVCacheManager | None) -> Any:
    """`torch.inference_mode(...)` to enter for hkv's tensor work on `manager`'s blocks, or
    None when the caller's mode already is the right one. hkv works in the mode its pool was
    made in (the first update's): a pool made under `torch.inference_mode` holds inference
    tensors, which only inference mode may update in place, and one made outside it must gain
    none (a later update outside would fail). So a forward under `torch.inference_mode` with
    `park` or `finish_turn` outside it, or the reverse, works; hkv's K/V then reach attention
    as that mode's tensors, which both modes may read."""
    if manager is None:
        return None
    pool_mode = manager.gpu.kv.is_inference()
    if torch.is_inference_mode_enabled() == pool_mode:
        return None
    return torch.inference_mode(pool_mode)


def in_storage_mode(method: Callable) -> Callable:
    """`method` of an object with a `manager`, run in that manager's storage mode."""

    @functools.wraps(method)
    def run(self, *args: Any, **kwargs: Any) -> Any:
        mode = storage_mode(self.manager)
        if mode is None:
            return method(self, *args, **kwargs)
        with mode:
            return method(self, *args, **kwargs)

    return run


@dataclass(frozen=True)
class HkvCacheSettings:
    """How an `HkvCache` lays out and places KV.

    `hot_blocks` is the manager's GPU pool in blocks, all layers together (one block = one layer's
    `block_tokens` tokens); it must exceed the pinned blocks, `(sink_blocks + recent_blocks) *
    num_layers`, so that cold blocks have slots to come back through. `host_blocks` sizes the
    host arena (blocks of the layout's dtype); `disk_blocks` slots in a file at `disk_path` take
    what the arena cannot hold. `prefetch` loads the next layer's cold blocks while the current
    layer computes. `config` picks the policy and cold formats (default: LRU, lossless).

    `working_copy`: while every block of the sequence (all layers) is on the GPU, each layer
    keeps its K/V assembled between steps and appends new tokens in place (two small copies a
    step, no gather). It costs a second copy of the sequence's KV while the turn runs (freed at
    `release`): for many sessions one session's KV beside the pool; for one sequence that fits
    the pool, twice its KV. Off, the GPU holds the pool and one layer's assembly.
    """

    block_tokens: int = 256
    hot_blocks: int = 64
    host_blocks: int = 4096
    sink_blocks: int = 1
    recent_blocks: int = 2
    disk_blocks: int = 0
    disk_path: str | None = None
    prefetch: bool = True
    working_copy: bool = True
    config: HybridKVCacheConfig = field(default_factory=lambda: LOSSLESS)

    def __post_init__(self) -> None:
        if not isinstance(self.config, HybridKVCacheConfig):
            raise HkvError(
                f"HkvCacheSettings.config: got {self.config!r}; expected a HybridKVCacheConfig "
                '(e.g. HybridKVCacheConfig(offload_strategy="lru"))'
            )
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


def new_manager(settings: HkvCacheSettings, keys: torch.Tensor) -> HybridKVCacheManager:
    """A manager for `settings` whose blocks fit K/V like `keys` (`[1, kv_heads, n, head_dim]`)."""
    dtype = _DTYPE_NAMES.get(keys.dtype)
    if dtype is None:
        raise HkvError(f"HkvCache: KV dtype {keys.dtype}; expected one of {_DTYPE_NAMES}")
    layout = BlockLayout(settings.block_tokens, keys.shape[1], keys.shape[3], 1, dtype)
    return HybridKVCacheManager(
        layout,
        gpu_blocks=settings.hot_blocks,
        host_blocks=settings.host_blocks,
        disk_blocks=settings.disk_blocks,
        disk_path=settings.disk_path,
        config=settings.config,
        device=keys.device,
        cold_admission=False,  # a block has nowhere else to come from: never declined
    )


class BlockStore:
    """The manager shared by an `HkvCache`'s layers (created on the first update)."""

    def __init__(
        self,
        settings: HkvCacheSettings,
        num_layers: int,
        manager: Any = None,
        factory: Callable[[torch.Tensor], HybridKVCacheManager] | None = None,
    ):
        settings.check_room(num_layers)
        self.settings = settings
        self.num_layers = num_layers
        self.manager: HybridKVCacheManager | None = manager
        self.factory = factory  # makes (or hands out a shared) manager at the first update
        self.num_pinned = 0  # pins this cache holds (the manager's other users must hold none)
        self.streamed: dict[int, None] = {}  # blocks loaded back for an assembly, oldest first
        self.layers: list[HkvLayer] = []  # weak proxies, set by HkvCache (no reference cycle)
        self.prefetch_for: int | None = None  # the layer whose blocks are in flight
        self.prefetch_pending: Any = None  # and the manager's pending access that loads them
        self.prefetched = 0  # blocks loaded ahead of their layer
        self.broken: str | None = None  # why a step failed part-way (`refuse`)
        self._ready_key: tuple | None = None  # whole_sequence_ready's cache
        self._ready = False
        unpinned = (
            settings.hot_blocks - (settings.sink_blocks + settings.recent_blocks) * num_layers
        )
        slack = max(1, unpinned // 4)  # slots kept for streaming cold blocks through
        self.window_blocks = max(0, (unpinned - slack) // num_layers)

    def whole_sequence_ready(self) -> bool:
        """Whether the sequence (every layer at the longest layer's length) fits the pool and
        every block of every layer is on the GPU or arriving: a working copy is kept only then,
        so it never holds what the pool cannot. Cached until a block departs, an access starts
        or ends, or a block is sealed."""
        m = self.manager
        if self.num_layers * max(layer.num_blocks for layer in self.layers) > m.gpu.capacity_blocks:
            return False
        key = (m.gpu_departures, m.stats.accesses, m.pending is None, self._sealed())
        if key != self._ready_key:
            keys = [k for layer in self.layers for k in layer._keys]
            self._ready_key, self._ready = key, m.ready_slots(keys, wait=False) is not None
        return self._ready

    def _sealed(self) -> int:
        return sum(layer.num_blocks for layer in self.layers)

    def refuse(self) -> None:
        """A layer's `update` once a step failed part-way (`broken`): one layer had taken the
        new tokens in and another not, so a retry returned other KV than the model's."""
        raise HkvError(
            f"HkvCache: an earlier step failed ({self.broken}); this cache no longer holds a "
            "consistent sequence: start again with a new HkvCache"
        )

    def ensure_manager(self, keys: torch.Tensor) -> HybridKVCacheManager:
        if self.manager is None:
            factory = self.factory or (lambda k: new_manager(self.settings, k))
            self.manager = factory(keys)
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
        if layer.work_is_current():
            return 0  # assembled and all of it on the GPU
        cached = layer._slot_map
        if cached is not None and cached[:2] == (manager.gpu_departures, layer.num_blocks):
            return 0  # all of it is on the GPU where it was
        keys = layer._keys
        cold = self.in_host(keys)[: max(0, self.available(layer) - self.settings.recent_blocks)]
        if not cold:
            return 0
        self.make_room(len(cold), set(keys))
        return self.launch(cold[: self.manager.gpu.num_free], layer.layer_idx)

    def prefetch_all(self) -> int:
        """Launch the loads of every layer's blocks in host RAM as one access (a turn resumed),
        a copy chunk per layer: each layer's first update waits, on the device, for its own
        chunk only (`manager.ready_slots`), so the CPU never waits and layer `l` computes
        while later layers still load. Without room for all of them, layer 0's alone (the
        others then load a layer ahead). Returns the blocks launched."""
        manager = self.manager
        if not self.settings.prefetch or manager is None or manager.pending is not None:
            return 0
        cold, starts = self.in_host_by_layer()
        if not cold:
            return 0
        if len(cold) > self.available() - self.settings.recent_blocks:
            return self.prefetch_next(self.num_layers - 1)
        self.make_room(len(cold), set(cold))
        return self.launch(cold[: manager.gpu.num_free], ALL_LAYERS, starts)

    def in_host_by_layer(self) -> tuple[list[int], list[int]]:
        """Every layer's blocks in host RAM, layer after layer, and the first of each layer's
        (the `starts` of one access that loads them a chunk a layer)."""
        per_layer = [self.in_host(layer._keys) for layer in self.layers]
        return [k for keys in per_layer for k in keys], [keys[0] for keys in per_layer if keys]

    def in_host(self, keys: list[int]) -> list[int]:
        """The keys whose blocks are in host RAM (what a prefetch can load without waiting)."""
        return self.manager.table.keys_in(keys, Tier.HOST)

    def launch(self, keys: list[int], layer_idx: int | None = None, starts=()) -> int:
        """Start loading `keys` to the GPU and return the count (0 if none or no room); the
        pending access is this store's prefetch (of layer `layer_idx`, if one; `ALL_LAYERS`).
        `starts`: the first key of each layer among `keys` (a copy chunk each)."""
        if not keys:
            return 0
        pending = self.manager.prepare_access(keys, starts=starts)
        if isinstance(pending, AccessResult):
            return 0
        self.prefetch_for, self.prefetch_pending = layer_idx, pending
        self.prefetched += len(keys)
        return len(keys)

    def slot_index(self, slots: list[int]) -> range | torch.Tensor:
        """`slots` as a `range` when they are consecutive (read in place, no index), else on
        the device without the CPU waiting (`TransferEngine.device_index`)."""
        if consecutive(slots):
            return range(slots[0], slots[0] + len(slots))
        return self.manager.engine.device_index(slots)

    def gather(self, kv: torch.Tensor, start: int, index: range | torch.Tensor) -> None:
        """Copy the blocks in GPU slots `index` into `kv`'s blocks from `start` on: one
        strided copy from `[n, 2, b, heads, dim]` into `kv`'s `[2, heads, n * b, dim]`, read
        in place from consecutive slots (a `range`), else after gathering whole blocks as
        8-byte words (a row gather, near copy speed)."""
        b, n = self.settings.block_tokens, len(index)
        pool = self.manager.gpu.kv
        if isinstance(index, range):
            blocks = pool.narrow(0, index.start, n).view(n, 2, b, *pool.shape[-2:])
        else:
            rows = as_words(pool).index_select(0, index)
            blocks = rows.view(pool.dtype).view(n, 2, b, *pool.shape[-2:])
        out = kv.narrow(2, start * b, n * b).unflatten(2, (n, b))
        out.copy_(blocks.permute(1, 3, 0, 2, 4))

    def chunks(self, keys: list[int]):
        """A layer's `keys` in order, cut so that each cut's cold blocks fit in the slots free
        or held by streamed blocks, and all of it in the unpinned slots: (keys, indices of the
        cold ones) pairs."""
        manager, streamed = self.manager, self.streamed
        chunk, cold, budget = [], [], self.available()
        for index, key in enumerate(keys):
            is_cold = manager.gpu_slots_of((key,)) is None
            full = len(chunk) >= self.room() or (is_cold and cold and len(cold) >= budget)
            if full:
                yield chunk, cold
                chunk, cold, budget = [], [], None
            if budget is None:
                budget = self.available()
            chunk.append(key)
            if is_cold:
                cold.append(index)
            elif key in streamed and manager.evictable(key):
                budget -= 1  # its slot counted as available, but the chunk protects it
        if chunk:
            yield chunk, cold

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


class Unsupported:
    """What `HkvLayer` refuses of a transformers layer: one sequence of batch size 1, whose
    blocks the manager holds (a reset, a crop or a reorder would leave them behind)."""

    def reset(self) -> None:  # transformers' own reset cleared the tensors, never the blocks
        raise HkvError(
            "HkvCache: reset is not supported (blocks stay in the manager): make a new one"
        )

    def crop(self, tokens_to_remove: int) -> None:
        raise HkvError("HkvCache: crop is not supported (blocks are shared with the manager)")

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise HkvError("HkvCache: beam search is not supported (batch size 1)")

    def batch_repeat_interleave(self, repeats: int) -> None:
        if repeats != 1:
            raise HkvError("HkvCache: batch size 1 only (num_return_sequences must be 1)")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise HkvError("HkvCache: batch size 1 only")
