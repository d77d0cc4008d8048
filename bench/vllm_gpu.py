"""Real vLLM on one GPU: a multi-turn workload through vLLM's CPU offloading tier, per policy.

The workload is the rig's anchor (../shared/gpu-vllm/anchor_bench.py, same seed and random
stream, so the token sequences are identical): `sessions` conversations of `turns` turns; turn 0
is 8-16K random token ids, each later turn re-sends the previous prompt plus 1-2K new tokens
(replies are not appended); rounds go turn by turn, sessions in a fresh random order each round,
in waves of `wave` concurrent requests. The GPU KV cache is capped (4 GiB) so that a session's
prefix has left the GPU before it returns: what comes back comes from the CPU tier or is
recomputed. The multimodal variant marks spans of each turn's new tokens as images through the
adapter's documented channel, `kv_transfer_params = {"hkv_modalities": [[start, end, "vision"]]}`
(the tokens stay random ids: the served model is text-only; only the policies see the labels).

Modes, each one process:

    python bench/vllm_gpu.py run --policy lru,arc,hkv_bip --cpu-gib 8 --repeats 2 --out R.json
    python bench/vllm_gpu.py capacity --tp 2 --cpu-gib 8 --out C.json   # KV tiers vs hkv plan
    python bench/vllm_gpu.py drive --plan full --devices 0,1 --out data/results/vllm_h200.json
    python bench/vllm_gpu.py drive --plan tp2 --devices 0,1 --out data/results/vllm_h200_tp2.json
    python bench/vllm_gpu.py workload                 # the request sequence's summary (CPU)

`run` measures one engine (CPU tier x variant x tensor-parallel size) in this process, engine
core in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, which also lets hkv's policies register into
vLLM 0.26's built-in dictionary). Its policies share the engine: before each run of the workload
the GPU prefix cache and the CPU tier are emptied and the offloading manager gets a new, empty
policy object; the policies' runs alternate, `repeats` rounds. `capacity` starts the engine sized
by `gpu_memory_utilization` and records its KV tiers for the check against `hkv plan`. `drive`
runs a plan's configurations one subprocess each, on free GPUs of `--devices`, until a deadline,
and rewrites the results JSON atomically after each.

Per run: workload wall time, TTFT mean / p50 / p90, cached share of prompt tokens (all turns and
turns > 0; vLLM's `num_cached_tokens`, GPU prefix hits plus CPU-tier hits), GB loaded from and
stored into the CPU tier, failed stores (`prepare_store` refused: no room could be made), and the
policy's own time per scheduler step (every `CachePolicy` method timed, over every engine step).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import time
import traceback
from array import array
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RIG = ROOT.parent / "shared" / "gpu-vllm"
VLLM_POLICIES = ("lru", "arc")
"""vLLM's own policies; every other name is `hkv_<online policy>` or `oracle`."""
ORACLE, ORACLE_PARAM = "oracle", "hkv_oracle"
"""bench/vllm_oracle.py: eviction that knows the workload's future (a yardstick, vLLM 0.26)."""

TOKEN_LOW, TOKEN_HIGH = 1000, 150000
"""Workload token ids (the anchor's range); warm-up prompts use ids above it."""


# -- the workload -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """The anchor workload's parameters; `images` adds the multimodal overlay."""

    sessions: int = 32
    turns: int = 4
    wave: int = 4
    first_min: int = 8192
    first_max: int = 16384
    delta_min: int = 1024
    delta_max: int = 2048
    max_tokens: int = 16
    seed: int = 0
    images: bool = False
    image_seed: int = 1
    image_median_tokens: int = 570
    block_tokens: int = 16

    def __post_init__(self) -> None:
        for name in ("sessions", "turns", "wave", "first_min", "delta_min", "block_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Workload.{name}: got {value!r}; expected an integer >= 1")
        if self.first_max < self.first_min or self.delta_max < self.delta_min:
            raise ValueError(
                f"Workload: first_max/delta_max ({self.first_max}/{self.delta_max}) must be >= "
                f"first_min/delta_min ({self.first_min}/{self.delta_min})"
            )


