"""What a KV block is, independent of where its bytes live.

A block is `block_tokens` consecutive tokens of one sequence's KV, across all layers of one layer
group. Policies, the simulator, the block manager and the vLLM adapter all describe blocks with
`BlockMeta`; the bytes themselves live in a tier (`hkv.storage.tiers`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NewType

BlockId = NewType("BlockId", int)
"""Opaque identifier of a block: a prefix hash in traces, a slot-independent id in the manager."""


class Modality(enum.StrEnum):
    """What produced a block's tokens; non-text blocks also cost an encoder pass to recompute."""

    TEXT = "text"
    VISION = "vision"
    AUDIO = "audio"

    @classmethod
    def parse(cls, value: str | Modality, *, field: str = "modality") -> Modality:
        try:
            return cls(value)
        except ValueError:
            from hkv.errors import HkvError

            valid = ", ".join(m.value for m in cls)
            raise HkvError(f"{field}: unknown modality {value!r}; use one of {valid}") from None


class Tier(enum.IntEnum):
    """Where a block's bytes live, hottest first (the order is the demotion order)."""

    GPU = 0
    HOST = 1
    DISK = 2

    @classmethod
    def parse(cls, value: int | str | Tier, *, field: str = "tier") -> Tier:
        """`value` as a Tier: a member, its number (0-2) or its name ("host", any case)."""
        if type(value) is cls:
            return value
        member = cls.__members__.get(value.upper()) if isinstance(value, str) else None
        if member is None and isinstance(value, int) and not isinstance(value, bool):
            member = cls._value2member_map_.get(value)
        if member is None:
            from hkv.errors import HkvError

            valid = ", ".join(f"{t.name.lower()} ({t.value})" for t in cls)
            raise HkvError(f"{field}: unknown tier {value!r}; use one of {valid}")
        return member


@dataclass(slots=True)
class BlockMeta:
    """Per-block facts a policy may use to rank blocks.

    `position` is the index of the block's first token in its sequence: recomputing a block late in
    a long prompt costs more attention FLOPs than one at the start.
    """

    tokens: int
    position: int = 0
    modality: Modality = Modality.TEXT
    tier: Tier = Tier.HOST
    pinned: bool = False
