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
from hkv.planning.offload_spec import (
    DEFAULT_POLICY,
    STABLE_HASH_ENV,
    STABLE_HASH_NOTE,
    DiskTierSpec,
    OffloadSpec,
    SizeNames,
    check_size_and_percent,
    check_size_fits_ram,
)
from hkv.planning.plan import GIB, VLLM_BLOCK_TOKENS, PlanInputs, detected_host_ram_gib, plan
from hkv.planning.plan_inputs import check_gib
from hkv.planning.policy_params import check_policy_params
from hkv.planning.sizes import parse_size
from hkv.planning.vllm_flags import (
    BOOLEAN_FLAGS,
    HYBRID_FLAGS,
    RealFlagChecks,
    serve_command,
    split_flags,
    weights_dtype_of,
)
from hkv.policies import online_policy_class

COST_WEIGHT_POLICIES = ("cost_aware", "modality_aware")
"""Policies that read per-modality cost weights; the others would silently ignore them."""

SIZE_FLAG = "--hybrid-kv-cache-cpu-offload-size"
PERCENT_FLAG = "--hybrid-kv-cache-cpu-offload-percent"
CONFIG_FLAG = "--hybrid-kv-cache-config"
PARAMS_NAME = "policy_params (--policy-param)"


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


class _Translator(RealFlagChecks):
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
        path = self.value("--hybrid-kv-cache-config")
        if path is None:
            return HybridKVCacheConfig()
        try:
            config = HybridKVCacheConfig.from_file(path)
        except ConfigError as exc:
            raise HkvError(f"--hybrid-kv-cache-config: {exc}") from None
        self.out.translated.append(
            {"flag": "--hybrid-kv-cache-config", "to": "hkv_config in --kv-transfer-config"}
        )
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
        from_file = "--hybrid-kv-cache-config" in self.flags
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

    def offload_bytes(self, config: HybridKVCacheConfig) -> int:
        """CPU tier size from the size and percent flags or the config file's fields, by
        `hkv.planning.offload_spec`'s rules."""
        size, size_name = self.requested_size(config)
        percent, percent_name = self.requested_percent(config)
        ram_name = "--cpu-ram" if self.cpu_ram_gib is not None else "host RAM"
        names = SizeNames(size_name, percent_name, ram_name)
        from_percent = self.percent_bytes(percent, percent_name) if percent is not None else None
        if size is not None and from_percent is not None:
            check_size_and_percent(size, percent, from_percent, names)
        if size is not None:
            check_size_fits_ram(size, self.host_ram_gib()[0], names)
        nbytes = next((n for n in (size, from_percent) if n is not None), None)
        nbytes = self.overflow_bytes() if nbytes is None else nbytes
        if nbytes == 0:  # given as 0, or sized by the GPUs' overflow and nothing overflows
            why = "is not needed: the KV cache fits on the GPUs" if size is None else "is 0 bytes"
            raise HkvError(f"{size_name}: the CPU tier {why}; give a size above 0")
        return nbytes

    def requested_size(self, config: HybridKVCacheConfig) -> tuple[int | None, str]:
        """The size from the flag or the file (the same when both give one), and its name."""
        text = self.value(SIZE_FLAG)
        size = None
        if text is not None:
            size, note = parse_size(text, flag=SIZE_FLAG)
            if note:
                self.out.warnings.append(note)
        return self.agreeing(size, SIZE_FLAG, config.cpu_offload_bytes, "cpu_offload_bytes")

    def requested_percent(self, config: HybridKVCacheConfig) -> tuple[float | None, str]:
        percent = self.number(PERCENT_FLAG)
        if percent is not None and not 0 < percent <= 1:
            raise HkvError(
                f"{PERCENT_FLAG}: got {percent}; expected a fraction in (0, 1], e.g. 0.4 for "
                "40 % of the KV cache"
            )
        return self.agreeing(
            percent, PERCENT_FLAG, config.cpu_offload_percent, "cpu_offload_percent"
        )

    @staticmethod
    def agreeing(flag_value: Any, flag: str, file_value: Any, field_name: str) -> tuple[Any, str]:
        if file_value is None:
            return flag_value, flag
        if flag_value is None:
            return file_value, CONFIG_FLAG
        if flag_value != file_value:
            raise FlagConflict(
                flag,
                CONFIG_FLAG,
                f"the flag says {flag_value:g}, the file's {field_name} says {file_value:g}; "
                "drop one or make them agree",
            )
        return flag_value, flag

    def percent_bytes(self, percent: float, name: str) -> int:
        """The article's `min(RAM x 0.7, total_KV x percent)`, total_KV from the plan."""
        the_plan = self.plan(offload_percent=percent)
        if the_plan.offload_bound_by == "host_ram":
            ram, where = self.host_ram_gib()
            self.out.warnings.append(
                f"{name} {percent:g} asks for {the_plan.offload_requested_bytes / GIB:.1f} GiB; "
                f"the formula min(RAM x 0.7, total_KV x percent) caps it at "
                f"{the_plan.offload_bytes / GIB:.1f} GiB ({ram:.0f} GiB from {where})"
            )
        return the_plan.offload_bytes

    def overflow_bytes(self) -> int:
        the_plan = self.plan()
        self.out.warnings.append(
            "no offload size or percent given: the CPU tier holds the KV that overflows the "
            f"GPU budget, {the_plan.offload_bytes / GIB:.1f} GiB"
        )
        return the_plan.offload_bytes

    def plan(self, **extra: Any):
        spec = self.spec()
        if spec is None:
            raise HkvError(
                f"{PERCENT_FLAG} (or no size at all) needs the model's KV size: pass --model as "
                f"a shipped name or a local config.json, or give {SIZE_FLAG}"
            )
        inputs = PlanInputs(
            gpus=self.number("--tensor-parallel-size", int) or 1,
            cpu_ram_gib=self.host_ram_gib()[0],
            max_model_len=self.number("--max-model-len", int),
            max_num_seqs=self.number("--max-num-seqs", int) or 16,
            kv_cache_dtype=self.value("--kv-cache-dtype") or "auto",
            gpu_memory_utilization=self.number("--gpu-memory-utilization") or 0.9,
            weights_dtype=weights_dtype_of(self.value("--quantization"), spec),
            **extra,
        )
        return plan(spec, inputs, suggest=False)

    def emit_offloading(self, spec: OffloadSpec) -> None:
        self.out.translated.append(
            {"flag": "--enable-hybrid-kv-cache", "to": "vLLM's OffloadingConnector (CPU tier)"}
        )
        args = spec.vllm_args()
        self.out.vllm_args += args
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
