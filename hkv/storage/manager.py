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
drops blocks (they are recomputed when next needed). A block lives in exactly one tier.

- Pinned blocks (`pin`, `access(..., pin=True)`: a running request uses them) are never evicted;
  a GPU full of pinned blocks refuses `admit` / `access` with `ok=False` and a reason, and
  changes nothing.
- `max_keep_blocks` of a modality caps its blocks on the GPU: extra ones are demoted right after
  the call that brought them (blocks the call itself uses are kept until the next call).
- Load or recompute: with a `cost_model`, a cold block whose load from its tier costs more than
  recomputing it is dropped and reported in `recompute`; a block the model says is not worth a
  disk slot is dropped instead of written. Without one every held block is loaded.
- Lost blocks: a disk slot that fails its checks (torn, corrupted, truncated file) is reported
  in `lost`, never returned.
- Overlap: `prepare_access` launches the host -> GPU copies and returns; `complete_access` waits.
  Demotions needed to make room are finished inside `prepare_access`. One access may be pending.
- Write-once blocks: KV of sealed tokens never changes, so a block loaded from host keeps its host
  copy (`retain_host_copies`, on by default) and demoting it again only frees its GPU slot: no
  copy, no wait. Retained copies are the first host bytes given up when the arena is short. A
  caller that rewrites GPU blocks in place must turn this off.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch

from hkv.blocks import BlockId, BlockMeta, Modality, Tier
from hkv.errors import HkvError
from hkv.planning.config import HybridKVCacheConfig
from hkv.policies import make_policy
from hkv.storage.disk import DiskTier
from hkv.storage.layout import BlockLayout
from hkv.storage.mover import Placement
from hkv.storage.quant import codec
from hkv.storage.records import (
    AccessResult,
    Admission,
    BlockRecord,
    Link,
    ManagerStats,
    PendingAccess,
    zero_counts,
)
from hkv.storage.tiers import GpuTier, HostTier
from hkv.storage.transfer import TransferEngine

__all__ = ["AccessResult", "Admission", "HybridKVCacheManager", "Link", "ManagerStats"]


