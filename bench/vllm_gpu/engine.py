"""`run`: one engine (CPU tier x variant x tensor-parallel size) in this process, its policies'
runs of the anchor workload alternating, `repeats` rounds."""

from __future__ import annotations

import gc
import json
import os
import random
import time

from bench.vllm_gpu import ORACLE, ORACLE_PARAM, VLLM_POLICIES, probe
from bench.vllm_gpu.plans import policy_list, split_policy
from bench.vllm_gpu.steps import StepTrace, diagnose
from bench.vllm_gpu.summary import method_use, summarize
from bench.vllm_gpu.timers import GcTimer, ManagerCounter, PolicyTimer, StepTimer, time_inner_parts
from hkv.report import provenance, write_json
from hkv.sim.anchor import TOKEN_HIGH, Workload, build_sessions


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


def warm_up(llm, w: Workload) -> None:
    """JIT paths (Triton MoE etc.) on token ids the workload never uses."""
    from vllm import SamplingParams

    sampling = SamplingParams(
        max_tokens=w.max_tokens, ignore_eos=True, temperature=0.0, detokenize=False
    )
    rng = random.Random(12345)

    def prompt(n):
        return {"prompt_token_ids": [rng.randrange(TOKEN_HIGH, 199000) for _ in range(n)]}

    for n in (3000, 9000, 17000):
        llm.generate([prompt(n)], sampling, use_tqdm=False)
    llm.generate([prompt(2000 + 37 * i) for i in range(4)], sampling, use_tqdm=False)


def wave_requests(w: Workload, sessions, wave, tag: bool) -> tuple[list, list]:
    """One wave's prompts and sampling parameters, each with its image spans and, with `tag`,
    its session and turn (the `oracle` yardstick reads them)."""
    from vllm import SamplingParams

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
    return prompts, params


GC_TIMER = GcTimer()
"""The collector's collections and seconds in this process, over each run (`counter_totals`)."""


def counter_totals(counters) -> dict:
    """The policy timer's, step timer's and manager counter's totals now."""
    policy_timer, step_timer, manager_counter, _ = counters
    policy = policy_timer.snapshot()
    hkv_policy = getattr(policy_timer.policy, "policy", None)  # hkv's adapter: its policy
    return {
        "policy_s": policy["policy_s"],
        "policy_calls": policy["policy_calls"],
        "policy_switches": getattr(hkv_policy, "switches", 0),  # `auto`'s changes of leader
        "step_s": step_timer.seconds,
        "steps": step_timer.steps,
        **manager_counter.snapshot(),
        **GC_TIMER.snapshot(),
        "methods": policy["methods"],
    }


def run_workload(llm, w: Workload, sessions, waves, counters, tag: bool = False) -> dict:
    """One pass of the workload; per-request rows and the run's summary. `tag`: every request
    tells the policy its session and turn (the `oracle` yardstick reads them)."""
    policy_timer, block_bytes = counters[0], counters[3]
    base = counter_totals(counters)
    metrics_before = metric_values(llm)
    rows = []
    host = (probe.process_cpu_s(), probe.steal_s())
    start = time.perf_counter()
    for wave_index, wave in enumerate(waves):
        prompts, params = wave_requests(w, sessions, wave, tag)
        wave_start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        wave_s = time.perf_counter() - wave_start
        for (session, turn), out in zip(wave, outputs, strict=True):
            rows.append(
                {
                    "wave": wave_index,
                    "session": session,
                    "turn": turn,
                    "prompt_len": sessions[session].prompt_lens[turn],
                    "ttft_s": getattr(out.metrics, "first_token_latency", None),
                    "cached_tokens": out.num_cached_tokens or 0,
                    "wave_s": wave_s,
                }
            )
    wall_s = time.perf_counter() - start
    cpu_s, steal = probe.process_cpu_s(), probe.steal_s()
    delta = {k: v - metrics_before.get(k, 0.0) for k, v in metric_values(llm).items()}
    now = counter_totals(counters)
    used = {k: now[k] - base[k] for k in now if k != "methods"}
    used["policy_by_method"] = method_use(base["methods"], now["methods"])
    if policy_timer.overhead is not None:
        used["timer_overhead_s_per_call"] = policy_timer.overhead["recorded_s"]
        used["timer_wrapper_s_per_call"] = policy_timer.overhead["added_s"]
    summary = summarize(rows, wall_s, used, delta, block_bytes)
    summary["cpu_s"] = cpu_s - host[0]  # the engine process's, all its threads
    summary["steal_s"] = None if steal is None or host[1] is None else steal - host[1]
    return {"summary": summary, "requests": rows}


