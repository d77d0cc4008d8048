"""Where an engine's steps and seconds go: a per-step trace of vLLM's scheduler and offloading
connector, and the per-request story of each CPU-tier hit (`run --trace`).

Per step (`StepTrace.rows`, one tuple a step, `STEP_FIELDS`): its seconds, the tokens it
scheduled and for how many requests, how many requests waited on a CPU-tier load
(`WAITING_FOR_REMOTE_KVS`) while it ran, the load jobs the connector issued in it and their
blocks, the store jobs, and the policy's seconds inside it. Per request (`requests`): the tokens
the GPU prefix cache held, the tokens the CPU tier added (the load), the steps from the load's
issue to its completion, and the steps from arrival to the first token.

`diagnose` folds one run's trace into the numbers that explain a difference in wall time between
policies at a similar hit rate: idle steps (nothing computed: every request waiting on a load),
decode-only steps (one token a request), prefill steps (more); load jobs, their sizes, and
requests' load waits in steps; partial-chain hits (a hit that stops before the blocks the
session's previous turn left). Idle steps are polls of about 0.1 ms on the H200: they count, but
cost little; what costs is in the prefill and decode seconds and the policy's own.
"""

from __future__ import annotations

import statistics
import time

STEP_FIELDS = (
    "s",  # the step's wall seconds
    "tokens",  # tokens scheduled (prefill and decode)
    "reqs",  # requests scheduled
    "prefill_reqs",  # of them, those whose prompt is not all scheduled yet
    "waiting_load",  # requests in WAITING_FOR_REMOTE_KVS during the step
    "load_jobs",  # load jobs issued by the connector in the step
    "load_blocks",  # their CPU-tier blocks
    "store_calls",  # `prepare_store` calls in the step
    "policy_s",  # the policy's own seconds in the step
)