class HybridKVCacheManager(Placement):
    """Blocks with modality tags over a GPU pool, a host arena and a disk file (module docstring).

    `host_blocks` sizes the host arena in blocks of the layout's own dtype (quantized blocks
    take less, so more fit); `disk_blocks` is the disk tier's slot count (fixed-size slots: a
    quantized block saves disk bandwidth, not a slot). `device` defaults to CUDA when present;
    on CPU the "GPU" pool is host memory and transfers are synchronous.
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
    ):
        self.layout = layout
        self.retain_host_copies = retain_host_copies
        self._retained: dict[int, None] = {}  # GPU blocks whose host copy is kept, oldest first
        self.config = config if config is not None else HybridKVCacheConfig()
        self.cost_model = cost_model
        self.engine = TransferEngine(device)
        self.device = self.engine.device
        self.gpu = GpuTier(layout, gpu_blocks, self.device)
        self.host = HostTier.for_layout(layout, host_blocks, pin_memory) if host_blocks else None
        if disk_blocks and (disk_path is None or not host_blocks):
            raise HkvError(
                f"disk_blocks={disk_blocks}: a disk tier needs disk_path (a file to create) and "
                "host_blocks > 0 (blocks reach the disk through host RAM)"
            )
        self.disk = DiskTier(disk_path, disk_blocks, layout.nbytes) if disk_blocks else None
        self._scratch: HostTier | None = None
        name = policy or self.config.offload_strategy
        if name == "belady":
            raise HkvError("policy: belady needs the future reference stream; use it in simulate")
        context = {"config": self.config, "cost_model": cost_model}
        self.policies = {Tier.GPU: make_policy(name, gpu_blocks, **context)}
        if self.host is not None:
            smallest = min(self._stride(fmt) for fmt in self._formats())
            self.policies[Tier.HOST] = make_policy(
                name, self.host.capacity_bytes // smallest, **context
            )
        if self.disk is not None:
            self.policies[Tier.DISK] = make_policy(name, disk_blocks, **context)
        self._blocks: dict[int, BlockRecord] = {}
        self._hot: dict[Modality, set[int]] = {m: set() for m in Modality}
        self._num_pinned = 0
        self._pending: PendingAccess | None = None
        self._completed: tuple[PendingAccess, AccessResult] | None = None  # the last one
        self.gpu_departures = 0
        """Times a block left its GPU slot; a map of blocks to slots stays valid while it holds."""
        self.stats = ManagerStats()

    def _formats(self) -> set[str]:
        return {self.config.modality(m).quantization for m in Modality}

    def _stride(self, fmt: str) -> int:
        return self.host.stride_bytes(codec(self.layout, fmt).payload_bytes)

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
        nothing changed) when every GPU block is pinned.
        """
        key = self._new_key(block_id)
        meta = BlockMeta(
            tokens=self.layout.block_tokens if tokens is None else tokens,
            position=position,
            modality=Modality.parse(modality),
            tier=Tier.GPU,
        )
        if kv is not None and tuple(kv.shape) != self.layout.shape:
            raise HkvError(f"admit: kv shape {tuple(kv.shape)}; expected {self.layout.shape}")
        gpu_policy = self.policies[Tier.GPU]
        gpu_policy.admit(key, meta)  # a hot block is always placed; admit() lets it learn
        slots = self._gpu_slots(1, {key})
        if isinstance(slots, str):
            self.stats.refused += 1
            return Admission(False, BlockId(key), None, slots)
        block = BlockRecord(key, meta, self.config.modality(meta.modality).quantization)
        self._blocks[key] = block
        self._to_gpu(block, slots[0])
        if kv is not None:
            self.gpu.kv[slots[0]].copy_(kv)
        if pin:
            self._pin(block)
        self.stats.admitted += 1
        self._enforce_keep_limits({key})
        return Admission(True, BlockId(key), slots[0])

    def access(self, block_ids: Iterable[int], *, pin: bool = False) -> AccessResult:
        """Bring the held blocks among `block_ids` to the GPU: prepare and complete an access."""
        pending = self.prepare_access(block_ids, pin=pin)
        return pending if isinstance(pending, AccessResult) else self.complete_access(pending)

    def prepare_access(
        self, block_ids: Iterable[int], *, pin: bool = False
    ) -> PendingAccess | AccessResult:
        """Launch the promotions of `block_ids`; an `AccessResult` with `ok=False` if no room."""
        if self._pending is not None:
            raise HkvError("prepare_access: an access is pending; complete_access() it first")
        ids = list(dict.fromkeys(int(b) for b in block_ids))
        hot, cold, missing = [], [], []
        for key in ids:
            block = self._blocks.get(key)
            if block is not None and block.inflight:
                raise HkvError(f"access: block {key} is being moved; complete that access first")
            (missing if block is None else hot if block.meta.tier is Tier.GPU else cold).append(
                key if block is None else block
            )
        recompute = [b for b in cold if self._cheaper_to_recompute(b, b.meta.tier)]
        loads = [b for b in cold if b not in set(recompute)]
        reason = self._no_room(len(loads), hot)
        if reason is not None:
            self.stats.refused += 1
            return AccessResult(False, {}, {}, reason=reason)
        for block in hot:
            self.policies[Tier.GPU].touch(block.key)
        for block in recompute:
            self._forget(block)
        self.stats.recomputed += len(recompute)
        for block in loads:  # out of their cold policies: no cascade below may pick them
            self.policies[block.meta.tier].remove(block.key)
            block.inflight = True
        lost, scratch = self._read_disk([b for b in loads if b.meta.tier is Tier.DISK])
        loads = [b for b in loads if b not in set(lost)]
        hits = Counter(b.meta.tier.name.lower() for b in hot + loads)
        slots = self._gpu_slots(len(loads), set(ids))
        assert not isinstance(slots, str), slots  # room was checked above
        transfers = self._launch_loads(loads, slots, scratch)
        for block in hot if pin else ():
            self._pin(block)
        pending = PendingAccess(
            ids,
            pin,
            dict(hits),
            loads,
            transfers,
            list(scratch.values()),
            tuple(BlockId(b.key) for b in recompute),
            tuple(BlockId(b.key) for b in lost),
            tuple(BlockId(k) for k in missing),
        )
        self._pending = pending
        return pending

    @property
    def pending(self) -> PendingAccess | None:
        """The access launched by `prepare_access` and not completed yet, if any."""
        return self._pending

    def complete_access(self, pending: PendingAccess) -> AccessResult:
        """Wait for `pending`'s loads; the blocks are on the GPU and usable from any stream.

        A second call for an access that another user of the manager completed first (so that
        its own access could proceed) returns the same result.
        """
        if pending is not self._pending:
            if self._completed is not None and self._completed[0] is pending:
                return self._completed[1]
            raise HkvError("complete_access: not the pending access of this manager")
        for transfer, link in pending.transfers:
            done = self.engine.complete_load(transfer)
            self.stats.moved(link, done.nbytes, done.device_s)
        for block in pending.loads:
            if block.host_offset is not None:
                if self.retain_host_copies:
                    self._retained[block.key] = None
                else:
                    self.host.free([block.host_offset])
                    block.host_offset = None
            if block.disk_slot is not None:
                self.disk.free([block.disk_slot])
                block.disk_slot = None
            block.inflight = False
            if not pending.pin:
                self._unpin(block)
        if pending.scratch_offsets:
            self._scratch.free(pending.scratch_offsets)
        self._pending = None
        for tier, count in pending.hits.items():
            self.stats.hits[tier] += count
        self.stats.misses += len(pending.missing)
        self._enforce_keep_limits(set(pending.ids))
        slots = {
            BlockId(k): self._blocks[k].gpu_slot
            for k in pending.ids
            if k in self._blocks and self._blocks[k].gpu_slot is not None
        }
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
        touch, blocks = self.policies[Tier.GPU].touch, self._blocks
        for key in block_ids:
            block = blocks.get(key)
            if block is None or block.gpu_slot is None:
                raise HkvError(f"touch: block {key!r} is not on the GPU; access() it instead")
            touch(key)

    def evictable(self, block_id: int) -> bool:
        """On the GPU, unpinned and not being loaded: `demote` may take it now."""
        block = self._blocks.get(block_id)
        return block is not None and block.gpu_slot is not None and not block.pins

    def gpu_slots_of(self, block_ids: Iterable[int]) -> list[int] | None:
        """The GPU slots of `block_ids`, in order, if every one is on the GPU and readable
        (not still being loaded); else None. Valid while `gpu_departures` is unchanged."""
        blocks, slots = self._blocks, []
        for key in block_ids:
            block = blocks.get(key)
            if block is None or block.gpu_slot is None or block.inflight:
                return None
            slots.append(block.gpu_slot)
        return slots

    def pin(self, block_ids: Iterable[int]) -> None:
        """Keep blocks on the GPU until `unpin` (pins nest). They must be on the GPU."""
        for key in block_ids:
            block = self._held(key, "pin")
            if block.meta.tier is not Tier.GPU:
                raise HkvError(
                    f"pin: block {key} is in the {block.meta.tier.name.lower()} tier; "
                    "use access([...], pin=True) to bring it to the GPU and pin it"
                )
            self._pin(block)

    def unpin(self, block_ids: Iterable[int]) -> None:
        """Release pins; blocks over their modality's `max_keep_blocks` may then be demoted."""
        for key in block_ids:
            block = self._held(key, "unpin")
            if block.pins == 0:
                raise HkvError(f"unpin: block {key} is not pinned")
            self._unpin(block)
        self._enforce_keep_limits(set())

    def demote(self, block_ids: Iterable[int]) -> None:
        """Move unpinned GPU blocks to the cold tiers now (an idle session's KV, say)."""
        blocks = [self._held(k, "demote") for k in block_ids]
        for block in blocks:
            if block.pins or block.meta.tier is not Tier.GPU:
                raise HkvError(f"demote: block {block.key} is pinned or not on the GPU")
        for block in blocks:
            self.policies[Tier.GPU].remove(block.key)
        self._demote_gpu(blocks)

    def free(self, block_ids: Iterable[int]) -> None:
        """Forget blocks wherever they are (their request ended and they are not to be cached)."""
        for key in block_ids:
            block = self._held(key, "free")
            if block.pins or block.inflight:
                raise HkvError(f"free: block {key} is pinned or being moved; unpin it first")
            self._forget(block)

    def block_ids(
        self, tier: Tier | None = None, modality: Modality | str | None = None
    ) -> list[BlockId]:
        """Held blocks, optionally only those in `tier` and of `modality`, in admission order."""
        wanted = None if modality is None else Modality.parse(modality)
        return [
            BlockId(k)
            for k, b in self._blocks.items()
            if (tier is None or b.meta.tier is tier)
            and (wanted is None or b.meta.modality is wanted)
        ]

    def where(self, block_id: int) -> Tier | None:
        block = self._blocks.get(int(block_id))
        return None if block is None else block.meta.tier

    def gpu_view(self, block_id: int) -> torch.Tensor:
        """The block's `[num_layers, 2, block_tokens, kv_heads, head_dim]` slot on the GPU."""
        block = self._held(block_id, "gpu_view")
        if block.gpu_slot is None or block.inflight:
            raise HkvError(f"gpu_view: block {block_id} is not on the GPU; access() it first")
        return self.gpu.block(block.gpu_slot)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def usage(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per modality and tier: `blocks`, `raw_bytes` (in the layout's dtype) and
        `stored_bytes` (what the tier spends: a GPU slot, host pages, a disk slot)."""
        fields = ("blocks", "raw_bytes", "stored_bytes")
        out = {m.value: {t.name.lower(): zero_counts(fields) for t in Tier} for m in Modality}
        for block in self._blocks.values():
            tier = block.meta.tier
            cell = out[block.meta.modality.value][tier.name.lower()]
            cell["blocks"] += 1
            cell["raw_bytes"] += self.layout.nbytes
            cell["stored_bytes"] += {
                Tier.GPU: self.layout.nbytes,
                Tier.HOST: self._stride(block.fmt) if self.host is not None else 0,
                Tier.DISK: self.disk.stride if self.disk is not None else 0,
            }[tier]
        return out

    def close(self) -> None:
        if self.disk is not None:
            self.disk.close()
