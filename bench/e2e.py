"""End to end in transformers: `HkvCache` against `DynamicCache`, decode and multi-turn TTFT.

    PYTHONPATH=. python bench/e2e.py --out data/results/e2e_h200.json      # on an H200 host
    PYTHONPATH=. python bench/e2e.py --quick --out /tmp/e2e_cpu.json       # CPU-sized smoke run

Model: MiniMax-M2.5's architecture with its attention dimensions (hidden 3072, 48 query heads,
8 KV heads, head_dim 128, partial RoPE, qk-norm) but only `--layers` layers (default 4) and
4 routed experts (2 active, intermediate 1536), random bf16 weights. KV per token per layer is
the real model's (4 KiB), so per-layer transfer costs are the real ones; a 62-layer model moves
62/layers times more per step. If this transformers lacks `MiniMaxM2Config`, a Llama config with
the same attention dimensions is used (the result says which).

1. Decode, one sequence: prefill `context` random tokens, then time `--decode-steps` greedy
   steps (one forward each). DynamicCache, then HkvCache with 100/50/32/10 % of the KV blocks hot
   (lossless cold blocks in pinned host RAM, LRU, 1 sink + 2 recent blocks pinned per layer).
   An untimed DynamicCache pass per context warms the kernels first (its last token, against the
   timed pass's, shows whether the model itself is deterministic on this machine).
   Reported: tokens/s, ratio to DynamicCache, peak GPU memory during prefill and during decode
   (`torch.cuda.max_memory_allocated`, reset between phases), bytes moved by the manager.
2. Multi-turn TTFT: turn 1 prefills a `prefix`-token prompt and ends (`finish_turn` demotes the
   session's KV to host); turn 2 adds `--turn-tokens` new tokens. `restore`: the store reloads
   the prefix from host and prefills only the new tokens; `recompute`: a fresh DynamicCache
   prefills prefix + new tokens. Time to the first new token's logits, median of `--repeats`
   after one untimed round.
   The cost model's own estimate for real MiniMax-M2.5 (62 layers) is recorded beside it.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import DynamicCache

from hkv.blocks import BlockMeta, Tier
from hkv.cost import CostModel
from hkv.integrations.transformers import (
    HkvCache,
    HkvCacheSettings,
    HkvSessionStore,
    hot_blocks_for,
)

HOT_FRACTIONS = (1.0, 0.5, 0.32, 0.1)
FULL = {
    "contexts": (8192, 32768),
    "prefixes": (2048, 8192, 32768),
    "dims": {"hidden_size": 3072, "num_attention_heads": 48, "num_kv_heads": 8, "head_dim": 128},
    "experts": {"num_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 1536},
    "block_tokens": 256,
    "dtype": torch.bfloat16,
}
QUICK = {
    "contexts": (512, 1024),
    "prefixes": (256, 512),
    "dims": {"hidden_size": 128, "num_attention_heads": 4, "num_kv_heads": 2, "head_dim": 32},
    "experts": {"num_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 64},
    "block_tokens": 32,
    "dtype": torch.float32,
}
VOCAB = 512


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_bytes() -> int | None:
    return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None


def build_model(layers: int, params: dict[str, Any], device: torch.device) -> tuple[Any, str]:
    """MiniMax-M2 (or, lacking it, Llama) with the given dims and random weights."""
    try:
        from transformers import MiniMaxM2ForCausalLM

        from hkv.tiny_model import TinyMiniMaxSettings, tiny_config

        tokenizer = type(
            "Tok", (), {"__len__": lambda s: VOCAB, "bos_token_id": 1, "eos_token_id": 2}
        )
        settings = TinyMiniMaxSettings(
            num_layers=layers,
            max_position_embeddings=65536,
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
            num_hidden_layers=layers,
            num_attention_heads=d["num_attention_heads"],
            num_key_value_heads=d["num_kv_heads"],
            head_dim=d["head_dim"],
            max_position_embeddings=65536,
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
def decode_case(model, cache, context: int, steps: int, device) -> dict[str, Any]:
    ids = tokens(context, device)
    reset_peak()
    sync()
    start = time.perf_counter()
    logits = model(ids, past_key_values=cache, use_cache=True).logits[:, -1:]
    sync()
    prefill_s = time.perf_counter() - start
    peak_prefill = peak_bytes()
    reset_peak()
    next_id = logits.argmax(-1)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        logits = model(next_id, past_key_values=cache, use_cache=True).logits
        next_id = logits[:, -1:].argmax(-1)
    sync()
    decode_s = time.perf_counter() - start
    return {
        "prefill_s": round(prefill_s, 4),
        "decode_tokens_per_s": round(steps / decode_s, 3),
        "peak_prefill_bytes": peak_prefill,
        "peak_decode_bytes": peak_bytes(),
        "last_token": int(next_id.item()),
    }


def decode_bench(model, num_layers, params, args, device) -> list[dict[str, Any]]:
    rows = []
    for context in params["contexts"]:
        # Untimed first pass: kernels pick and cache their plans per shape on first use (cuDNN
        # attention does), which would otherwise be charged to whichever cache runs first.
        warm = decode_case(model, DynamicCache(), context, args.decode_steps, device)
        base = decode_case(model, DynamicCache(), context, args.decode_steps, device)
        base["repeat_same_last_token"] = warm["last_token"] == base["last_token"]
        rows.append({"context": context, "cache": "dynamic", **base})
        print(json.dumps(rows[-1]), flush=True)
        for fraction in HOT_FRACTIONS:
            settings = HkvCacheSettings(block_tokens=params["block_tokens"], hot_blocks=1)
            total = context + args.decode_steps + 1
            hot = hot_blocks_for(fraction, total, num_layers, settings)
            per_layer = -(-total // settings.block_tokens)
            settings = HkvCacheSettings(
                block_tokens=settings.block_tokens,
                hot_blocks=hot,
                host_blocks=per_layer * num_layers + 8,
            )
            cache = HkvCache(num_layers, settings)
            row = decode_case(model, cache, context, args.decode_steps, device)
            stats = cache.manager.stats
            rows.append(
                {
                    "context": context,
                    "cache": "hkv",
                    "hot_fraction": fraction,
                    "hot_blocks": hot,
                    "blocks_total": per_layer * num_layers,
                    **row,
                    "same_last_token_as_dynamic": row["last_token"] == base["last_token"],
                    "tokens_per_s_vs_dynamic": round(
                        row["decode_tokens_per_s"] / base["decode_tokens_per_s"], 4
                    ),
                    "peak_decode_vs_dynamic": _ratio(
                        row["peak_decode_bytes"], base["peak_decode_bytes"]
                    ),
                    "bytes_moved": dict(stats.to_dict()["bytes_moved"]),
                    "host_hits": stats.hits["host"],
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            del cache
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return rows


def _ratio(a: int | None, b: int | None) -> float | None:
    return None if a is None or not b else round(a / b, 4)


@torch.no_grad()
def first_token_s(model, ids: torch.Tensor, cache) -> float:
    sync()
    start = time.perf_counter()
    model(ids, past_key_values=cache, use_cache=True).logits[:, -1].argmax(-1).item()
    sync()
    return time.perf_counter() - start


@torch.no_grad()
def ttft_bench(model, num_layers, params, args, device) -> list[dict[str, Any]]:
    rows = []
    cost = CostModel.default()
    for prefix in params["prefixes"]:
        new = tokens(args.turn_tokens, device, seed=1)
        turn1 = tokens(prefix, device)
        blocks = -(-(prefix + args.turn_tokens) // params["block_tokens"]) * num_layers
        settings = HkvCacheSettings(
            block_tokens=params["block_tokens"], hot_blocks=blocks + 8, host_blocks=blocks + 8
        )
        restore, recompute = [], []
        for _ in range(args.repeats + 1):  # the first round warms the kernels up, untimed
            store = HkvSessionStore(num_layers, settings)
            cache = store.cache_for("s", turn1)
            model(turn1, past_key_values=cache, use_cache=True)
            store.finish_turn("s", cache, turn1)
            sync()
            full = torch.cat([turn1, new], dim=1)
            start = time.perf_counter()
            cache = store.cache_for("s", full)
            restore.append(time.perf_counter() - start + first_token_s(model, new, cache))
            assert store.last_decision["action"] == "load", store.last_decision
            assert cache.layers[0].new_tokens[-1] == args.turn_tokens
            del store, cache
            recompute.append(first_token_s(model, full, DynamicCache()))
        r, c = statistics.median(restore[1:]), statistics.median(recompute[1:])
        estimate = [
            cost.decide(BlockMeta(tokens=256, position=p, tier=Tier.HOST), Tier.HOST, "bf16")
            for p in range(0, prefix, 256)
        ]
        rows.append(
            {
                "prefix": prefix,
                "turn_tokens": args.turn_tokens,
                "restore_ttft_s": round(r, 5),
                "recompute_ttft_s": round(c, 5),
                "recompute_over_restore": round(c / r, 3),
                "cost_model_minimax_m25": {
                    "load_s": round(sum(d.load_s for d in estimate), 5),
                    "recompute_s": round(sum(d.recompute_s for d in estimate), 5),
                },
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def link_gbps(device: torch.device) -> float | None:
    """Pinned host -> GPU bulk copy of 1 GiB, measured in this run."""
    if device.type != "cuda":
        return None
    host = torch.empty(2**30, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty_like(host, device=device)
    gpu.copy_(host)
    sync()
    start = time.perf_counter()
    gpu.copy_(host, non_blocking=True)
    sync()
    return round(2**30 / (time.perf_counter() - start) / 1e9, 2)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="CPU-sized dims and contexts")
    parser.add_argument("--layers", type=int, default=None, help="model layers (4; quick: 2)")
    parser.add_argument("--decode-steps", type=int, default=None, help="32; quick: 8")
    parser.add_argument("--turn-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    params = QUICK if args.quick else FULL
    num_layers = args.layers or (2 if args.quick else 4)
    args.decode_steps = args.decode_steps or (8 if args.quick else 32)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    model, arch = build_model(num_layers, params, device)
    started = time.time()
    result = {
        "bench": "e2e",
        "quick": args.quick,
        "machine": {
            "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
            "host_to_gpu_pinned_gbps": link_gbps(device),
            "platform": platform.platform(),
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "model": {
            "architecture": arch,
            "layers": num_layers,
            **params["dims"],
            **params["experts"],
            "dtype": str(params["dtype"]).removeprefix("torch."),
            "weights": "random",
        },
        "params": {
            "block_tokens": params["block_tokens"],
            "decode_steps": args.decode_steps,
            "hot_fractions": list(HOT_FRACTIONS),
            "sink_blocks": 1,
            "recent_blocks": 2,
            "cold_format": "passthrough (lossless)",
            "policy": "lru",
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name, bench in (("decode", decode_bench), ("multi_turn_ttft", ttft_bench)):
        try:
            result[name] = bench(model, num_layers, params, args, device)
        except Exception as exc:  # recorded in the results (one device run must say what broke)
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{name} failed: {exc!r}", file=sys.stderr)
        result["wall_s"] = round(time.time() - started, 1)
        args.out.write_text(json.dumps(result, indent=2) + "\n")  # partial results survive a kill
    return result


if __name__ == "__main__":
    main()
