"""`OffloadSpec`: the one description of hkv's offloading tiers, whoever builds or reads it.

`hkv plan`, `hkv flags`, a config file (`HybridKVCacheConfig.cpu_offload_bytes` / `_percent`)
and the vLLM adapter (`hkv.integrations.vllm.settings`) all describe the same thing: a CPU tier
of some bytes under a policy, in blocks of some tokens, and optionally a disk tier of some bytes
in a directory under its own policy and admission. This module holds that description, its
defaults and its rules, and turns it into vLLM's connector config and back.

Defaults (the only ones): CPU policy `auto` (`DEFAULT_POLICY`), block size vLLM's 16 tokens
(`VLLM_BLOCK_TOKENS`), disk policy `cost_aware`, disk admission `cost`.

Rules (the only ones):
- a CPU size given both as bytes and as a percent of the model's KV is refused with
  `FlagConflict` unless the two agree within 1 % (`check_size_and_percent`);
- a CPU size given explicitly (bytes) above 0.7 x host RAM is refused with `FlagConflict`:
  strict, a size someone typed is never changed behind their back (`check_size_fits_ram`);
- a percent, or no size at all (the KV that overflows the GPUs), follows the article's formula
  `min(RAM x 0.7, total_KV x percent)`: there the cap is part of the formula, and it warns;
- the policy reaches vLLM as `eviction_policy` and, for hkv policies, again as
  `hkv_config.offload_strategy`: both are written from `OffloadSpec.policy`, and a connector
  config whose two disagree is refused when hkv reads it (`read_policy_settings`, at engine
  start), as is a `hkv_config.cpu_offload_bytes` other than `cpu_bytes_to_use`.

Imports neither torch nor vLLM.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hkv.errors import FlagConflict, HkvError, shown
from hkv.planning.config import HybridKVCacheConfig
from hkv.planning.plan_inputs import HOST_RAM_FRACTION, MAX_TOKENS, VLLM_BLOCK_TOKENS
from hkv.planning.policy_params import VLLM_NATIVE_POLICIES, check_policy_params
from hkv.planning.sizes import GIB, MAX_BYTES, parse_size
from hkv.policies import online_policy_class

DEFAULT_POLICY = "auto"
"""The CPU tier's policy when none is named: hkv's `auto`, the policy of the suite within half a
point of the best of vLLM's options and the published peers in the most cells (31 of 32:
docs/policies.md, "Which policy, from the suite")."""

ADAPTER_MODULE = "hkv.integrations.vllm"
"""Where vLLM finds `hkv_<policy>` (`cache_policy_module_path`)."""

SPEC_MODULE = "hkv.integrations.vllm.spec"
"""Where vLLM finds hkv's tiering spec (`spec_module_path`): vLLM's own, whose manager lets
the hkv policy of the CPU tier read the connector's extra config."""

HKV_TIERING_SPEC = "HkvTieringOffloadingSpec"
HKV_CPU_SPEC = "HkvOffloadingSpec"
"""vLLM's `CPUOffloadingSpec` whose manager lets an hkv policy read the extra config: what a CPU
tier alone with an hkv policy names, so that no vLLM class needs wrapping for it."""

DISK_TIER_TYPE = "HkvDiskTier"
DISK_TIER_MODULE = "hkv.integrations.vllm.tier"
DEFAULT_DISK_POLICY = "cost_aware"
DISK_ADMISSIONS = ("cost", "all")
"""`cost`: a block goes to disk only where loading it beats recomputing it; `all`: every block."""

STABLE_HASH_ENV = {"PYTHONHASHSEED": "0"}
"""What a disk tier needs in vLLM's environment: vLLM 0.26 seeds its prefix-cache hashes
randomly unless `PYTHONHASHSEED` is set, and blocks stored under one process's hashes are never
found by the next one."""

STABLE_HASH_NOTE = (
    "PYTHONHASHSEED=0 before vllm serve: vLLM 0.26 seeds its prefix-cache block hashes at "
    "random unless PYTHONHASHSEED is set, so a restarted server would find none of the blocks "
    "on disk; keep it the same for every server on this directory"
)

SIZE_TOLERANCE = 0.01
"""How far a size and a percent may disagree (as a fraction of the larger) and still agree."""


