"""Opaque byte keys on one bounded `DiskTier` file: the store behind hkv's vLLM disk tier.

- Keys are any bytes (vLLM's `OffloadKey`: a block hash and a KV-cache group). A slot's header
  holds a 64-bit digest of its key (BLAKE2b), so the index can be rebuilt from the file alone:
  two keys sharing a digest would have to collide in 64 bits (about 1 in 10^7 over a million
  resident blocks, checked again by the payload checksum only if their sizes differ).
- Bound: `bound_bytes` covers the whole file (superblock, flag table, every slot), fixed when the
  file is made; a full store evicts with an hkv policy or refuses, it never grows.
- Restart: `open_store` reopens the file when the sidecar `hkv_tier.json` names the same
  identity (model, dtype, chunk geometry) and geometry; the slots marked valid come back. A
  torn, truncated or corrupt slot reads as lost (`DiskTier.read_many`), never as data.
- One owner: `DiskTier`'s exclusive `flock`; a second store on the directory gets one line
  naming the owner's pid.
- Threads: every method runs on the caller's (vLLM's scheduler) thread except `write` and
  `read`, which touch only the file and may run on I/O threads; a slot is never reused while a
  read of it is pinned or a write to it is pending.

Torch-free and vLLM-free (`hkv.integrations.vllm.tier` adapts it to vLLM).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.outputs import write_atomic
from hkv.policies.base import EvictionPolicy
from hkv.storage.disk import HEADER_BYTES, DiskTier
from hkv.storage.disk_file import DamagedTierFile

FILE_NAME = "hkv_tier.bin"
META_NAME = "hkv_tier.json"
FORMAT = "raw"
_PAGE = 4096
ONE_TOKEN = BlockMeta(tokens=1)
log = logging.getLogger("hkv.disk_store")


def digest(key: bytes) -> int:
    """The 64-bit digest a slot header stores for `key`."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def slots_within(bound_bytes: int, slot_bytes: int) -> int:
    """The most slots of `slot_bytes` whose `DiskTier` file stays within `bound_bytes`."""
    stride = -(-(HEADER_BYTES + slot_bytes) // _PAGE) * _PAGE
    slots = max(0, (bound_bytes - _PAGE) // (stride + 1))
    while slots and _file_bytes(slots, stride) > bound_bytes:
        slots -= 1
    return slots


def _file_bytes(slots: int, stride: int) -> int:
    return _PAGE + -(-slots // _PAGE) * _PAGE + slots * stride


class DiskStore:
    """Resident keys (by digest) in slots of one `DiskTier`, evicted by `policy`."""

    def __init__(
        self,
        tier: DiskTier,
        policy: EvictionPolicy,
        restored: dict[int, int],
        restored_meta: BlockMeta = ONE_TOKEN,
    ):
        self.tier, self.policy = tier, policy
        self.page_cache = True
        self._slot_of = dict(restored)  # digest -> slot, readable
        self._pending: dict[int, int] = {}  # digest -> slot, being written
        self._pins: dict[int, int] = {}  # digest -> reads in flight
        self._keys: dict[int, bytes] = {}  # digest -> key, for blocks stored by this process
        self.evicted: list[bytes] = []  # keys evicted since the caller last took them
        for key in restored:
            policy.insert(key, restored_meta)  # positions are not on disk
        self.counts = dict.fromkeys(("written", "evicted", "refused_full", "lost"), 0)
        self.counts["restored"] = len(restored)

    @property
    def file_bytes(self) -> int:
        return os.fstat(self.tier._fd).st_size

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, key: int) -> bool:
        return key in self._slot_of

    def reserve(self, items: Sequence[tuple[bytes, BlockMeta]]) -> list[tuple[int, int, BlockMeta]]:
        """Slots for the keys of `items` that are neither resident nor being written, in order,
        evicting with the policy where the store is full; `(digest, slot, meta)` each. Keys that
        find no slot (the rest are pinned or pending) are refused from the end: a prefix's head
        is worth more than its tail."""
        new, seen = [], set()
        for key, meta in items:
            d = digest(key)
            if d not in self._slot_of and d not in self._pending and d not in seen:
                seen.add(d)
                new.append((d, key, meta))
        if not new:
            return []
        need = len(new) - self.tier.num_free
        if need > 0 and not self._evict(need):
            kept = max(0, self.tier.num_free)
            self.counts["refused_full"] += len(new) - kept
            new = new[:kept]
        slots = self.tier.allocate(len(new)) if new else []
        reserved = []
        for (d, key, meta), slot in zip(new, slots or (), strict=True):
            self._pending[d] = slot
            self._keys[d] = key
            reserved.append((d, slot, meta))
        return reserved

    def _evict(self, n: int) -> bool:
        victims = self.policy.evict(n, protected=self._pins)
        if victims is None:
            return False
        for d in victims:
            self.tier.free([self._slot_of.pop(d)])
            if (key := self._keys.pop(d, None)) is not None:
                self.evicted.append(key)
        self.counts["evicted"] += len(victims)
        return True

    def write(self, reserved: Sequence[tuple[int, int, BlockMeta]], buffers: Sequence[Any]) -> int:
        """Write `buffers[i]` into the slot of `reserved[i]` (I/O thread); payload bytes."""
        entries = [
            (slot, d, FORMAT, buf) for (d, slot, _), buf in zip(reserved, buffers, strict=True)
        ]
        written = self.tier.write_many(entries)
        if not self.page_cache:
            self.tier.forget_pages([slot for _, slot, _ in reserved])
        return written

    def finish_write(self, reserved: Sequence[tuple[int, int, BlockMeta]], ok: bool) -> None:
        """After `write`: the keys become readable (`ok`) or their slots are freed."""
        for d, slot, meta in reserved:
            del self._pending[d]
            if ok:
                self._slot_of[d] = slot
                self.policy.insert(d, meta)
            else:
                self._keys.pop(d, None)
                self.tier.free([slot])
        if ok:
            self.counts["written"] += len(reserved)

    def pin(self, keys: Sequence[bytes]) -> list[tuple[int, int] | None]:
        """`(digest, slot)` of each resident key, pinned against eviction until `finish_read`;
        None where a key is no longer resident."""
        out: list[tuple[int, int] | None] = []
        for key in keys:
            d = digest(key)
            slot = self._slot_of.get(d)
            if slot is not None:
                self._pins[d] = self._pins.get(d, 0) + 1
                self.policy.touch(d)
            out.append(None if slot is None else (d, slot))
        return out

    def read(
        self, pinned: Sequence[tuple[int, int]], out: np.ndarray, offsets: Sequence[int]
    ) -> list[str | None]:
        """Read pinned slots into `out[offset:]` (I/O thread); per slot None or why it is lost."""
        entries = [(slot, d, FORMAT) for d, slot in pinned]
        return self.tier.read_many(entries, out, offsets)

    def finish_read(
        self, pinned: Sequence[tuple[int, int]], problems: Sequence[str | None]
    ) -> None:
        """Unpin; a lost slot leaves the index (the block is then a miss, never wrong data)."""
        for (d, slot), problem in zip(pinned, problems, strict=True):
            count = self._pins.pop(d) - 1
            if count:
                self._pins[d] = count
            if problem is not None and self._slot_of.get(d) == slot:
                log.warning("hkv disk tier: dropped a block: %s", problem)
                del self._slot_of[d]
                self.policy.remove(d)
                self.tier.free([slot])
                self.counts["lost"] += 1

    def touch(self, keys: Sequence[bytes]) -> None:
        for key in keys:
            self.policy.touch(digest(key))

    def close(self) -> None:
        self.tier.close()


def open_store(
    directory: str | os.PathLike[str],
    bound_bytes: int,
    slot_bytes: int,
    identity: dict[str, Any],
    make_policy: Callable[[int], EvictionPolicy],
    restored_meta: BlockMeta = ONE_TOKEN,
) -> DiskStore:
    """The store in `directory`: reopened when its sidecar names `identity` and the geometry is
    the same, else made anew (what the old file held is unusable then: another model, dtype or
    chunk size, or another bound); `HkvError` if another process owns it."""
    folder = Path(directory)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HkvError(f"hkv disk tier: cannot use directory {str(folder)!r}: {exc}") from None
    slots = slots_within(bound_bytes, slot_bytes)
    if slots < 1:
        raise HkvError(
            f"hkv disk tier: disk_bytes={bound_bytes} holds no chunk of {slot_bytes} bytes; "
            f"give at least {2 * _PAGE + HEADER_BYTES + slot_bytes + _PAGE} bytes"
        )
    path, meta_path = folder / FILE_NAME, folder / META_NAME
    wanted = {"identity": identity, "slots": slots, "slot_bytes": slot_bytes}
    why = _why_not_reopen(path, meta_path, wanted)
    tier = _reopened(path, slots, slot_bytes) if why is None else why
    if isinstance(tier, DiskTier):
        restored = {h.key: s for s, h in tier.scan().items() if _usable(h, slot_bytes)}
        tier.claim(restored.values())  # else new chunks would be written over them
        log.info("hkv disk tier: reopened %s with %d blocks", path, len(restored))
    else:
        if path.exists():
            log.warning("hkv disk tier: starting %s empty: %s", path, tier)
        # (a start stopped before the new sidecar is written leaves the old one: the next start
        # then finds the file's geometry is not the sidecar's, `_reopened`, and makes it anew;
        # the old one is not removed first, as a server that owns the file keeps its sidecar)
        tier, restored = DiskTier(path, slots, slot_bytes), {}
    try:
        write_atomic(meta_path, [json.dumps(wanted, indent=1, sort_keys=True)], "disk tier path")
        return DiskStore(tier, make_policy(slots), restored, restored_meta)
    except BaseException:
        tier.close()
        raise


def _reopened(path: Path, slots: int, slot_bytes: int) -> DiskTier | str:
    """The tier file at `path` reopened, or why it is made anew instead: damaged (cut short, a
    broken superblock) or of another geometry than its sidecar says (`HkvError` where another
    process owns it)."""
    try:
        tier = DiskTier.open(path)
    except DamagedTierFile as exc:
        return str(exc)
    if (tier.capacity_blocks, tier.slot_bytes) != (slots, slot_bytes):
        tier.close()
        return f"its file holds {tier.capacity_blocks} slots of {tier.slot_bytes} bytes"
    return tier


def _usable(header: Any, slot_bytes: int) -> bool:
    return header.fmt == FORMAT and header.nbytes == slot_bytes


def _why_not_reopen(path: Path, meta_path: Path, wanted: dict[str, Any]) -> str | None:
    """None when the file at `path` may be reopened, else why not."""
    if not path.exists():
        return "no tier file yet"
    try:
        found = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        return f"its sidecar {meta_path.name} is unreadable ({type(exc).__name__})"
    if not isinstance(found, dict):
        return f"its sidecar {meta_path.name} is not an object"
    for field in ("identity", "slots", "slot_bytes"):
        if found.get(field) != wanted[field]:
            return f"{field} changed ({found.get(field)!r} -> {wanted[field]!r})"
    return None
