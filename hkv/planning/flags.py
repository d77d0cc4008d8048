"""The article's `vllm serve` flags, translated into a command vLLM really accepts.

The article mixes real vLLM flags with `--enable-hybrid-kv-cache` and five
`--hybrid-kv-cache-*` flags that no vLLM release has. `translate(argv)` reads both kinds and
returns the vLLM 0.33 arguments that do what they meant:

- offloading becomes an `OffloadSpec` (`hkv.planning.offload_spec`, whose sizing rules and
  defaults `hkv plan` shares) and from it `--kv-offloading-size GiB --kv-offloading-backend
  native` when vLLM's own LRU is wanted, or `--kv-transfer-config` with vLLM's
  `OffloadingConnector` naming an hkv policy; with a disk tier (`translate(disk=...)`), vLLM's
  tiering config with hkv's disk tier and `PYTHONHASHSEED=0` before `vllm serve`;
- settings with no vLLM counterpart are listed in `dropped` with the reason;
- contradictory flags raise `FlagConflict`, naming both flags.

The checks of the real vLLM flags in the same command (block size per attention backend,
tensor parallelism, fp8 with cold-tier quantization, legacy flags) are in `hkv.planning.vllm_flags`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from hkv.errors import ConfigError, FlagConflict, HkvError, shorten
from hkv.models.model_spec import ModelSpec
from hkv.planning.config import HybridKVCacheConfig, known_policies, parse_cost_weights
from hkv.planning.flag_sizes import CONFIG_FLAG, CpuTierSizing
from hkv.planning.offload_spec import (
    DEFAULT_POLICY,
    STABLE_HASH_ENV,
    STABLE_HASH_NOTE,
    DiskTierSpec,
    OffloadSpec,
)
from hkv.planning.plan import GIB, VLLM_BLOCK_TOKENS, detected_host_ram_gib
from hkv.planning.plan_inputs import check_gib
from hkv.planning.policy_params import check_policy_params
from hkv.planning.vllm_flags import (
    BOOLEAN_FLAGS,
    HYBRID_FLAGS,
    RealFlagChecks,
    serve_command,
    split_flags,
)
from hkv.policies import online_policy_class

COST_WEIGHT_POLICIES = ("cost_aware", "modality_aware")
"""Policies that read per-modality cost weights; the others would silently ignore them."""

PARAMS_NAME = "policy_params (--policy-param)"
SIZES = frozenset({"cpu_offload_bytes", "cpu_offload_percent"})


@dataclass
class Translation:
    """What `hkv flags` reports: the real command, hkv's config, and what had no counterpart."""

    vllm_args: list[str]
    hkv_config: dict[str, Any]
    dropped: list[dict[str, str]] = field(default_factory=list)
    translated: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        """The `vllm serve` line: the model positional, as `vllm serve` wants it, after the
        environment it needs (`env`)."""
        return serve_command(self.vllm_args, self.env)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["command"] = self.command
        return out


def try_translate(argv: list[str], **kwargs: Any) -> Translation | HkvError:
    """`translate`, returning the error instead of raising it (for tables of cases)."""
    try:
        return translate(argv, **kwargs)
    except HkvError as exc:
        return exc


