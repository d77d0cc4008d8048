"""What a KV block costs to move and to recompute, and which of the two to do.

- Moving: each tier has a link to the GPU with a bandwidth per direction and a fixed latency
  per transfer (`HardwareProfile`); `load_s = latency + bytes / bandwidth`. A block on the GPU
  costs nothing to use. Disk loads go disk -> host staging -> GPU, pipelined, so they run at the
  slowest of the three links.
- Recomputing: the prefill FLOPs of the block's tokens at its position, over an effective FLOP
  rate. Per token: `2 x active parameters` for the matmuls (the LM head excluded: prefill only
  needs logits for the last token) plus attention, `4 x heads x head_dim` per layer per token of
  context (QK^T and AV, 2 FLOPs a multiply-add), so a block late in a long prompt costs more.
  Vision and audio blocks add their encoder's FLOPs per token.
- Deciding: a resident block is loaded when that is cheaper than recomputing it, else recomputed
  (docs/design.md §4: from host RAM ~10x cheaper; from a 1 GB/s disk it can cost more).

`HardwareProfile.default()` is the H200 SXM host measured in docs/design.md §3; `hkv.calibrate`
measures this machine into a JSON profile (`hkv calibrate`) that `HardwareProfile.load` reads
back.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from hkv.blocks import BlockMeta, Modality, Tier
from hkv.errors import HkvError, is_number
from hkv.formats import cold_bits_per_value
from hkv.inputs import read_json
from hkv.models.model_spec import LayerKind, ModelSpec
from hkv.outputs import write_atomic

LINKS = ("gpu", "host_pinned", "host_pageable", "disk")
"""Link names of a profile: where a block's bytes sit, seen from the GPU."""


@dataclass(frozen=True)
class LinkSpec:
    """One tier's path to the GPU: bandwidth each way (GB/s, 1e9 bytes) and per-transfer latency."""

    to_gpu_gbps: float
    from_gpu_gbps: float
    latency_s: float

    def __post_init__(self) -> None:
        for name in ("to_gpu_gbps", "from_gpu_gbps"):
            value = getattr(self, name)
            if not is_number(value) or not value > 0 or not math.isfinite(value):
                raise HkvError(f"profile link {name}: got {value!r}; expected a number > 0")
        if not is_number(self.latency_s) or not 0 <= self.latency_s < math.inf:
            raise HkvError(f"profile link latency_s: got {self.latency_s!r}; expected >= 0")


@dataclass(frozen=True)
class HardwareProfile:
    """Bandwidths, latencies and compute rate of one machine.

    `measured` lists the fields measured on `machine`; every other value is the default H200's
    (docs/design.md §3) or an assumption named in `notes`.
    """

    name: str
    links: dict[str, LinkSpec]
    prefill_tflops: float
    host_memcpy_gbps: float
    gpu_name: str | None = None
    measured: tuple[str, ...] = ()
    machine: dict[str, Any] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        missing = [name for name in LINKS if name not in self.links]
        if missing:
            raise HkvError(f"profile {self.name!r}: links {missing} missing; need all of {LINKS}")
        for name in ("prefill_tflops", "host_memcpy_gbps"):
            value = getattr(self, name)
            if not is_number(value) or not 1e-6 <= value < math.inf:  # 1e-320: an
                raise HkvError(  # infinite second for every token, and Infinity in --json
                    f"profile {name}: got {value!r}; expected a finite number >= 1e-6"
                )

    @classmethod
    def default(cls) -> HardwareProfile:
        """One H200 SXM host as measured in docs/design.md §3 (latencies and FLOP rate assumed)."""
        return cls(
            name="h200-default",
            links={
                # HBM copy measured 4,136 GB/s counting read + write: half of it moves a block.
                "gpu": LinkSpec(2068.0, 2068.0, 5e-6),
                "host_pinned": LinkSpec(51.9, 53.5, 10e-6),
                "host_pageable": LinkSpec(5.3, 10.7, 20e-6),
                "disk": LinkSpec(1.1, 0.48, 100e-6),
            },
            prefill_tflops=400.0,
            host_memcpy_gbps=50.0,
            gpu_name="NVIDIA H200",
            measured=("links.*.to_gpu_gbps", "links.*.from_gpu_gbps"),
            machine={"source": "docs/design.md §3, one H200 SXM host"},
            notes=(
                "latencies assumed (launch ~5-20 us, NVMe ~100 us); prefill_tflops assumed: ~40% "
                "of the H200's 989 dense bf16 TFLOP/s, which makes a 512-token MiniMax-M2.5 block "
                "~10x dearer to recompute than to load from pinned host RAM, as docs/design.md §4 "
                "says; host_memcpy_gbps assumed"
            ),
        )

    def with_disk(
        self,
        to_gpu_gbps: float,
        from_gpu_gbps: float | None = None,
        latency_s: float | None = None,
        name: str | None = None,
    ) -> HardwareProfile:
        """This profile with its disk link's bandwidth (and latency, name) replaced: a slower
        drive, or what loads were measured to take."""
        disk = self.links["disk"]
        link = LinkSpec(
            to_gpu_gbps,
            disk.from_gpu_gbps if from_gpu_gbps is None else from_gpu_gbps,
            disk.latency_s if latency_s is None else latency_s,
        )
        return replace(self, name=name or self.name, links={**self.links, "disk": link})

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["measured"] = list(self.measured)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "profile") -> HardwareProfile:
        try:
            links = {name: LinkSpec(**spec) for name, spec in data["links"].items()}
            return cls(
                name=str(data.get("name", source)),
                links=links,
                prefill_tflops=data["prefill_tflops"],
                host_memcpy_gbps=data.get("host_memcpy_gbps", 50.0),
                gpu_name=data.get("gpu_name"),
                measured=tuple(data.get("measured", ())),
                machine=dict(data.get("machine", {})),
                notes=str(data.get("notes", "")),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise HkvError(
                f"profile {source}: not a calibration profile ({type(exc).__name__}: {exc}); "
                "write one with `hkv calibrate --out FILE`"
            ) from None

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None) -> HardwareProfile:
        """Read a profile written by `hkv calibrate`; None gives the default H200 profile."""
        if path is None:
            return cls.default()
        return cls.from_dict(read_json(path, "profile"), source=str(path))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the profile as JSON to `path`, atomically (`hkv.outputs.write_atomic`)."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        return write_atomic(path, [text], "out", example="hkv-profile.json")