@dataclass(frozen=True)
class SizeNames:
    """How the caller names the CPU size, the percent and the RAM in its messages."""

    size: str
    percent: str
    ram: str


def check_size_and_percent(size_bytes: int, percent: float, percent_bytes: int, names: SizeNames):
    """Refuse a size and a percent that disagree by more than `SIZE_TOLERANCE`."""
    if abs(size_bytes - percent_bytes) > SIZE_TOLERANCE * max(size_bytes, percent_bytes):
        raise FlagConflict(
            names.size,
            names.percent,
            f"the size says {size_bytes / GIB:.1f} GiB, the percent {percent:g} of this "
            f"model's KV says {percent_bytes / GIB:.1f} GiB; give one of them",
        )


def host_limit_bytes(ram_gib: float) -> int:
    """The most a CPU tier may take of `ram_gib` of host RAM."""
    return int(ram_gib * GIB * HOST_RAM_FRACTION)


def check_size_fits_ram(size_bytes: int, ram_gib: float, names: SizeNames) -> None:
    """Refuse an explicit CPU size above 0.7 x host RAM (never capped silently)."""
    limit = host_limit_bytes(ram_gib)
    if size_bytes > limit:
        raise FlagConflict(
            names.size,
            names.ram,
            f"{size_bytes / GIB:.1f} GiB is more than 0.7 x {ram_gib:.0f} GiB = "
            f"{limit / GIB:.1f} GiB; the rest of RAM must stay for the OS and the engine",
        )


