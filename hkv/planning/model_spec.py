"""What a model's KV cache costs, read from its Hugging Face `config.json`.

A `ModelSpec` splits a model's decoder layers into layer groups by how their cache grows:

- full attention: K and V for every token, `2 x kv_heads x head_dim` values per token per layer;
- sliding window: the same per token, but only the last `window_tokens` tokens are kept;
- MLA (multi-head latent attention, DeepSeek): one compressed latent of `kv_lora_rank` values
  plus `qk_rope_head_dim` rotary values per token per layer, shared by all heads;
- linear (mamba / gated delta-net): a constant state per sequence, independent of its length.

Parameter counts come from the dimensions alone (norms, biases and MTP modules left out), which
is within a percent of the published totals for the shipped configs (see tests).
"""

from __future__ import annotations

import enum
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hkv.errors import HkvError

DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "fp32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
    "int4": 0.5,
}
"""Bytes per element for the dtype names used by HF configs, vLLM flags and hkv."""


def dtype_bytes(dtype: str, *, field_name: str = "dtype") -> float:
    """Bytes per element of `dtype`; raises `HkvError` naming `field_name` on an unknown dtype."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        valid = ", ".join(DTYPE_BYTES)
        raise HkvError(f"{field_name}: unknown dtype {dtype!r}; use one of {valid}") from None


def data_dir() -> Path:
    """The project's `data/` folder (override with the `HKV_DATA_DIR` environment variable)."""
    if env := os.environ.get("HKV_DATA_DIR"):
        return Path(env)
    return Path(__file__).resolve().parents[2] / "data"


def shipped_models() -> list[str]:
    """Names accepted by `ModelSpec.load` without a path: the folders of `data/models/`."""
    models = data_dir() / "models"
    return sorted(p.parent.name for p in models.glob("*/config.json"))


def _shipped_config(name: str) -> Path | None:
    """The shipped config for a folder name (`minimax-m2.5`) or its Hub id (`MiniMaxAI/...`)."""
    models = data_dir() / "models"
    if (models / name / "config.json").is_file():
        return models / name / "config.json"
    for meta_path in models.glob("*/hkv.json"):
        if json.loads(meta_path.read_text()).get("hub_id", "").lower() == name.lower():
            return meta_path.parent / "config.json"
    return None


class LayerKind(enum.StrEnum):
    FULL = "full_attention"
    SLIDING = "sliding_attention"
    MLA = "mla"
    LINEAR = "linear"


@dataclass(frozen=True)
class LayerGroup:
    """Layers whose cache grows the same way.

    `kv_values_per_token` is the number of cached elements one token adds in one layer (0 for
    linear layers); `state_values_per_seq` the constant per-sequence state of one linear layer.
    `kv_heads` is what tensor parallelism shards (`None` for MLA, whose latent is replicated).
    """

    kind: LayerKind
    num_layers: int
    kv_values_per_token: int
    kv_heads: int | None = None
    window_tokens: int | None = None
    state_values_per_seq: int = 0

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> int:
        """Bytes one held token costs across this group's layers."""
        return int(self.num_layers * self.kv_values_per_token * kv_dtype_bytes)

    def kv_bytes_per_seq(self, tokens: int, kv_dtype_bytes: float) -> int:
        """Bytes one sequence of `tokens` tokens holds in this group (window and state applied)."""
        held = tokens if self.window_tokens is None else min(tokens, self.window_tokens)
        state = self.num_layers * self.state_values_per_seq * kv_dtype_bytes
        return int(held * self.kv_bytes_per_token(kv_dtype_bytes) + state)


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
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            shipped = _shipped_config(str(name_or_path))
            if shipped is None:
                raise HkvError(
                    f"model: {str(name_or_path)!r} is neither a config.json, a folder holding "
                    f"one, nor a shipped model; shipped models: {', '.join(shipped_models())}"
                )
            path = shipped
        try:
            config = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise HkvError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        name = path.parent.name if path.name == "config.json" else path.stem
        spec = cls.from_hf_config(config, name=name, source=str(path))
        meta_path = path.parent / "hkv.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        return replace(spec, hub_id=meta.get("hub_id") or str(path.parent), published=meta)

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], *, name: str, source: str = "") -> ModelSpec:
        """Build a spec from a parsed HF config dict; raises `HkvError` naming a missing field."""
        return _ConfigReader(config, name, source).spec()

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
        if kv_cache_dtype.startswith("fp8"):
            return 1
        return dtype_bytes(kv_cache_dtype, field_name="kv_cache_dtype")

    def kv_shard_fraction(self, tensor_parallel: int) -> float:
        """Share of each token's KV one GPU holds under tensor parallelism `tensor_parallel`.

        KV heads are split across ranks; when there are more ranks than KV heads each rank keeps
        one (replicated) head. MLA's latent is not split: every rank holds all of it.
        """
        if self.is_mla:
            return 1.0
        heads_per_rank = max(1, math.ceil(self.num_kv_heads / tensor_parallel))
        return heads_per_rank / self.num_kv_heads


_EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")


class _ConfigReader:
    """Reads one HF config dict; one method per thing it derives."""

    def __init__(self, config: dict[str, Any], name: str, source: str):
        self.c = config.get("text_config", config) if "text_config" in config else config
        self.top = config
        self.name = name
        self.source = source

    def need(self, key: str) -> Any:
        if key not in self.c or self.c[key] is None:
            raise HkvError(f"{self.source or self.name}: config field {key!r} is missing")
        return self.c[key]

    def get(self, *keys: str, default: Any = None) -> Any:
        for key in keys:
            if self.c.get(key) is not None:
                return self.c[key]
        return default

    def spec(self) -> ModelSpec:
        hidden = int(self.need("hidden_size"))
        heads = int(self.need("num_attention_heads"))
        groups = tuple(g for g in self.layer_groups(hidden, heads) if g.num_layers)
        attn, mlp_total, mlp_active = self.params_per_model(hidden, heads)
        embed = self.embedding_params(hidden)
        architectures = self.top.get("architectures") or ["?"]
        return ModelSpec(
            name=self.name,
            architecture=architectures[0],
            model_type=str(self.top.get("model_type", "?")),
            hidden_size=hidden,
            num_layers=int(self.need("num_hidden_layers")),
            num_attention_heads=heads,
            num_kv_heads=int(self.get("num_key_value_heads", default=heads)),
            head_dim=self.head_dim(hidden, heads),
            vocab_size=int(self.need("vocab_size")),
            max_position_embeddings=int(self.get("max_position_embeddings", default=0)),
            layer_groups=groups,
            total_params=attn + mlp_total + embed,
            # The input embedding is a lookup, not a matmul: only the output projection is active.
            active_params=attn + mlp_active + self.lm_head_params(hidden),
            embedding_params=embed,
            native_weights_dtype=self.native_dtype(),
            num_experts=self.num_experts(),
            num_experts_per_tok=int(self.get("num_experts_per_tok", default=0)),
            num_mtp_modules=int(self.get("num_mtp_modules", "num_nextn_predict_layers", default=0)),
            source=self.source,
            raw=self.top,
        )

    def head_dim(self, hidden: int, heads: int) -> int:
        return int(self.get("head_dim", default=hidden // heads))

    def native_dtype(self) -> str:
        quant = self.top.get("quantization_config") or {}
        if quant.get("quant_method") == "fp8":
            return "fp8"
        if quant.get("quant_method") == "mxfp4" or (
            quant.get("quant_method") in ("awq", "gptq") and quant.get("bits") == 4
        ):
            return "int4"
        return "bf16"

    def layer_kinds(self) -> list[str]:
        """One label per decoder layer: full_attention, sliding_attention or linear."""
        n = int(self.need("num_hidden_layers"))
        if types := self.get("layer_types", "layers_block_type"):
            labels = [_normalise_layer_label(t, self.source or self.name) for t in types]
        elif types := self.get("attn_type_list"):
            # MiniMax: 1 = softmax attention, 0 = lightning (linear) attention.
            labels = ["full_attention" if t == 1 else "linear" for t in types]
        elif self.get("sliding_window_pattern"):
            # Gemma 3: every `pattern`-th layer is global, the others slide.
            pattern = int(self.get("sliding_window_pattern"))
            labels = [
                "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                for i in range(n)
            ]
        elif self.get("sliding_window") and self.get("use_sliding_window", default=True):
            labels = ["sliding_attention"] * n
        else:
            labels = ["full_attention"] * n
        if len(labels) != n:
            raise HkvError(
                f"{self.source or self.name}: {len(labels)} layer types listed for "
                f"num_hidden_layers={n}; the two must agree"
            )
        return labels

    def layer_groups(self, hidden: int, heads: int) -> list[LayerGroup]:
        labels = self.layer_kinds()
        n_full = labels.count("full_attention")
        n_slide = labels.count("sliding_attention")
        n_linear = labels.count("linear")
        if self.get("kv_lora_rank"):
            latent = int(self.need("kv_lora_rank")) + int(self.need("qk_rope_head_dim"))
            groups = [LayerGroup(LayerKind.MLA, n_full + n_slide, latent)]
        else:
            kv_heads = int(self.get("num_key_value_heads", default=heads))
            per_token = 2 * kv_heads * self.head_dim(hidden, heads)
            window = self.get("sliding_window")
            groups = [
                LayerGroup(LayerKind.FULL, n_full, per_token, kv_heads=kv_heads),
                LayerGroup(
                    LayerKind.SLIDING,
                    n_slide,
                    per_token,
                    kv_heads=kv_heads,
                    window_tokens=int(window) if window else None,
                ),
            ]
        if n_linear:
            groups.append(
                LayerGroup(LayerKind.LINEAR, n_linear, 0, state_values_per_seq=self.linear_state())
            )
        return groups

    def linear_state(self) -> int:
        """Elements of one linear layer's per-sequence state (conv state + recurrent state)."""
        if self.get("linear_num_value_heads"):  # Qwen3-Next gated delta-net
            key_dim = int(self.need("linear_num_key_heads")) * int(self.need("linear_key_head_dim"))
            v_heads = int(self.need("linear_num_value_heads"))
            v_dim = int(self.need("linear_value_head_dim"))
            conv = (2 * key_dim + v_heads * v_dim) * (int(self.need("linear_conv_kernel_dim")) - 1)
            return conv + v_heads * int(self.need("linear_key_head_dim")) * v_dim
        if self.get("mamba_d_state"):  # Jamba-style mamba-1
            d_inner = int(self.need("mamba_expand")) * int(self.need("hidden_size"))
            conv = d_inner * (int(self.need("mamba_d_conv")) - 1)
            return conv + d_inner * int(self.need("mamba_d_state"))
        raise HkvError(
            f"{self.source or self.name}: linear/mamba layers found but their state size is not "
            "derivable; supported: Qwen3-Next (linear_* fields) and Jamba (mamba_* fields)"
        )

    def num_experts(self) -> int:
        return int(self.get(*_EXPERT_KEYS, default=0))

    def embedding_params(self, hidden: int) -> int:
        vocab = int(self.need("vocab_size"))
        tied = bool(self.top.get("tie_word_embeddings", self.c.get("tie_word_embeddings", False)))
        return vocab * hidden * (1 if tied else 2)

    def lm_head_params(self, hidden: int) -> int:
        return int(self.need("vocab_size")) * hidden

    def attention_params(self, hidden: int, heads: int, label: str) -> int:
        if label == "linear":
            return self.linear_params(hidden)
        if self.get("kv_lora_rank"):
            nope, rope = int(self.need("qk_nope_head_dim")), int(self.need("qk_rope_head_dim"))
            v_dim, kv_rank = int(self.need("v_head_dim")), int(self.need("kv_lora_rank"))
            q_rank = self.get("q_lora_rank")
            q = (
                hidden * q_rank + q_rank * heads * (nope + rope)
                if q_rank
                else hidden * heads * (nope + rope)
            )
            kv = hidden * (kv_rank + rope) + kv_rank * heads * (nope + v_dim)
            return q + kv + heads * v_dim * hidden
        head_dim = self.head_dim(hidden, heads)
        kv_heads = int(self.get("num_key_value_heads", default=heads))
        return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim

    def linear_params(self, hidden: int) -> int:
        if self.get("linear_num_value_heads"):
            key_dim = int(self.need("linear_num_key_heads")) * int(self.need("linear_key_head_dim"))
            v_heads = int(self.need("linear_num_value_heads"))
            value_dim = v_heads * int(self.need("linear_value_head_dim"))
            in_proj = hidden * (2 * key_dim + 2 * value_dim + 2 * v_heads)
            return in_proj + value_dim * hidden
        d_inner = int(self.get("mamba_expand", default=2)) * hidden
        return 3 * hidden * d_inner

    def mlp_params(self, hidden: int, layer: int) -> tuple[int, int]:
        """(total, active) parameters of layer `layer`'s MLP: dense or mixture of experts."""
        experts = self.num_experts()
        dense_layers = int(self.get("first_k_dense_replace", default=0))
        if not experts or layer < dense_layers:
            dense = 3 * hidden * int(self.need("intermediate_size"))
            return dense, dense
        expert_inter = int(self.get("moe_intermediate_size", "intermediate_size"))
        one_expert = 3 * hidden * expert_inter
        shared = 3 * hidden * self.shared_intermediate(expert_inter)
        router = hidden * experts
        top_k = int(self.need("num_experts_per_tok"))
        return experts * one_expert + shared + router, top_k * one_expert + shared + router

    def shared_intermediate(self, expert_inter: int) -> int:
        if n_shared := self.get("n_shared_experts"):
            return int(n_shared) * expert_inter
        return int(
            self.get("shared_expert_intermediate_size", "shared_intermediate_size", default=0)
        )

    def params_per_model(self, hidden: int, heads: int) -> tuple[int, int, int]:
        attn = total = active = 0
        for layer, label in enumerate(self.layer_kinds()):
            attn += self.attention_params(hidden, heads, label)
            mlp_total, mlp_active = self.mlp_params(hidden, layer)
            total += mlp_total
            active += mlp_active
        return attn, total, active


def _normalise_layer_label(label: str, source: str) -> str:
    label = str(label).lower()
    if label in ("full_attention", "attention", "global", "full"):
        return "full_attention"
    if label in ("sliding_attention", "sliding", "local", "chunked_attention"):
        return "sliding_attention"
    if label in ("linear_attention", "mamba", "linear", "mamba2"):
        return "linear"
    raise HkvError(
        f"{source}: unknown layer type {label!r} in layer_types; hkv knows full_attention, "
        "sliding_attention, linear_attention and mamba"
    )
