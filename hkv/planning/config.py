"""`HybridKVCacheConfig`: the article's configuration object, made real.

The article imports `HybridKVCacheConfig` from vLLM; no vLLM release has it. hkv provides it with
the same fields, validates every value, and translates it into what vLLM really accepts
(`hkv.planning.flags`). The article's example is accepted verbatim: its field names and
structure (the article itself is not part of this repository, so the numbers below are hkv's
own):

    from hkv import HybridKVCacheConfig

    config = HybridKVCacheConfig(
        offload_strategy="modality_aware",
        modality_configs={
            "vision": {"offload_priority": 0.8, "quantization": "q6", "max_keep_blocks": 512},
            "text": {"offload_priority": 0.3, "quantization": "q8", "max_keep_blocks": 2048},
            "audio": {"offload_priority": 0.6, "quantization": "fp16", "max_keep_blocks": 256},
        },
        cost_model_params={
            "transfer_cost_gpu_to_cpu": 0.15,
            "transfer_cost_cpu_to_gpu": 0.12,
            "computation_cost_per_block": 0.5,
        },
    )

Meaning of the fields, as hkv implements them:
- `offload_priority` in [0, 1]: how eagerly a modality's blocks leave the GPU; 1 goes first.
- `quantization`: the block's format in the cold tiers (`fp16`/`bf16` keep it bit-exact; `q8`,
  `q6`, `q4` quantize on demotion and dequantize on promotion).
- `max_keep_blocks`: at most this many of the modality's blocks stay hot on the GPU (None: no cap).
- `cost_model_params`: relative per-block costs (same unit for all three) used when no measured
  calibration profile is given; `hkv.cost` replaces them with measured seconds when one is.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from hkv.blocks import Modality
from hkv.errors import ConfigError, HkvError, reject_unknown, shown
from hkv.inputs import read_json, read_text, read_yaml
from hkv.modalities import ARTICLE_MODALITY_CONFIGS, ModalityConfig, check_fraction
from hkv.policies.registry import policy_names


def known_policies() -> tuple[str, ...]:
    """Every policy name hkv's registry knows (`hkv.policies`)."""
    return tuple(policy_names())


def _modality(name: Any, where: str) -> Modality:
    try:
        return Modality.parse(name, field=where)
    except HkvError as exc:
        raise ConfigError(str(exc)) from None


