"""How one modality's KV blocks are treated (`ModalityConfig`), and the article's settings.

Below the config (`hkv.planning.config`, which holds a `ModalityConfig` per modality) and below
the policies that read one (`modality_aware`), so neither has to import the other's layer.
Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hkv.blocks import Modality
from hkv.errors import ConfigError
from hkv.formats import COLD_FORMATS, LOSSLESS_FORMATS

ARTICLE_MODALITY_CONFIGS: dict[str, dict[str, Any]] = {
    "vision": {"offload_priority": 0.8, "quantization": "q6", "max_keep_blocks": 512},
    "text": {"offload_priority": 0.3, "quantization": "q8", "max_keep_blocks": 2048},
    "audio": {"offload_priority": 0.6, "quantization": "fp16", "max_keep_blocks": 256},
}
"""The article's per-modality settings, in its structure, with hkv's numbers
(`HybridKVCacheConfig.article_example()` holds them; `modality_aware` defaults to them)."""


def check_fraction(where: str, value: Any) -> float:
    """`value` as a float if it is a number in [0, 1]; else `ConfigError` naming `where`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(f"{where}: got {value!r}; expected a number in [0, 1]")
    return float(value)


@dataclass
class ModalityConfig:
    """How one modality's KV blocks are treated (`hkv.planning.config`'s docstring gives the
    meanings): `offload_priority` in [0, 1] (1 leaves first), the cold-tier `quantization`, and
    `max_keep_blocks` (None: no cap)."""

    offload_priority: float = 0.5
    quantization: str = "fp16"
    max_keep_blocks: int | None = None
    where: str = field(default="ModalityConfig", repr=False, compare=False)

    def __post_init__(self) -> None:
        self.offload_priority = check_fraction(
            f"{self.where}.offload_priority", self.offload_priority
        )
        if self.quantization not in COLD_FORMATS:
            raise ConfigError(
                f"{self.where}.quantization: got {self.quantization!r}; "
                f"expected one of {', '.join(COLD_FORMATS)}"
            )
        keep = self.max_keep_blocks
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 0):
            raise ConfigError(
                f"{self.where}.max_keep_blocks: got {keep!r}; expected an integer >= 0 or None"
            )

    @property
    def lossless(self) -> bool:
        return self.quantization in LOSSLESS_FORMATS


def article_modalities() -> dict[Modality, ModalityConfig]:
    """`ARTICLE_MODALITY_CONFIGS` as a `ModalityConfig` per modality."""
    return {
        Modality(name): ModalityConfig(**settings, where=f"modality_configs[{name!r}]")
        for name, settings in ARTICLE_MODALITY_CONFIGS.items()
    }
