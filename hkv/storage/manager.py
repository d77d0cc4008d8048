"""`HybridKVCacheManager`: hot KV blocks on the GPU, cold ones in host RAM and on disk.

    manager = HybridKVCacheManager(layout, gpu_blocks=1024, host_blocks=4096, disk_blocks=16384,
                                   disk_path="/nvme/hkv.kv", config=config, cost_model=cost)
    manager.admit(7, kv, modality="vision", position=512)    # a new block, written on the GPU
    result = manager.access([3, 5, 7], pin=True)             # promote what is cold, pin all
    ... attention reads manager.gpu_view(b) or manager.gpu.layer(i)[result.gpu_slots[b]] ...
    manager.unpin([3, 5, 7])

Each tier has its own instance of the configured policy (`config.offload_strategy`, or
`policy=`), driven by the protocol in `hkv.policies.base`: when the GPU needs a slot, its policy
names victims, which are demoted to host (quantized to their modality's cold format on the GPU
first); when the host arena is full its policy demotes to disk; when the disk is full its policy
drops blocks, as a disk write the drive fails does (dropped blocks are recomputed when next
needed). A block lives in exactly one tier.

- Pinned blocks (`pin`, `access(..., pin=True)`: a running request uses them) are never evicted;
  a GPU full of pinned blocks refuses `admit` / `access` with `ok=False` and a reason, and
  changes nothing.
- `max_keep_blocks` of a modality caps its blocks on the GPU: extra ones are demoted right after
  the call that brought them (blocks the call itself uses are kept until the next call).
- Load or recompute: with a `cost_model`, a cold block whose load from its tier costs more than
  recomputing it is dropped and reported in `recompute`; a block the model says is not worth a
  disk slot is dropped instead of written. Without one every held block is loaded.
- Lost blocks: a disk slot that fails its checks (torn, corrupted, truncated file) is reported
  in `lost`, never returned; a read the drive fails (EIO) refuses the access (`ok=False`, the
  reason names the error) and leaves every block where it was.
- Overlap: `prepare_access` launches the host -> GPU copies and returns; `complete_access` waits.
  Demotions needed to make room are finished inside `prepare_access`. One access may be pending;
  its blocks (those on the GPU already too) stay pinned by it until it completes. `ready_slots`
  lets a reader use blocks still arriving: the current stream waits on the device for the copy
  chunks that bring them (`starts` cuts a chunk per reader's unit), the CPU not.
- Encoded once: a block loaded from a cold tier keeps the bytes it came from (host extent or
  disk slot; `retain_host_copies`, default on, covers both), and demoting it while its values are
  unchanged reuses them: no copy, and a quantized block is never encoded again from its decoded
  copy, so its error is one encoding's however often it moves. Kept copies are the first cold
  bytes given up when a tier is short (exact blocks' first); `stats.requantized` counts lossy
  encodings of a decoded copy this forced, each with the minima and scales it was decoded with
  (`BlockRecord.scales`): the same codes, so its error stays one encoding's.
- Writes: GPU values change through `admit(kv)` and `write`; a caller writing a block in place
  (`gpu.kv`, its slots) calls `mark_dirty([b])` first, or takes `gpu_view(b, write=True)`: the
  kept copy is given up and the next demotion encodes the new values.
  (`hkv.integrations.transformers` only admits and reads blocks.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch

from hkv.blocks import BlockId, BlockMeta, Modality, Tier
from hkv.errors import HkvError
from hkv.planning.config import HybridKVCacheConfig
from hkv.storage import checks
from hkv.storage.disk import DiskTier
from hkv.storage.layout import BlockLayout
from hkv.storage.mover import Mover, tier_policies
from hkv.storage.quant import codec
from hkv.storage.records import (
    AccessResult,
    Admission,
    BlockRecord,
    Link,
    ManagerStats,
    PendingAccess,
)
from hkv.storage.table import BlockTable
from hkv.storage.tiers import GpuTier, HostTier
from hkv.storage.transfer import TransferEngine

__all__ = ["AccessResult", "Admission", "HybridKVCacheManager", "Link", "ManagerStats"]


class HybridKVCacheManager:
    """Blocks with modality tags over a GPU pool, a host arena and a disk file (module docstring).

    `host_blocks` sizes the host arena in blocks of the layout's own dtype (quantized blocks
    take less, so more fit); `disk_blocks` is the disk tier's slot count (fixed-size slots: a
    quantized block saves disk bandwidth, not a slot). `device` defaults to CUDA when present;
    on CPU the "GPU" pool is host memory and transfers are synchronous. `cold_admission=False`:
    the cold tiers take every block they have room for, never asking their policy (a caller
    that cannot recompute a block: `HkvCache`).

    Components: `table` (`BlockTable`: records, pins, kept copies; torch-free) and `mover`
    (`Mover`: room, demotions, loads, caps) over the tiers `gpu`, `host`, `disk`.
    """

    def __init__(
        self,
        layout: BlockLayout,
        *,
        gpu_blocks: int,
        host_blocks: int = 0,
        disk_blocks: int = 0,
        disk_path: str | None = None,
        config: HybridKVCacheConfig | None = None,
        policy: str | None = None,
        cost_model: Any = None,
        device: str | torch.device | None = None,
        pin_memory: bool | None = None,
        retain_host_copies: bool = True,
        cold_admission: bool = True,
    ):
        self.layout = layout
        self.retain_host_copies = retain_host_copies
        self.config = config if config is not None else HybridKVCacheConfig()
        self.cost_model = cost_model
        self.engine = TransferEngine(device)
        self.device = self.engine.device
        if disk_blocks and (disk_path is None or not host_blocks):
            raise HkvError(
                f"disk_blocks={disk_blocks}: a disk tier needs disk_path (a file to create) and "
                "host_blocks > 0 (blocks reach the disk through host RAM)"
            )
        self.gpu = GpuTier(layout, gpu_blocks, self.device)
        self.host = HostTier.for_layout(layout, host_blocks, pin_memory) if host_blocks else None
        cold = (codec(layout, self.config.modality(m).quantization).payload_bytes for m in Modality)
        slot = max(layout.nbytes, *cold)  # a quantized block can outgrow a raw one (odd blocks)
        self.disk = DiskTier(disk_path, disk_blocks, slot) if disk_blocks else None
        tiers, context = (self.gpu, self.host, self.disk), {"config": self.config}
        name = policy or self.config.offload_strategy
        context["cost_model"] = cost_model
        self.policies = tier_policies(name, tiers, context, self._host_stride)
        self.stats, self.table = ManagerStats(), BlockTable()
        self.mover = Mover(self.table, layout, tiers, self.engine, self.policies,
                           config=self.config, cost_model=cost_model, stats=self.stats,
                           keep_copies=retain_host_copies,
                           cold_admission=cold_admission)  # fmt: skip
        self._pending: PendingAccess | None = None
        self._closed = False
        self._completed: tuple[PendingAccess, AccessResult] | None = None  # the last one

    def _host_stride(self, fmt: str) -> int:
        return self.host.stride_bytes(codec(self.layout, fmt).payload_bytes)

    @property
    def gpu_departures(self) -> int:
        """Times a block left its GPU slot; a map of blocks to slots stays valid while it holds."""
        return self.mover.gpu_departures

    # ---- the public operations ------------------------------------------------------------

    def admit(
        self,
        block_id: int,
        kv: torch.Tensor | None = None,
        *,
        modality: Modality | str = Modality.TEXT,
        position: int = 0,
        tokens: int | None = None,
        pin: bool = False,
    ) -> Admission:
        """Place a new block on the GPU (demoting others if needed); write `kv` into it if given.
        `kv` is `[num_layers, 2, block_tokens, kv_heads, head_dim]`. Refused (`ok=False`,
        nothing changed) when every GPU block is pinned."""
        self._open("admit")
        key = self.table.new_key(block_id)
        tokens = self.layout.block_tokens if tokens is None else tokens
        position, tokens = checks.placement(position, tokens, self.layout.block_tokens)
        meta = BlockMeta(tokens, position, Modality.parse(modality), Tier.GPU)
        checks.kv(kv, self.layout, "admit")  # all checked: nothing changed yet
        self.policies[Tier.GPU].admit(key, meta)  # a hot block is always placed; admit() learns
        slots = self.mover.gpu_slots(1, {key})
        if isinstance(slots, str):
            self.stats.refused += 1
            return Admission(False, BlockId(key), None, slots)
        block = BlockRecord(key, meta, self.config.modality(meta.modality).quantization)
        self.table.add(block)
        self.mover.place_on_gpu(block, slots[0])
        if kv is not None:
            self.gpu.kv[slots[0]].copy_(kv)
        if pin:
            self.table.pin(block)
        self.stats.admitted += 1
        self.mover.enforce_keep_limits({key})
        return Admission(True, BlockId(key), slots[0])

    def write(self, block_id: int, kv: torch.Tensor) -> None:
        """Overwrite a GPU block's values with `kv` (`[num_layers, 2, block_tokens, kv_heads,
        head_dim]`); the next demotion encodes them (`mark_dirty`)."""
        checks.kv(kv, self.layout, "write")
        self.gpu_view(block_id, write=True).copy_(kv)

    def mark_dirty(self, block_ids: Iterable[int]) -> None:
        """Say these GPU blocks were (or are about to be) written in place: the cold copies they
        kept no longer hold their values, so they are given up."""
        for block in [
            self._gpu_block(k, "mark_dirty") for k in checks.block_ids(block_ids, "mark_dirty")
        ]:
            self.mover.give_up_copy(block)
            block.exact, block.scales = True, None  # its next demotion encodes its new values

    def access(self, block_ids: Iterable[int], *, pin: bool = False) -> AccessResult:
        """Bring the held blocks among `block_ids` to the GPU: prepare and complete an access."""
        pending = self.prepare_access(block_ids, pin=pin)
        return pending if isinstance(pending, AccessResult) else self.complete_access(pending)

    def prepare_access(
        self, block_ids: Iterable[int], *, pin: bool = False, starts: Iterable[int] = ()
    ) -> PendingAccess | AccessResult:
        """Launch the promotions of `block_ids`; an `AccessResult` with `ok=False` if no room
        (or the drive failed a read).
        `starts`: keys that each begin a reader's unit (a copy chunk each: `ready_slots`)."""
        self._open("prepare_access")
        if self._pending is not None:
            raise HkvError("prepare_access: an access is pending; complete_access() it first")
        ids = list(dict.fromkeys(checks.block_ids(block_ids, "access")))
        hot, cold, missing = self.table.sort_access(ids)
        mover = self.mover
        recompute = [b for b in cold if mover.cheaper_to_recompute(b, b.meta.tier)]
        recomputed = set(recompute)
        loads = [b for b in cold if b not in recomputed]
        reason = mover.no_room(len(loads), hot)
        if reason is not None:
            self.stats.refused += 1
            return AccessResult(False, {}, {}, reason=reason)
        try:  # before anything changes: a read that fails leaves every block where it was
            lost, scratch = mover.read_disk([b for b in loads if b.meta.tier is Tier.DISK])
        except OSError as exc:
            self.stats.refused += 1
            return AccessResult(False, {}, {}, reason=f"reading the disk failed ({exc}); try again")
        lost_set = set(lost)
        loads = [b for b in loads if b not in lost_set]
        for block in hot:
            self.policies[Tier.GPU].touch(block.key)
        for block in recompute:
            mover.forget(block)
        self.stats.recomputed += len(recompute)
        for block in loads:  # out of their cold policies: no cascade below may pick them
            self.policies[block.meta.tier].remove(block.key)
            block.inflight = True
        hits = {t.name.lower(): n for t, n in Counter(b.meta.tier for b in hot + loads).items()}
        slots = mover.gpu_slots(len(loads), set(ids))
        assert not isinstance(slots, str), slots  # room was checked above
        transfers, arrivals = self.mover.launch_loads(loads, slots, scratch, frozenset(starts))
        for block in hot:  # pinned until complete, as the loads are: no admit may demote one
            self.table.pin(block)
        self.stats.accesses += 1
        self._pending = PendingAccess(
            ids, pin, dict(hits), loads, transfers, list(scratch.values()),
            tuple(BlockId(b.key) for b in recompute), tuple(BlockId(b.key) for b in lost),
            tuple(BlockId(k) for k in missing), arrivals, hot,
        )  # fmt: skip
        return self._pending

    def ready_slots(self, block_ids: Iterable[int], wait: bool = True) -> list[int] | None:
        """The GPU slots of `block_ids` if each is on the GPU or arriving in the pending access
        (else None); with `wait` the current stream waits on the device for the arriving ones,
        the CPU never. Valid while `gpu_departures` is unchanged (module docstring: Overlap)."""
        arrivals = self._pending.arrivals if self._pending is not None else {}
        found = self.table.ready_slots(block_ids, arrivals)
        return None if found is None else self.engine.after(*found) if wait else found[0]

    @property
    def pending(self) -> PendingAccess | None:
        """The access launched by `prepare_access` and not completed yet, if any."""
        return self._pending

    def complete_access(self, pending: PendingAccess) -> AccessResult:
        """Wait for `pending`'s loads; the blocks are on the GPU and usable from any stream.

        A second call for an access that another user of the manager completed first (so that
        its own access could proceed) returns the same result.
        """
        if pending is not self._pending or pending is None:
            if self._completed is not None and self._completed[0] is pending is not None:
                return self._completed[1]
            raise HkvError("complete_access: not the pending access of this manager")
        for transfer, link in pending.transfers:
            done = self.engine.complete_load(transfer)
            self.stats.moved(link, done.nbytes, done.device_s)
        for block in pending.loads:
            self.mover.settle_load(block)
        for block in () if pending.pin else pending.loads + pending.hot:
            self.table.unpin(block)
        if pending.scratch_offsets:
            self.mover.scratch.free(pending.scratch_offsets)
        self._pending = None
        for tier, count in pending.hits.items():
            self.stats.hits[tier] += count
        self.stats.misses += len(pending.missing)
        self.mover.enforce_keep_limits(set(pending.ids))
        slots = {BlockId(k): slot for k, slot in self.table.slots_on_gpu(pending.ids).items()}
        result = AccessResult(
            True, slots, pending.hits, pending.recompute, pending.lost, pending.missing
        )
        self._completed = (pending, result)
        return result

    def touch(self, block_ids: Iterable[int]) -> None:
        """Tell the GPU policy that these GPU blocks were just used (nothing moves).

        For a reader that keeps its own map of blocks to slots (`gpu_slots_of`) and so does not
        `access` blocks that are already on the GPU.
        """
        touch, records = self.policies[Tier.GPU].touch, self.table.records
        for key in block_ids:  # (a key of another type is not held: the error below)
            block = records.get(key)
            if block is None or block.gpu_slot is None:
                raise HkvError(f"touch: block {key!r} is not on the GPU; access() it instead")
            touch(key)

    def evictable(self, block_id: int) -> bool:
        """On the GPU, unpinned and not being loaded: `demote` may take it now."""
        block = self.table.get(block_id)
        return block is not None and block.gpu_slot is not None and not block.pins

    def gpu_slots_of(self, block_ids: Iterable[int]) -> list[int] | None:
        """The GPU slots of `block_ids`, in order, if every one is on the GPU and readable
        (not still being loaded); else None. Valid while `gpu_departures` is unchanged."""
        return self.table.gpu_slots_of(block_ids)

    def pin(self, block_ids: Iterable[int]) -> None:
        """Keep blocks on the GPU until `unpin` (pins nest). They must be on the GPU."""
        blocks = [self.table.held(key, "pin") for key in checks.block_ids(block_ids, "pin")]
        for block in blocks:  # every one checked before any is pinned
            if block.meta.tier is not Tier.GPU:
                raise HkvError(
                    f"pin: block {block.key} is in the {block.meta.tier.name.lower()} tier; "
                    "use access([...], pin=True) to bring it to the GPU and pin it"
                )
        for block in blocks:
            self.table.pin(block)

    def unpin(self, block_ids: Iterable[int]) -> None:
        """Release pins; blocks over their modality's `max_keep_blocks` may then be demoted."""
        blocks = [self.table.held(key, "unpin") for key in checks.block_ids(block_ids, "unpin")]
        checks.unpinnable(blocks, self._pending.own if self._pending else set(), "unpin")
        for block in blocks:
            self.table.unpin(block)
        self.mover.enforce_keep_limits(set())

    def demote(self, block_ids: Iterable[int]) -> None:
        """Move unpinned GPU blocks to the cold tiers now (an idle session's KV, say)."""
        self._open("demote")
        blocks = [self.table.held(k, "demote") for k in checks.block_ids(block_ids, "demote")]
        for block in blocks:
            if block.pins or block.meta.tier is not Tier.GPU:
                raise HkvError(f"demote: block {block.key} is pinned or not on the GPU")
        for block in blocks:
            self.policies[Tier.GPU].remove(block.key)
        self.mover.demote_gpu(blocks)

    def free(self, block_ids: Iterable[int]) -> None:
        """Forget blocks wherever they are (their request ended and they are not to be cached)."""
        blocks = [self.table.held(key, "free") for key in checks.block_ids(block_ids, "free")]
        for block in blocks:  # every one checked before any is forgotten
            if block.pins or block.inflight:
                raise HkvError(f"free: block {block.key} is pinned or being moved; unpin it first")
        for block in {b.key: b for b in blocks}.values():
            self.mover.forget(block)

    def block_ids(
        self, tier: Tier | None = None, modality: Modality | str | None = None
    ) -> list[BlockId]:
        """Held blocks, optionally only those in `tier` and of `modality`, in admission order."""
        return self.table.block_ids(tier, modality)

    def where(self, block_id: int) -> Tier | None:
        block = self.table.get(checks.block_id(block_id, "where"))
        return None if block is None else block.meta.tier

    def gpu_view(self, block_id: int, *, write: bool = False) -> torch.Tensor:
        """The block's `[num_layers, 2, block_tokens, kv_heads, head_dim]` slot on the GPU.

        For reading; `write=True` if the caller writes into it (`mark_dirty`)."""
        block = self._gpu_block(block_id, "gpu_view")
        if write:
            self.mark_dirty([block.key])
        return self.gpu.block(block.gpu_slot)

    def _gpu_block(self, block_id: int, action: str) -> BlockRecord:
        block = self.table.held(block_id, action)
        if block.gpu_slot is None or block.inflight:
            raise HkvError(f"{action}: block {block_id} is not on the GPU; access() it first")
        return block

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.table

    def __len__(self) -> int:
        return len(self.table)

    def usage(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per modality and tier: `blocks`, `raw_bytes` and `stored_bytes` (`Mover.usage`)."""
        return self.mover.usage()

    def close(self) -> None:
        """Close the disk tier's file (and release its lock)."""
        if self.disk is not None:
            self.disk.close()
        self._closed = True

    def _open(self, action: str) -> None:
        if self._closed:
            raise HkvError(f"{action}: this manager is closed (its disk tier's file too)")
