"""The e2e benchmark's model (MiniMax-M2.5's attention and expert dims, random weights), its
inputs, and `Memory`, the GPU memory of one case measured over its start."""

from __future__ import annotations

import contextlib
import gc
from typing import Any

import torch

from hkv.monitor import GpuPeakSampler

HOT_FRACTIONS = (1.0, 0.5, 0.32, 0.1)


SESSION_HOT_FRACTIONS = (1.0, 0.5, 0.32, 0.25, 0.1)
"""The sessions workload adds a point between 32 % and 10 % to its frontier."""


FULL = {
    "layers": 8,
    "contexts": (8192, 32768, 131072),
    "prefixes": (2048, 8192, 32768, 65536),
    "sessions": {"count": 16, "context": 8192, "turn_tokens": 64, "decode_tokens": 32},
    "dims": {"hidden_size": 3072, "num_attention_heads": 48, "num_kv_heads": 8, "head_dim": 128},
    "experts": {"num_experts": 16, "num_experts_per_tok": 8, "intermediate_size": 1536},
    "block_tokens": 256,
    "dtype": torch.bfloat16,
}


QUICK = {
    "layers": 2,
    "contexts": (512, 1024),
    "prefixes": (256, 512),
    "sessions": {"count": 4, "context": 256, "turn_tokens": 16, "decode_tokens": 4},
    "dims": {"hidden_size": 128, "num_attention_heads": 4, "num_kv_heads": 2, "head_dim": 32},
    "experts": {"num_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 64},
    "block_tokens": 32,
    "dtype": torch.float32,
}


VOCAB = 512


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Memory:
    """GPU memory of one case, measured over the case's start (weights and nothing else):
    `resident()` after the KV is in place (allocator bytes, and nvitop's device bytes with
    PyTorch's cache emptied), `timed()` around the timed phase (peaks of both)."""

    def __enter__(self) -> Memory:
        self.resident_bytes = self.resident_nvitop_bytes = None
        self.peak_bytes = self.peak_nvitop_bytes = None
        gc.collect()  # earlier cases' caches must be gone, not waiting for the collector
        if torch.cuda.is_available():
            sync()
            torch.cuda.empty_cache()
            self.base = torch.cuda.memory_allocated()
        self.sampler = GpuPeakSampler().__enter__()
        self.base_nvitop = self.sampler.peak_bytes
        return self

    def __exit__(self, *exc: object) -> None:
        self.sampler.__exit__(*exc)

    def _over(self, value: int | None, base: int | None) -> int | None:
        return None if value is None or base is None else value - base

    def resident(self) -> None:
        if torch.cuda.is_available():
            sync()
            self.resident_bytes = torch.cuda.memory_allocated() - self.base
            torch.cuda.empty_cache()
            self.resident_nvitop_bytes = self._over(self.sampler.now(), self.base_nvitop)

    @contextlib.contextmanager
    def timed(self):
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self.sampler.restart()
        yield
        sync()
        if torch.cuda.is_available():
            self.peak_bytes = torch.cuda.max_memory_allocated() - self.base
        self.peak_nvitop_bytes = self._over(self.sampler.now(peak=True), self.base_nvitop)

    def fields(self, prefix: str) -> dict[str, Any]:
        return {
            f"{prefix}_resident_bytes": self.resident_bytes,
            f"{prefix}_resident_nvitop_bytes": self.resident_nvitop_bytes,
            f"{prefix}_peak_bytes": self.peak_bytes,
            f"{prefix}_peak_nvitop_bytes": self.peak_nvitop_bytes,
        }


def build_model(num_layers: int, params: dict[str, Any], device: torch.device) -> tuple[Any, str]:
    """MiniMax-M2 (or, lacking it, Llama) with the given dims and random weights."""
    try:
        from transformers import MiniMaxM2ForCausalLM

        from hkv.tiny_model import TinyMiniMaxSettings, tiny_config

        tokenizer = type(
            "Tok", (), {"__len__": lambda s: VOCAB, "bos_token_id": 1, "eos_token_id": 2}
        )
        settings = TinyMiniMaxSettings(
            num_layers=num_layers,
            max_position_embeddings=262144,
            **params["dims"],
            **params["experts"],
        )
        config, cls, name = tiny_config(settings, tokenizer()), MiniMaxM2ForCausalLM, "minimax_m2"
    except ImportError:
        from transformers import LlamaConfig, LlamaForCausalLM

        d = params["dims"]
        config = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=d["hidden_size"],
            intermediate_size=params["experts"]["intermediate_size"],
            num_hidden_layers=num_layers,
            num_attention_heads=d["num_attention_heads"],
            num_key_value_heads=d["num_kv_heads"],
            head_dim=d["head_dim"],
            max_position_embeddings=262144,
        )
        cls, name = LlamaForCausalLM, "llama (MiniMaxM2 missing in this transformers)"
    torch.manual_seed(0)
    with torch.device(device):
        model = cls(config).to(params["dtype"]).eval()
    return model, name


def tokens(n: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, n), generator=gen).to(device)


@torch.no_grad()
def forward(model, ids: torch.Tensor, cache) -> torch.Tensor:
    """The next greedy token after `ids` (logits of the last position only), without autograd
    (with it, a long prefill keeps every layer's activations: the 64K TTFT case ran out of
    memory that way, in the untimed prefill of its "resident" cache)."""
    out = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1:].argmax(-1)


def blocks_of(tokens_: int, block_tokens: int) -> int:
    return -(-tokens_ // block_tokens)


def ratio_of(a: int | None, b: int | None) -> float | None:
    return None if a is None or not b else round(a / b, 4)


def saved_share(used: int | None, baseline: int | None) -> float | None:
    return None if used is None or not baseline else round(1 - used / baseline, 4)
