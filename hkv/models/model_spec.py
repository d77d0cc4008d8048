"""What a model's KV cache costs, read from its Hugging Face `config.json`.

A `ModelSpec` splits a model's decoder layers into layer groups by how their cache grows
(`hkv.models.layers`); `hkv.models.hf_config` reads the config's fields.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hkv.errors import HkvError, shown
from hkv.inputs import path_shown, read_json
from hkv.models.hf_config import HFConfigReader
from hkv.models.layers import DTYPE_BYTES, LayerGroup, LayerKind, dtype_bytes

__all__ = ["DTYPE_BYTES", "LayerGroup", "LayerKind", "ModelSpec", "dtype_bytes", "shipped_models"]


MODELS_DIR = Path(__file__).resolve().parent
"""The shipped model configs, a folder each beside this module: package data, so that an
installed hkv (a wheel, or `pip install --target`, as vLLM's plugin loader finds it) has them
too, not only a checkout."""


def models_dir() -> Path:
    """Where shipped model configs are read (`HKV_MODELS_DIR` overrides `MODELS_DIR`)."""
    if env := os.environ.get("HKV_MODELS_DIR"):
        return Path(env)
    return MODELS_DIR


def shipped_models() -> list[str]:
    """Names accepted by `ModelSpec.load` without a path: the folders of `hkv/models/`."""
    return sorted(p.parent.name for p in models_dir().glob("*/config.json"))


def _shipped_config(name: str) -> Path | None:
    """The shipped config for a folder name (`minimax-m2.5`) or its Hub id (`MiniMaxAI/...`)."""
    models = models_dir()
    if os.path.isfile(models / name / "config.json"):  # False, not OSError, for a too-long name
        return models / name / "config.json"
    for meta_path in models.glob("*/hkv.json"):
        if (read_meta(meta_path).get("hub_id") or "").lower() == name.lower():
            return meta_path.parent / "config.json"
    return None


def read_meta(path: Path) -> dict[str, Any]:
    """A model folder's `hkv.json` (Hub id, published counts, source), checked: an object whose
    `hub_id`, when present, is a string."""
    meta = read_json(path, "model metadata")
    hub_id = meta.get("hub_id")
    if hub_id is not None and not isinstance(hub_id, str):
        raise HkvError(
            f"model metadata {path_shown(path)}: hub_id: got {shown(hub_id)}; expected the "
            'model\'s Hub id as a string (e.g. "MiniMaxAI/MiniMax-M2.5")'
        )
    return meta


@dataclass(frozen=True)
class ModelSpec:
    """The dimensions of a decoder-only model that decide its memory footprint."""

    name: str
    architecture: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    layer_groups: tuple[LayerGroup, ...]
    total_params: int
    active_params: int
    embedding_params: int
    native_weights_dtype: str = "bf16"
    num_experts: int = 0
    num_experts_per_tok: int = 0
    num_mtp_modules: int = 0
    source: str = ""
    hub_id: str | None = None
    """How vLLM should be told to load the model (`--model`); a shipped model's Hub id."""
    published: dict[str, Any] = field(default_factory=dict, compare=False)
    """A shipped model's `hkv.json`: Hub id, published parameter counts, source."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def load(cls, name_or_path: str | os.PathLike[str]) -> ModelSpec:
        """Read a shipped model by name (`minimax-m2.5`) or any HF `config.json` (file or dir)."""
        path = Path(name_or_path)
        if os.path.isdir(path):
            path = path / "config.json"
        if not os.path.exists(path):
            shipped = _shipped_config(str(name_or_path))
            if shipped is None:
                raise HkvError(
                    f"model: {shown(str(name_or_path))} is neither a config.json, a folder "
                    f"holding one, nor a shipped model; shipped models: "
                    f"{', '.join(shipped_models())}"
                )
            path = shipped
        config = read_json(path, "model config")
        name = path.parent.name if path.name == "config.json" else path.stem
        spec = cls.from_hf_config(config, name=name, source=str(path))
        meta_path = path.parent / "hkv.json"
        meta = read_meta(meta_path) if os.path.lexists(meta_path) else {}
        return replace(spec, hub_id=meta.get("hub_id") or str(path.parent), published=meta)

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], *, name: str, source: str = "") -> ModelSpec:
        """Build a spec from a parsed HF config dict; raises `HkvError` naming a missing or
        unreadable field."""
        return cls(**HFConfigReader(config, name, source).spec_fields())

    @property
    def is_mla(self) -> bool:
        return any(g.kind is LayerKind.MLA for g in self.layer_groups)

    def kv_bytes_per_token(self, kv_cache_dtype: str = "auto") -> int:
        """Bytes one held token costs across all attention layers (windows not applied)."""
        nbytes = self.kv_dtype_bytes(kv_cache_dtype)
        return sum(g.kv_bytes_per_token(nbytes) for g in self.layer_groups)

    def kv_bytes_per_token_by_group(self, kv_cache_dtype: str = "auto") -> dict[str, int]:
        nbytes = self.kv_dtype_bytes(kv_cache_dtype)
        return {g.kind.value: g.kv_bytes_per_token(nbytes) for g in self.layer_groups}

    def kv_bytes_per_seq(self, tokens: int, kv_cache_dtype: str = "auto") -> int:
        """Bytes one sequence of `tokens` tokens holds in the cache (windows and states applied)."""
        nbytes = self.kv_dtype_bytes(kv_cache_dtype)
        return sum(g.kv_bytes_per_seq(tokens, nbytes) for g in self.layer_groups)

    def kv_dtype_bytes(self, kv_cache_dtype: str = "auto") -> float:
        """`auto` keeps the activations' dtype (bf16 for these models, also for fp8 weights)."""
        if kv_cache_dtype == "auto":
            return 2
        if kv_cache_dtype == "fp8_ds_mla":
            return self._ds_mla_bytes()
        if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in DTYPE_BYTES:
            raise HkvError(f"kv_cache_dtype: got {kv_cache_dtype!r}; expected auto or one of "
                           f"{', '.join(DTYPE_BYTES)}")  # fmt: skip
        return DTYPE_BYTES[kv_cache_dtype]

    def _ds_mla_bytes(self) -> float:
        """vLLM's `fp8_ds_mla` a value: DeepSeek's 512 latent and 64 rotary values a token and
        layer take 656 bytes, the latent in fp8 with one fp32 scale for each 128 values and the
        rotary part in bf16 (vLLM's `flashmla_sparse` backend); a model with other MLA sizes
        (or none) has no such layout here."""
        sizes = {g.kv_values_per_token for g in self.layer_groups if g.kind is LayerKind.MLA}
        if sizes != {512 + 64}:
            raise HkvError(f"kv_cache_dtype: got 'fp8_ds_mla', vLLM's layout for DeepSeek's MLA "
                           f"(512 latent + 64 rotary values a token); {self.name} has "
                           f"{'MLA of ' + str(sorted(sizes)) + ' values' if sizes else 'no MLA'}"
                           ": use fp8")  # fmt: skip
        return 656 / (512 + 64)

    def kv_shard_fraction(self, tensor_parallel: int) -> float:
        """Share of each token's KV one GPU holds under tensor parallelism `tensor_parallel`.

        KV heads are split across ranks; when there are more ranks than KV heads each rank keeps
        one (replicated) head. MLA's latent is not split: every rank holds all of it.
        """
        if self.is_mla:
            return 1.0
        heads_per_rank = max(1, math.ceil(self.num_kv_heads / tensor_parallel))
        return heads_per_rank / self.num_kv_heads
