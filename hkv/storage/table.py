"""`BlockTable`: which blocks the manager holds and what it knows of each. Torch-free.

The table is bookkeeping only: records (`BlockRecord`: tier, slot, offsets, pins), key checks,
pin counts, the GPU blocks of each modality and the GPU blocks that kept a cold copy. It never
touches bytes: freeing a slot or an extent is the mover's (`hkv.storage.mover`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from hkv.blocks import BlockId, Modality, Tier
from hkv.errors import HkvError
from hkv.storage import checks
from hkv.storage.records import BlockRecord, zero_counts

_ABSENT = object()


class BlockTable:
    """The held blocks, in admission order, with their pins and kept cold copies.

    `copies[tier]` lists the GPU blocks that kept their cold copy in `tier` (host or disk),
    oldest first: the first cold bytes given up when that tier is short.
    """

    def __init__(self) -> None:
        self.records: dict[int, BlockRecord] = {}
        self.hot: dict[Modality, set[int]] = {m: set() for m in Modality}
        self.num_pinned = 0
        self.copies: dict[Tier, dict[int, None]] = {Tier.HOST: {}, Tier.DISK: {}}

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.records

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[BlockRecord]:
        return iter(self.records.values())

    def get(self, key: int) -> BlockRecord | None:
        return self.records.get(key)

    def new_key(self, block_id: Any) -> int:
        """`block_id` as a key no held block has; HkvError otherwise."""
        if isinstance(block_id, bool) or not isinstance(block_id, int | np.integer):
            raise HkvError(f"block id: got {block_id!r}; expected an integer (a BlockId)")
        key = int(block_id)
        if key in self.records:
            tier = self.records[key].meta.tier.name.lower()
            raise HkvError(f"admit: block {key} is already held (in the {tier} tier); access() it")
        return key

    def held(self, block_id: Any, action: str) -> BlockRecord:
        block = self.records.get(checks.block_id(block_id, action))
        if block is None:
            raise HkvError(f"{action}: block {block_id!r} is not held by this manager")
        return block

    def add(self, block: BlockRecord) -> None:
        self.records[block.key] = block

    def remove(self, block: BlockRecord) -> None:
        """Forget the record (its slots and extents must be freed already)."""
        if block.pins:
            self.num_pinned -= 1
        self.hot[block.meta.modality].discard(block.key)
        for copies in self.copies.values():
            copies.pop(block.key, None)
        self.records.pop(block.key, None)

    def pin(self, block: BlockRecord) -> None:
        block.pins += 1
        if block.pins == 1:
            self.num_pinned += 1
            block.meta.pinned = True

    def unpin(self, block: BlockRecord) -> None:
        block.pins -= 1
        if block.pins == 0:
            self.num_pinned -= 1
            block.meta.pinned = False

    def placed_on_gpu(self, block: BlockRecord, slot: int) -> None:
        block.gpu_slot, block.meta.tier = slot, Tier.GPU
        self.hot[block.meta.modality].add(block.key)

    def left_gpu(self, block: BlockRecord) -> int:
        """Clear the block's GPU slot; returns it (for the mover to free)."""
        slot, block.gpu_slot = block.gpu_slot, None
        self.hot[block.meta.modality].discard(block.key)
        return slot

    def oldest_copy(self, tier: Tier) -> BlockRecord:
        """The kept copy in `tier` to give up first: of a block whose GPU values are exact
        (encoding them again loses nothing) if there is one, else the oldest."""
        copies = self.copies[tier]
        key = next((k for k in copies if self.records[k].exact), next(iter(copies)))
        return self.records[key]

    def sort_access(self, ids: list[int]) -> tuple[list[BlockRecord], list[BlockRecord], list[int]]:
        """The requested blocks as (on the GPU, in a cold tier, keys not held)."""
        hot, cold, missing = [], [], []
        for key in ids:
            block = self.records.get(key)
            if block is None:
                missing.append(key)
            elif block.inflight:
                raise HkvError(f"access: block {key} is being moved; complete that access first")
            else:
                (hot if block.meta.tier is Tier.GPU else cold).append(block)
        return hot, cold, missing

    def keys_in(self, keys: Iterable[int], tier: Tier) -> list[int]:
        """Those of `keys` held in `tier`, in order."""
        get = self.records.get
        return [k for k in keys if (b := get(k)) is not None and b.meta.tier is tier]

    def gpu_slots_of(self, keys: Iterable[int]) -> list[int] | None:
        """The GPU slots of `keys`, in order, if every one is on the GPU and not in flight."""
        slots = []
        for key in keys:
            block = self.records.get(key)
            if block is None or block.gpu_slot is None or block.inflight:
                return None
            slots.append(block.gpu_slot)
        return slots

    def ready_slots(
        self, keys: Iterable[int], arrivals: dict[int, Any]
    ) -> tuple[list[int], list[Any]] | None:
        """The GPU slots of `keys`, in order, if each is on the GPU, or in flight with an entry
        in `arrivals` (key -> event or None); and the distinct events to wait for."""
        slots, events, get = [], {}, self.records.get
        for key in keys:
            block = get(key)
            if block is None or (slot := block.gpu_slot) is None:
                return None
            if block.inflight:
                if (event := arrivals.get(key, _ABSENT)) is _ABSENT:
                    return None
                if event is not None:
                    events[id(event)] = event
            slots.append(slot)
        return slots, list(events.values())

    def slots_on_gpu(self, keys: Iterable[int]) -> dict[int, int]:
        """key -> GPU slot of those of `keys` held on the GPU."""
        records = self.records
        return {
            k: records[k].gpu_slot for k in keys if k in records and records[k].gpu_slot is not None
        }

    def usage(
        self, raw_bytes: int, stored_bytes: Callable[[BlockRecord], int]
    ) -> dict[str, dict[str, dict[str, int]]]:
        """Per modality and tier: `blocks`, `raw_bytes` (`raw_bytes` each) and `stored_bytes`
        (what `stored_bytes(block)` says its tier spends on it)."""
        fields = ("blocks", "raw_bytes", "stored_bytes")
        out = {m.value: {t.name.lower(): zero_counts(fields) for t in Tier} for m in Modality}
        for block in self.records.values():
            cell = out[block.meta.modality.value][block.meta.tier.name.lower()]
            cell["blocks"] += 1
            cell["raw_bytes"] += raw_bytes
            cell["stored_bytes"] += stored_bytes(block)
        return out

    def block_ids(
        self, tier: Tier | None = None, modality: Modality | str | None = None
    ) -> list[BlockId]:
        """Held blocks, optionally only those in `tier` and of `modality`, in admission order."""
        wanted = None if modality is None else Modality.parse(modality)
        return [
            BlockId(k)
            for k, b in self.records.items()
            if (tier is None or b.meta.tier is tier)
            and (wanted is None or b.meta.modality is wanted)
        ]
