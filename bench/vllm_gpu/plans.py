"""The plans: which engines (policies x CPU tier x variant x GPUs) a `drive` runs, in order."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Config:
    """One engine: its policies (run in turn, `repeats` rounds), CPU tier, variant and GPUs.

    `kind` "capacity" starts the engine sized by `gpu_memory_utilization` instead (no KV cap, no
    workload) to compare vLLM's KV tiers with `hkv plan`.
    """

    policies: tuple[str, ...]
    cpu_gib: float
    variant: str = "text"
    repeats: int = 2
    tp: int = 1
    gpu_kv_gib: float = 4.0
    kind: str = "workload"


def plan(name: str, best_hkv: str, hkv_policies: list[str]) -> list[Config]:
    """Configurations in the order they start (most informative first: a deadline cuts the rest).

    `full`: vLLM's lru and arc and the best hkv policy at 8 GiB; lru and the best at 16 GiB;
    the three at 12 GiB; the multimodal variant at 8 GiB (lru, the best, modality_aware); then
    every other online hkv policy at 8 and at 12 GiB; each twice. `reduced`: lru, arc and the
    best at 8 GiB, once. `tp2`: the engine at tensor parallelism 2 sized by utilization (the plan
    check), then lru and the best at 8 GiB twice, with 2 GiB of GPU KV per GPU: the same
    number of tokens as 4 GiB at TP=1, since each GPU holds half of every block.
    """
    best = f"hkv_{best_hkv}"
    others = tuple(f"hkv_{p}" for p in hkv_policies if f"hkv_{p}" != best)
    if name == "reduced":
        return [Config(("lru", "arc", best), 8.0, repeats=1)]
    if name == "full":
        mm = tuple(dict.fromkeys(("lru", best, "hkv_modality_aware")))
        return [
            Config(("lru", "arc", best), 8.0),
            Config(("lru", best), 16.0),
            Config(("lru", "arc", best), 12.0),
            Config(mm, 8.0, "mm"),
            Config(others, 8.0),
            Config(others, 12.0),
        ]
    if name == "tp2":
        return [
            Config(("lru",), 8.0, repeats=0, tp=2, kind="capacity"),
            Config(("lru", best), 8.0, tp=2, gpu_kv_gib=2.0),
        ]
    raise ValueError(f"--plan: got {name!r}; expected reduced, full or tp2")


def config_key(config: Config) -> str:
    return json.dumps(asdict(config), sort_keys=True)
