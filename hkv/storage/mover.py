"""How blocks move between the manager's tiers: room on the GPU, demotions down to host and disk,
loads back up, per-modality caps, and forgetting. The manager (`hkv.storage.manager`) inherits these;
they read and change its tiers, policies, transfer engine, block records and counters."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import numpy as np

from hkv.blocks import Tier
from hkv.errors import HkvError
from hkv.storage.quant import codec
from hkv.storage.records import BlockRecord, Link
from hkv.storage.tiers import HostTier


class Placement:
    """The manager's internal moves (mixed into `HybridKVCacheManager`)."""

    def _no_room(self, needed: int, hot: list[BlockRecord]) -> str | None:
        short = needed - self.gpu.num_free
        if short <= 0:
            return None
        in_use = self._num_pinned + sum(1 for b in hot if b.pins == 0)
        evictable = self.gpu.capacity_blocks - self.gpu.num_free - in_use
        if short <= evictable:
            return None
        return (
            f"GPU tier full: {needed} blocks to place, {self.gpu.num_free} free of "
            f"{self.gpu.capacity_blocks}, {self._num_pinned} pinned and "
            f"{in_use - self._num_pinned} used by this call; unpin blocks or raise gpu_blocks"
        )

    def _gpu_slots(self, n: int, protected: set[int]) -> list[int] | str:
        """`n` free GPU slots, demoting policy-chosen victims; a reason string if impossible."""
        short = n - self.gpu.num_free
        if short > 0:
            victims = self.policies[Tier.GPU].evict(short, protected)
            if victims is None:
                return (
                    f"GPU tier full: all {self.gpu.capacity_blocks} blocks are pinned or used by "
                    "this call; unpin blocks or raise gpu_blocks"
                )
            self._demote_gpu([self._blocks[k] for k in victims])
        return self.gpu.allocate(n)

    def _to_gpu(self, block: BlockRecord, slot: int) -> None:
        block.gpu_slot = slot
        block.meta.tier = Tier.GPU
        self._hot[block.meta.modality].add(block.key)
        policy = self.policies[Tier.GPU]
        if block.key not in policy:
            policy.insert(block.key, block.meta)

    def _demote_gpu(self, blocks: list[BlockRecord]) -> None:
        """GPU -> host for blocks already out of the GPU policy, batched per cold format.

        In batches the arena can take at once, so that a demotion larger than the arena flows
        on to disk through it instead of being dropped."""
        if self.host is None:  # no cold tier: the blocks are recomputed when next needed
            self._drop(blocks)
            return
        by_fmt = defaultdict(list)
        for block in blocks:
            by_fmt[block.fmt].append(block)
        for fmt, group in by_fmt.items():
            step = max(1, self.host.capacity_bytes // self._stride(fmt) // 2)
            for first in range(0, len(group), step):
                batch = group[first : first + step]
                kept = self._admit_cold(Tier.HOST, batch)
                kept_ids = {b.key for b in kept}
                self._drop([b for b in batch if b.key not in kept_ids])
                clean = [b for b in kept if b.host_offset is not None]
                for block in clean:  # the host still has its bytes: nothing to copy
                    del self._retained[block.key]
                    self._leave_gpu(block)
                    block.meta.tier = Tier.HOST
                    self.policies[Tier.HOST].insert(block.key, block.meta)
                self.stats.demoted["host"] += len(clean)
                self.stats.demoted_clean += len(clean)
                dirty = [b for b in kept if b.host_offset is None]
                if dirty:
                    self._copy_to_host(dirty, fmt)

    def _copy_to_host(self, kept: list[BlockRecord], fmt: str) -> None:
        offsets = self._host_room(fmt, len(kept))
        if offsets is None:
            self._drop(kept)
            return
        slots = [b.gpu_slot for b in kept]
        done = self.engine.store(self.gpu, slots, self.host, offsets, fmt)
        self.stats.moved(Link.GPU_TO_HOST, done.nbytes, done.device_s)
        for block, offset in zip(kept, offsets.tolist(), strict=True):
            self._leave_gpu(block)
            block.host_offset, block.meta.tier = offset, Tier.HOST
            self.policies[Tier.HOST].insert(block.key, block.meta)
        self.stats.demoted["host"] += len(kept)

    def _host_room(self, fmt: str, count: int) -> np.ndarray | None:
        """Host extents for `count` blocks of `fmt`, demoting host blocks to disk as needed."""
        policy, nbytes = self.policies[Tier.HOST], codec(self.layout, fmt).payload_bytes
        while True:
            over = len(policy) + count - policy.capacity_blocks
            if over <= 0 and self.host.can_allocate(nbytes, count):
                return self.host.allocate(nbytes, count)
            if self._retained and not self.host.can_allocate(nbytes, count):
                # copies of GPU blocks go first: the GPU has their bytes
                block = self._blocks[next(iter(self._retained))]
                del self._retained[block.key]
                self.host.free([block.host_offset])
                block.host_offset = None
                continue
            short = count * self._stride(fmt) - (self.host.capacity_bytes - self.host.used_bytes)
            want = max(over, -(-short // self._stride("bf16")), 1)
            victims = policy.evict(min(want, len(policy))) if len(policy) else None
            if not victims:
                return None
            self._demote_host([self._blocks[k] for k in victims])

    def _demote_host(self, blocks: list[BlockRecord]) -> None:
        """Host -> disk (or dropped) for blocks already out of the host policy."""
        worth = [b for b in blocks if not self._cheaper_to_recompute(b, Tier.DISK)]
        kept = self._admit_cold(Tier.DISK, worth)
        policy = self.policies.get(Tier.DISK)
        if kept:  # slots of blocks being promoted are still taken: count free slots, too
            short = max(
                len(policy) + len(kept) - policy.capacity_blocks, len(kept) - self.disk.num_free
            )
            if short > 0 and len(policy):
                victims = policy.evict(min(short, len(policy))) or []
                self._drop([self._blocks[k] for k in victims])
            kept = kept[: self.disk.num_free]
        kept_ids = {b.key for b in kept}
        self._drop([b for b in blocks if b.key not in kept_ids])
        if not kept:
            return
        slots = self.disk.allocate(len(kept))
        entries = []
        for block, slot in zip(kept, slots, strict=True):
            payload = self.host.view(block.host_offset, codec(self.layout, block.fmt).payload_bytes)
            entries.append((slot, block.key, block.fmt, payload.numpy()))
        start = time.perf_counter()
        nbytes = self.disk.write_many(entries)
        self.stats.moved(Link.HOST_TO_DISK, nbytes, time.perf_counter() - start)
        for block, slot in zip(kept, slots, strict=True):
            self.host.free([block.host_offset])
            block.host_offset, block.disk_slot, block.meta.tier = None, slot, Tier.DISK
            policy.insert(block.key, block.meta)
        self.stats.demoted["disk"] += len(kept)

    def _admit_cold(self, tier: Tier, blocks: list[BlockRecord]) -> list[BlockRecord]:
        """The blocks `tier`'s policy admits (admission control may decline some)."""
        policy = self.policies.get(tier)
        if policy is None:
            return []
        if len(blocks) > policy.capacity_blocks:
            blocks = blocks[: policy.capacity_blocks]
        return [b for b in blocks if policy.admit(b.key, b.meta)]

    def _read_disk(self, blocks: list[BlockRecord]) -> tuple[list[BlockRecord], dict[int, int]]:
        """Read disk blocks into the scratch arena: (lost blocks, key -> scratch offset)."""
        if not blocks:
            return [], {}
        self._ensure_scratch(len(blocks))
        offsets = {}
        for fmt in {b.fmt for b in blocks}:
            group = [b for b in blocks if b.fmt == fmt]
            nbytes = codec(self.layout, fmt).payload_bytes
            places = self._scratch.allocate(nbytes, len(group)).tolist()
            offsets.update(zip((b.key for b in group), places, strict=True))
        entries = [(b.disk_slot, b.key, b.fmt) for b in blocks]
        start = time.perf_counter()
        problems = self.disk.read_many(
            entries, self._scratch.buf.numpy(), [offsets[b.key] for b in blocks]
        )
        read_s = time.perf_counter() - start
        lost = [b for b, problem in zip(blocks, problems, strict=True) if problem is not None]
        self.stats.moved(Link.DISK_TO_GPU, 0, read_s)
        for block in lost:
            self._scratch.free([offsets.pop(block.key)])
            block.inflight = False
            self._forget(block)
        self.stats.lost += len(lost)
        return lost, offsets

    def _ensure_scratch(self, count: int) -> None:
        need = count * self._stride("bf16")
        if self._scratch is None or self._scratch.capacity_bytes < need:
            pin = self.host.pinned if self.host is not None else False
            page = self.host.page_bytes if self.host is not None else 4096
            self._scratch = HostTier(need, page, pin_memory=pin)

    def _launch_loads(self, loads: list[BlockRecord], slots: list[int], scratch: dict[int, int]):
        """Launch host/scratch -> GPU copies per (source, format); the blocks take their slots."""
        groups = defaultdict(list)
        for block, slot in zip(loads, slots, strict=True):
            self._pin(block)  # in flight: no eviction may pick it
            self._to_gpu(block, slot)
            from_disk = block.key in scratch
            groups[(from_disk, block.fmt)].append((block, slot))
        transfers = []
        for (from_disk, fmt), group in groups.items():
            source = self._scratch if from_disk else self.host
            offsets = [scratch[b.key] if from_disk else b.host_offset for b, _ in group]
            transfer = self.engine.prepare_load(
                source, offsets, self.gpu, [s for _, s in group], fmt
            )
            transfers.append((transfer, Link.DISK_TO_GPU if from_disk else Link.HOST_TO_GPU))
        return transfers

    def _enforce_keep_limits(self, protected: set[int]) -> None:
        """Demote each modality's GPU blocks beyond its `max_keep_blocks` (policy's choice)."""
        for modality, keys in self._hot.items():
            cap = self.config.modality(modality).max_keep_blocks
            if cap is None or len(keys) <= cap:
                continue
            evictable = sum(1 for k in keys if k not in protected and not self._blocks[k].pins)
            n = min(len(keys) - cap, evictable)
            if n <= 0:
                continue
            others = set().union(*(s for m, s in self._hot.items() if m is not modality))
            victims = self.policies[Tier.GPU].evict(n, others | protected)
            if victims:
                self.stats.capped += len(victims)
                self._demote_gpu([self._blocks[k] for k in victims])

    # ---- bookkeeping ----------------------------------------------------------------------

    def _cheaper_to_recompute(self, block: BlockRecord, tier: Tier) -> bool:
        if self.cost_model is None:
            return False
        return self.cost_model.decide(block.meta, tier, block.fmt).action == "recompute"

    def _new_key(self, block_id: Any) -> int:
        if isinstance(block_id, bool) or not isinstance(block_id, int | np.integer):
            raise HkvError(f"block id: got {block_id!r}; expected an integer (a BlockId)")
        key = int(block_id)
        if key in self._blocks:
            tier = self._blocks[key].meta.tier.name.lower()
            raise HkvError(f"admit: block {key} is already held (in the {tier} tier); access() it")
        return key

    def _held(self, block_id: Any, action: str) -> BlockRecord:
        block = self._blocks.get(int(block_id))
        if block is None:
            raise HkvError(f"{action}: block {block_id!r} is not held by this manager")
        return block

    def _pin(self, block: BlockRecord) -> None:
        block.pins += 1
        if block.pins == 1:
            self._num_pinned += 1
            block.meta.pinned = True

    def _unpin(self, block: BlockRecord) -> None:
        block.pins -= 1
        if block.pins == 0:
            self._num_pinned -= 1
            block.meta.pinned = False

    def _leave_gpu(self, block: BlockRecord) -> None:
        self.gpu_departures += 1
        self.gpu.free([block.gpu_slot])
        block.gpu_slot = None
        self._hot[block.meta.modality].discard(block.key)

    def _drop(self, blocks: list[BlockRecord]) -> None:
        """Blocks no cold tier keeps: forgotten (they are recomputed when next needed)."""
        for block in blocks:
            self._forget(block)
        self.stats.dropped += len(blocks)

    def _forget(self, block: BlockRecord) -> None:
        for policy in self.policies.values():
            policy.remove(block.key)
        if block.gpu_slot is not None:
            self._leave_gpu(block)
        if block.host_offset is not None:
            self.host.free([block.host_offset])
            self._retained.pop(block.key, None)
        if block.disk_slot is not None:
            self.disk.free([block.disk_slot])
        if block.pins:
            self._num_pinned -= 1
        self._blocks.pop(block.key, None)
