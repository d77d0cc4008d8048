"""The memory plan: budgets, tensor parallelism, the article's offload formula, what would fit."""

from __future__ import annotations

import pytest

from hkv.errors import HkvError
from hkv.models.model_spec import ModelSpec
from hkv.planning.plan import (
    GIB,
    PlanInputs,
    plan,
    tensor_parallel_problem,
    tensor_parallel_sizes,
    weights_bytes,
)

MINIMAX = ModelSpec.load("minimax-m2.5")


def test_weights_by_dtype_match_the_published_sizes():
    # MiniMax-M2.5's published sizes: ~458 GB bf16, ~229 GB fp8, ~115 GB at 4 bits (+ embeddings
    # in bf16, group scales)
    assert weights_bytes(MINIMAX, "bf16") == pytest.approx(458e9, rel=0.01)
    assert weights_bytes(MINIMAX, "fp8") == pytest.approx(230e9, rel=0.01)
    assert 115e9 < weights_bytes(MINIMAX, "int4") < 122e9


def test_article_setup_does_not_fit_because_of_the_weights():
    p = plan(
        MINIMAX, gpus=2, gpu_mem_gib=48, cpu_ram_gib=64, max_model_len=32768, weights_dtype="int4"
    )
    assert not p.fits
    assert p.reasons[0].startswith("weights alone")
    assert p.max_seqs_on_gpu == 0
    assert p.offload_bytes == 0 and p.offload_bound_by == "does_not_fit"
    assert "--kv-offloading-size" not in p.vllm_args
    assert any(s.startswith("4 x 48 GiB GPUs with int4 weights fit") for s in p.suggestions)


def test_kv_budget_and_sequences_by_hand():
    inputs = PlanInputs(
        gpus=2,
        gpu_mem_gib=140,
        cpu_ram_gib=1024,
        max_model_len=32768,
        max_num_seqs=64,
        gpu_memory_utilization=0.9,
        reserve_gib=2,
    )
    p = plan(MINIMAX, inputs)
    w_per_gpu = -(-weights_bytes(MINIMAX, "fp8") // 2)
    budget_per_gpu = int(140 * GIB * 0.9) - w_per_gpu - 2 * GIB
    seq_per_gpu = 8_321_499_136 // 2  # 4 of the 8 KV heads on each GPU
    assert p.gpu_kv_budget_bytes == 2 * budget_per_gpu
    assert p.kv_bytes_per_token_per_gpu == 126_976
    assert p.max_seqs_on_gpu == budget_per_gpu // seq_per_gpu
    assert p.fits
    overflow = (64 - p.max_seqs_on_gpu) * 8_321_499_136
    assert p.offload_bytes == overflow and p.offload_bound_by == "gpu_overflow"
    assert "--kv-offloading-size" in p.vllm_args


def test_more_ranks_than_kv_heads_replicate_a_head():
    p = plan(MINIMAX, gpus=16, gpu_mem_gib=80, cpu_ram_gib=256, max_model_len=8192)
    assert p.kv_bytes_per_token_per_gpu == 253_952 // 8  # one of 8 heads per GPU, not 1/16
    assert any("replicated" in w for w in p.warnings)


def test_offload_formula_bound_by_host_ram():
    # the article's failure: percent 0.8 with 32 GB of RAM
    p = plan(MINIMAX, gpus=2, cpu_ram_gib=32, max_model_len=32768, offload_percent=0.8)
    assert p.offload_requested_bytes == int(p.kv_demand_bytes * 0.8)
    assert p.offload_bytes == int(32 * GIB * 0.7)
    assert p.offload_bound_by == "host_ram"
    assert any("caps it at 0.7 x 32 GiB" in w for w in p.warnings)


def test_offload_formula_bound_by_percent():
    p = plan(MINIMAX, gpus=2, cpu_ram_gib=1024, max_model_len=32768, offload_percent=0.1)
    assert p.offload_bytes == int(p.kv_demand_bytes * 0.1)
    assert p.offload_bound_by == "offload_percent"


def test_fp8_kv_halves_the_kv_and_is_passed_to_vllm():
    p = plan(MINIMAX, gpus=2, cpu_ram_gib=64, max_model_len=32768, kv_cache_dtype="fp8")
    assert p.kv_bytes_per_token == 126_976
    assert p.vllm_args[p.vllm_args.index("--kv-cache-dtype") + 1] == "fp8"


def test_context_above_the_model_limit_warns():
    p = plan(MINIMAX, gpus=2, cpu_ram_gib=64, max_model_len=300_000)
    assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN" in w for w in p.warnings)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"gpus": 5}, "48 attention heads, which 5 ranks cannot split evenly; use one of 1, 2, 4"),
        ({"gpus": 3}, "8 KV heads, which 3 ranks cannot split evenly; use one of 1, 2, 4, 8, 16"),
        ({"gpus": 0}, "gpus: got 0"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization: got 1.5"),
        ({"offload_percent": 2}, "offload_percent: got 2"),
        ({"weights_dtype": "int3"}, "weights_dtype: got 'int3'; use one of bf16, fp8, int4"),
    ],
)
def test_bad_inputs_name_the_field(overrides, message):
    with pytest.raises(HkvError, match=message):
        plan(MINIMAX, cpu_ram_gib=64, **overrides)