class _Translator(RealFlagChecks, CpuTierSizing):
    def __init__(self, pairs: list[tuple[str, str | None]], model: str | None, cpu_ram_gib, disk,
                 policy_params=None):  # fmt: skip
        self.disk: DiskTierSpec | None = disk
        self.policy_params = dict(policy_params or {})
        self.flags: dict[str, str | None] = {}
        for name, value in pairs:
            if name in self.flags:
                raise FlagConflict(name, name, "given twice; keep one")
            self.flags[name] = value
        if model is not None:
            if "--model" in self.flags:
                raise FlagConflict("--model", "the positional model", "two models given")
            self.flags["--model"] = model
        self.cpu_ram_gib = cpu_ram_gib
        self.out = Translation(vllm_args=[], hkv_config={})
        self._spec: ModelSpec | bool | None = False
        self.policy_defaulted = False  # no policy named: DEFAULT_POLICY

    # -- inputs -----------------------------------------------------------------------------
    def value(self, flag: str) -> str | None:
        value = self.flags.get(flag)
        if flag in self.flags and value is None and flag not in BOOLEAN_FLAGS:
            raise HkvError(f"{flag}: needs a value")
        return value

    def number(self, flag: str, kind: type = float) -> Any:
        text = self.value(flag)
        if text is None:
            return None
        try:
            value = kind(text)
        except ValueError:
            raise HkvError(f"{flag}: got {text!r}; expected {kind.__name__}") from None
        if kind is float and not math.isfinite(value):
            raise HkvError(f"{flag}: got {text!r}; expected a finite number")
        return value

    def spec(self) -> ModelSpec | None:
        """The model's spec when `--model` names a shipped model or a local config, else None."""
        if self._spec is False:
            name = self.value("--model")
            try:
                self._spec = ModelSpec.load(name) if name else None
            except HkvError:
                self._spec = None
                self.out.warnings.append(
                    f"--model {shorten(name)}: no local config.json, so KV sizes, tensor-parallel "
                    "and block-size checks that need the model's dimensions were skipped"
                )
        return self._spec  # type: ignore[return-value]

    def host_ram_gib(self) -> tuple[float, str]:
        if self.cpu_ram_gib is not None:
            return self.cpu_ram_gib, "--cpu-ram"
        return detected_host_ram_gib(), "this machine's RAM (pass --cpu-ram to plan for another)"

    # -- the translation ----------------------------------------------------------------------
    def run(self) -> Translation:
        config = self.hybrid_config()
        if config is None and self.policy_params:
            raise HkvError(f"{PARAMS_NAME}: nothing is offloaded; add --enable-hybrid-kv-cache")
        self.copy_real_flags()
        self.check_block_size()
        self.check_tensor_parallel()
        self.check_fp8_with_cold_quantization(config)
        self.drop_legacy_flags()
        if config is not None:
            self.emit_offloading(self.offload_spec(config))
            self.out.hkv_config = config.to_dict()
        return self.out

    def offload_spec(self, config: HybridKVCacheConfig) -> OffloadSpec:
        check_policy_params(config.offload_strategy, self.policy_params, PARAMS_NAME)
        return OffloadSpec(
            cpu_bytes=self.offload_bytes(config),
            block_tokens=self.number("--block-size", int) or VLLM_BLOCK_TOKENS,
            policy=config.offload_strategy,
            policy_params=self.policy_params,
            config=config,
            disk=self.disk,
        )

    def hybrid_config(self) -> HybridKVCacheConfig | None:
        """The `HybridKVCacheConfig` the hybrid flags describe, or None if none was given."""
        unknown = [f for f in self.flags if "hybrid-kv-cache" in f and f not in HYBRID_FLAGS]
        if unknown:
            raise HkvError(f"{unknown[0]}: no such flag; hkv knows {', '.join(HYBRID_FLAGS)}")
        given = [f for f in HYBRID_FLAGS if f in self.flags]
        if not given and self.disk is None:
            return None
        if given and "--enable-hybrid-kv-cache" not in self.flags:
            self.out.warnings.append(
                f"{given[0]} given without --enable-hybrid-kv-cache; offloading enabled anyway"
            )
        config = self.base_config()
        policy = self.policy(config)
        weights = self.cost_weights(policy)
        data = config.to_dict()
        data.update(offload_strategy=policy, cost_weights=weights)
        return HybridKVCacheConfig.from_dict(data)

    def base_config(self) -> HybridKVCacheConfig:
        path = self.value(CONFIG_FLAG)
        if path is None:
            return HybridKVCacheConfig()
        try:
            config = HybridKVCacheConfig.from_file(path)
        except ConfigError as exc:
            raise HkvError(f"--hybrid-kv-cache-config: {exc}") from None
        return config

    def policy(self, config: HybridKVCacheConfig) -> str:
        flag_policy = self.value("--hybrid-kv-cache-policy")
        valid = known_policies()
        if flag_policy is not None and flag_policy not in valid:
            raise HkvError(
                f"--hybrid-kv-cache-policy: unknown policy {flag_policy!r}; "
                f"valid: {', '.join(valid)}"
            )
        for name in {flag_policy, config.offload_strategy} - {None}:
            try:
                online_policy_class(name, runner="a server")
            except HkvError as exc:
                raise HkvError(f"--hybrid-kv-cache-policy: {exc}") from None
        from_file = CONFIG_FLAG in self.flags and config.strategy_named  # (the file names one)
        if flag_policy and from_file and flag_policy != config.offload_strategy:
            raise FlagConflict(
                "--hybrid-kv-cache-policy",
                "--hybrid-kv-cache-config",
                f"the flag says {flag_policy!r}, the file's offload_strategy says "
                f"{config.offload_strategy!r}; drop one or make them agree",
            )
        if flag_policy:
            return flag_policy
        if not from_file and "--hybrid-kv-cache-cost-weights" in self.flags:
            self.out.warnings.append(
                "--hybrid-kv-cache-cost-weights without a policy: using cost_aware, "
                "the policy that reads them"
            )
            return "cost_aware"
        if from_file:
            return config.offload_strategy
        self.policy_defaulted = True
        return DEFAULT_POLICY

    def cost_weights(self, policy: str) -> dict[str, float] | None:
        text = self.value("--hybrid-kv-cache-cost-weights")
        if text is None:
            return None
        weights = parse_cost_weights(text, where="--hybrid-kv-cache-cost-weights")
        if policy not in COST_WEIGHT_POLICIES:
            raise FlagConflict(
                "--hybrid-kv-cache-cost-weights",
                "--hybrid-kv-cache-policy",
                f"policy {policy!r} ignores cost weights; use one of "
                f"{', '.join(COST_WEIGHT_POLICIES)} or drop the weights",
            )
        return weights

    def emit_offloading(self, spec: OffloadSpec) -> None:
        self.out.translated.append(
            {"flag": "--enable-hybrid-kv-cache", "to": "vLLM's OffloadingConnector (CPU tier)"}
        )
        args = spec.vllm_args()
        self.out.vllm_args += args
        if CONFIG_FLAG in self.flags:
            self.emit_config(spec)
        if args[0] == "--kv-offloading-size":  # vLLM's own lru: its two plain flags say it all
            self.out.translated.append(
                {"flag": "offload size / percent", "to": f"--kv-offloading-size {args[1]} (GiB)"}
            )
        else:
            to = f"eviction_policy {spec.eviction_policy!r} in --kv-transfer-config"
            flag = "--hybrid-kv-cache-policy"
            if self.policy_defaulted:
                flag += " (not given)"
                to += " (hkv's recommended default; --hybrid-kv-cache-policy lru for vLLM's own)"
            self.out.translated.append({"flag": flag, "to": to})
        if spec.policy_params:
            to = f"hkv_policy_params {json.dumps(dict(spec.policy_params))} in --kv-transfer-config"
            self.out.translated.append({"flag": "--policy-param", "to": to})
        if spec.disk is not None:
            self.emit_disk(spec.disk)
        lossy = spec.config.quantized_modalities if spec.config is not None else []
        if lossy:
            reason = (f"cold-tier quantization ({', '.join(lossy)}) has no vLLM counterpart: "
                      "vLLM's tiers store blocks unchanged; hkv's own manager "
                      "(hkv.storage.manager) applies it")  # fmt: skip
            self.out.dropped.append({"flag": "modality_configs[*].quantization", "reason": reason})

    def emit_config(self, spec: OffloadSpec) -> None:
        """Where the config file's settings went: `hkv_config`, or nowhere (vLLM's own policy)."""
        if spec.is_hkv_policy:
            to = {"flag": CONFIG_FLAG, "to": "hkv_config in --kv-transfer-config"}
            return self.out.translated.append(to)
        unread = sorted(set(spec.config.to_dict(compact=True)) - {"offload_strategy"} - SIZES)
        if unread:  # (the sizes went into the size flags)
            reason = (f"vLLM's own {spec.policy!r} reads none of the file's {', '.join(unread)}; "
                      "name an hkv policy (offload_strategy) to apply them")  # fmt: skip
            self.out.dropped.append({"flag": CONFIG_FLAG, "reason": reason})

    def emit_disk(self, disk: DiskTierSpec) -> None:
        self.out.translated.append(
            {
                "flag": "--disk-size / --disk-dir",
                "to": f"hkv's disk tier in secondary_tiers ({disk.disk_bytes / GIB:.2f} GiB in "
                f"{disk.path}, policy {disk.policy}, admission {disk.admission}) behind the CPU "
                "tier, through vLLM's TieringOffloadingSpec",
            }
        )
        self.out.env.update(STABLE_HASH_ENV)
        self.out.notes.append(STABLE_HASH_NOTE)


def translate(argv: list[str], *, cpu_ram_gib: float | None = None,
              disk: DiskTierSpec | None = None, policy_params=None) -> Translation:  # fmt: skip
    """A seed-style `vllm serve` line (a list of tokens) as real vLLM arguments; `disk`: hkv's
    disk tier behind the CPU tier; `policy_params`: the hkv policy's `hkv_policy_params`."""
    pairs, model = split_flags(argv)
    if cpu_ram_gib is not None:
        check_gib("cpu_ram_gib", cpu_ram_gib, positive=True)
    return _Translator(pairs, model, cpu_ram_gib, disk, policy_params).run()