def _check_cost(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{where}: got {value!r}; expected a number >= 0")
    if not math.isfinite(value):
        raise ConfigError(f"{where}: got {value!r}; expected a finite number")
    return float(value)


@dataclass
class CostModelParams:
    """The article's relative per-block costs; hkv reads them as one consistent unit."""

    transfer_cost_gpu_to_cpu: float = 1.0
    transfer_cost_cpu_to_gpu: float = 1.0
    computation_cost_per_block: float = 10.0
    where: str = field(default="CostModelParams", repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("transfer_cost_gpu_to_cpu", "transfer_cost_cpu_to_gpu"):
            setattr(self, name, _check_cost(f"{self.where}.{name}", getattr(self, name)))
        self.computation_cost_per_block = _check_cost(
            f"{self.where}.computation_cost_per_block", self.computation_cost_per_block
        )

    @property
    def offload_pays(self) -> bool:
        """Whether a round trip (store + load) is cheaper than recomputing a block."""
        round_trip = self.transfer_cost_gpu_to_cpu + self.transfer_cost_cpu_to_gpu
        return round_trip < self.computation_cost_per_block


def _default_modalities() -> dict[str, ModalityConfig]:
    return {m.value: ModalityConfig(where=f"modality_configs[{m.value!r}]") for m in Modality}


@dataclass
class HybridKVCacheConfig:
    """Everything hkv needs to decide where KV blocks live and in which format.

    `cpu_offload_bytes` / `cpu_offload_percent` mirror the article's
    `--hybrid-kv-cache-cpu-offload-size` / `-percent` and are read as them: `hkv flags` sizes
    the CPU tier from them under the same rules (`hkv.planning.offload_spec`), refuses a flag
    that says otherwise, and writes the size once, as vLLM's `cpu_bytes_to_use`. `cost_weights`
    mirrors `--hybrid-kv-cache-cost-weights` (a per-modality multiplier on a block's value).
    `offload_strategy` left unset reads as `lru` here and in hkv's block manager, while
    `hkv flags` gives a config file that names none its recommended `hkv_auto`, as it does a
    command that names no policy (`strategy_named` says which).
    """

    offload_strategy: str = None  # type: ignore[assignment]  # unset: "lru", strategy_named False
    modality_configs: dict[str, ModalityConfig] = field(default_factory=_default_modalities)
    cost_model_params: CostModelParams = field(default_factory=CostModelParams)
    cpu_offload_bytes: int | None = None
    cpu_offload_percent: float | None = None
    cost_weights: dict[str, float] | None = None

    def __post_init__(self) -> None:
        self.strategy_named = self.offload_strategy is not None
        if not self.strategy_named:
            self.offload_strategy = "lru"
        policies = known_policies()
        if self.offload_strategy not in policies:
            raise ConfigError(
                f"offload_strategy: got {self.offload_strategy!r}; "
                f"expected one of {', '.join(policies)}"
            )
        self.modality_configs = self._parse_modalities(self.modality_configs)
        self.cost_model_params = self._parse_costs(self.cost_model_params)
        self._check_offload_amount()
        if self.cost_weights is not None:
            self.cost_weights = parse_cost_weights(self.cost_weights, where="cost_weights")

    @staticmethod
    def _parse_modalities(given: Any) -> dict[str, ModalityConfig]:
        if not isinstance(given, Mapping):
            raise ConfigError(
                f"modality_configs: got {type(given).__name__}; expected a mapping from "
                f"modality ({', '.join(m.value for m in Modality)}) to its settings"
            )
        parsed = _default_modalities()
        for name, settings in given.items():
            where = f"modality_configs[{name!r}]"
            modality = _modality(name, "modality_configs")
            if isinstance(settings, ModalityConfig):
                settings = {f.name: getattr(settings, f.name) for f in fields(settings)}
                settings.pop("where")
            if not isinstance(settings, Mapping):
                raise ConfigError(f"{where}: got {settings!r}; expected a mapping of settings")
            _reject_unknown(where, settings, ModalityConfig)
            parsed[modality.value] = ModalityConfig(**settings, where=where)
        return parsed

    @staticmethod
    def _parse_costs(given: Any) -> CostModelParams:
        if isinstance(given, CostModelParams):
            return given
        if not isinstance(given, Mapping):
            raise ConfigError(f"cost_model_params: got {given!r}; expected a mapping")
        _reject_unknown("cost_model_params", given, CostModelParams)
        return CostModelParams(**given, where="cost_model_params")

    def _check_offload_amount(self) -> None:
        if self.cpu_offload_percent is not None:
            self.cpu_offload_percent = check_fraction(
                "cpu_offload_percent", self.cpu_offload_percent
            )
        size = self.cpu_offload_bytes
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise ConfigError(f"cpu_offload_bytes: got {size!r}; expected an integer >= 0")

    def modality(self, modality: Modality | str) -> ModalityConfig:
        return self.modality_configs[Modality.parse(modality).value]

    @property
    def quantized_modalities(self) -> list[str]:
        """Modalities whose cold blocks are stored lossy (q8/q6/q4)."""
        return [name for name, mc in self.modality_configs.items() if not mc.lossless]

    def to_dict(self, *, compact: bool = False) -> dict[str, Any]:
        """Plain JSON-able form; `HybridKVCacheConfig.from_dict(c.to_dict()) == c`.

        `compact=True` leaves out what equals the defaults (for command lines).
        """
        out = asdict(self)
        for settings in out["modality_configs"].values():
            settings.pop("where")
        out["cost_model_params"].pop("where")
        if compact:
            default = HybridKVCacheConfig().to_dict()
            out = {k: v for k, v in out.items() if k == "offload_strategy" or v != default[k]}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "config") -> HybridKVCacheConfig:
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"{source}: expected a mapping of settings, got {type(data).__name__}"
            )
        _reject_unknown(source, data, cls)
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path) -> HybridKVCacheConfig:
        """Load from `.py` (defines `config`), `.json` or `.yaml`/`.yml`; errors name the file.

        A `.py` file is executed (its code runs with your permissions): load only files you
        trust. JSON and YAML (safe loading, aliases refused) are the formats for the rest."""
        path = Path(path)
        if not os.path.isfile(path):  # False, not OSError, for a name too long
            raise ConfigError(f"config file: no such file {shown(str(path))}")
        loader = _LOADERS.get(path.suffix.lower())
        if loader is None:
            raise ConfigError(
                f"config file: {path.name} has suffix {path.suffix!r}; "
                "use .py (defining `config`), .json or .yaml"
            )
        try:
            return loader(path)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        except HkvError as exc:  # from reading the file: it names the file already
            raise ConfigError(str(exc)) from None

    @classmethod
    def article_example(cls) -> HybridKVCacheConfig:
        """The article's custom configuration: its fields and structure, hkv's numbers."""
        return cls(
            offload_strategy="modality_aware",
            modality_configs={name: dict(c) for name, c in ARTICLE_MODALITY_CONFIGS.items()},
            cost_model_params={
                "transfer_cost_gpu_to_cpu": 0.15,
                "transfer_cost_cpu_to_gpu": 0.12,
                "computation_cost_per_block": 0.5,
            },
        )