def _check_int(name: str, value: Any, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise HkvError(f"{name}: got {shown(value)}; expected an integer in [1, {int(high):,}]")


def _check_policy(name: str, policy: Any) -> None:
    if not isinstance(policy, str):
        raise HkvError(f"{name}: got {shown(policy)}; expected a policy name")
    try:
        online_policy_class(policy, runner="a server")
    except HkvError as exc:
        raise HkvError(f"{name}: {exc}") from None


@dataclass(frozen=True)
class DiskTierSpec:
    """hkv's disk tier behind the CPU tier (vLLM's tiering, `HkvDiskTier`).

    `path`: its directory; `disk_bytes`: the bound on what it keeps; `policy`: the hkv policy
    that evicts when full; `admission`: `cost` or `all` (`DISK_ADMISSIONS`); `profile`: an
    `hkv calibrate` JSON for the cost model (None: the tier's shipped default); `page_cache`:
    keep written blocks in the page cache.
    """

    path: str
    disk_bytes: int
    policy: str = DEFAULT_DISK_POLICY
    admission: str = "cost"
    profile: str | None = None
    page_cache: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip():
            raise HkvError(f"disk_dir: got {shown(self.path)}; give the disk tier's directory")
        _check_int("disk_bytes", self.disk_bytes, MAX_BYTES)
        _check_policy("disk_policy", self.policy)
        if self.admission not in DISK_ADMISSIONS:
            raise HkvError(
                f"disk_admission: got {shown(self.admission)}; expected one of "
                f"{', '.join(DISK_ADMISSIONS)}"
            )
        if self.profile is not None and not isinstance(self.profile, str):
            raise HkvError(f"disk_profile: got {shown(self.profile)}; expected a file path")
        if not isinstance(self.page_cache, bool):
            raise HkvError(f"page_cache: got {shown(self.page_cache)}; expected true or false")

    def tier_config(self) -> dict[str, Any]:
        """Its entry in vLLM's `secondary_tiers`."""
        out: dict[str, Any] = {
            "type": DISK_TIER_TYPE,
            "module_path": DISK_TIER_MODULE,
            "path": self.path,
            "disk_bytes": self.disk_bytes,
            "policy": self.policy,
            "admission": self.admission,
        }
        if self.profile is not None:
            out["profile"] = self.profile
        if self.page_cache:
            out["page_cache"] = True
        return out

    @classmethod
    def from_tier_config(cls, tier: Mapping[str, Any]) -> DiskTierSpec:
        keys = ("path", "disk_bytes", "policy", "admission", "profile", "page_cache")
        return cls(**{k: tier[k] for k in keys if k in tier})


@dataclass(frozen=True)
class OffloadSpec:
    """The offloading tiers of one vLLM server.

    `cpu_bytes`: the CPU tier (vLLM's `cpu_bytes_to_use`, all ranks together); `block_tokens`:
    tokens in an offloaded block; `policy`: the CPU tier's policy (vLLM's `lru`/`arc` or any
    online hkv policy); `policy_params`: its hyperparameters (`hkv_policy_params`); `config`:
    hkv's per-modality settings, cost weights and cold formats, whose `offload_strategy` must be
    `policy` (None: the defaults, for an hkv policy; vLLM's own read none); `disk`: hkv's disk
    tier, or None for none.
    """

    cpu_bytes: int
    block_tokens: int = VLLM_BLOCK_TOKENS
    policy: str = DEFAULT_POLICY
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    config: HybridKVCacheConfig | None = None
    disk: DiskTierSpec | None = None

    def __post_init__(self) -> None:
        _check_int("cpu_bytes", self.cpu_bytes, MAX_BYTES)
        _check_int("block_tokens", self.block_tokens, MAX_TOKENS)
        _check_policy("policy", self.policy)
        check_policy_params(self.policy, self.policy_params)
        if self.config is None and self.is_hkv_policy:  # one form: the policy's defaults
            object.__setattr__(self, "config", HybridKVCacheConfig(offload_strategy=self.policy))
        strategy = self.config.offload_strategy if self.config is not None else self.policy
        if strategy != self.policy:
            raise HkvError(
                f"policy: {self.policy!r}, but the config's offload_strategy says "
                f"{strategy!r}; make them agree"
            )

    @property
    def is_hkv_policy(self) -> bool:
        return self.policy not in VLLM_NATIVE_POLICIES

    @property
    def eviction_policy(self) -> str:
        """The name vLLM's `eviction_policy` holds."""
        return f"hkv_{self.policy}" if self.is_hkv_policy else self.policy

    def hkv_config(self) -> dict[str, Any]:
        """What the hkv policy reads (`hkv_config`): the non-default settings of `config`,
        without the sizes, which `cpu_bytes_to_use` already says."""
        config = self.config or HybridKVCacheConfig(offload_strategy=self.policy)
        out = config.to_dict(compact=True)  # what equals the defaults is left out
        out.pop("cpu_offload_bytes", None)
        out.pop("cpu_offload_percent", None)
        return out

    def extra_config(self) -> dict[str, Any]:
        """vLLM's `kv_connector_extra_config` for these tiers.

        `block_size` is written when it is not vLLM's default or a disk tier is kept (a
        restart must find the same blocks); hkv's tiering spec is named when the CPU tier runs
        an hkv policy (its manager hands the policy this config), vLLM's otherwise.
        """
        extra: dict[str, Any] = {"cpu_bytes_to_use": self.cpu_bytes}
        if self.block_tokens != VLLM_BLOCK_TOKENS or self.disk is not None:
            extra["block_size"] = self.block_tokens
        extra["eviction_policy"] = self.eviction_policy
        if self.is_hkv_policy:
            extra["cache_policy_module_path"] = ADAPTER_MODULE
            extra["hkv_config"] = self.hkv_config()
            if self.policy_params:
                extra["hkv_policy_params"] = dict(self.policy_params)
        if self.disk is not None:
            # hkv's spec whatever the CPU tier's policy: it is vLLM's, plus the 0.26 guard
            # of a store made after its request finished (a `KeyError` in vLLM's manager)
            extra.update(spec_name=HKV_TIERING_SPEC, spec_module_path=SPEC_MODULE)
            extra["secondary_tiers"] = [self.disk.tier_config()]
        elif self.is_hkv_policy:
            extra.update(spec_name=HKV_CPU_SPEC, spec_module_path=SPEC_MODULE)
        return extra

    def transfer_config(self) -> dict[str, Any]:
        """vLLM's `--kv-transfer-config`: its `OffloadingConnector` with `extra_config()`."""
        return {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": self.extra_config(),
        }

    def vllm_args(self) -> list[str]:
        """The `vllm serve` arguments for the tiers: vLLM's two plain flags when its own lru
        is the only tier (its blocks are then the GPU's: `--block-size`, which the caller
        writes), else `--kv-transfer-config`."""
        if self.policy == "lru" and self.disk is None:
            gib = f"{self.cpu_bytes / GIB:.2f}"
            return ["--kv-offloading-size", gib, "--kv-offloading-backend", "native"]
        return ["--kv-transfer-config", json.dumps(self.transfer_config(), separators=(",", ":"))]

    def env(self) -> dict[str, str]:
        """Environment variables `vllm serve` needs for these tiers (a disk tier: stable
        block hashes, `STABLE_HASH_ENV`)."""
        return dict(STABLE_HASH_ENV) if self.disk is not None else {}

    @classmethod
    def from_extra_config(cls, extra: Mapping[str, Any]) -> OffloadSpec:
        """The spec a connector config describes (the inverse of `extra_config`)."""
        settings = read_policy_settings(extra)
        policy = _policy_of(str(extra.get("eviction_policy", "lru")))
        tiers = [t for t in extra.get("secondary_tiers") or () if t.get("type") == DISK_TIER_TYPE]
        return cls(
            cpu_bytes=extra.get("cpu_bytes_to_use"),
            block_tokens=settings.get("block_tokens", VLLM_BLOCK_TOKENS),
            policy=policy,
            policy_params=settings.get("policy_params", {}),
            config=settings.get("config"),
            disk=DiskTierSpec.from_tier_config(tiers[0]) if tiers else None,
        )


def _policy_of(eviction_policy: str) -> str:
    return eviction_policy.removeprefix("hkv_")


def read_policy_settings(extra: Mapping[str, Any]) -> dict[str, Any]:
    """What the CPU tier's hkv policy reads from a connector config: `config`
    (`HybridKVCacheConfig` from `hkv_config`), `policy_params` and `block_tokens`, each where
    given. Refuses an `hkv_config` that names another policy than `eviction_policy`, or another
    size than `cpu_bytes_to_use` (the rules of the module docstring)."""
    settings: dict[str, Any] = {}
    raw = extra.get("hkv_config")
    if raw:
        config = HybridKVCacheConfig.from_dict(raw, source="hkv_config")
        _check_same_policy(extra, raw)
        _check_same_size(extra, config)
        settings["config"] = config
    params = extra.get("hkv_policy_params")
    if params:
        if not isinstance(params, Mapping):
            raise HkvError(
                f"hkv_policy_params: got {shown(params)}; expected an object of name: value"
            )
        settings["policy_params"] = dict(params)
    block_tokens = extra.get("block_size")
    if block_tokens:
        try:
            settings["block_tokens"] = int(block_tokens)
        except (TypeError, ValueError):
            raise HkvError(f"block_size: got {shown(block_tokens)}; expected tokens") from None
        _check_int("block_size", settings["block_tokens"], MAX_TOKENS)
    return settings


def _check_same_policy(extra: Mapping[str, Any], raw: Mapping[str, Any]) -> None:
    named, strategy = extra.get("eviction_policy"), raw.get("offload_strategy")
    if named is None or strategy is None or _policy_of(str(named)) == strategy:
        return
    raise HkvError(
        f"hkv_config: offload_strategy {strategy!r} and eviction_policy {named!r} name two "
        f"policies, and vLLM runs {named!r}; make them agree (or drop offload_strategy)"
    )


def _check_same_size(extra: Mapping[str, Any], config: HybridKVCacheConfig) -> None:
    size, used = config.cpu_offload_bytes, extra.get("cpu_bytes_to_use")
    if size is None or used is None or size == used:
        return
    raise HkvError(
        f"hkv_config: cpu_offload_bytes {size} but cpu_bytes_to_use {used}; vLLM sizes the "
        "CPU tier by cpu_bytes_to_use: drop cpu_offload_bytes or make them agree"
    )


def disk_tier(
    size: str, path: str | None, *, policy: str | None = None, admission: str | None = None,
    profile: str | None = None,
) -> DiskTierSpec:  # fmt: skip
    """hkv's disk tier from `hkv flags`' options: `size` as `parse_size` reads it (a bare
    number is GiB), `path` made absolute (the server may start elsewhere)."""
    if path is None:
        raise HkvError("disk_dir: needed with --disk-size; give the directory the tier keeps")
    nbytes, _ = parse_size(size, flag="--disk-size")
    if nbytes == 0:
        raise HkvError(f"--disk-size: got {size!r}; give a size above 0")
    options = {"policy": policy, "admission": admission, "profile": profile}
    return DiskTierSpec(
        os.path.abspath(os.path.expanduser(path)),
        nbytes,
        **{k: v for k, v in options.items() if v is not None},
    )