@dataclass(frozen=True)
class Decision:
    """Load-or-recompute for one block in one tier; `saved_s` is what a hit there saves."""

    action: str  # "load" or "recompute"
    load_s: float
    recompute_s: float

    @property
    def saved_s(self) -> float:
        return max(0.0, self.recompute_s - self.load_s)


@dataclass(frozen=True)
class CostModel:
    """Seconds to load or recompute a block of `spec`'s KV on `profile`'s machine.

    `host_memory` picks the host link (pinned or pageable). Encoder costs are FLOPs per token of
    the modality; the defaults assume a ~675M-parameter ViT with 2x2 patch merging (Qwen2.5-VL:
    2 x 675e6 x 4 per token) and a Whisper-large-sized audio encoder at two frames per token.
    """

    spec: ModelSpec
    profile: HardwareProfile = field(default_factory=HardwareProfile.default)
    kv_cache_dtype: str = "auto"
    host_memory: str = "pinned"
    vision_encoder_flops_per_token: float = 5.4e9
    audio_encoder_flops_per_token: float = 2.5e9

    def __post_init__(self) -> None:
        if self.host_memory not in ("pinned", "pageable"):
            raise HkvError(f"host_memory: got {self.host_memory!r}; expected pinned or pageable")
        for name in ("vision_encoder_flops_per_token", "audio_encoder_flops_per_token"):
            value = getattr(self, name)
            if not is_number(value) or not math.isfinite(value) or value < 0:
                raise HkvError(f"{name}: got {value!r}; expected a finite number >= 0 (FLOPs)")
        spec = self.spec
        lm_head = spec.vocab_size * spec.hidden_size
        set_ = object.__setattr__
        set_(self, "_linear_flops_per_token", 2.0 * max(spec.active_params - lm_head, 0))
        set_(self, "_attn_groups", _attention_groups(spec))
        set_(self, "_kv_bytes_per_token", spec.kv_bytes_per_token(self.kv_cache_dtype))
        set_(self, "_kv_bits", 8.0 * spec.kv_dtype_bytes(self.kv_cache_dtype))
        set_(self, "_flops_per_s", self.profile.prefill_tflops * 1e12)

    @classmethod
    def default(cls, model: str = "minimax-m2.5", **kwargs: Any) -> CostModel:
        """MiniMax-M2.5 (or `model`: a shipped name or config.json) on the default H200."""
        return cls(ModelSpec.load(model), **kwargs)

    def block_bytes(self, meta: BlockMeta, cold_format: str = "auto") -> int:
        """Bytes of `meta`'s KV in `cold_format` (`auto`: the KV cache dtype)."""
        raw = meta.tokens * self._kv_bytes_per_token
        bits = self.bits_per_value(meta, cold_format)
        return raw if bits is None else int(raw * bits / self._kv_bits)

    def bits_per_value(self, meta: BlockMeta, cold_format: str = "auto") -> float | None:
        """Stored bits per KV value of `meta`'s block in `cold_format` (None: the KV dtype)."""
        return cold_bits_per_value(cold_format, meta.tokens, self.spec.head_dim)

    def recompute_flops(self, meta: BlockMeta) -> float:
        """Prefill FLOPs of `meta.tokens` tokens starting at `meta.position`, encoder included."""
        tokens, start = meta.tokens, meta.position
        flops = self._linear_flops_per_token * tokens
        for flops_per_ctx, window in self._attn_groups:
            flops += flops_per_ctx * _context_sum(start, tokens, window)
        modality = meta.modality
        if modality is not Modality.TEXT:  # ("vision" as a plain string too: the same price)
            modality = modality if type(modality) is Modality else Modality.parse(modality)
            if modality is Modality.VISION:
                flops += self.vision_encoder_flops_per_token * tokens
            elif modality is Modality.AUDIO:
                flops += self.audio_encoder_flops_per_token * tokens
        return flops

    def recompute_s(self, meta: BlockMeta) -> float:
        return self.recompute_flops(meta) / self._flops_per_s

    def link(self, tier: Tier) -> LinkSpec:
        tier = tier if type(tier) is Tier else Tier.parse(tier)  # (1 is host, not disk)
        if tier is Tier.GPU:
            return self.profile.links["gpu"]
        if tier is Tier.HOST:
            return self.profile.links[f"host_{self.host_memory}"]
        return self.profile.links["disk"]

    def load_s(self, meta: BlockMeta, tier: Tier | None = None, cold_format: str = "auto") -> float:
        """Seconds to bring `meta`'s block from `tier` (default: `meta.tier`) into GPU memory."""
        tier = meta.tier if tier is None else tier
        tier = tier if type(tier) is Tier else Tier.parse(tier)
        if tier is Tier.GPU:
            return 0.0
        nbytes = self.block_bytes(meta, cold_format)
        link = self.link(tier)
        gbps = link.to_gpu_gbps
        if tier is Tier.DISK:
            host = self.link(Tier.HOST).to_gpu_gbps
            gbps = min(gbps, host, self.profile.host_memcpy_gbps)
        return link.latency_s + nbytes / (gbps * 1e9)

    def store_s(self, meta: BlockMeta, tier: Tier, cold_format: str = "auto") -> float:
        """Seconds to write `meta`'s block from the GPU into `tier`."""
        tier = tier if type(tier) is Tier else Tier.parse(tier)
        if tier is Tier.GPU:
            return 0.0
        link = self.link(tier)
        return link.latency_s + self.block_bytes(meta, cold_format) / (link.from_gpu_gbps * 1e9)

    def decide(
        self, meta: BlockMeta, tier: Tier | None = None, cold_format: str = "auto"
    ) -> Decision:
        """Load or recompute `meta`'s block held in `tier`: whichever takes less time."""
        load = self.load_s(meta, tier, cold_format)
        recompute = self.recompute_s(meta)
        return Decision("load" if load <= recompute else "recompute", load, recompute)

    def disk_crossover_tokens(self, chunk_tokens: int, max_tokens: int = 1 << 20) -> int | None:
        """The shortest prefix, in whole chunks of `chunk_tokens`, that loads from disk in less
        time than it takes to recompute; None if there is none up to `max_tokens`.

        A disk hit is worth something only as part of a prefix (an engine reuses the longest
        cached prefix and recomputes the rest), and the prefix [0, m) saves
        `recompute(0, m) - m / chunk_tokens x load(chunk)`. Recomputing a chunk costs more the
        deeper it sits (attention) while loading one costs the same anywhere, so once a prefix
        saves time every longer one does: this is the admission bound of hkv's disk tier.
        """
        load = self.load_s(BlockMeta(tokens=chunk_tokens, tier=Tier.DISK))
        saved, position = 0.0, 0
        while position + chunk_tokens <= max_tokens:
            saved += self.recompute_s(BlockMeta(tokens=chunk_tokens, position=position)) - load
            position += chunk_tokens
            if saved > 0:
                return position
        return None

    def describe(self) -> dict[str, Any]:
        """Model and profile facts for results JSON."""
        return {
            "model": self.spec.name,
            "profile": self.profile.name,
            "kv_cache_dtype": self.kv_cache_dtype,
            "host_memory": self.host_memory,
            "kv_bytes_per_token": self._kv_bytes_per_token,
            "prefill_tflops": self.profile.prefill_tflops,
        }


def _attention_groups(spec: ModelSpec) -> list[tuple[float, int | None]]:
    """(FLOPs per token per context token, window) for each attention layer group."""
    raw = spec.raw.get("text_config", spec.raw)
    heads = spec.num_attention_heads
    groups = []
    for group in spec.layer_groups:
        if group.kind is LayerKind.LINEAR:
            continue
        if group.kind is LayerKind.MLA:
            qk = int(raw.get("qk_nope_head_dim", 0)) + int(raw.get("qk_rope_head_dim", 0))
            per_ctx = 2.0 * heads * (qk + int(raw.get("v_head_dim", spec.head_dim)))
        else:
            per_ctx = 4.0 * heads * spec.head_dim
        groups.append((per_ctx * group.num_layers, group.window_tokens))
    return groups


def _context_sum(start: int, tokens: int, window: int | None) -> float:
    """Sum over the block's tokens of the context each attends to: positions start+1 .. +tokens."""
    first, last = start + 1, start + tokens
    if window is None or last <= window:
        return (first + last) * tokens / 2.0
    if first >= window:
        return float(window * tokens)
    below = window - first + 1  # tokens whose context is still growing
    return (first + window) * below / 2.0 + window * (tokens - below)
