"""`Mover`: how blocks move between the manager's tiers: room on the GPU, demotions down to host
and disk, loads back up, per-modality caps, kept cold copies, and forgetting.

The manager (`hkv.storage.manager`) owns one; the mover changes the tiers' slots and extents, the
policies and the `BlockTable`, and counts what it moved in the manager's `ManagerStats`.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hkv.blocks import Modality, Tier
from hkv.formats import LOSSLESS_FORMATS
from hkv.planning.config import HybridKVCacheConfig
from hkv.policies import make_policy, online_policy_class
from hkv.storage.disk import DiskTier
from hkv.storage.layout import BlockLayout
from hkv.storage.quant import codec
from hkv.storage.records import BlockRecord, Link, ManagerStats
from hkv.storage.table import BlockTable
from hkv.storage.tiers import GpuTier, HostTier
from hkv.storage.transfer import TransferEngine


def tier_policies(
    name: str,
    tiers: tuple[GpuTier, HostTier | None, DiskTier | None],
    context: dict[str, Any],
    host_stride: Callable[[str], int],
) -> dict[Tier, Any]:
    """One instance of policy `name` per tier, sized in blocks (the host's in blocks of its
    smallest cold format). `context` is the config and cost model the policies may use."""
    online_policy_class(name, runner="the block manager")  # an offline yardstick cannot run
    gpu, host, disk = tiers
    policies = {Tier.GPU: make_policy(name, gpu.capacity_blocks, **context)}
    if host is not None:
        formats = {context["config"].modality(m).quantization for m in Modality}
        smallest = min(host_stride(fmt) for fmt in formats)
        policies[Tier.HOST] = make_policy(name, host.capacity_bytes // smallest, **context)
    if disk is not None:
        policies[Tier.DISK] = make_policy(name, disk.capacity_blocks, **context)
    return policies


class Mover:
    """The manager's moves between tiers (see the manager's docstring for the rules)."""

    def __init__(
        self, table: BlockTable, layout: BlockLayout,
        tiers: tuple[GpuTier, HostTier | None, DiskTier | None], engine: TransferEngine,
        policies: dict[Tier, Any], *, config: HybridKVCacheConfig, cost_model: Any,
        stats: ManagerStats, keep_copies: bool, cold_admission: bool = True,
    ):  # fmt: skip
        self.table, self.layout, self.engine, self.policies = table, layout, engine, policies
        self.gpu, self.host, self.disk = tiers
        self.config, self.cost_model, self.stats = config, cost_model, stats
        self.keep_copies, self.cold_admission = keep_copies, cold_admission
        self.scratch: HostTier | None = None  # disk reads land here on their way to the GPU
        self.gpu_departures = 0
        """Times a block left its GPU slot; a map of blocks to slots stays valid while it holds."""

    def host_stride(self, fmt: str) -> int:
        return self.host.stride_bytes(codec(self.layout, fmt).payload_bytes)

    def usage(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per modality and tier: `blocks`, `raw_bytes` (in the layout's dtype) and
        `stored_bytes` (what the tier spends: a GPU slot, host pages, a disk slot)."""
        stored = {
            Tier.GPU: lambda b: self.layout.nbytes,
            Tier.HOST: lambda b: self.host_stride(b.fmt),
            Tier.DISK: lambda b: self.disk.stride,
        }
        return self.table.usage(self.layout.nbytes, lambda b: stored[b.meta.tier](b))

    # ---- room on the GPU ------------------------------------------------------------------

    def no_room(self, needed: int, hot: list[BlockRecord]) -> str | None:
        """Why `needed` blocks cannot be placed (all else pinned or used by the call), or None."""
        gpu, num_pinned = self.gpu, self.table.num_pinned
        short = needed - gpu.num_free
        if short <= 0:
            return None
        in_use = num_pinned + sum(1 for b in hot if b.pins == 0)
        if short <= gpu.capacity_blocks - gpu.num_free - in_use:
            return None
        return (
            f"GPU tier full: {needed} blocks to place, {gpu.num_free} free of "
            f"{gpu.capacity_blocks}, {num_pinned} pinned and "
            f"{in_use - num_pinned} used by this call; unpin blocks or raise gpu_blocks"
        )

    def gpu_slots(self, n: int, protected: set[int]) -> list[int] | str:
        """`n` free GPU slots, demoting policy-chosen victims; a reason string if impossible."""
        short = n - self.gpu.num_free
        if short > 0:
            victims = self.policies[Tier.GPU].evict(short, protected)
            if victims is None:
                return (
                    f"GPU tier full: all {self.gpu.capacity_blocks} blocks are pinned or used by "
                    "this call; unpin blocks or raise gpu_blocks"
                )
            self.demote_gpu([self.table.records[k] for k in victims])
        return self.gpu.allocate(n)

    def place_on_gpu(self, block: BlockRecord, slot: int) -> None:
        self.table.placed_on_gpu(block, slot)
        policy = self.policies[Tier.GPU]
        if block.key not in policy:
            policy.insert(block.key, block.meta)

    def leave_gpu(self, block: BlockRecord) -> None:
        self.gpu_departures += 1
        self.gpu.free([self.table.left_gpu(block)])

    # ---- demotions ------------------------------------------------------------------------

    def demote_gpu(self, blocks: list[BlockRecord]) -> None:
        """GPU -> cold tiers for blocks already out of the GPU policy.

        A block that kept its cold copy goes back to that copy's tier (no copy, no encoding);
        the others are encoded to host, per cold format, in batches the arena can take at once,
        so that a demotion larger than the arena flows on to disk through it."""
        if self.host is None:  # no cold tier: the blocks are recomputed when next needed
            self.drop(blocks)
            return
        self._reuse_copies([b for b in blocks if b.disk_slot is not None], Tier.DISK)
        by_fmt = defaultdict(list)
        for block in blocks:
            if block.disk_slot is None:
                by_fmt[block.fmt].append(block)
        for fmt, group in by_fmt.items():
            step = max(1, self.host.capacity_bytes // self.host_stride(fmt) // 2)
            for first in range(0, len(group), step):
                batch = group[first : first + step]
                kept = self._admit_cold(Tier.HOST, batch)
                kept_ids = {b.key for b in kept}
                self.drop([b for b in batch if b.key not in kept_ids])
                self._reuse_copies([b for b in kept if b.host_offset is not None], Tier.HOST)
                dirty = [b for b in kept if b.host_offset is None]
                if dirty:
                    self._copy_to_host(dirty, fmt)

    def _reuse_copies(self, blocks: list[BlockRecord], tier: Tier) -> None:
        """Back to the copy each block kept in `tier`: its host bytes, or the disk slot it was
        loaded from (never given back, so the tier's policy has room). Nothing is copied."""
        for block in blocks:
            del self.table.copies[tier][block.key]
            self.leave_gpu(block)
            block.meta.tier = tier
            self.policies[tier].insert(block.key, block.meta)
        self.stats.demoted[tier.name.lower()] += len(blocks)
        self.stats.demoted_clean += len(blocks)

    def _copy_to_host(self, kept: list[BlockRecord], fmt: str) -> None:
        offsets = self._host_room(fmt, len(kept))
        if offsets is None:
            self.drop(kept)
            return
        fresh = [i for i, b in enumerate(kept) if b.scales is None]
        if fresh:
            slots = [kept[i].gpu_slot for i in fresh]
            done = self.engine.store(self.gpu, slots, self.host, offsets[fresh], fmt)
            self.stats.moved(Link.GPU_TO_HOST, done.nbytes, done.device_s)
        if len(fresh) < len(kept):
            again = [i for i, b in enumerate(kept) if b.scales is not None]
            self._encode_again([kept[i] for i in again], offsets[again], fmt)
        for block, offset in zip(kept, offsets.tolist(), strict=True):
            self.leave_gpu(block)
            block.host_offset, block.meta.tier = offset, Tier.HOST
            self.policies[Tier.HOST].insert(block.key, block.meta)
        self.stats.demoted["host"] += len(kept)

    def _encode_again(self, blocks: list[BlockRecord], offsets: np.ndarray, fmt: str) -> None:
        """Encode decoded lossy blocks with the minima and scales they were decoded with, into
        host extents `offsets`: the codes they came from, so their error stays that of one
        encoding however often their cold copy is given up (under a short host arena)."""
        c = codec(self.layout, fmt)
        start = time.perf_counter()
        kv = self.gpu.kv[[b.gpu_slot for b in blocks]]
        payload = c.encode(kv, scales=torch.stack([b.scales for b in blocks])).cpu()
        for row, offset in zip(payload, offsets.tolist(), strict=True):
            self.host.view(offset, c.payload_bytes).copy_(row)
        self.stats.moved(Link.GPU_TO_HOST, payload.numel(), time.perf_counter() - start)
        self.stats.requantized += len(blocks)

    def _host_room(self, fmt: str, count: int) -> np.ndarray | None:
        """Host extents for `count` blocks of `fmt`, demoting host blocks to disk as needed."""
        policy, nbytes = self.policies[Tier.HOST], codec(self.layout, fmt).payload_bytes
        while True:
            over = len(policy) + count - policy.capacity_blocks
            if over <= 0 and self.host.can_allocate(nbytes, count):
                return self.host.allocate(nbytes, count)
            if self.table.copies[Tier.HOST] and not self.host.can_allocate(nbytes, count):
                self.give_up_copy(self.table.oldest_copy(Tier.HOST))  # the GPU has the values
                continue
            short = count * self.host_stride(fmt) - (
                self.host.capacity_bytes - self.host.used_bytes
            )
            want = max(over, -(-short // self.host_stride("bf16")), 1)
            victims = policy.evict(min(want, len(policy))) if len(policy) else None
            if not victims:
                return None
            self.demote_host([self.table.records[k] for k in victims])

    def demote_host(self, blocks: list[BlockRecord]) -> None:
        """Host -> disk (or dropped) for blocks already out of the host policy."""
        worth = [b for b in blocks if not self.cheaper_to_recompute(b, Tier.DISK)]
        kept = self._disk_room(self._admit_cold(Tier.DISK, worth))
        kept_ids = {b.key for b in kept}
        self.drop([b for b in blocks if b.key not in kept_ids])
        if not kept:
            return
        slots = self.disk.allocate(len(kept))
        entries = []
        for block, slot in zip(kept, slots, strict=True):
            payload = self.host.view(block.host_offset, codec(self.layout, block.fmt).payload_bytes)
            entries.append((slot, block.key, block.fmt, payload.numpy()))
        start = time.perf_counter()
        try:
            nbytes = self.disk.write_many(entries)
        except OSError:  # the drive refused the write (full, EIO): dropped, as if no room
            self.disk.free(slots)
            self.drop(kept)
            return
        self.stats.moved(Link.HOST_TO_DISK, nbytes, time.perf_counter() - start)
        for block, slot in zip(kept, slots, strict=True):
            self.host.free([block.host_offset])
            block.host_offset, block.disk_slot, block.meta.tier = None, slot, Tier.DISK
            self.policies[Tier.DISK].insert(block.key, block.meta)
        self.stats.demoted["disk"] += len(kept)

    def _disk_room(self, kept: list[BlockRecord]) -> list[BlockRecord]:
        """Free slots for as many of `kept` as fit: kept copies are given up first, then the
        disk policy's victims dropped. Slots of blocks being promoted are still taken."""
        policy = self.policies.get(Tier.DISK)
        if not kept:
            return kept
        while len(kept) > self.disk.num_free and self.table.copies[Tier.DISK]:
            self.give_up_copy(self.table.oldest_copy(Tier.DISK))
        short = max(
            len(policy) + len(kept) - policy.capacity_blocks, len(kept) - self.disk.num_free
        )
        if short > 0 and len(policy):
            victims = policy.evict(min(short, len(policy))) or []
            self.drop([self.table.records[k] for k in victims])
        return kept[: self.disk.num_free]

    def _admit_cold(self, tier: Tier, blocks: list[BlockRecord]) -> list[BlockRecord]:
        """The blocks `tier`'s policy admits (admission control may decline some)."""
        policy = self.policies.get(tier)
        if policy is None:
            return []
        if len(blocks) > policy.capacity_blocks:
            blocks = blocks[: policy.capacity_blocks]
        if not self.cold_admission:  # every block has a place while the tier has room
            return blocks
        return [b for b in blocks if policy.admit(b.key, b.meta)]

    def enforce_keep_limits(self, protected: set[int]) -> None:
        """Demote each modality's GPU blocks beyond its `max_keep_blocks` (policy's choice)."""
        records, hot = self.table.records, self.table.hot
        for modality, keys in hot.items():
            cap = self.config.modality(modality).max_keep_blocks
            if cap is None or len(keys) <= cap:
                continue
            evictable = sum(1 for k in keys if k not in protected and not records[k].pins)
            n = min(len(keys) - cap, evictable)
            if n <= 0:
                continue
            others = set().union(*(s for m, s in hot.items() if m is not modality))
            victims = self.policies[Tier.GPU].evict(n, others | protected)
            if victims:
                self.stats.capped += len(victims)
                self.demote_gpu([records[k] for k in victims])

    # ---- loads ----------------------------------------------------------------------------

    def read_disk(self, blocks: list[BlockRecord]) -> tuple[list[BlockRecord], dict[int, int]]:
        """Read disk blocks into the scratch arena: (lost blocks, key -> scratch offset)."""
        if not blocks:
            return [], {}
        formats = Counter(b.fmt for b in blocks)
        self._ensure_scratch(sum(self.host_stride(f) * n for f, n in formats.items()))
        offsets = {}
        for fmt in {b.fmt for b in blocks}:
            group = [b for b in blocks if b.fmt == fmt]
            nbytes = codec(self.layout, fmt).payload_bytes
            places = self.scratch.allocate(nbytes, len(group)).tolist()
            offsets.update(zip((b.key for b in group), places, strict=True))
        entries = [(b.disk_slot, b.key, b.fmt) for b in blocks]
        start = time.perf_counter()
        try:
            problems = self.disk.read_many(
                entries, self.scratch.buf.numpy(), [offsets[b.key] for b in blocks]
            )
        except OSError:  # the drive failed the read: the staging goes back, the blocks stay
            self.scratch.free(list(offsets.values()))
            raise
        read_s = time.perf_counter() - start
        lost = [b for b, problem in zip(blocks, problems, strict=True) if problem is not None]
        self.stats.moved(Link.DISK_TO_GPU, 0, read_s)
        for block in lost:
            self.scratch.free([offsets.pop(block.key)])
            block.inflight = False
            self.forget(block)
        self.stats.lost += len(lost)
        return lost, offsets

    def _ensure_scratch(self, need: int) -> None:  # (a disk tier comes with a host tier)
        if self.scratch is None or self.scratch.capacity_bytes < need:
            self.scratch = HostTier(need, self.host.page_bytes, pin_memory=self.host.pinned)

    def launch_loads(
        self,
        loads: list[BlockRecord],
        slots: list[int],
        scratch: dict[int, int],
        starts: frozenset[int] = frozenset(),
    ):
        """Launch host/scratch -> GPU copies per (source, format); the blocks take their slots.
        A copy chunk starts at each block whose key is in `starts` (see `prepare_load`).
        Returns [(transfer, link)] and each block's arrival event (`Transfer.block_arrivals`)."""
        groups, pin, place = defaultdict(list), self.table.pin, self.place_on_gpu
        for block, slot in zip(loads, slots, strict=True):
            pin(block)  # in flight: no eviction may pick it
            place(block, slot)
            block.exact = block.fmt in LOSSLESS_FORMATS  # else the GPU holds a decoded copy
            if not block.exact:
                block.scales = self._scales_of(block, scratch.get(block.key))
            groups[(block.key in scratch, block.fmt)].append((block, slot))
        transfers, arrivals = [], {}
        for (from_disk, fmt), group in groups.items():
            source = self.scratch if from_disk else self.host
            offsets = [scratch[b.key] if from_disk else b.host_offset for b, _ in group]
            cuts = [i for i, (b, _) in enumerate(group) if b.key in starts]
            transfer = self.engine.prepare_load(
                source, offsets, self.gpu, [s for _, s in group], fmt, cuts
            )
            transfers.append((transfer, Link.DISK_TO_GPU if from_disk else Link.HOST_TO_GPU))
            events = transfer.block_arrivals()
            arrivals.update((b.key, event) for (b, _), event in zip(group, events, strict=True))
        return transfers, arrivals

    def _scales_of(self, block: BlockRecord, scratch_offset: int | None):
        """A copy of the minima and scales of the lossy payload `block` is loaded from (in the
        host arena, or in the scratch arena when read from disk)."""
        c = codec(self.layout, block.fmt)
        source, offset = (self.host, block.host_offset)
        if scratch_offset is not None:
            source, offset = self.scratch, scratch_offset
        return source.view(offset, c.payload_bytes)[c.codes_bytes :].clone()

    def settle_load(self, block: BlockRecord) -> None:
        """A loaded block keeps the cold copy it came from (or gives it up without
        `keep_copies`): its next clean demotion reuses those bytes."""
        for tier, place in ((Tier.HOST, block.host_offset), (Tier.DISK, block.disk_slot)):
            if place is not None:
                if self.keep_copies:
                    self.table.copies[tier][block.key] = None
                else:
                    self.give_up_copy(block)
        block.inflight = False

    # ---- copies, drops, forgetting --------------------------------------------------------

    def give_up_copy(self, block: BlockRecord) -> None:
        """Free the cold copy a GPU block kept (its GPU values are then the only ones)."""
        if block.host_offset is not None:
            self.host.free([block.host_offset])
            block.host_offset = None
        if block.disk_slot is not None:
            self.disk.free([block.disk_slot])
            block.disk_slot = None
        for copies in self.table.copies.values():
            copies.pop(block.key, None)

    def cheaper_to_recompute(self, block: BlockRecord, tier: Tier) -> bool:
        if self.cost_model is None:
            return False
        return self.cost_model.decide(block.meta, tier, block.fmt).action == "recompute"

    def drop(self, blocks: list[BlockRecord]) -> None:
        """Blocks no cold tier keeps: forgotten (they are recomputed when next needed)."""
        for block in blocks:
            self.forget(block)
        self.stats.dropped += len(blocks)

    def forget(self, block: BlockRecord) -> None:
        for policy in self.policies.values():
            policy.remove(block.key)
        if block.gpu_slot is not None:
            self.leave_gpu(block)
        self.give_up_copy(block)
        self.table.remove(block)