@dataclass(frozen=True)
class Session:
    """One conversation: all its tokens, the prompt length of each turn, and its image spans."""

    tokens: list[int]
    prompt_lens: list[int]
    spans: list[tuple[int, int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class TurnRequest:
    """One request of the sequence, in submission order."""

    index: int
    wave: int
    session: int
    turn: int
    prompt_len: int
    spans: list[tuple[int, int, str]]


def build_sessions(w: Workload) -> tuple[list[Session], list[list[tuple[int, int]]]]:
    """Sessions and waves `[[(session, turn), ...], ...]`, the anchor's random stream exactly."""
    rng = random.Random(w.seed)
    drafts = []
    for _ in range(w.sessions):
        first = rng.randint(w.first_min, w.first_max)
        deltas = [rng.randint(w.delta_min, w.delta_max) for _ in range(w.turns - 1)]
        total = first + sum(deltas)
        tokens = [rng.randrange(TOKEN_LOW, TOKEN_HIGH) for _ in range(total)]
        lens = [first]
        for delta in deltas:
            lens.append(lens[-1] + delta)
        drafts.append((tokens, lens))
    waves = []
    for turn in range(w.turns):
        order = list(range(w.sessions))
        rng.shuffle(order)
        for start in range(0, len(order), w.wave):
            waves.append([(s, turn) for s in order[start : start + w.wave]])
    image_rng = random.Random(w.image_seed)  # its own stream: the tokens stay the anchor's
    sessions = [
        Session(tokens, lens, image_spans(lens, w, image_rng) if w.images else [])
        for tokens, lens in drafts
    ]
    return sessions, waves


def image_spans(prompt_lens: list[int], w: Workload, rng: random.Random) -> list:
    """Image spans in each turn's new tokens: 1-4 in turn 0, one in half the later turns.

    Sizes are log-normal around `image_median_tokens` (ServeGen's image-token median is ~570),
    clipped to [64, 4600] and to the slot each image is drawn in (a turn's new tokens are cut
    into equal slots, one image per slot, so images never overlap).
    """
    spans = []
    start = 0
    for turn, end in enumerate(prompt_lens):
        count = rng.randint(1, 4) if turn == 0 else int(rng.random() < 0.5)
        slot = (end - start) // max(count, 1)
        for i in range(count):
            size = round(rng.lognormvariate(math.log(w.image_median_tokens), 0.6))
            size = min(max(64, min(size, 4600)), slot - 1)
            if size < 1:
                continue  # a turn too short to hold an image (only in small test workloads)
            first = start + i * slot + rng.randrange(0, slot - size)
            spans.append((first, first + size, "vision"))
        start = end
    return spans


def request_sequence(w: Workload) -> tuple[list[Session], list[TurnRequest]]:
    """The sessions and every request in submission order (wave by wave)."""
    sessions, waves = build_sessions(w)
    requests = []
    for wave_index, wave in enumerate(waves):
        for session, turn in wave:
            length = sessions[session].prompt_lens[turn]
            spans = [(a, min(b, length), m) for a, b, m in sessions[session].spans if a < length]
            requests.append(TurnRequest(len(requests), wave_index, session, turn, length, spans))
    return sessions, requests


def block_hash_chain(tokens: list[int], block_tokens: int) -> list[int]:
    """Ids of the full blocks of `tokens`, each hashing its parent's id and its own tokens.

    Like vLLM's prefix-cache hashes: equal prefixes give equal ids, a partial last block has
    none (vLLM neither caches nor offloads it).
    """
    ids, parent = [], b""
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        block = array("q", tokens[start : start + block_tokens]).tobytes()
        parent = hashlib.blake2b(parent + block, digest_size=8).digest()
        ids.append(int.from_bytes(parent, "big"))
    return ids


def block_modalities(spans, num_blocks: int, block_tokens: int) -> list[str]:
    """Label per block: a block overlapping a marked span takes its label (the adapter's rule)."""
    labels = ["text"] * num_blocks
    for start, end, label in spans:
        for index in range(start // block_tokens, min(num_blocks, -(-end // block_tokens))):
            labels[index] = label
    return labels


def workload_summary(w: Workload) -> dict:
    sessions, requests = request_sequence(w)
    blocks = sum(s.prompt_lens[-1] // w.block_tokens for s in sessions)
    image_tokens = sum(b - a for s in sessions for a, b, _ in s.spans)
    return {
        **asdict(w),
        "requests": len(requests),
        "prompt_tokens": sum(r.prompt_len for r in requests),
        "distinct_full_blocks": blocks,
        "image_tokens": image_tokens,
        "image_spans": sum(len(s.spans) for s in sessions),
    }


# -- one configuration in this process -------------------------------------------------------
class PolicyTimer:
    """Times every method call on one `CachePolicy` instance (wrapping its bound methods).

    `per_method[name]` is `[seconds, calls]`; `seconds` and `calls` are their totals. The
    recorded seconds include the timer's own cost inside each measured interval (a clock read and
    the call through the wrapper); `measure_overhead` measures it in this process, and the
    results report `policy_s` both raw and net of it.
    """

    METHODS = ("get", "insert", "remove", "touch", "evict", "clear")
    OPTIONAL = ("mark_evictable", "mark_non_evictable", "on_store_miss", "on_request_finished")

    def __init__(self, policy) -> None:
        self.per_method: dict[str, list] = {}
        self.overhead: dict[str, float] | None = None  # `measure_overhead()`, set by the caller
        for name in self.METHODS + self.OPTIONAL:
            if hasattr(policy, name):
                cell = self.per_method[name] = [0.0, 0]
                setattr(policy, name, self._timed(getattr(policy, name), cell))

    def snapshot(self) -> dict:
        """Totals and per-method `(seconds, calls)` now, for differences over a run."""
        methods = {name: tuple(cell) for name, cell in self.per_method.items()}
        return {"policy_s": self.seconds, "policy_calls": self.calls, "methods": methods}

    @property
    def seconds(self) -> float:
        return sum(cell[0] for cell in self.per_method.values())

    @property
    def calls(self) -> int:
        return sum(cell[1] for cell in self.per_method.values())

    @staticmethod
    def _timed(method, cell: list):
        clock = time.perf_counter

        def timed(*args, **kwargs):
            start = clock()
            try:
                return method(*args, **kwargs)
            finally:
                cell[0] += clock() - start
                cell[1] += 1

        return timed

    @classmethod
    def measure_overhead(cls, calls: int = 200_000, rounds: int = 5) -> dict[str, float]:
        """The timer's cost per call, in seconds, measured here on a method that does nothing.

        `recorded_s`: what one wrapped call of the no-op adds to `seconds` beyond the no-op's own
        bare call (subtract it per call for the policy's net time). `added_s`: all the wrapper
        adds to its caller (also counted in the step time). Medians of `rounds` rounds.
        """

        class Probe:
            def get(self, key):
                return None

        bare = Probe().get
        recorded, added = [], []
        for _ in range(rounds):
            cell = [0.0, 0]
            wrapped = cls._timed(bare, cell)
            loop_s = _loop_seconds(None, calls)
            bare_s = _loop_seconds(bare, calls) - loop_s
            wrapped_s = _loop_seconds(wrapped, calls) - loop_s
            recorded.append((cell[0] - bare_s) / calls)
            added.append((wrapped_s - bare_s) / calls)
        return {
            "recorded_s": max(0.0, statistics.median(recorded)),
            "added_s": max(0.0, statistics.median(added)),
        }


def _loop_seconds(function, calls: int) -> float:
    """Seconds for `calls` calls of `function(None)` in a plain loop (just the loop if None)."""
    start = time.perf_counter()
    if function is None:
        for _ in range(calls):
            pass
    else:
        for _ in range(calls):
            function(None)
    return time.perf_counter() - start


class StepTimer:
    """Counts and times the engine's steps (the in-process `EngineCore.step_fn`)."""

    def __init__(self, engine_core) -> None:
        self.seconds = 0.0
        self.steps = 0
        step = engine_core.step_fn

        def timed():
            start = time.perf_counter()
            out = step()
            self.seconds += time.perf_counter() - start
            self.steps += 1
            return out

        engine_core.step_fn = timed


class ManagerCounter:
    """Blocks loaded and stored and refused stores, counted at vLLM's offloading manager."""

    def __init__(self, manager) -> None:
        self.loaded_blocks = self.stored_blocks = self.evicted_blocks = self.failed_stores = 0
        prepare_load, prepare_store = manager.prepare_load, manager.prepare_store

        def load(keys, *args, **kwargs):
            self.loaded_blocks += len(keys)
            return prepare_load(keys, *args, **kwargs)

        def store(keys, *args, **kwargs):
            out = prepare_store(keys, *args, **kwargs)
            if out is None:
                self.failed_stores += 1
            else:
                self.stored_blocks += len(out.keys_to_store)
                self.evicted_blocks += len(out.evicted_keys)
            return out

        manager.prepare_load, manager.prepare_store = load, store

    def snapshot(self) -> dict:
        return dict(vars(self))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    low = int(k)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (k - low)


def engine_kwargs(args, policy: str) -> dict:
    extra = {"cpu_bytes_to_use": int(args.cpu_gib * (1 << 30)), "eviction_policy": policy}
    return {
        "model": str(args.model),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "max_model_len": 32768,
        "enforce_eager": True,
        "kv_cache_memory_bytes": int(args.gpu_kv_gib * (1 << 30)),
        "tensor_parallel_size": getattr(args, "tp", 1),
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 16,
        "enable_prefix_caching": True,
        "disable_log_stats": False,
        "seed": 0,
        "kv_transfer_config": {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": extra,
        },
    }


def offloading_manager(llm):
    """vLLM's scheduler-side `CPUOffloadingManager` (engine core in this process)."""
    core = llm.llm_engine.engine_core.engine_core
    return core, core.scheduler.connector.connector_scheduler.manager


def metric_values(llm) -> dict[str, float]:
    """Counters of interest from vLLM's Prometheus metrics, summed over label sets."""
    wanted = ("offload", "prefix_cache", "kv_transfer")
    out: dict[str, float] = {}
    for metric in llm.get_metrics():
        if any(w in metric.name for w in wanted) and hasattr(metric, "value"):
            out[metric.name] = out.get(metric.name, 0.0) + float(metric.value)
    return out


def warm_up(llm, sampling) -> None:
    """JIT paths (Triton MoE etc.) on token ids the workload never uses."""
    rng = random.Random(12345)

    def prompt(n):
        return {"prompt_token_ids": [rng.randrange(TOKEN_HIGH, 199000) for _ in range(n)]}

    for n in (3000, 9000, 17000):
        llm.generate([prompt(n)], sampling, use_tqdm=False)
    llm.generate([prompt(2000 + 37 * i) for i in range(4)], sampling, use_tqdm=False)


def run_workload(llm, w: Workload, sessions, waves, counters, tag: bool = False) -> dict:
    """One pass of the workload; per-request rows and the run's summary. `tag`: every request
    tells the policy its session and turn (the `oracle` yardstick reads them)."""
    from vllm import SamplingParams

    policy_timer, step_timer, manager_counter, block_bytes = counters

    def totals(policy: dict) -> dict:
        return {
            "policy_s": policy["policy_s"],
            "policy_calls": policy["policy_calls"],
            "step_s": step_timer.seconds,
            "steps": step_timer.steps,
            **manager_counter.snapshot(),
        }

    policy_before = policy_timer.snapshot()
    base = totals(policy_before)
    metrics_before = metric_values(llm)
    rows = []
    start = time.perf_counter()
    for wave_index, wave in enumerate(waves):
        prompts, params = [], []
        for session, turn in wave:
            length = sessions[session].prompt_lens[turn]
            prompts.append({"prompt_token_ids": sessions[session].tokens[:length]})
            spans = [[a, min(b, length), m] for a, b, m in sessions[session].spans if a < length]
            transfer = {"hkv_modalities": spans} if spans else {}
            if tag:
                transfer[ORACLE_PARAM] = [session, turn]
            extra = {"kv_transfer_params": transfer} if transfer else None
            params.append(
                SamplingParams(
                    max_tokens=w.max_tokens,
                    ignore_eos=True,
                    temperature=0.0,
                    detokenize=False,
                    extra_args=extra,
                )
            )
        wave_start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        wave_s = time.perf_counter() - wave_start
        for (session, turn), out in zip(wave, outputs, strict=True):
            metrics = out.metrics
            rows.append(
                {
                    "wave": wave_index,
                    "session": session,
                    "turn": turn,
                    "prompt_len": sessions[session].prompt_lens[turn],
                    "ttft_s": getattr(metrics, "first_token_latency", None),
                    "cached_tokens": out.num_cached_tokens or 0,
                    "wave_s": wave_s,
                }
            )
    wall_s = time.perf_counter() - start
    metrics_after = metric_values(llm)
    delta = {k: v - metrics_before.get(k, 0.0) for k, v in metrics_after.items()}
    policy_after = policy_timer.snapshot()
    now = totals(policy_after)
    used = {k: now[k] - base[k] for k in now}
    used["policy_by_method"] = method_use(policy_before["methods"], policy_after["methods"])
    if policy_timer.overhead is not None:
        used["timer_overhead_s_per_call"] = policy_timer.overhead["recorded_s"]
        used["timer_wrapper_s_per_call"] = policy_timer.overhead["added_s"]
    return {"summary": summarize(rows, wall_s, used, delta, block_bytes), "requests": rows}


def method_use(before: dict, after: dict) -> dict:
    """Per policy method, seconds and calls between two `PolicyTimer.snapshot`s (called only)."""
    out = {}
    for name, (seconds, calls) in after.items():
        was_s, was_calls = before.get(name, (0.0, 0))
        if calls > was_calls:
            out[name] = {"s": seconds - was_s, "calls": calls - was_calls}
    return out


def policy_time(used) -> dict:
    """Policy time raw and net of the timer's measured cost per call (None if not measured).

    Net: each call's recorded time less what the timer records around a no-op; the step time
    less all the wrapper adds per call (it runs inside the steps, so it inflated them too).
    """
    steps = max(used["steps"], 1)
    out = {
        "policy_s": used["policy_s"],
        "policy_s_per_step": used["policy_s"] / steps,
        "policy_frac_of_step": used["policy_s"] / used["step_s"] if used["step_s"] else None,
        "timer_overhead_s_per_call": used.get("timer_overhead_s_per_call"),
        "policy_s_net": None,
        "policy_s_per_step_net": None,
        "policy_frac_of_step_net": None,
    }
    if out["timer_overhead_s_per_call"] is None:
        return out
    calls = used["policy_calls"]
    net_s = max(0.0, used["policy_s"] - calls * out["timer_overhead_s_per_call"])
    step_net_s = used["step_s"] - calls * used.get("timer_wrapper_s_per_call", 0.0)
    out["policy_s_net"] = net_s
    out["policy_s_per_step_net"] = net_s / steps
    out["policy_frac_of_step_net"] = net_s / step_net_s if step_net_s > 0 else None
    out |= timer_floor(used.get("policy_by_method") or {}, used["policy_s"], calls, step_net_s)
    return out


FLOOR_MIN_CALLS = 1000


def timer_floor(methods: dict, policy_s: float, calls: int, step_s: float) -> dict:
    """The policy's time net of the timer's cost as measured inside the engine.

    The probe in `PolicyTimer.measure_overhead` times the wrapper in a tight loop, where it is
    cheaper than at vLLM's call sites (cold caches, a busier interpreter): hkv's
    `mark_evictable`, a bare `set.discard`, records more per call there than the probe says
    the wrapper alone costs. So the run also takes, as the wrapper's cost per call, the
    cheapest recorded per-call time of any method called at least `FLOOR_MIN_CALLS` times in
    the run. That method did some work too, so this over-counts the wrapper: `*_net_low` is
    a lower bound of the policy's time, as the raw `policy_s` is an upper one (`*_net`, the
    probe's estimate, lies between them when the probe is not cheaper than the floor).
    """
    per_call = {n: m["s"] / m["calls"] for n, m in methods.items() if m["calls"] >= FLOOR_MIN_CALLS}
    if not per_call:
        return {"timer_floor_s_per_call": None, "timer_floor_method": None,
                "policy_s_net_low": None, "policy_frac_of_step_net_low": None}  # fmt: skip
    method = min(per_call, key=per_call.__getitem__)
    low = max(0.0, policy_s - calls * per_call[method])
    return {
        "timer_floor_s_per_call": per_call[method],
        "timer_floor_method": method,
        "policy_s_net_low": low,
        "policy_frac_of_step_net_low": low / step_s if step_s > 0 else None,
    }


def summarize(rows, wall_s, used, metrics, block_bytes) -> dict:
    ttft = [r["ttft_s"] for r in rows if r["ttft_s"] is not None]
    later = [r for r in rows if r["turn"] > 0]
    later_ttft = [r["ttft_s"] for r in later if r["ttft_s"] is not None]
    steps = max(used["steps"], 1)
    # Counted at the manager (exact); vLLM's own byte counters are kept beside them.
    load_bytes = used["loaded_blocks"] * block_bytes
    store_bytes = used["stored_blocks"] * block_bytes
    return {
        "wall_s": wall_s,
        "ttft_mean_s": sum(ttft) / len(ttft) if ttft else None,
        "ttft_p50_s": percentile(ttft, 0.5),
        "ttft_p90_s": percentile(ttft, 0.9),
        "ttft_turn_gt0_mean_s": (sum(later_ttft) / len(later_ttft) if later_ttft else None),
        "cached_frac": sum(r["cached_tokens"] for r in rows) / sum(r["prompt_len"] for r in rows),
        "turn_gt0_cached_frac": (
            sum(r["cached_tokens"] for r in later) / sum(r["prompt_len"] for r in later)
            if later
            else None
        ),
        "load_gb": load_bytes / 1e9,
        "store_gb": store_bytes / 1e9,
        "failed_stores": used["failed_stores"],
        "allocation_failures_metric": metrics.get("vllm:kv_offload_allocation_failure"),
        "load_gb_metric": metrics.get("vllm:kv_offload_load_bytes", 0.0) / 1e9,
        "store_gb_metric": metrics.get("vllm:kv_offload_store_bytes", 0.0) / 1e9,
        "loaded_blocks": used["loaded_blocks"],
        "stored_blocks": used["stored_blocks"],
        "evicted_blocks": used["evicted_blocks"],
        "steps": used["steps"],
        "step_s_mean": used["step_s"] / steps,
        **policy_time(used),
        "policy_calls": used["policy_calls"],
        "policy_by_method": used.get("policy_by_method"),
        "metrics_delta": metrics,
    }


def run_config(args, result: dict) -> None:
    """Measure one configuration into `result` (written to `args.out` after every run).

    `args.policy` may name several policies (comma-separated): they share one engine, whose CPU
    tier and GPU prefix cache are emptied and whose policy object is replaced before each run,
    and their runs alternate (repeat 0 of each, then repeat 1 of each), so that the host's drift
    falls on all of them alike. The engine is built with the first.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HKV_BLOCK_TOKENS", "16")
    policies = policy_list(args.policy)
    w = Workload(images=args.variant == "mm")
    result |= {
        "policy": policies[0] if len(policies) == 1 else ",".join(policies),
        "policies": policies,
        "cpu_gib": args.cpu_gib,
        "variant": args.variant,
        "tp": getattr(args, "tp", 1),
        "gpu_kv_gib": args.gpu_kv_gib,
    }
    t0 = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams

    if any(split_policy(p)[0] not in (*VLLM_POLICIES, ORACLE) for p in policies):
        from hkv.integrations.vllm import register

        register()  # vLLM 0.26: into the manager's built-in dictionary; 0.32+: the factory
    sessions, waves = build_sessions(w)
    if ORACLE in policies:
        oracle_module().install([request for wave in waves for request in wave])
    result["vllm_version"] = vllm.__version__
    result["t_import_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    llm = LLM(**engine_kwargs(args, split_policy(policies[0])[0]))
    result["t_engine_init_s"] = time.perf_counter() - t1
    core, manager = offloading_manager(llm)
    result["cpu_blocks"] = manager._num_blocks if hasattr(manager, "_num_blocks") else None
    result["gpu_blocks"] = llm.llm_engine.vllm_config.cache_config.num_gpu_blocks
    block_bytes = int(args.cpu_gib * (1 << 30)) // max(result["cpu_blocks"] or 1, 1)
    result["block_bytes"] = block_bytes  # over all ranks (vLLM sizes the tier that way)
    overhead = PolicyTimer.measure_overhead()
    result["timer_overhead"] = overhead
    steps, stores = StepTimer(core), ManagerCounter(manager)
    sampling = SamplingParams(
        max_tokens=w.max_tokens, ignore_eos=True, temperature=0.0, detokenize=False
    )
    t2 = time.perf_counter()
    warm_up(llm, sampling)
    result["t_warmup_s"] = time.perf_counter() - t2
    result["policy_info"], result["repeats"] = {}, []
    for repeat in range(args.repeats):
        for name in policies:
            policy, reset_ok = fresh_policy(llm, manager, name)
            result["policy_info"][name] = policy_info(policy)
            timer = PolicyTimer(policy)
            timer.overhead = overhead
            gc.collect()  # the last run's garbage (its policy, in cycles with its timer) now
            counters = (timer, steps, stores, block_bytes)
            one = run_workload(llm, w, sessions, waves, counters, tag=name == ORACLE)
            one["policy"], one["repeat"] = name, repeat
            one["summary"]["caches_reset"] = reset_ok
            result["repeats"].append(one)
            print("SUMMARY", name, args.cpu_gib, args.variant, repeat,
                  json.dumps({k: v for k, v in one["summary"].items() if k != "metrics_delta"}),
                  flush=True)  # fmt: skip
            write_json(args.out, result)
    result["status"] = "done"
    write_json(args.out, result)


def oracle_module():
    """bench/vllm_oracle.py, imported from this script's folder (bench/ is not a package)."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.append(here)
    import vllm_oracle

    return vllm_oracle


def policy_list(text: str) -> list[str]:
    """`--policy`: one name or several, comma-separated (`lru,arc,hkv_bip`), each once."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names or len(set(names)) != len(names):
        raise SystemExit(f"--policy: got {text!r}; expected names like lru,arc,hkv_bip, each once")
    return names


def split_policy(spec: str) -> tuple[str, dict]:
    """`hkv_bip+tail_first` -> (`hkv_bip`, {"tail_first": True}): a policy and boolean
    hyperparameters switched on (hkv policies only; they reach it as `hkv_policy_params`)."""
    name, *flags = spec.split("+")
    if flags and name in VLLM_POLICIES:
        raise SystemExit(f"--policy: {spec!r}; vLLM's own {name} takes no hkv hyperparameters")
    return name, dict.fromkeys(flags, True)


def fresh_policy(llm, manager, spec: str):
    """Empty both tiers and give vLLM's offloading manager a new, empty policy `spec`.

    The tiers are emptied first (the manager clears its old policy and its block counts), then
    the policy object is replaced and the tiers emptied again, so that the manager and its new
    policy start from the same empty state. Returns the policy and whether both resets held.
    """
    from vllm.v1.kv_offload.cpu import manager as cpu_manager

    ok = llm.reset_prefix_cache(reset_running_requests=True, reset_connector=True)
    name, params = split_policy(spec)
    policy_cls = cpu_manager._CACHE_POLICIES[name]
    extra = {"policy_params": params} if params else {}
    manager._policy = policy_cls(cache_capacity=manager._num_blocks, **extra)
    ok = llm.reset_prefix_cache(reset_running_requests=True, reset_connector=True) and ok
    return manager._policy, bool(ok)


def policy_info(policy) -> dict:
    """The policy's class, and for hkv's its hyperparameters and cost model."""
    info = {"policy_class": type(policy).__name__}
    inner = getattr(policy, "policy", None)  # hkv: the wrapped EvictionPolicy
    if inner is not None:
        info["hkv_hyperparameters"] = inner.hyperparameters()
        model = getattr(inner, "cost_model", None)
        info["hkv_cost_model"] = getattr(getattr(model, "spec", None), "name", None)
    return info


def run_capacity(args, result: dict) -> None:
    """Start the engine sized by `gpu_memory_utilization` (no KV cap) and record its KV tiers.

    vLLM's rule (0.26, `Worker.determine_available_memory`): KV per GPU = total x utilization -
    (weights + the profiling forward's peak activations + non-torch memory such as the CUDA
    context and NCCL buffers), CUDA graphs not counted unless opted in (this runs eager). The
    workers log "Available KV cache memory" and "Model loading took"; the driver reads them.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    result |= {"tp": args.tp, "cpu_gib": args.cpu_gib, "model": str(args.model)}
    result["gpu_memory_utilization"] = args.utilization
    from vllm import LLM

    kwargs = engine_kwargs(args, "lru")
    del kwargs["kv_cache_memory_bytes"]
    kwargs["gpu_memory_utilization"] = args.utilization
    llm = LLM(**kwargs)
    import torch  # after the engine: CUDA first used here would force its workers to spawn

    result["gpu_total_bytes"] = torch.cuda.mem_get_info(0)[1]
    config = llm.llm_engine.vllm_config
    _, manager = offloading_manager(llm)
    result["gpu_blocks"] = config.cache_config.num_gpu_blocks
    result["block_tokens"] = config.cache_config.block_size
    result["cpu_blocks"] = manager._num_blocks
    result["max_model_len"] = config.model_config.max_model_len
    result["max_num_seqs"] = config.scheduler_config.max_num_seqs
    result["status"] = "done"
    write_json(args.out, result)


def write_json(path: Path, data: dict) -> None:
    """Write `data` as JSON atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


# -- a plan of configurations, one subprocess each ----------------------------------------------
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


def measure_link() -> dict:
    """Pinned host<->GPU copy bandwidth (GB/s, 1e9 bytes) of this machine, 256 MiB copies."""
    import torch

    n = 256 << 20
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = {"gpu_name": torch.cuda.get_device_name(0), "torch": torch.__version__}
    out["gpus"] = torch.cuda.device_count()
    for label, copy in (
        ("h2d_gbps", lambda: dev.copy_(host)),
        ("d2h_gbps", lambda: host.copy_(dev)),
    ):
        copy()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(10):
            copy()
        torch.cuda.synchronize()
        out[label] = round(10 * n / (time.perf_counter() - start) / 1e9, 1)
    return out


def command_for(config: Config, out: Path, model: Path) -> list[str]:
    if config.kind == "capacity":
        return [
            *(sys.executable, __file__, "capacity", "--tp", str(config.tp)),
            *("--cpu-gib", str(config.cpu_gib), "--out", str(out), "--model", str(model)),
        ]
    return [
        *(sys.executable, __file__, "run", "--policy", ",".join(config.policies)),
        *("--cpu-gib", str(config.cpu_gib), "--variant", config.variant),
        *("--repeats", str(config.repeats), "--tp", str(config.tp)),
        *("--gpu-kv-gib", str(config.gpu_kv_gib), "--out", str(out), "--model", str(model)),
    ]


@dataclass
class Running:
    index: int
    config: Config
    proc: subprocess.Popen
    devices: list[str]
    started: float


def drive(args) -> dict:
    """Run a plan's configurations in subprocesses, each on its own GPUs, until `deadline_s`.

    Configurations start in plan order, each as soon as enough of `--devices` are free (one per
    tensor-parallel rank). The results JSON is rewritten atomically after each. With `--resume`,
    the configurations already done in `--out` are kept and not run again.
    """
    from hkv.policies import policy_names

    deadline = time.time() + args.deadline_s
    configs = plan(args.plan, args.best, policy_names(online_only=True))
    if args.only:
        configs = configs[: args.only]
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    if args.resume and Path(args.out).exists():
        result, done = resumed(json.loads(Path(args.out).read_text()), configs)
    else:  # measures the link: only for a new results file
        result, done = fresh_result(args, configs), set()
    free = [d.strip() for d in args.devices.split(",") if d.strip()]
    queue = []
    for index, config in enumerate(configs):
        if config.tp > len(free):  # would wait for GPUs that --devices does not give
            status = f"skipped: needs {config.tp} GPUs, --devices gives {len(free)}"
            result["configs"].append({**asdict(config), "status": status})
        elif config_key(config) not in done:
            queue.append((index, config))
    running: list[Running] = []
    while queue or running:
        while queue and len(free) >= queue[0][1].tp:
            index, config = queue[0]
            if deadline - time.time() < args.min_config_s:
                result["configs"].append({**asdict(config), "status": "skipped: deadline"})
                queue.pop(0)
                continue
            queue.pop(0)
            devices, free = free[: config.tp], free[config.tp :]
            command = command_for(config, work / f"run{index:02d}.json", args.model)
            env = os.environ | {"CUDA_VISIBLE_DEVICES": ",".join(devices)}
            with open(work / f"run{index:02d}.log", "w") as log:  # the child keeps its own copy
                proc = subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )
            running.append(Running(index, config, proc, devices, time.time()))
        time.sleep(1.0)
        for job in list(running):
            code = job.proc.poll()
            late = time.time() > deadline
            if code is None and not late:
                continue
            if code is None:
                os.killpg(job.proc.pid, signal.SIGKILL)
                job.proc.wait()
            status = "killed: deadline" if code is None else "done" if code == 0 else f"exit {code}"
            running.remove(job)
            free += job.devices
            seconds = time.time() - job.started
            out = work / f"run{job.index:02d}.json"
            collect(result, job.config, out, work / f"run{job.index:02d}.log", status, seconds)
            write_json(args.out, result)
        if queue and time.time() > deadline:
            for _, config in queue:
                result["configs"].append({**asdict(config), "status": "skipped: deadline"})
            queue = []
    write_json(args.out, result)
    return result


def fresh_result(args, configs: list[Config]) -> dict:
    link = subprocess.run(
        [sys.executable, __file__, "link"], capture_output=True, text=True, timeout=120
    )
    machine = {"platform": platform.platform(), "cpus": os.cpu_count()}
    machine |= json.loads(link.stdout.strip().splitlines()[-1]) if link.returncode == 0 else {}
    return {
        "generated_by": f"bench/vllm_gpu.py drive --plan {args.plan} --devices {args.devices}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "versions": {"python": platform.python_version()},
        "workload": {
            "text": workload_summary(Workload()),
            "mm": workload_summary(Workload(images=True)),
        },
        "plan": [asdict(c) for c in configs],
        "configs": [],
        "runs": [],
    }  # fmt: skip


def resumed(old: dict, configs: list[Config]) -> tuple[dict, set[str]]:
    """`old` results kept for the configurations of `configs` that finished; their keys."""
    wanted = {config_key(c) for c in configs}
    done = set()
    for entry in old.get("configs", []):
        fields = {k: entry[k] for k in Config.__dataclass_fields__ if k in entry}
        fields["policies"] = tuple(fields.get("policies", ()))
        try:
            key = config_key(Config(**fields))
        except TypeError:
            continue
        if entry.get("status") == "done" and key in wanted:
            done.add(key)
    keep = [e for e in old.get("configs", []) if e.get("status") == "done"]
    old["configs"] = keep
    old["runs"] = [r for r in old.get("runs", []) if r.get("config_key") in done]
    return old, done


CONFIG_FIELDS = (
    *("t_import_s", "t_engine_init_s", "t_warmup_s", "cpu_blocks", "gpu_blocks", "block_bytes"),
    *("policy_info", "timer_overhead", "error"),
)
VLLM_LOG_LINES = {
    "kv_available_gib": r"Available KV cache memory: ([0-9.]+) GiB",
    "weights_gib": r"Model loading took ([0-9.]+) GiB",
}


def collect(result: dict, config: Config, out: Path, log: Path, status: str, seconds: float):
    """Fold one configuration's file into the results (`configs`, and a `runs` row a run)."""
    data = json.loads(out.read_text()) if out.exists() else {}
    if status == "done" and data.get("status") != "done":
        status = "incomplete"
    key = config_key(config)
    entry = {**asdict(config), "status": status, "process_s": round(seconds, 1)}
    entry |= {k: data[k] for k in CONFIG_FIELDS if k in data}
    result["configs"].append(entry)
    if "vllm_version" in data:
        result["versions"]["vllm"] = data["vllm_version"]
    if config.kind == "capacity" and data.get("status") == "done":
        result["plan_check"] = plan_check(data, log.read_text() if log.exists() else "")
    for one in data.get("repeats", []):
        rows = one["requests"]  # submission order, the same as `request_sequence`
        result["runs"].append(
            {
                "policy": one.get("policy", config.policies[0]),
                "cpu_gib": config.cpu_gib,
                "variant": config.variant,
                "tp": config.tp,
                "repeat": one["repeat"],
                "config_key": key,
                **one["summary"],
                "cached_tokens": [r["cached_tokens"] for r in rows],
                "ttft_s": [None if r["ttft_s"] is None else round(r["ttft_s"], 5) for r in rows],
            }
        )


def plan_check(capacity: dict, log: str) -> dict:
    """vLLM's KV tiers at this configuration against `hkv plan` for the same inputs.

    GPU: KV bytes per GPU (vLLM's block count x tokens a block x bytes a token on one GPU)
    against the plan's per-GPU budget. CPU: the tier per rank (vLLM's CPU block count x one
    rank's share of a block) against the plan's offload bytes over the GPUs.
    """
    import re

    from hkv.planning.model_spec import ModelSpec
    from hkv.planning.plan import GIB, PlanInputs
    from hkv.planning.plan import plan as hkv_plan

    tp = capacity["tp"]
    spec = ModelSpec.load(capacity.get("model", RIG / "minimax_m2_8l"))  # a folder or a name
    inputs = PlanInputs(
        gpus=tp,
        gpu_mem_gib=capacity["gpu_total_bytes"] / GIB,
        max_model_len=capacity["max_model_len"],
        max_num_seqs=capacity["max_num_seqs"],
        gpu_memory_utilization=capacity["gpu_memory_utilization"],
        offload_gib=capacity["cpu_gib"],
        cpu_ram_gib=max(64.0, capacity["cpu_gib"] * 4),  # so that host RAM never caps the tier
        block_tokens=capacity["block_tokens"],
    )
    predicted = hkv_plan(spec, inputs)
    block_gpu = capacity["block_tokens"] * predicted.kv_bytes_per_token_per_gpu
    vllm_gpu = capacity["gpu_blocks"] * block_gpu
    plan_gpu = predicted.gpu_kv_blocks * block_gpu
    vllm_cpu_rank = capacity["cpu_blocks"] * block_gpu
    plan_cpu_rank = predicted.offload_bytes_per_rank
    logged = {}
    for name, pattern in VLLM_LOG_LINES.items():
        found = [float(x) for x in re.findall(pattern, log)]
        logged[name] = found or None
    usable = int(inputs.gpu_mem_gib * GIB * inputs.gpu_memory_utilization)
    return {
        "tp": tp,
        "inputs": asdict(inputs),
        "vllm_gpu_blocks": capacity["gpu_blocks"],
        "plan_gpu_blocks": predicted.gpu_kv_blocks,
        "vllm_kv_bytes_per_gpu": vllm_gpu,
        "plan_kv_bytes_per_gpu": plan_gpu,
        "gpu_kv_error_frac": (plan_gpu - vllm_gpu) / vllm_gpu,
        "vllm_non_kv_bytes_per_gpu": usable - vllm_gpu,
        "plan_weights_bytes_per_gpu": predicted.weights_bytes_per_gpu,
        "plan_reserve_bytes_per_gpu": predicted.reserve_bytes_per_gpu,
        "vllm_logged": logged,
        "vllm_cpu_blocks": capacity["cpu_blocks"],
        "plan_cpu_blocks": predicted.offload_blocks,
        "vllm_cpu_bytes_per_rank": vllm_cpu_rank,
        "plan_cpu_bytes_per_rank": plan_cpu_rank,
        "cpu_exact": vllm_cpu_rank == plan_cpu_rank,
        "vllm_rule": "KV per GPU = total x gpu_memory_utilization - weights - peak activation "
        "of the profiling forward - non-torch memory (CUDA context, NCCL); eager, so no CUDA "
        "graph term (vLLM 0.26 Worker.determine_available_memory)",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    one = sub.add_parser("run", help="one engine: its policies' runs, in this process")
    one.add_argument(
        "--policy", required=True, help="lru, arc, hkv_<policy>[+flag]; or several: a,b,c"
    )
    one.add_argument("--cpu-gib", type=float, required=True, help="CPU tier, total over ranks")
    one.add_argument("--variant", choices=("text", "mm"), default="text")
    one.add_argument("--repeats", type=int, default=1)
    one.add_argument("--gpu-kv-gib", type=float, default=4.0, help="per GPU")
    one.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    one.add_argument("--model", type=Path, default=RIG / "minimax_m2_8l")
    one.add_argument("--out", type=Path, required=True)
    cap = sub.add_parser("capacity", help="the engine sized by utilization: its KV tiers")
    cap.add_argument("--cpu-gib", type=float, required=True, help="CPU tier, total over ranks")
    cap.add_argument("--tp", type=int, default=1)
    cap.add_argument("--utilization", type=float, default=0.9, help="gpu_memory_utilization")
    cap.add_argument("--model", type=Path, default=RIG / "minimax_m2_8l")
    cap.add_argument("--out", type=Path, required=True)
    cap.set_defaults(gpu_kv_gib=0.0)
    many = sub.add_parser("drive", help="a plan of configurations, one subprocess each")
    many.add_argument("--plan", default="full", choices=("reduced", "full", "tp2"))
    many.add_argument("--best", default="bip", help="the hkv policy the simulator ranks best")
    many.add_argument("--devices", default="0", help="CUDA devices to use, e.g. 0,1")
    many.add_argument("--deadline-s", type=float, default=540.0)
    many.add_argument("--min-config-s", type=float, default=60.0)
    many.add_argument("--only", type=int, default=None, help="the plan's first N configurations")
    many.add_argument("--resume", action="store_true", help="keep --out's finished configs")
    many.add_argument("--model", type=Path, default=RIG / "minimax_m2_8l")
    many.add_argument("--work-dir", type=Path, default=ROOT / "out" / "vllm_gpu")
    many.add_argument("--out", type=Path, default=ROOT / "data/results/vllm_h200.json")
    sub.add_parser("link", help="pinned host<->GPU bandwidth as one JSON line")
    sub.add_parser("workload", help="the request sequence's summary as JSON")
    args = parser.parse_args(argv)
    if args.mode in ("run", "capacity"):
        result: dict = {}
        code = 0
        try:
            (run_config if args.mode == "run" else run_capacity)(args, result)
        except BaseException:
            traceback.print_exc()
            write_json(args.out, result | {"status": "error", "error": traceback.format_exc()})
            code = 3
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # vLLM's teardown is slow and can hang on exit; results are written
    if args.mode == "drive":
        drive(args)
    elif args.mode == "link":
        print(json.dumps(measure_link()))
    else:
        print(json.dumps({"text": workload_summary(Workload()),
                          "mm": workload_summary(Workload(images=True))}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