def parse_cost_weights(weights: Any, *, where: str) -> dict[str, float]:
    """Validate a `{"text": 1.0, "vision": 1.5, ...}` mapping of per-modality multipliers."""
    if isinstance(weights, str):
        try:
            weights = json.loads(weights)
        except (ValueError, RecursionError) as exc:  # bad JSON, nested or digits past limits
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "too deep or too long"
            raise ConfigError(
                f"{where}: not valid JSON ({reason}); write e.g. "
                """'{"text": 1.0, "vision": 1.5, "audio": 1.2}'"""
            ) from None
    if not isinstance(weights, Mapping) or not weights:
        raise ConfigError(
            f"{where}: got {shown(weights)}; expected a non-empty mapping modality -> weight"
        )
    out = {}
    for name, value in weights.items():
        modality = _modality(name, where)
        out[modality.value] = _check_cost(f"{where}[{name!r}]", value)
    return out


def _reject_unknown(where: str, settings: Mapping[str, Any], cls: type) -> None:
    allowed = [f.name for f in fields(cls) if f.name != "where"]
    reject_unknown(where, settings, allowed, error=ConfigError)


def _load_json(path: Path) -> HybridKVCacheConfig:
    return HybridKVCacheConfig.from_dict(read_json(path, "config file"))


def _load_yaml(path: Path) -> HybridKVCacheConfig:
    """Safe YAML (no Python objects, no aliases): the format for files from elsewhere."""
    try:
        import yaml  # noqa: F401 (only to say what to install)
    except ImportError:
        raise ConfigError("reading YAML needs PyYAML: pip install pyyaml") from None
    data = read_yaml(path, "config file")
    return HybridKVCacheConfig.from_dict(data if data is not None else {})


def _load_python(path: Path) -> HybridKVCacheConfig:
    """Run the file and take its `config`.

    A .py config is Python: loading it runs its code with your permissions, and a file that
    loops runs until stopped. Load .py files you wrote or trust; JSON and YAML (safe loading)
    are the formats for anything else. An exception the file raises becomes a `ConfigError`
    naming its line.

    The article's file starts with `from vllm import HybridKVCacheConfig`, which no vLLM has; while
    the file runs, that one import is answered with hkv's class so the file works unchanged.
    """
    namespace: dict[str, Any] = {"__name__": "hkv_user_config", "__file__": str(path)}
    real_import = builtins.__import__
    stand_in = types.SimpleNamespace(HybridKVCacheConfig=HybridKVCacheConfig)

    def article_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "vllm" and fromlist and "HybridKVCacheConfig" in fromlist:
            return stand_in
        return real_import(name, globals, locals, fromlist, level)

    namespace["__builtins__"] = dict(vars(builtins), __import__=article_import)
    try:
        exec(compile(read_text(path, "config file"), str(path), "exec"), namespace)
    except HkvError:
        raise
    except (Exception, RecursionError) as exc:
        line = _user_line(exc, str(path))
        raise ConfigError(f"line {line}: {type(exc).__name__}: {exc}") from None
    config = namespace.get("config")
    if isinstance(config, Mapping):
        return HybridKVCacheConfig.from_dict(config)
    if not isinstance(config, HybridKVCacheConfig):
        raise ConfigError(
            "defines no `config`; end the file with `config = HybridKVCacheConfig(...)`"
        )
    return config


def _user_line(exc: BaseException, filename: str) -> int | str:
    tb = exc.__traceback__
    line: int | str = "?"
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.lineno:
        line = exc.lineno
    return line


_LOADERS = {".py": _load_python, ".json": _load_json, ".yaml": _load_yaml, ".yml": _load_yaml}
