"""What `HkvDiskTier` reads from its entry in `secondary_tiers`, and the cost model it admits by.

Torch-free and vLLM-free: the spec passed in is read by attribute only.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hkv.cost import CostModel, HardwareProfile
from hkv.errors import HkvError, reject_unknown
from hkv.models.model_spec import ModelSpec
from hkv.outputs import write_atomic
from hkv.planning.offload_spec import DEFAULT_DISK_POLICY, DISK_ADMISSIONS
from hkv.policies import make_policy, policy_names
from hkv.policies.base import EvictionPolicy

MAX_CONTEXT_TOKENS = 1 << 21
"""Where the search for a disk crossover stops (2M tokens: past every served context)."""


@dataclass(frozen=True)
class TierSettings:
    """The tier's keys in vLLM's `secondary_tiers` entry (besides `type` and `module_path`).

    `path`: the directory of the tier file; `disk_bytes`: the bound on that file; `policy`: the
    hkv policy that evicts when full; `admission`: `cost` (chunks of prompts that reach the
    disk crossover) or `all`; `profile`: an `hkv calibrate` JSON (default: hkv's default H200
    profile, `HardwareProfile.default()`); `model`: a shipped model name or config.json for the
    cost model (default: the served model's path); `min_prefix_tokens`: a crossover given by
    hand instead of the cost model's; `page_cache`: keep written chunks in the page cache
    (default: no, reads then come from the disk, as vLLM's `fs` tier does with O_DIRECT);
    `enable_kv_events`, `locality`: as for vLLM's `fs` tier.
    """

    path: str
    disk_bytes: int
    policy: str = DEFAULT_DISK_POLICY
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    admission: str = "cost"
    profile: str | None = None
    model: str | None = None
    min_prefix_tokens: int | None = None
    page_cache: bool = False
    enable_kv_events: bool = False
    locality: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise HkvError(f"hkv disk tier: path: got {self.path!r}; give a directory")
        if isinstance(self.disk_bytes, bool) or not isinstance(self.disk_bytes, int):
            raise HkvError(f"hkv disk tier: disk_bytes: got {self.disk_bytes!r}; give bytes")
        if self.disk_bytes <= 0:
            raise HkvError(f"hkv disk tier: disk_bytes: got {self.disk_bytes}; must be > 0")
        if self.admission not in DISK_ADMISSIONS:
            raise HkvError(
                f"hkv disk tier: admission: got {self.admission!r}; expected one of "
                f"{DISK_ADMISSIONS}"
            )
        if self.policy not in policy_names(online_only=True):
            raise HkvError(
                f"hkv disk tier: policy: got {self.policy!r}; expected one of "
                f"{', '.join(policy_names(online_only=True))}"
            )
        low = self.min_prefix_tokens
        if low is not None and (isinstance(low, bool) or not isinstance(low, int) or low < 0):
            raise HkvError(f"hkv disk tier: min_prefix_tokens: got {low!r}; expected tokens >= 0")
        if "\0" in self.path:
            raise HkvError(
                f"hkv disk tier: path: got {self.path!r}, with a NUL byte; give a directory"
            )
        if not isinstance(self.policy_params, Mapping):
            raise HkvError(
                f"hkv disk tier: policy_params: got {self.policy_params!r}; expected an object "
                "of the policy's hyperparameters by name ({} for none)"
            )
        for name in ("page_cache", "enable_kv_events"):  # "no" would read as true
            if not isinstance(getattr(self, name), bool):
                raise HkvError(
                    f"hkv disk tier: {name}: got {getattr(self, name)!r}; expected true or false"
                )
        if self.locality is not None and not isinstance(self.locality, str):
            raise HkvError(
                f"hkv disk tier: locality: got {self.locality!r}; expected a string (as vLLM's "
                'fs tier takes it, e.g. "REMOTE")'
            )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TierSettings:
        reject_unknown("hkv disk tier", config, [f.name for f in dataclasses.fields(cls)])
        missing = [name for name in ("path", "disk_bytes") if name not in config]
        if missing:
            raise HkvError(f"hkv disk tier: {' and '.join(missing)} missing from its config")
        return cls(**config)

    def policy_factory(self, cost: CostModel) -> Callable[[int], EvictionPolicy]:
        def make(capacity_blocks: int) -> EvictionPolicy:
            return make_policy(self.policy, capacity_blocks, cost_model=cost, **self.policy_params)

        return make


def chunk_cost(spec: Any, settings: TierSettings) -> tuple[CostModel, int | None]:
    """The cost model of the served model on `settings.profile`'s machine, and the shortest
    prompt whose chunks the tier writes (None: none; `admission: all` writes every chunk)."""
    model = settings.model or spec.config.model.name
    try:
        model_spec = ModelSpec.load(model)
    except HkvError as exc:
        raise HkvError(
            f"hkv disk tier: no cost model for {model!r} ({exc}); set the tier's `model` to a "
            "config.json or a shipped model, or give `min_prefix_tokens`"
        ) from None
    dtype = "fp8" if "fp8" in str(spec.config.model.dtype) else "auto"
    cost = CostModel(model_spec, HardwareProfile.load(settings.profile), kv_cache_dtype=dtype)
    if settings.admission == "all":
        return cost, 0
    if settings.min_prefix_tokens is not None:
        return cost, settings.min_prefix_tokens
    chunk = max(spec.tokens_per_block) * int(spec.blocks_per_chunk)
    return cost, cost.disk_crossover_tokens(chunk, MAX_CONTEXT_TOKENS)


def identity(spec: Any, chunk_bytes: int) -> dict[str, Any]:
    """What must match for chunks on disk to be this engine's: model, KV dtype, chunk geometry,
    the parallel layout and the block-hash seed."""
    parallel = spec.config.parallel
    return {
        "model": str(spec.config.model.name),
        "kv_dtype": str(spec.config.model.dtype),
        "tokens_per_block": list(spec.tokens_per_block),
        "blocks_per_chunk": int(spec.blocks_per_chunk),
        "chunk_bytes": int(chunk_bytes),
        "rank": int(getattr(parallel, "rank", 0)),
        "world_size": int(getattr(parallel, "world_size", 1)),
        "hash_seed": os.environ.get("PYTHONHASHSEED"),
    }


SPEED_FILE = "hkv_tier_speed.json"
MEASURED_CHUNKS = 64
"""Loads of fewer chunks are not timed: their latency says little about the drive's speed."""


def measured_crossover(
    cost: CostModel, chunk_bytes: int, chunk_tokens: int, per_chunk_s: float
) -> int | None:
    """The disk crossover (`CostModel.disk_crossover_tokens`) with disk loads taking what they
    took in this engine, `per_chunk_s` a chunk (the reader threads' seconds), in
    steps of at least 1,024 tokens (a scheduler-side call must stay short)."""
    gbps = chunk_bytes / max(per_chunk_s, 1e-9) / 1e9
    measured = dataclasses.replace(cost, profile=cost.profile.with_disk(gbps, latency_s=0.0))
    step = chunk_tokens * max(1, -(-1024 // chunk_tokens))
    return measured.disk_crossover_tokens(step, MAX_CONTEXT_TOKENS)


def read_speed(directory: str) -> float | None:
    """Seconds a chunk took to load when the tier last ran on `directory`, if recorded."""
    try:
        value = json.loads((Path(directory) / SPEED_FILE).read_text())["per_chunk_s"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(value) if isinstance(value, int | float) and value > 0 else None


def write_speed(directory: str, per_chunk_s: float) -> str | None:
    """Record `per_chunk_s` beside the tier file for the next start; None, or why it could not
    be (a full or read-only disk: a hint lost, never an error in the engine's poll)."""
    try:
        write_atomic(
            Path(directory) / SPEED_FILE, [json.dumps({"per_chunk_s": per_chunk_s})], "path"
        )
    except (HkvError, OSError) as exc:
        return str(exc)
    return None
