"""`HkvLayer`: one model layer's KV as hkv blocks plus a tail tensor (`hkv.integrations.
transformers` says how it works)."""

from __future__ import annotations

from collections import deque

import torch
from transformers.cache_utils import DynamicLayer

from hkv.blocks import Tier
from hkv.errors import HkvError
from hkv.formats import LOSSLESS_FORMATS
from hkv.integrations.transformers.kv_blocks import (
    ALL_LAYERS,
    KEYS,
    TOUCH_EVERY,
    BlockStore,
    Unsupported,
    storage_mode,
)


class HkvLayer(Unsupported, DynamicLayer):
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
        self._slot_map: tuple[int, int, range | torch.Tensor] | None = None  # departures, n, slots
        self.needs_pins = False  # a turn resumed: pin sinks and recent blocks at next update
        self._since_touch = 0  # fast-path updates since the policy last heard of these blocks
        # the working copy: `[2, heads, capacity, dim]`, its first `_work_tokens` tokens this
        # layer's K/V, kept while the whole sequence stays on the GPU (checked at departures)
        self._work: torch.Tensor | None = None
        self._work_tokens = 0
        self._work_departures = -1
        self._fast_limit = -1  # `_set_work` keeps it; no working copy: never
        self._work_geometry: tuple = ()  # heads, head_dim, strides (`_set_work`)
        self._work_inference = False
        self._staging: torch.Tensor | None = None  # pinned host room for the tail, 1st release

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
        """Append `[1, kv_heads, new, head_dim]` K/V; return the layer's whole K/V (in the
        pool's grad mode, `kv_blocks.storage_mode`). After a step that failed part-way the
        cache refuses every later one (`BlockStore.refuse`): its layers no longer agree."""
        self.store.broken is None or self.store.refuse()
        try:  # (free where nothing raises: the fast path pays nothing)
            if self._work is not None:
                fast = self._fast_append(key_states, value_states)
                if fast is not None:
                    return fast
            mode = storage_mode(self.store.manager)
            if mode is None:
                return self._update(key_states, value_states)
            with mode:
                return self._update(key_states, value_states)
        except BaseException as exc:
            self.store.broken = f"layer {self.layer_idx}: {exc}"
            raise

    def _update(
        self, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
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
        if self._work is not None:
            if self.work_is_current() or self._work_still_valid():
                return self._append_to_work(key_states, value_states)
            self._drop_work()
        if self.tail_keys.shape[-2]:
            device = key_states.device
            # a tail parked in pinned host memory comes back without the CPU waiting
            back = (self.tail_keys.to(device, non_blocking=True), key_states)
            self.tail_keys = torch.cat(back, -2)
            back = (self.tail_values.to(device, non_blocking=True), value_states)
            self.tail_values = torch.cat(back, -2)
        else:  # nothing to append to (a turn resumed at a block boundary, a prefill)
            self.tail_keys, self.tail_values = key_states, value_states
        self._seal_full_blocks()
        if not self.num_blocks:
            return self.tail_keys, self.tail_values
        _, heads, tail, dim = self.tail_keys.shape
        sealed = self.num_blocks * self.store.settings.block_tokens
        keep = self.store.settings.working_copy and self.store.whole_sequence_ready()
        capacity = sealed + tail + (self._headroom(sealed + tail) if keep else 0)
        kv = torch.empty(
            (2, heads, capacity, dim), dtype=self.tail_keys.dtype, device=self.tail_keys.device
        )
        self._assemble_into(kv)
        kv[0, :, sealed : sealed + tail] = self.tail_keys[0]
        kv[1, :, sealed : sealed + tail] = self.tail_values[0]
        if keep and self._slot_map is not None:  # every block on the GPU, none moved since
            self._set_work(kv, sealed + tail)
            self._work_departures = self.store.manager.gpu_departures
            self.tail_keys = self.tail_values = None  # in the working copy from now on
        if store.prefetch_for == ALL_LAYERS and self.layer_idx == store.num_layers - 1:
            store.settle()  # the turn's loads, launched at resume, arrived long ago
        self.store.prefetch_next(self.layer_idx)  # overlaps this layer's attention and MLP
        return kv[0:1, :, : sealed + tail], kv[1:2, :, : sealed + tail]

    # ---- the working copy ---------------------------------------------------------------

    def work_is_current(self) -> bool:
        """True while the working copy exists and no GPU block anywhere left since it was
        checked (so all of this layer's blocks are still where they were)."""
        return self._work is not None and self._work_departures == self.store.manager.gpu_departures

    def _work_still_valid(self) -> bool:
        """After departures: the copy stays if the whole sequence is still on the GPU (or
        arriving) and fits the pool. With a lossy cold format it is dropped: a block that went
        and came back would differ from it."""
        manager = self.store.manager
        fmt = manager.config.modality("text").quantization
        if fmt not in LOSSLESS_FORMATS or not self.store.whole_sequence_ready():
            return False
        self._work_departures = manager.gpu_departures
        return True

    def _headroom(self, tokens: int) -> int:
        """Tokens of room past `tokens` a new working copy gets: a block, or an eighth."""
        b = self.store.settings.block_tokens
        return max(b, -(-tokens // 8 // b) * b)

    def _set_work(self, work: torch.Tensor | None, tokens: int) -> None:
        """`work` becomes the working copy (None: none), with what `_write` and `_fast_append`
        need kept once: heads, dim, strides and the copy's grad mode."""
        self._work, self._work_tokens = work, tokens
        if work is not None:
            self._work_geometry = (work.shape[1], work.shape[3], work.stride())
            self._work_inference = work.is_inference()
        self._update_fast_limit()

    def _update_fast_limit(self) -> None:
        """The most tokens `_fast_append` may leave in the copy: its capacity, and one short of
        the next block's end (a block completed is sealed by `_append_to_work`)."""
        b = self.store.settings.block_tokens
        last = (self.num_blocks + 1) * b - 1
        self._fast_limit = -1 if self._work is None else min(self._work.shape[2], last)

    def _fast_append(self, keys: torch.Tensor, values: torch.Tensor):
        """A decode step's path, or None when `_update` must run: the working copy current, the
        caller in the pool's mode, no pins to restore, no prefetch for this layer to wait for,
        and the tokens completing no block and fitting the copy (`_write`)."""
        store = self.store
        manager = store.manager
        start = self._work_tokens
        end = start + keys.shape[-2]
        if (
            self._work_departures != manager.gpu_departures
            or end > self._fast_limit
            or self.needs_pins
            or store.prefetch_for == self.layer_idx
            or torch.is_inference_mode_enabled() != self._work_inference
        ):
            return None
        views = self._write(keys, values, start, end)
        self.updates += 1
        self.recent_updates.append(end - start)
        self._count_touch()
        store.prefetch_next(self.layer_idx)
        return views

    def _write(self, keys: torch.Tensor, values: torch.Tensor, start: int, end: int):
        """Write `keys` and `values` into the copy's tokens `start:end` (one `torch.cat` into
        an `as_strided` view; under `torch.no_grad` a `narrow` costs the host half as much
        again as a whole step's `torch.cat`); return K and V views of its first `end` tokens."""
        work, (heads, dim, stride) = self._work, self._work_geometry
        new = work.as_strided((2, heads, end - start, dim), stride, start * dim)
        torch.cat([keys, values], 0, out=new)
        self._work_tokens = end
        size = (1, heads, end, dim)
        return work.as_strided(size, stride), work.as_strided(size, stride, stride[0])

    def _count_touch(self) -> None:
        """One more update of blocks that all stayed on the GPU: every `TOUCH_EVERY`, the
        policy hears of them."""
        self._since_touch += 1
        if self._since_touch >= TOUCH_EVERY:
            self.store.manager.touch(self._keys)
            self._since_touch = 0

    def _append_to_work(self, keys: torch.Tensor, values: torch.Tensor):
        """The working copy's general path (a block completed, the copy full, or a grad mode
        other than the copy's): the new tokens written in place, blocks completed sealed from
        the copy, the policy told every `TOUCH_EVERY` updates; views of the copy returned."""
        start = self._work_tokens
        end = start + keys.shape[-2]
        if end > self._work.shape[2]:
            old = self._work
            work = torch.empty(
                (2, old.shape[1], end + self._headroom(end), old.shape[3]),
                dtype=old.dtype,
                device=old.device,
            )
            work[:, :, :start] = old[:, :, :start]
            self._set_work(work, start)
        views = self._write(keys, values, start, end)
        b = self.store.settings.block_tokens
        while end - self.num_blocks * b >= b:
            first = self.num_blocks * b
            block = self._work[:, :, first : first + b].permute(0, 2, 1, 3).unsqueeze(0)
            self._seal_block(block)
        self._update_fast_limit()
        if self.work_is_current():
            self._count_touch()
        self.store.prefetch_next(self.layer_idx)
        return views

    def _drop_work(self) -> None:
        """Back to the tail tensor and per-step assembly (the copy's memory is freed)."""
        if self._work is None:
            return
        sealed = self.num_blocks * self.store.settings.block_tokens
        tail = self._work[:, :, sealed : self._work_tokens]
        self.tail_keys, self.tail_values = tail[0:1].clone(), tail[1:2].clone()
        self._set_work(None, 0)
        self._work_departures = -1

    def _is_pinned(self, index: int) -> bool:
        s = self.store.settings
        return index < s.sink_blocks or index >= self.num_blocks - s.recent_blocks

    def _seal_full_blocks(self) -> None:
        """Admit every complete block of the tail; keep sinks and the most recent pinned."""
        b = self.store.settings.block_tokens
        sealed_any = self.tail_keys.shape[-2] >= b
        while self.tail_keys.shape[-2] >= b:
            kv = torch.stack([self.tail_keys[0, :, :b], self.tail_values[0, :, :b]])
            self._seal_block(kv.permute(0, 2, 1, 3).unsqueeze(0))  # [1, 2, b, heads, dim]
            self.tail_keys = self.tail_keys[:, :, b:]
            self.tail_values = self.tail_values[:, :, b:]
        if sealed_any:  # a view would keep the whole prefill's K/V alive
            self.tail_keys, self.tail_values = self.tail_keys.clone(), self.tail_values.clone()

    def _seal_block(self, kv: torch.Tensor) -> None:
        """Admit `kv` `[1, 2, b, heads, dim]` as this layer's next block."""
        manager, b = self.store.manager, self.store.settings.block_tokens
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
        admission = manager.admit(self.block_key(index), kv, position=index * b, tokens=b, pin=pin)
        if not admission.ok:
            raise HkvError(
                f"HkvCache: block {index} of layer {self.layer_idx} refused: {admission.reason}"
            )
        self.store.num_pinned += pin
        self._keys.append(self.block_key(index))

    def _assemble_into(self, kv: torch.Tensor) -> None:
        """Write this layer's blocks, in order, into `kv` `[2, heads, tokens, dim]` (one copy;
        the only other memory is one chunk's gather)."""
        manager = self.store.manager
        departures, n = manager.gpu_departures, self.num_blocks
        cached = self._slot_map
        if cached is None or cached[0] != departures or cached[1] != n:
            slots = manager.ready_slots(self._keys)  # None unless all are on or arriving
            cached = None if slots is None else (departures, n, self.store.slot_index(slots))
            self._slot_map = cached
            if cached is not None:
                manager.touch(self._keys)
                self._since_touch = 0
        if cached is not None:  # all on the GPU where they were: gather, tell the policy
            self._count_touch()
            self.store.gather(kv, 0, cached[2])
            return
        self.store.settle()
        hot_from = self.num_blocks - self.store.settings.recent_blocks - self.store.window_blocks
        passing = set(self._keys[self.store.settings.sink_blocks : hot_from])
        start = 0
        for chunk, cold in self.store.chunks(self._keys):
            self.store.make_room(len(cold), set(chunk))
            result = manager.access(chunk, pin=True)
            # outside the hot window a block on the GPU is passing through: first to leave
            self.store.streamed.update(dict.fromkeys(k for k in chunk if k in passing))
            if not result.ok or result.to_compute:
                raise HkvError(
                    f"HkvCache: layer {self.layer_idx} could not bring back its blocks "
                    f"({result.reason or f'{len(result.to_compute)} blocks lost'})"
                )
            self.store.gather(
                kv, start, self.store.slot_index([result.gpu_slots[k] for k in chunk])
            )
            manager.unpin(chunk)
            start += len(chunk)

    def get_seq_length(self) -> int:
        if not self.is_initialized:
            return 0
        if self._work is not None:
            return self._work_tokens
        return self.num_blocks * self.store.settings.block_tokens + self.tail_keys.shape[-2]

    def release(self) -> None:
        """Unpin this layer's blocks and move its tail to host memory (the turn ended)."""
        self._drop_work()
        manager = self.store.manager
        pinned = [self.block_key(i) for i in range(self.num_blocks) if self._is_pinned(i)]
        if pinned and not self.needs_pins:
            manager.unpin(pinned)
            self.store.num_pinned -= len(pinned)
        self.needs_pins = False
        if self.tail_keys is not None and self.tail_keys.device.type == "cuda":
            self._tail_to_host()
        elif self.tail_keys is not None:
            self.tail_keys, self.tail_values = self.tail_keys.cpu(), self.tail_values.cpu()

    def _tail_to_host(self) -> None:
        """Copy the tail (less than a block) into this layer's pinned staging buffer without
        the CPU waiting, and keep views of it: the buffer is allocated once, at the first
        release, so a turn's end costs no pinned allocation (`cudaHostAlloc` takes
        milliseconds). The stream that copies the tail back runs after this copy, and this
        layer's next release writes the buffer only after that."""
        keys, values = self.tail_keys, self.tail_values
        size = keys.numel()
        staging = self._staging
        if staging is None or staging.dtype != keys.dtype or 2 * size > staging.numel():
            _, heads, tokens, dim = keys.shape
            room = 2 * heads * max(tokens, self.store.settings.block_tokens) * dim
            staging = self._staging = torch.empty(room, dtype=keys.dtype, pin_memory=True)
        half = staging.numel() // 2
        self.tail_keys = staging[:size].view(keys.shape).copy_(keys, non_blocking=True)
        self.tail_values = staging[half : half + size].view(keys.shape)
        self.tail_values.copy_(values, non_blocking=True)

    def repin(self) -> None:
        """Pin the sink and recent blocks again (a turn resumed): those on the GPU (the usual
        case: the layer before prefetched them) in place, the others brought back."""
        manager = self.store.manager
        pinned = [self.block_key(i) for i in range(self.num_blocks) if self._is_pinned(i)]
        here = [k for k in pinned if manager.where(k) is Tier.GPU]  # arriving ones too
        away = [k for k in pinned if manager.where(k) is not Tier.GPU]
        manager.pin(here)
        if away:
            self.store.settle()
            result = manager.access(away, pin=True)
            if not result.ok or result.to_compute:
                manager.unpin(here)
                raise HkvError(f"HkvCache: layer {self.layer_idx} could not restore its pins")
        self.store.num_pinned += len(pinned)
        self.needs_pins = False
