"""KV and parameter arithmetic for each layer kind, against values computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hkv.errors import HkvError
from hkv.models.model_spec import LayerKind, ModelSpec

MIB = 1 << 20
GIB = 1 << 30


def spec_of(config: dict, name: str = "tiny") -> ModelSpec:
    return ModelSpec.from_hf_config(config, name=name)


def tiny(**fields) -> dict:
    base = {
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "vocab_size": 100,
        "intermediate_size": 128,
    }
    return base | fields


def test_minimax_kv_bytes_match_the_design_numbers():
    spec = ModelSpec.load("minimax-m2.5")
    # 62 layers x 2 (K, V) x 8 KV heads x 128 head_dim x 2 bytes
    assert spec.kv_bytes_per_token() == 62 * 2 * 8 * 128 * 2 == 253_952
    assert spec.kv_bytes_per_token("fp8") == 126_976
    assert spec.kv_bytes_per_seq(32_768) == 8_321_499_136
    assert spec.kv_bytes_per_seq(32_768) / GIB == pytest.approx(7.75)
    assert spec.kv_bytes_per_seq(196_608) / GIB == pytest.approx(46.5)
    assert spec.kv_bytes_per_seq(512) == 124 * MIB
    assert [g.kind for g in spec.layer_groups] == [LayerKind.FULL]
    assert spec.num_experts == 256 and spec.num_experts_per_tok == 8
    assert spec.num_mtp_modules == 3
    assert spec.native_weights_dtype == "fp8"
    assert spec.hub_id == "MiniMaxAI/MiniMax-M2.5"


def test_kv_cache_dtypes_are_vllms_one_byte_names_or_refused():
    spec = ModelSpec.load("minimax-m2.5")
    for name in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"):
        assert spec.kv_dtype_bytes(name) == 1
    assert spec.kv_dtype_bytes("auto") == spec.kv_dtype_bytes("bf16") == 2
    for junk in ("fp8_anything", "FP8", 8, None):
        with pytest.raises(HkvError, match="kv_cache_dtype: got .*; expected auto or one of"):
            spec.kv_dtype_bytes(junk)
    with pytest.raises(HkvError, match="'fp8_ds_mla'.*minimax-m2.5 has no MLA: use fp8"):
        spec.kv_dtype_bytes("fp8_ds_mla")
    deepseek = ModelSpec.load("deepseek-v3")  # 656 bytes a token a layer (vLLM's flashmla_sparse)
    assert deepseek.kv_bytes_per_token("fp8_ds_mla") == 656 * deepseek.num_layers


def test_shipped_model_is_found_by_hub_id_too():
    assert ModelSpec.load("MiniMaxAI/MiniMax-M2.5").name == "minimax-m2.5"


def test_sliding_window_layers_hold_at_most_the_window():
    spec = ModelSpec.load("gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2  # K and V, 8 KV heads, head_dim 64, bf16
    by_group = spec.kv_bytes_per_token_by_group()
    assert by_group == {"full_attention": 18 * per_layer, "sliding_attention": 18 * per_layer}
    # 18 full layers hold every token, 18 sliding layers only the last 128
    assert spec.kv_bytes_per_seq(32_768) == 18 * per_layer * 32_768 + 18 * per_layer * 128
    assert spec.kv_bytes_per_seq(100) == 36 * per_layer * 100


def test_mla_caches_one_latent_per_token_and_is_not_sharded():
    spec = ModelSpec.load("deepseek-v3")
    assert spec.is_mla
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes
    assert spec.kv_bytes_per_token() == 61 * 576 * 2 == 70_272
    assert spec.kv_shard_fraction(8) == 1.0


def test_gated_deltanet_layers_hold_a_constant_state():
    config = tiny(
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        linear_num_key_heads=2,
        linear_key_head_dim=4,
        linear_num_value_heads=4,
        linear_value_head_dim=4,
        linear_conv_kernel_dim=4,
    )
    spec = spec_of(config)
    conv = (2 * 2 * 4 + 4 * 4) * (4 - 1)  # (2 key dims + value dim) x (kernel - 1)
    recurrent = 4 * 4 * 4  # value heads x key_head_dim x value_head_dim
    state = 3 * (conv + recurrent) * 2
    full_per_token = 1 * 2 * 2 * 8 * 2
    assert spec.kv_bytes_per_seq(1) == full_per_token + state
    assert spec.kv_bytes_per_seq(1000) == 1000 * full_per_token + state


def test_jamba_mamba_layers_hold_a_constant_state():
    config = tiny(
        layers_block_type=["mamba", "attention", "mamba", "mamba"],
        mamba_expand=2,
        mamba_d_conv=4,
        mamba_d_state=8,
    )
    spec = spec_of(config)
    d_inner = 2 * 64
    state = 3 * (d_inner * 3 + d_inner * 8) * 2
    assert spec.kv_bytes_per_seq(10) == 10 * (2 * 2 * 8 * 2) + state


def test_gemma_style_pattern_makes_every_nth_layer_global():
    spec = spec_of(tiny(num_hidden_layers=6, sliding_window=16, sliding_window_pattern=3))
    groups = {g.kind: g.num_layers for g in spec.layer_groups}
    assert groups == {LayerKind.FULL: 2, LayerKind.SLIDING: 4}


@pytest.mark.parametrize("name", ["minimax-m2.5", "gpt-oss-120b", "deepseek-v3"])
def test_parameter_counts_match_the_published_ones(name):
    spec = ModelSpec.load(name)
    meta = json.loads(Path(spec.source).with_name("hkv.json").read_text())
    assert spec.total_params == pytest.approx(meta["published_total_params"], rel=0.01)
    assert spec.active_params == pytest.approx(meta["published_active_params"], rel=0.07)


def test_dense_model_parameters_by_hand():
    spec = spec_of(tiny(tie_word_embeddings=True))
    attention = 2 * 64 * 4 * 8 + 2 * 64 * 2 * 8  # q, o + k, v
    mlp = 3 * 64 * 128
    assert spec.total_params == 4 * (attention + mlp) + 100 * 64


def test_unknown_model_lists_the_shipped_ones():
    with pytest.raises(HkvError, match="shipped models: .*minimax-m2.5"):
        ModelSpec.load("no-such-model")


def test_missing_field_is_named():
    config = tiny()
    del config["hidden_size"]
    with pytest.raises(HkvError, match="'hidden_size' is missing"):
        spec_of(config)


def test_layer_types_must_match_the_layer_count():
    with pytest.raises(HkvError, match="3 layer types listed for num_hidden_layers=4"):
        spec_of(tiny(layer_types=["full_attention"] * 3))


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 64,\n oops}')
    with pytest.raises(HkvError, match="not valid JSON .* line 2"):
        ModelSpec.load(path)
