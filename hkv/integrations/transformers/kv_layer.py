"""`HkvLayer`: one model layer's KV as hkv blocks plus a tail tensor (`hkv.integrations.
transformers` says how it works)."""

from __future__ import annotations

from collections import deque

import torch
from transformers.cache_utils import DynamicLayer

from hkv.errors import HkvError
from hkv.integrations.transformers.kv_blocks import KEYS, TOUCH_EVERY, BlockStore


class HkvLayer(DynamicLayer):
    """One model layer's KV: full blocks in the manager, the tail as a tensor (module docstring)."""

    is_croppable = False

    def __init__(self, store: BlockStore, layer_idx: int, key_base: int = 0):
        super().__init__()
        self.store = store
        self.layer_idx = layer_idx
        self.key_base = key_base
        self.num_blocks = 0
        self.tail_keys: torch.Tensor | None = None
        self.tail_values: torch.Tensor | None = None
        self.updates = 0  # calls of update() so far
        self.recent_updates: deque[int] = deque(maxlen=64)  # tokens of each of the last 64
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
        self.updates += 1
        self.recent_updates.append(key_states.shape[-2])
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
