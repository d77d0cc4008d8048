"""Reading a Hugging Face `config.json` into the fields of a `ModelSpec`.

One method per thing derived: layer kinds and groups, head size, native dtype, experts and the
parameter counts (from the dimensions alone: norms, biases and MTP modules left out, within a
percent of the published totals for the shipped configs).
"""

from __future__ import annotations

from typing import Any

from hkv.errors import HkvError
from hkv.models.layers import LayerGroup, LayerKind

POSITIVE_FIELDS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size")

_EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")
SANE_SPEC = (("num_kv_heads", 1), ("head_dim", 1), ("num_experts", 0), ("num_experts_per_tok", 0),
             ("max_position_embeddings", 0), ("total_params", 1), ("active_params", 1))  # fmt: skip
"""Derived `ModelSpec` fields and their least values (0 KV heads divided by zero later on)."""


class HFConfigReader:
    """Reads one HF config dict; one method per thing it derives."""

    def __init__(self, config: dict[str, Any], name: str, source: str):
        self.name = name
        self.source = source
        if not isinstance(config, dict):
            raise HkvError(f"{self.where}: a config is a JSON object, got {type(config).__name__}")
        text = config.get("text_config")
        self.c = text if isinstance(text, dict) else config
        self.top = config
        for key in POSITIVE_FIELDS:
            self.need_positive(key)

    @property
    def where(self) -> str:
        return self.source or self.name

    def need(self, key: str) -> Any:
        if key not in self.c or self.c[key] is None:
            raise HkvError(f"{self.where}: config field {key!r} is missing")
        return self.c[key]

    def need_positive(self, key: str) -> int:
        """A required field that must be a whole number >= 1 (and below 2**40)."""
        value = self.need(key)
        ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 1 << 40
        if not ok:
            raise HkvError(
                f"{self.where}: config field {key!r} is {value!r}; expected a count >= 1"
            )
        return value

    def get(self, *keys: str, default: Any = None) -> Any:
        for key in keys:
            if self.c.get(key) is not None:
                return self.c[key]
        return default

    def spec_fields(self) -> dict[str, Any]:
        """Keyword arguments of `ModelSpec` for this config; `HkvError` naming the source when
        an optional field holds something no real config has (text, a list, a zero)."""
        try:
            fields = self._spec_fields()
        except HkvError:  # already says which field
            raise
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError) as exc:
            raise HkvError(
                f"{self.where}: a config field holds a value hkv cannot read "
                f"({type(exc).__name__}: {exc}); check the config against the model's own"
            ) from None
        for key, low in SANE_SPEC:  # what follows from the fields must be a real model's
            if fields[key] < low:
                raise HkvError(
                    f"{self.where}: {key} comes out {fields[key]} from its config fields; "
                    f"expected >= {low}: check the config against the model's own"
                )
        return fields

    def _spec_fields(self) -> dict[str, Any]:
        hidden = int(self.need("hidden_size"))
        heads = int(self.need("num_attention_heads"))
        groups = tuple(g for g in self.layer_groups(hidden, heads) if g.num_layers)
        attn, mlp_total, mlp_active = self.params_per_model(hidden, heads)
        embed = self.embedding_params(hidden)
        architectures = self.top.get("architectures") or ["?"]
        return dict(
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