def run_config(args, result: dict) -> None:
    """Measure one configuration into `result` (written to `args.out` after every run).

    `args.policy` may name several policies (comma-separated): they share one engine, whose CPU
    tier and GPU prefix cache are emptied and whose policy object is replaced before each run,
    and their runs alternate (repeat 0 of each, then repeat 1 of each), so that the host's drift
    falls on all of them alike, in an order that rotates by round (`round_order`; a run's place
    is its `slot`). The engine is built with the first, which runs `warmup_runs` times first.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HKV_BLOCK_TOKENS", "16")
    policies = policy_list(args.policy)
    popularity, seed = getattr(args, "popularity", 0.0), getattr(args, "seed", 0)
    w = Workload(images=args.variant == "mm", popularity=popularity, seed=seed)
    parameters = {
        "policy": policies[0] if len(policies) == 1 else ",".join(policies),
        "policies": policies,
        "cpu_gib": args.cpu_gib,
        "variant": args.variant,
        "popularity": popularity,
        **({"seed": seed} if seed else {}),  # (seed 0: files as before)
        "tp": getattr(args, "tp", 1),
        "gpu_kv_gib": args.gpu_kv_gib,
        "repeats": args.repeats,
        "warmup_runs": getattr(args, "warmup_runs", 1),
        "order": getattr(args, "order", "rotate"),
    }
    command = "python -m bench.vllm_gpu run"
    result |= provenance(command, parameters, packages=("hkv", "vllm", "torch"))
    result |= {k: v for k, v in parameters.items() if k != "repeats"}
    llm, sessions, waves = start_engine(args, policies, w, result)
    import torch  # imported by vLLM already

    result["machine"]["gpu_name"] = torch.cuda.get_device_name(0)  # for the provenance tables
    core, manager = offloading_manager(llm)
    result["cpu_blocks"] = manager._num_blocks if hasattr(manager, "_num_blocks") else None
    result["gpu_blocks"] = llm.llm_engine.vllm_config.cache_config.num_gpu_blocks
    block_bytes = int(args.cpu_gib * (1 << 30)) // max(result["cpu_blocks"] or 1, 1)
    result["block_bytes"] = block_bytes  # over all ranks (vLLM sizes the tier that way)
    result["timer_overhead"] = PolicyTimer.measure_overhead()
    counters = (None, StepTimer(core), ManagerCounter(manager), block_bytes)
    if getattr(args, "trace", False):  # after the counters: the trace's step holds theirs
        connector = core.scheduler.connector.connector_scheduler
        counters = (*counters, StepTrace(core, connector), previous_turn_blocks(sessions, waves))
    t2 = time.perf_counter()
    warm_up(llm, w)
    result["t_warmup_s"] = time.perf_counter() - t2
    result["policy_info"], result["repeats"], result["warmup"] = {}, [], []
    for _ in range(parameters["warmup_runs"]):
        warmup_run(llm, manager, policies[0], (w, sessions, waves), counters, result)
    result["host_probe"] = getattr(args, "host_probe", False)
    timed_rounds(args, (llm, manager, counters), (w, sessions, waves), result)
    result["status"] = "done"
    write_json(args.out, result)


def timed_rounds(args, engine, workload, result: dict) -> None:
    """`args.repeats` rounds of the policies' runs into `result["repeats"]`, each with the
    host's speed just before and after it (`probe.around`: chunks a second while the engine is
    idle; their geometric mean `host_rate`; None where `result["host_probe"]` is off), written
    after every run."""
    llm, manager, counters = engine
    policies, order = result["policies"], result["order"]
    for repeat in range(args.repeats):
        for slot, name in enumerate(round_order(policies, repeat, order)):

            def run(name=name):
                return run_policy(llm, manager, name, workload, counters, result)

            one, (before, after) = probe.around(run, result["host_probe"])
            one["policy"], one["repeat"], one["slot"] = name, repeat, slot
            mean = (before * after) ** 0.5 if before else None
            one["summary"] |= {"host_rate_before": before, "host_rate_after": after,
                               "host_rate": mean}  # fmt: skip
            result["repeats"].append(one)
            print("SUMMARY", name, args.cpu_gib, args.variant, repeat,
                  json.dumps({k: v for k, v in one["summary"].items() if k != "metrics_delta"}),
                  flush=True)  # fmt: skip
            write_json(args.out, result)


def round_order(policies: list[str], repeat: int, order: str) -> list[str]:
    """The policies' order in round `repeat`: as given (`fixed`), or shifted by one place a
    round (`rotate`), so that over as many rounds as policies each runs once in every place
    of a round and a cost tied to a place (the round's first run, a run after another policy)
    falls on every policy alike."""
    if order == "fixed" or not policies:
        return list(policies)
    shift = repeat % len(policies)
    return [*policies[shift:], *policies[:shift]]


def start_engine(args, policies: list[str], w: Workload, result: dict):
    """Import vLLM, register hkv's policies (and the oracle's future), build the engine; the
    import and init times go into `result`. Returns the engine, sessions and waves."""
    t0 = time.perf_counter()
    import vllm
    from vllm import LLM

    if any(split_policy(p)[0] not in (*VLLM_POLICIES, ORACLE) for p in policies):
        from hkv.integrations.vllm import register

        register()  # vLLM 0.26: into the manager's built-in dictionary; 0.32+: the factory
    sessions, waves = build_sessions(w)
    if ORACLE in policies:
        from bench import vllm_oracle

        vllm_oracle.install([request for wave in waves for request in wave])
    result["vllm_version"] = vllm.__version__
    result["t_import_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    llm = LLM(**engine_kwargs(args, split_policy(policies[0])[0]))
    result["t_engine_init_s"] = time.perf_counter() - t1
    return llm, sessions, waves


def warmup_run(llm, manager, name: str, workload, counters, result: dict) -> None:
    """One run of policy `name`, its wall time, TTFT, cached share and steps into
    `result["warmup"]`, apart from the timed runs: an engine's first run of the workload is
    slower than its later ones (over the committed engine files before 90e62ef, whose first
    run was always lru's: `hkv.report.bench_vllm.first_run_penalty`), which would otherwise
    fall on the first policy alone."""
    summary = run_policy(llm, manager, name, workload, counters, result)["summary"]
    kept = ("wall_s", "ttft_mean_s", "cached_frac", "steps")
    result["warmup"].append({"policy": name, **{k: summary[k] for k in kept if k in summary}})


def run_policy(llm, manager, name: str, workload, counters, result: dict) -> dict:
    """One run of the workload with a fresh, timed policy `name` in the emptied tiers."""
    w, sessions, waves = workload
    policy, reset_ok = fresh_policy(llm, manager, name)
    result["policy_info"][name] = policy_info(policy)
    timer = PolicyTimer(policy)
    timer.overhead = result["timer_overhead"]
    inner = time_inner_parts(getattr(policy, "policy", None))
    trace = counters[4] if len(counters) > 4 else None
    if trace is not None:
        trace.reset()
        trace.use_policy_clock(lambda: timer.seconds)
    gc.collect()  # the last run's garbage (its policy, in cycles with its timer) now
    one = run_workload(llm, w, sessions, waves, (timer, *counters[1:4]), tag=name == ORACLE)
    one["summary"]["caches_reset"] = reset_ok
    if inner:
        log = inner.pop("leaders", None)
        one["summary"]["policy_inner"] = {k: {"s": c[0], "calls": c[1]} for k, c in inner.items()}
        if log is not None:  # `auto`: its first leader, then [request, new leader, seconds]
            one["summary"]["policy_leaders"] = log
    if trace is not None:
        one["trace"] = trace.snapshot()
        one["summary"]["diagnosis"] = diagnose(one["trace"], counters[5])
    return one


def previous_turn_blocks(sessions, waves) -> dict[int, int]:
    """Request index (submission order) -> full blocks of its session's previous prompt (turns
    after the first): what the CPU tier could hold of it at best, for `diagnose`."""
    out, index = {}, 0
    for wave in waves:
        for session, turn in wave:
            if turn > 0:
                out[index] = sessions[session].prompt_lens[turn - 1] // 16
            index += 1
    return out


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
