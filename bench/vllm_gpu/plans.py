"""The plans: which engines (policies x CPU tier x variant x GPUs) a `drive` runs, in order; and
the policies a run names (`--policy`), each with its hyperparameters."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from bench.vllm_gpu import VLLM_POLICIES


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


def policy_list(text: str) -> list[str]:
    """`--policy`: one name or several, comma-separated (`lru,arc,hkv_bip`), each once (a comma
    inside a JSON value is the value's: `hkv_auto+experts=["lru","lip"],lru`)."""
    names = [p.strip() for p in split_outside(text, ",") if p.strip()]
    if not names or len(set(names)) != len(names):
        raise SystemExit(f"--policy: got {text!r}; expected names like lru,arc,hkv_bip, each once")
    return names


def split_policy(spec: str) -> tuple[str, dict]:
    """`hkv_bip+tail_first` -> (`hkv_bip`, {"tail_first": True}); `hkv_auto+first=lru` ->
    (`hkv_auto`, {"first": "lru"}): a policy and hyperparameters, each `+NAME` switched on or
    `+NAME=VALUE` (a JSON value, else the text as a string), hkv policies only (they reach it
    as `hkv_policy_params`). A `+` inside a JSON list, object or string is the value's:
    `hkv_auto+experts=["lru","lru+st2"]`."""
    name, *flags = split_outside(spec, "+")
    if flags and name in VLLM_POLICIES:
        raise SystemExit(f"--policy: {spec!r}; vLLM's own {name} takes no hkv hyperparameters")
    params = {}
    for flag in flags:
        key, eq, text = flag.partition("=")
        if not key:
            raise SystemExit(f"--policy: {spec!r}; expected +NAME or +NAME=VALUE after {name}")
        params[key] = _value(text) if eq else True
    return name, params


def split_outside(text: str, sep: str) -> list[str]:
    """`text.split(sep)`, but a `sep` inside brackets, braces or a double-quoted string (a JSON
    value's) does not split."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, char in enumerate(text):
        if quoted:
            quoted = char != '"' or text[i - 1] == "\\"
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth = max(0, depth - 1)
        elif char == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def _value(text: str):
    """A hyperparameter's value: JSON where it parses (`0.01`, `true`), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text
