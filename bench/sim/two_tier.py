"""The two-tier model behind the GPU benchmark's prediction (`python -m bench.vllm_gpu_sim`).

Bench-only (nothing in hkv, its CLI or its notebooks runs it). The requests are the GPU
benchmark's own (`hkv.sim.anchor.trace_requests`, same seed): every
prompt is cut into 16-token blocks whose ids chain a hash of the parent id and the block's
tokens, like vLLM's prefix hashes (a partial last block has no id: vLLM neither caches nor
offloads it).

Two tiers, as in vLLM with its OffloadingConnector:
- GPU prefix cache: `gpu_kv_gib` of 512 KiB blocks (8,192), modelled as hkv's `lru` in
  `store="per_request"` mode. Its hits are the prompt's longest GPU-resident prefix; what a request
  stores there it touches afterwards in prefix order, so a finished prompt leaves the GPU tail
  first, like vLLM's free queue (blocks freed in reverse). Requests of one wave run one after
  another here, not side by side: the GPU holds about two waves, which is what lets a session
  hit when it ends one round and opens the next.
- CPU tier: the policy under test at `cpu_gib` of 512 KiB blocks (8 GiB = 16,384), replayed with
  `store="per_request"` (vLLM's `CPUOffloadingManager`: a request's missing blocks are stored in
  one all-or-nothing eviction, its reused blocks touched once, in prefix order).

A request's cached tokens are its GPU prefix plus the CPU-resident blocks that continue it
(vLLM looks up the CPU tier from the end of the GPU hit), at most `prompt_len - 1`. What the
rest costs is `prefill_frac`: the cost model's prefill seconds of every prompt's uncached
tokens, at their positions, over those of the whole prompts. Two policies with the same cached
share can differ there: a token deep in a long prompt attends to everything before it, so a
tier that keeps whole chains of some sessions saves more prefill than one that keeps the heads
of all of them (the H200 engine's wall times follow `prefill_frac`, not the cached share:
`data/results/vllm_h200_steps.json`). What a request waits for its first token is modelled too,
`ttft_frac`: the engine runs a wave's requests first come, first served (vLLM's scheduler fills
each step's 8,192 tokens from the oldest request on), so a request's first token waits for the
uncached prefill of the requests before it in its wave and then its own; `ttft_frac` is the sum
of those waits over the sum with nothing cached. Two policies that leave the same prefill can
differ there: a miss in the first request of a wave delays all four, one in the last request only
itself (on the skewed variant at 8 GiB `auto` leaves 1.4 % less prefill than lru in the model and
waits 1.5 % longer, the engines' sign: `python -m bench.auto_candidates --seeds`). Each request
is replayed alone (`replay` on a one-request trace, policy state kept), so per-turn shares come
out too. vLLM's own `lru` and `arc` are predicted with hkv's `lru` and `arc`. Standard library
and numpy only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from hkv.blocks import BlockMeta
from hkv.cost import CostModel
from hkv.policies import make_policy
from hkv.sim.replay import replay, simulate
from hkv.sim.trace import Request, trace_from_requests

KV_BYTES_PER_TOKEN = 8 * 2 * 8 * 128 * 2
"""8-layer MiniMax-M2.5 dims: layers x (K, V) x KV heads x head_dim x bf16 bytes (32 KiB)."""


def blocks_for_gib(gib: float, block_tokens: int = 16) -> int:
    """Blocks of `block_tokens` tokens that `gib` GiB holds (8 GiB -> 16,384 at 16 tokens)."""
    return int(gib * (1 << 30)) // (KV_BYTES_PER_TOKEN * block_tokens)


class TwoTierReplay:
    """GPU `lru` prefix cache in front of a CPU tier run by `policy`, one request at a time."""

    def __init__(self, policy, gpu_blocks: int, block_tokens: int = 16, cost_model=None):
        self.cpu = policy
        self.gpu = make_policy("lru", gpu_blocks)
        self.block_tokens = block_tokens
        self.cost_model = cost_model
        self.store_failed = self.inserts = self.evictions = 0

    def step(self, request: Request, prompt_len: int) -> int:
        """Cached tokens of `request`; both tiers then see it as vLLM would."""
        ids = request.hash_ids
        gpu_hit = 0
        while gpu_hit < len(ids) and ids[gpu_hit] in self.gpu:
            gpu_hit += 1
        hit = gpu_hit
        while hit < len(ids) and ids[hit] in self.cpu:
            hit += 1
        one = trace_from_requests([request], block_tokens=self.block_tokens)
        replay(one, self.gpu, store="per_request")
        cpu = replay(one, self.cpu, cost_model=self.cost_model, store="per_request")
        self.store_failed += cpu.store_failed
        self.inserts += cpu.inserts
        self.evictions += cpu.evictions
        return min(hit * self.block_tokens, prompt_len - 1)


def predict(
    policy_name: str,
    cpu_blocks: int,
    gpu_blocks: int,
    requests: list[Request],
    turn_requests: list,
    cost_model: CostModel | None = None,
    params: dict | None = None,
) -> dict:
    """Cached shares (all turns, turns > 0) and prefill left of one policy (with hyperparameters
    `params`) at one CPU capacity."""
    cost_model = cost_model or CostModel.default()
    policy = make_policy(policy_name, cpu_blocks, cost_model=cost_model, **(params or {}))
    tiers = TwoTierReplay(policy, gpu_blocks, cost_model=cost_model)
    start = time.perf_counter()
    cached, filled_at = [], None  # the first request whose store evicted from the CPU tier
    for i, (req, tr) in enumerate(zip(requests, turn_requests, strict=True)):
        cached.append(tiers.step(req, tr.prompt_len))
        if filled_at is None and tiers.evictions:
            filled_at = i
    prompt = [tr.prompt_len for tr in turn_requests]
    before = filled_at if filled_at is not None else len(prompt)
    later = [i for i, tr in enumerate(turn_requests) if tr.turn > 0]
    return {
        "policy": policy_name,
        "cpu_blocks": cpu_blocks,
        "gpu_blocks": gpu_blocks,
        "cached_frac": sum(cached) / sum(prompt),
        "prefill_frac": prefill_frac(cached, prompt, cost_model),
        "ttft_frac": ttft_frac(cached, prompt, [tr.wave for tr in turn_requests], cost_model),
        "turn_gt0_cached_frac": sum(cached[i] for i in later) / sum(prompt[i] for i in later),
        "store_gb": tiers.inserts * KV_BYTES_PER_TOKEN * 16 / 1e9,
        "inserts": tiers.inserts,
        "evictions": tiers.evictions,
        "store_failed": tiers.store_failed,
        # until the CPU tier first evicts, every policy that admits what it is offered holds the
        # same blocks: `auto`'s shadows cannot tell `lip` from `lru` before `filled_at`
        "filled_at": filled_at,
        "cached_before_fill": sum(cached[:before]) / max(sum(prompt[:before]), 1),
        "elapsed_s": round(time.perf_counter() - start, 2),
    }


def _prefill_s(cost_model: CostModel, start: int, end: int) -> float:
    """The cost model's prefill seconds of tokens `start` to `end` of a prompt."""
    return cost_model.recompute_s(BlockMeta(end - start, position=start)) if end > start else 0.0