class StepTrace:
    """Wraps the in-process engine core's step, the scheduler's `schedule` and the offloading
    connector's scheduler side; `rows` and `requests` fill as the engine runs.

    `policy_seconds`: a callable returning the policy's total seconds so far (the run's
    `PolicyTimer`), read around each step; swap it per run with `use_policy_clock`."""

    def __init__(self, engine_core, connector_scheduler, block_tokens: int = 16) -> None:
        self.rows: list[tuple] = []
        self.requests: dict[str, dict] = {}
        self.block_tokens = block_tokens
        self._policy_seconds = lambda: 0.0
        self._step = {"load_jobs": 0, "load_blocks": 0, "store_calls": 0}
        self._wrap_step(engine_core)
        self._wrap_scheduler(engine_core.scheduler)
        self._wrap_connector(connector_scheduler)

    def use_policy_clock(self, policy_seconds) -> None:
        self._policy_seconds = policy_seconds

    def reset(self) -> None:
        """Start a new run's trace."""
        self.rows, self.requests = [], {}

    def _wrap_step(self, core) -> None:
        step = core.step_fn
        scheduler = core.scheduler

        def traced():
            self._step = {"load_jobs": 0, "load_blocks": 0, "store_calls": 0, "sched": None}
            policy_before = self._policy_seconds()
            start = time.perf_counter()
            out = step()
            seconds = time.perf_counter() - start
            self._record(scheduler, seconds, self._policy_seconds() - policy_before)
            return out

        core.step_fn = traced

    def _record(self, scheduler, seconds: float, policy_s: float) -> None:
        sched = self._step.get("sched")
        tokens = reqs = prefill = waiting = 0
        if sched is not None:
            tokens, reqs, prefill, waiting = sched
        step_index = len(self.rows)
        self.rows.append(
            (round(seconds, 6), tokens, reqs, prefill, waiting, self._step["load_jobs"],
             self._step["load_blocks"], self._step["store_calls"], round(policy_s, 6))
        )  # fmt: skip
        for req_id in list(scheduler.finished_recving_kv_req_ids):
            row = self.requests.get(req_id)
            if row is not None and row.get("load_done_step") is None:
                row["load_done_step"] = step_index

    def _wrap_scheduler(self, scheduler) -> None:
        schedule = scheduler.schedule

        def traced(*args, **kwargs):
            out = schedule(*args, **kwargs)
            step_index = len(self.rows)
            prefill = 0
            for req_id in out.num_scheduled_tokens:
                request = scheduler.requests.get(req_id)
                if request is None:
                    continue
                row = self.requests.get(req_id)
                if row is not None and row.get("first_step") is None:
                    row["first_step"] = step_index
                if request.num_computed_tokens < request.num_prompt_tokens:
                    prefill += 1
            waiting = sum(
                1 for r in scheduler.requests.values() if r.status.name == "WAITING_FOR_REMOTE_KVS"
            )
            self._step["sched"] = (
                out.total_num_scheduled_tokens, len(out.num_scheduled_tokens), prefill, waiting
            )  # fmt: skip
            return out

        scheduler.schedule = traced

    def _wrap_connector(self, connector) -> None:
        matched = connector.get_num_new_matched_tokens
        after_alloc = connector.update_state_after_alloc
        manager = connector.manager
        prepare_store = manager.prepare_store

        def traced_matched(request, num_computed_tokens):
            out = matched(request, num_computed_tokens)
            row = self.requests.setdefault(
                request.request_id,
                {"arrival_step": len(self.rows), "prompt": request.num_prompt_tokens,
                 "lookups": 0, "deferred": 0},
            )  # fmt: skip
            row["lookups"] += 1
            if out[0] is None:
                row["deferred"] += 1
            else:
                row["gpu_hit"], row["cpu_hit"] = num_computed_tokens, out[0]
            return out

        def traced_after_alloc(request, blocks, num_external_tokens):
            out = after_alloc(request, blocks, num_external_tokens)
            if num_external_tokens:
                self._step["load_jobs"] += 1
                self._step["load_blocks"] += -(-num_external_tokens // self.block_tokens)
                row = self.requests.get(request.request_id)
                if row is not None:
                    row["load_step"] = len(self.rows)
            return out

        def traced_store(*args, **kwargs):
            self._step["store_calls"] += 1
            return prepare_store(*args, **kwargs)

        connector.get_num_new_matched_tokens = traced_matched
        connector.update_state_after_alloc = traced_after_alloc
        manager.prepare_store = traced_store

    def snapshot(self) -> dict:
        """This run's trace as plain lists (for the run's JSON)."""
        return {"fields": list(STEP_FIELDS), "rows": [list(r) for r in self.rows],
                "requests": list(self.requests.values())}  # fmt: skip


def diagnose(trace: dict, previous_blocks: dict | None = None) -> dict:
    """One run's trace folded into counts and seconds (see the module doc).

    `previous_blocks`: request index (submission order) -> blocks its session's previous turn
    could have left in the CPU tier, for the partial-chain count (None: not counted)."""
    index = {name: i for i, name in enumerate(trace["fields"])}
    rows = trace["rows"]

    def col(name):
        return [r[index[name]] for r in rows]

    seconds, tokens, reqs = col("s"), col("tokens"), col("reqs")
    kinds = {"idle": [], "decode": [], "prefill": []}
    for s, t, r in zip(seconds, tokens, reqs, strict=True):  # prefill: more tokens than reqs
        kinds["idle" if t == 0 else "prefill" if t > r else "decode"].append(s)
    out = {
        "steps": len(rows),
        "step_s": sum(seconds),
        **{f"{k}_steps": len(v) for k, v in kinds.items()},
        **{f"{k}_s": sum(v) for k, v in kinds.items()},
        "steps_with_waiting_load": sum(1 for w in col("waiting_load") if w),
        "load_jobs": sum(col("load_jobs")),
        "load_blocks": sum(col("load_blocks")),
        "store_calls": sum(col("store_calls")),
        "policy_s": sum(col("policy_s")),
        "policy_s_max_step": max(col("policy_s"), default=0.0),
    }
    requests = trace["requests"]
    loads = [r for r in requests if r.get("cpu_hit")]
    waits = [r["load_done_step"] - r["load_step"] for r in loads
             if r.get("load_done_step") is not None and r.get("load_step") is not None]  # fmt: skip
    starts = [r["first_step"] - r["arrival_step"] for r in requests if r.get("first_step")]
    out |= {
        "requests": len(requests),
        "requests_loading": len(loads),
        "load_blocks_per_job_median": (
            statistics.median(-(-r["cpu_hit"] // 16) for r in loads) if loads else 0
        ),
        "load_wait_steps_mean": statistics.fmean(waits) if waits else 0.0,
        "load_wait_steps_max": max(waits, default=0),
        "first_step_after_arrival_mean": statistics.fmean(starts) if starts else 0.0,
        "deferred_lookups": sum(r.get("deferred", 0) for r in requests),
        "gpu_hit_tokens": sum(r.get("gpu_hit", 0) for r in requests),
        "cpu_hit_tokens": sum(r.get("cpu_hit") or 0 for r in requests),
    }
    if previous_blocks is not None:
        partial = 0
        for i, r in enumerate(requests):
            best = previous_blocks.get(i)
            got = ((r.get("gpu_hit") or 0) + (r.get("cpu_hit") or 0)) // 16
            if best and 0 < got < best:
                partial += 1
        out["partial_chain_hits"] = partial
    return out


KEPT = ("wall_s", "ttft_mean_s", "cached_frac", "steps", "policy_s", "policy_switches",
        "policy_by_method", "policy_inner", "diagnosis")  # fmt: skip
"""What `fold_traces` keeps of each run's summary."""


def fold_traces(run_files: list, out, window: tuple[int, int] = (170, 212)) -> dict:
    """One small results file from `run --trace` files: per run, its summary's `KEPT` keys with
    the diagnosis made again from the whole trace (this module's `diagnose`), and the trace's
    rows in `window` (steps), where the anchor's first returning wave starts."""
    from pathlib import Path

    from hkv.inputs import read_json
    from hkv.report import write_json

    runs = []
    first = None
    for path in run_files:
        data = read_json(path, "fold-traces")
        first = first or data
        for one in data.get("repeats", []):
            if "trace" not in one:
                raise SystemExit(f"fold-traces: {path} has a run without a trace (run --trace)")
            summary = dict(one["summary"])
            summary["diagnosis"] = diagnose(one["trace"], _previous_blocks(data))
            runs.append(
                {"policy": one["policy"], "repeat": one["repeat"],
                 "cpu_gib": data["parameters"]["cpu_gib"], "variant": data["parameters"]["variant"],
                 **{k: summary.get(k) for k in KEPT},
                 "trace_window": {"steps": list(window), "fields": one["trace"]["fields"],
                                  "rows": one["trace"]["rows"][window[0]:window[1]]},
                 "file": Path(path).name}
            )  # fmt: skip
    head = {k: first[k] for k in ("date_utc", "machine", "versions")} if first else {}
    result = {"generated_by": "python -m bench.vllm_gpu run ... --trace, then fold-traces",
              **head, "runs": runs}  # fmt: skip
    write_json(out, result)
    return result


def _previous_blocks(data: dict) -> dict[int, int] | None:
    """`previous_turn_blocks` of the anchor workload a run file served (None: not the anchor)."""
    from bench.vllm_gpu.engine import previous_turn_blocks
    from hkv.sim.anchor import Workload, build_sessions

    params = data.get("parameters", {})
    workload = Workload(
        images=params.get("variant") == "mm", popularity=params.get("popularity", 0.0)
    )
    return previous_turn_blocks(*build_sessions(workload))
