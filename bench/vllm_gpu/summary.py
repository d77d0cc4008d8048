"""One run's summary: cached shares, TTFT, bytes moved, and the policy's time net of the
timer's own cost; `fold`, many runs' files as one small results file."""

from __future__ import annotations

from pathlib import Path

from hkv.report import write_json


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    low = int(k)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (k - low)


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
        "policy_switches": used.get("policy_switches", 0),
        "policy_by_method": used.get("policy_by_method"),
        **{k: used[k] for k in ("gc_collections", "gc_s", "gc_gen2_s") if k in used},
        "metrics_delta": metrics,
    }


FOLDED_DROP = ("metrics_delta",)
"""Per-run keys `fold` leaves out (vLLM's raw metric deltas); the per-method timer table
(`policy_by_method`: seconds and calls of each `CachePolicy` method) stays, so a committed
file shows where each policy's time went, vLLM's own included."""


def fold(files: list, out, partial: bool = False) -> dict:
    """One small results file from several `run` files (one engine each): each engine's
    parameters and sizes, and a row per run (its summary, without the per-request arrays).
    `partial`: an engine cut off before its last run (a call's time limit) keeps the runs it
    finished, its entry marked `"finished": false`; otherwise such a file is refused."""
    from hkv.inputs import read_json
    from hkv.sim.anchor import Workload, workload_summary

    engines, runs, variants = [], [], {}
    for path in files:
        data = read_json(path, "fold")
        finished = data.get("status") == "done"
        if not finished and not (partial and data.get("repeats")):
            raise SystemExit(f"fold: {path} did not finish ({data.get('status')!r})")
        params = data["parameters"]
        engines.append({**params, "cpu_blocks": data["cpu_blocks"], "file": Path(path).name})
        if not finished:
            engines[-1]["finished"] = False
        if data.get("warmup"):  # the runs made before the timed ones, kept apart
            engines[-1]["warmup"] = data["warmup"]
        popularity, seed = params.get("popularity", 0.0), params.get("seed", 0)
        drawn = {"seed": seed} if seed else {}  # (another draw of the workload than the engines')
        variants[f"{params['variant']}@{popularity:g}{f'#{seed}' if seed else ''}"] = (
            workload_summary(
                Workload(images=params["variant"] == "mm", popularity=popularity, seed=seed)
            )
        )
        for one in data["repeats"]:
            summary = {k: v for k, v in one["summary"].items() if k not in FOLDED_DROP}
            place = {"slot": one["slot"]} if "slot" in one else {}  # (files before 'order')
            rows = one.get("requests") or []
            waves = {"by_wave": by_wave(rows)} if rows and all("wave" in r for r in rows) else {}
            runs.append({"policy": one["policy"], "repeat": one["repeat"], **place,
                         "cpu_gib": params["cpu_gib"], "variant": params["variant"],
                         "popularity": popularity, **drawn, **summary, **waves})  # fmt: skip
    first = read_json(files[0], "fold")
    head = {k: first[k] for k in ("date_utc", "machine", "versions")}
    command = "python -m bench.vllm_gpu run ..., one engine a call (`engines`), then fold"
    result = {"generated_by": command, **head, "parameters": {"engines": engines},
              "workloads": variants, "runs": runs}  # fmt: skip
    write_json(out, result)
    return result


def by_wave(rows: list[dict]) -> dict[str, list]:
    """A run's requests summed wave by wave (waves in order): the TTFT of its requests
    (seconds, a request without one counted 0) and their cached tokens. Small enough to
    fold, and enough to tell where two policies' TTFT parts
    (`hkv.report.bench_vllm_auto.wave_split`)."""
    ttft: dict[int, float] = {}
    cached: dict[int, int] = {}
    for row in rows:
        wave = row["wave"]
        ttft[wave] = ttft.get(wave, 0.0) + (row["ttft_s"] or 0.0)
        cached[wave] = cached.get(wave, 0) + row["cached_tokens"]
    order = sorted(ttft)
    return {
        "ttft_s": [round(ttft[w], 6) for w in order],
        "cached_tokens": [cached[w] for w in order],
    }