def test_blocks_follow_vllms_rounding_per_gpu_and_over_ranks():
    spec = ModelSpec.load("minimax-m2.5")
    p = plan(spec, gpus=2, cpu_ram_gib=256.0, offload_gib=8.0, weights_dtype="int4",
             max_model_len=32768, max_num_seqs=4)  # fmt: skip
    assert p.fits
    block_per_gpu = 16 * p.kv_bytes_per_token_per_gpu  # 4 of the 8 KV heads on each GPU
    assert p.gpu_kv_blocks == p.gpu_kv_budget_bytes // 2 // block_per_gpu
    # vLLM's CPU tier: whole blocks of every rank's share, so a little under 4 GiB a rank
    assert p.offload_blocks == (8 << 30) // (2 * block_per_gpu) == 2114
    assert p.offload_bytes_per_rank == 2114 * block_per_gpu < 4 << 30
    with pytest.raises(HkvError, match="block_tokens"):
        plan(spec, block_tokens=0)


@pytest.mark.parametrize(
    ("model", "accepted", "refused"),
    [
        # GQA: 48 query heads, 8 KV heads: split the KV heads (1-8) or replicate them (16)
        ("minimax-m2.5", [1, 2, 4, 8, 16], [3, 5, 6, 12, 32]),
        # MLA: one latent per token on every rank; only the 128 query heads must split
        ("deepseek-v3", [1, 2, 4, 8, 16], [3, 6, 12]),
    ],
)
def test_tensor_parallel_sizes_follow_vllms_rules_per_attention_type(model, accepted, refused):
    spec = ModelSpec.load(model)
    assert all(tensor_parallel_problem(spec, tp) is None for tp in accepted)
    assert all(tensor_parallel_problem(spec, tp) for tp in refused)
    assert tensor_parallel_sizes(spec) == accepted


def test_keywords_override_the_inputs_given_and_unknown_ones_are_named():
    """`plan(spec, inputs, gpus=8)` plans for 8 GPUs (the keywords were dropped when `inputs`
    came too: a 1-GPU plan that did not fit, unsaid)."""
    both = plan(MINIMAX, PlanInputs(cpu_ram_gib=64), gpus=8, gpu_mem_gib=141)
    alone = plan(MINIMAX, gpus=8, gpu_mem_gib=141, cpu_ram_gib=64)
    assert both.to_dict() == alone.to_dict() and both.fits
    for inputs in (None, PlanInputs(cpu_ram_gib=64)):
        with pytest.raises(HkvError, match="plan: unknown field 'gpu'; accepted fields: gpus, "):
            plan(MINIMAX, inputs, gpu=8)