def prefill_frac(cached: list[int], prompt: list[int], cost_model: CostModel) -> float:
    """Prefill seconds of the prompts' uncached tokens (from `cached[i]` to `prompt[i]`) over
    those of the whole prompts, priced by `cost_model` at their positions."""
    left = sum(_prefill_s(cost_model, c, p) for c, p in zip(cached, prompt, strict=True))
    return left / sum(_prefill_s(cost_model, 0, p) for p in prompt)


def wave_waits(own_s: list[float], waves: list[int]) -> list[float]:
    """Each request's wait for its first token in the model: the prefill seconds (`own_s`, in
    submission order) of the requests before it in its wave (`waves[i]`: request i's wave, the
    requests of a wave next to each other) and its own, first come, first served."""
    waits, wave, waited = [], None, 0.0
    for seconds, w in zip(own_s, waves, strict=True):
        if w != wave:
            wave, waited = w, 0.0
        waited += seconds
        waits.append(waited)
    return waits


def ttft_frac(
    cached: list[int], prompt: list[int], waves: list[int], cost_model: CostModel
) -> float:
    """The requests' waits for their first token (`wave_waits`) with `cached[i]` tokens of each
    prompt cached, over their waits with none cached."""
    left = [_prefill_s(cost_model, c, p) for c, p in zip(cached, prompt, strict=True)]
    whole = [_prefill_s(cost_model, 0, p) for p in prompt]
    return sum(wave_waits(left, waves)) / sum(wave_waits(whole, waves))


def gpu_only(gpu_blocks: int, requests: list[Request], turn_requests: list) -> float:
    """Cached share with no CPU tier (the GPU prefix cache alone)."""
    gpu = make_policy("lru", gpu_blocks)
    cached = 0
    for req, tr in zip(requests, turn_requests, strict=True):
        ids, hit = req.hash_ids, 0
        while hit < len(ids) and ids[hit] in gpu:
            hit += 1
        cached += min(hit * 16, tr.prompt_len - 1)
        replay(trace_from_requests([req], block_tokens=16), gpu, store="per_request")
    return cached / sum(tr.prompt_len for tr in turn_requests)


def yardstick(gib: float, requests: list[Request]) -> float:
    """Belady's prefix-token hit share, CPU tier alone, per-block stores (docs/design.md §2): an
    upper reference for what any online policy could keep at this capacity."""
    trace = trace_from_requests(requests, block_tokens=16)
    return simulate(trace, ["belady"], blocks_for_gib(gib), store="per_block")[
        0
    ].prefix_token_hit_frac


def compare(rows: list[dict], measured_path: Path) -> list[dict]:
    """Measured (mean over repeats, the GPU benchmark's `runs` in `measured_path`) next to
    predicted cached shares, per configuration; [] when the file is absent."""
    if not measured_path.is_file():
        return []
    runs = json.loads(measured_path.read_text()).get("runs", [])
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["policy"], run["cpu_gib"], run.get("variant", "text")), []).append(
            run
        )
    predicted = {(r["policy"], r["cpu_gib"], r["variant"]): r for r in rows}
    out = []
    for (policy, gib, variant), group in groups.items():
        sim_name = policy.removeprefix("hkv_")  # vLLM's lru/arc -> hkv's lru/arc
        row = predicted.get((sim_name, gib, variant))
        if row is None:
            continue
        measured = sum(r["cached_frac"] for r in group) / len(group)
        later = sum(r["turn_gt0_cached_frac"] for r in group) / len(group)
        out.append(
            {
                "policy": policy,
                "cpu_gib": gib,
                "variant": variant,
                "repeats": len(group),
                "measured_cached_frac": measured,
                "predicted_cached_frac": row["cached_frac"],
                "diff_points": 100 * (row["cached_frac"] - measured),
                "measured_turn_gt0_cached_frac": later,
                "predicted_turn_gt0_cached_frac": row["turn_gt0_cached_frac"],
                "measured_store_gb": sum(r["store_gb"] for r in group) / len(group),
                "predicted_store_gb": row["store_gb"],
            }
        )
    return out
