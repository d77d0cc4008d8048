"""`bench.vllm_gpu.steps`: the per-step trace of an engine and its diagnosis, driven through
stand-ins of vLLM's engine core, scheduler and offloading connector (no GPU, no vLLM)."""

from __future__ import annotations

import types

from bench.vllm_gpu.steps import STEP_FIELDS, StepTrace, diagnose


class Scheduler:
    """Two requests: `a` loads 64 tokens from the CPU tier and waits a step for them, `b`
    computes its 100-token prompt at once; then both decode one token."""

    def __init__(self, connector):
        self.connector = connector
        self.requests = {}
        self.finished_recving_kv_req_ids = set()
        self.plan = iter(
            [
                {"b": 100},  # a's load is issued, b prefills
                {},  # a waits on its load, b has nothing left: an idle step
                {"a": 36, "b": 1},  # a computes the rest of its prompt
                {"a": 1, "b": 1},
            ]
        )

    def schedule(self):
        if not self.requests:
            for rid, prompt in (("a", 100), ("b", 100)):
                self.requests[rid] = types.SimpleNamespace(
                    request_id=rid, num_prompt_tokens=prompt, num_computed_tokens=0,
                    status=types.SimpleNamespace(name="WAITING"),
                )  # fmt: skip
            a, b = self.requests["a"], self.requests["b"]
            self.connector.get_num_new_matched_tokens(a, 0)
            self.connector.get_num_new_matched_tokens(b, 0)
            self.connector.update_state_after_alloc(a, None, 64)
            a.status.name, a.num_computed_tokens = "WAITING_FOR_REMOTE_KVS", 64
        scheduled = next(self.plan)
        for rid, n in scheduled.items():
            self.requests[rid].num_computed_tokens += n
        return types.SimpleNamespace(
            num_scheduled_tokens=scheduled, total_num_scheduled_tokens=sum(scheduled.values())
        )


class Connector:
    def __init__(self):
        self.manager = types.SimpleNamespace(prepare_store=lambda keys, ctx: keys)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return (64, True) if request.request_id == "a" else (0, False)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        return None


def test_the_trace_counts_idle_steps_loads_and_each_requests_wait():
    connector = Connector()
    scheduler = Scheduler(connector)
    steps = iter(range(4))

    def step():
        index = next(steps)
        if index == 0:
            connector.manager.prepare_store(["k"], None)
        if index == 1:  # the load completes during the idle step
            scheduler.finished_recving_kv_req_ids.add("a")
            scheduler.requests["a"].status.name = "WAITING"
        scheduler.schedule()
        return {}, True

    core = types.SimpleNamespace(step_fn=step, scheduler=scheduler)
    clock = iter([0.0, 0.0, 0.5, 0.5, 0.5, 0.75, 0.75, 0.75])
    trace = StepTrace(core, connector, block_tokens=16)
    trace.use_policy_clock(lambda: next(clock))
    for _ in range(4):
        core.step_fn()
    snap = trace.snapshot()
    assert snap["fields"] == list(STEP_FIELDS)
    tokens = [row[STEP_FIELDS.index("tokens")] for row in snap["rows"]]
    assert tokens == [100, 0, 37, 2]
    loads = [row[STEP_FIELDS.index("load_blocks")] for row in snap["rows"]]
    assert loads == [4, 0, 0, 0]  # 64 tokens in 16-token blocks, issued at the first step
    policy = [row[STEP_FIELDS.index("policy_s")] for row in snap["rows"]]
    assert policy == [0.0, 0.0, 0.25, 0.0]

    found = diagnose(snap, previous_blocks={0: 6})
    assert found["steps"] == 4 and found["idle_steps"] == 1
    assert found["prefill_steps"] == 2 and found["decode_steps"] == 1
    assert found["load_jobs"] == 1 and found["load_blocks"] == 4
    assert found["requests_loading"] == 1 and found["load_wait_steps_mean"] == 1
    assert found["cpu_hit_tokens"] == 64 and found["store_calls"] == 1
    assert found["partial_chain_hits"] == 1  # a got 4 of the 6 blocks its last turn stored
    assert found["policy_s"] == 0.25


def test_time_rows_take_medians_over_repeats_against_lru_in_the_same_engine():
    from hkv.report.bench_vllm_auto import time_findings, time_rows

    def run(policy, wall, ttft, policy_s, repeat):
        cell = {"repeat": repeat, "cpu_gib": 8.0, "popularity": 0.0, "cached_frac": 0.5}
        return {"policy": policy, "wall_s": wall, "ttft_mean_s": ttft, "policy_s": policy_s, **cell}

    runs = [run("lru", w, 0.2, 0.1, i) for i, w in enumerate((20.0, 22.0, 21.0))]
    runs += [run("hkv_auto", w, 0.18, 0.3, i) for i, w in enumerate((19.0, 30.0, 18.9))]
    rows = {r["policy"]: r for r in time_rows({"runs": runs})}
    assert rows["lru"]["wall_s"] == 21.0 and rows["lru"]["repeats"] == 3
    assert rows["hkv_auto"]["wall_s"] == 19.0  # the slow spell of one repeat does not decide
    assert abs(rows["hkv_auto"]["wall_vs_lru"] - (19.0 / 21.0 - 1)) < 1e-12
    assert abs(rows["hkv_auto"]["ttft_vs_lru"] + 0.1) < 1e-12
    assert abs(rows["hkv_auto"]["policy_x_lru"] - 3.0) < 1e-12
    (line,) = time_findings({"runs": runs}, {"runs": []})
    assert line.startswith("anchor at 8 GiB: hkv_auto's median wall time is -9.5 %")
