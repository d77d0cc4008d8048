"""StaticBlockGraphs on a machine without CUDA: what it refuses, and why, before any capture.
Capture and replay are GPU tests (tests/test_gpu_graphs.py)."""

from __future__ import annotations

import pytest
import torch

from hkv.errors import HkvError
from hkv.integrations.transformers import StaticBlockGraphs
from hkv.tiny_model import TinyMiniMaxSettings, tiny_config

Tok = type("Tok", (), {"__len__": lambda self: 64, "bos_token_id": 1, "eos_token_id": 2})


@pytest.fixture(scope="module")
def cpu_model():
    from transformers import MiniMaxM2ForCausalLM

    settings = TinyMiniMaxSettings(
        num_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=2, head_dim=16
    )
    return MiniMaxM2ForCausalLM(tiny_config(settings, Tok())).eval()


def test_a_model_on_cpu_is_refused_with_what_to_do(cpu_model) -> None:
    with pytest.raises(HkvError, match=r"weights on cpu.*CUDA device.*model.to\('cuda'\)"):
        StaticBlockGraphs(cpu_model, token_counts=(1,))
    assert all("forward" not in layer.mlp.__dict__ for layer in cpu_model.model.layers)


@pytest.mark.parametrize("counts", [(), (0,), (1, -4), ("64",), (True,), 7])
def test_token_counts_must_be_positive_ints(cpu_model, counts) -> None:
    with pytest.raises(HkvError, match="token_counts .*expected token counts >= 1"):
        StaticBlockGraphs(cpu_model, token_counts=counts)


@pytest.mark.parametrize("batch_size", [0, -1, 1.0, True])
def test_batch_size_must_be_a_positive_int(cpu_model, batch_size) -> None:
    with pytest.raises(HkvError, match="batch_size"):
        StaticBlockGraphs(cpu_model, token_counts=(1,), batch_size=batch_size)


def test_a_model_without_decoder_layers_names_what_was_expected() -> None:
    with pytest.raises(HkvError, match=r"Linear has no decoder layers at `model.model.layers`"):
        StaticBlockGraphs(torch.nn.Linear(4, 4))


def test_a_layer_without_a_feed_forward_block_is_named(cpu_model) -> None:
    holder = torch.nn.Module()
    holder.model = torch.nn.Module()
    holder.model.layers = torch.nn.ModuleList([cpu_model.model.layers[0], torch.nn.Identity()])
    with pytest.raises(HkvError, match="layer 1 \\(Identity\\) has no feed-forward block"):
        StaticBlockGraphs(holder)


def test_a_model_graphed_already_is_refused_until_the_other_is_removed(cpu_model) -> None:
    block = cpu_model.model.layers[1].mlp
    block.forward = block.forward  # what another StaticBlockGraphs leaves in place
    try:
        with pytest.raises(HkvError, match="layer 1's feed-forward block already has its forward"):
            StaticBlockGraphs(cpu_model, token_counts=(1,))
    finally:
        del block.forward
