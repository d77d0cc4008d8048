"""`WorkloadSpec`: the knobs of hkv's workload generator (`hkv.sim.workload`), each validated
with its range, and the named presets."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from hkv.errors import HkvError, shown
from hkv.sim.trace import DEFAULT_BLOCK_TOKENS


@dataclass(frozen=True)
class WorkloadSpec:
    """Knobs of the generator; every field is validated (range in the field's comment)."""

    seed: int = 0  # >= 0
    num_sessions: int = 1000  # >= 1
    block_tokens: int = DEFAULT_BLOCK_TOKENS  # >= 1
    session_rate_per_s: float = 2.0  # > 0, outside bursts
    burst_factor: float = 4.0  # >= 1, rate multiplier during a burst
    burst_on_s: float = 20.0  # > 0, mean burst length
    burst_off_s: float = 120.0  # > 0, mean time between bursts
    rag_fraction: float = 0.25  # [0, 1] of sessions
    long_doc_fraction: float = 0.15  # [0, 1] of sessions
    mean_turns: float = 3.0  # >= 1, chat turns per session (geometric)
    rag_mean_turns: float = 1.5  # >= 1
    think_time_s: float = 60.0  # > 0, mean gap between turns (exponential)
    num_system_prompts: int = 30  # >= 1
    system_tokens_median: float = 1500.0  # > 0
    num_documents: int = 300  # >= 1
    document_tokens_median: float = 4000.0  # > 0
    long_doc_tokens_median: float = 16000.0  # > 0
    user_tokens_median: float = 250.0  # > 0
    output_tokens_median: float = 300.0  # > 0
    length_sigma: float = 0.8  # > 0, lognormal sigma of every text length
    zipf_exponent: float = 1.1  # > 0, popularity of system prompts and documents
    max_input_tokens: int = 131072  # >= block_tokens, sessions stop growing here
    image_turn_fraction: float = 0.0  # [0, 1] of user turns carrying images
    mean_images_per_turn: float = 1.2  # >= 1
    image_tokens_median: float = 570.0  # > 0
    image_tokens_sigma: float = 1.0  # > 0
    image_tokens_min: int = 10  # >= 1
    image_tokens_max: int = 4600  # >= image_tokens_min
    audio_turn_fraction: float = 0.0  # [0, 1] of user turns carrying audio
    audio_tokens_median: float = 400.0  # > 0

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_field(f.name, getattr(self, f.name), f.type)
        if self.image_tokens_max < self.image_tokens_min:
            raise HkvError(
                f"workload.image_tokens_max: got {self.image_tokens_max}; expected >= "
                f"image_tokens_min ({self.image_tokens_min})"
            )
        if self.max_input_tokens < self.block_tokens:
            raise HkvError(
                f"workload.max_input_tokens: got {self.max_input_tokens}; expected >= "
                f"block_tokens ({self.block_tokens})"
            )
        if self.rag_fraction + self.long_doc_fraction > 1:
            raise HkvError(
                f"workload.rag_fraction + long_doc_fraction: got "
                f"{self.rag_fraction + self.long_doc_fraction}; expected <= 1"
            )
        self._check_burst_switches()

    def _check_burst_switches(self) -> None:
        """Arrivals are drawn period by period; refuse a spec whose sessions span more on/off
        periods than `MAX_BURST_SWITCHES` (bursts of a microsecond would take hours)."""
        on, off = self.burst_on_s, self.burst_off_s
        mean_rate = self.session_rate_per_s * (off + self.burst_factor * on) / (on + off)
        switches = 2 * self.num_sessions / mean_rate / (on + off)
        if switches > MAX_BURST_SWITCHES:
            raise HkvError(
                f"workload.burst_on_s + burst_off_s: got {on:g} + {off:g} s; {self.num_sessions:,} "
                f"sessions at {self.session_rate_per_s:g}/s would span ~{switches:.2g} bursts and "
                f"pauses, over the cap of {MAX_BURST_SWITCHES:,}; make them longer or the rate "
                "higher"
            )

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> WorkloadSpec:
        """A named starting point (`PRESETS`), with `overrides` applied on top."""
        if name not in PRESETS:
            raise HkvError(f"preset: unknown preset {name!r}; valid: {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    @classmethod
    def multimodal(cls, **overrides: Any) -> WorkloadSpec:
        """A vision-heavy chat workload with some audio (used by the benchmarks)."""
        return cls.preset("multimodal", **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, dict[str, Any]] = {
    "chat": {},
    # Question answering over long shared documents: few, long, popular prefixes.
    "doc_qa": {
        "rag_fraction": 0.6,
        "long_doc_fraction": 0.1,
        "num_documents": 400,
        "document_tokens_median": 10000.0,
        "rag_mean_turns": 2.0,
        "output_tokens_median": 150.0,
    },
    "multimodal": {"image_turn_fraction": 0.4, "audio_turn_fraction": 0.1, "rag_fraction": 0.15},
}
"""Named workload shapes; `WorkloadSpec.preset(name, **overrides)`."""

_FRACTIONS = {
    "rag_fraction",
    "long_doc_fraction",
    "image_turn_fraction",
    "audio_turn_fraction",
}
_AT_LEAST_ONE = {"mean_turns", "rag_mean_turns", "burst_factor", "mean_images_per_turn"}


_TOKENS_MAX = 1 << 20
MAX_BURST_SWITCHES = 100_000
"""The most burst/pause periods the arrivals may span (a few hundred ms to draw)."""
_LIMITS: dict[str, float] = {
    # counts that size the output: 100,000 sessions is ~3 M block references, ~40 s to write
    "num_sessions": 100_000,
    "num_documents": 100_000,
    "num_system_prompts": 100_000,
    "seed": 2**63 - 1,
    "block_tokens": 1 << 16,
    "max_input_tokens": 1 << 22,
    "image_tokens_min": _TOKENS_MAX,
    "image_tokens_max": _TOKENS_MAX,
    "mean_turns": 1000,
    "rag_mean_turns": 1000,
    "mean_images_per_turn": 1000,
    "burst_factor": 1000,
    "length_sigma": 10,
    "image_tokens_sigma": 10,
    "zipf_exponent": 100,
}
"""Upper bounds, so that no setting asks for more than a machine can generate; token medians
are at most 2**20 and rates and times lie in [1e-6, 1e9]."""


def _limits(name: str) -> tuple[float, float]:
    """(low, high) beyond the checks below (> 0, >= 1, fractions); ints start at 1 (seed: 0)."""
    if name in _LIMITS:
        return (-math.inf, _LIMITS[name])
    if name.endswith("_tokens_median"):
        return (-math.inf, _TOKENS_MAX)
    if name.endswith(("_per_s", "_s")):
        return (1e-6, 1e9)
    return (-math.inf, math.inf)


def _check_field(name: str, value: Any, kind: Any, prefix: str = "workload") -> None:
    """`HkvError` (naming `prefix.name`) unless `value` is in field `name`'s range."""
    where = f"{prefix}.{name}"
    low, high = _limits(name)
    if kind in ("int", int):
        low = 0 if name == "seed" else 1
        ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok or not low <= value <= high:
            raise HkvError(f"{where}: got {shown(value)}; expected an integer in [{low}, {high:,}]")
        return
    if name not in _FRACTIONS and isinstance(value, int | float) and not low <= value <= high:
        raise HkvError(f"{where}: got {shown(value)}; expected a number in [{low:g}, {high:g}]")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise HkvError(f"{where}: got {shown(value)}; expected a finite number")
    if name in _FRACTIONS and not 0 <= value <= 1:
        raise HkvError(f"{where}: got {shown(value)}; expected a number in [0, 1]")
    if name in _AT_LEAST_ONE and value < 1:
        raise HkvError(f"{where}: got {shown(value)}; expected a number >= 1")
    if name not in _FRACTIONS and value <= 0:
        raise HkvError(f"{where}: got {shown(value)}; expected a number > 0")
