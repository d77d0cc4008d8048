"""Trace simulator: Mooncake-format traces, a workload generator and a replay engine.

from hkv.sim import generate, load_trace, simulate
trace = load_trace("trace.jsonl")             # or generate(WorkloadSpec(seed=0))
results = simulate(trace, "all", capacity_blocks=1024, cost_model=CostModel.default())
"""

from hkv.sim.replay import ReplayResult, replay, simulate
from hkv.sim.trace import Request, Trace, load_trace, trace_from_requests, write_trace
from hkv.sim.workload import PRESETS, WorkloadSpec, generate, overlay_modalities

__all__ = [
    "PRESETS",
    "ReplayResult",
    "Request",
    "Trace",
    "WorkloadSpec",
    "generate",
    "load_trace",
    "overlay_modalities",
    "replay",
    "simulate",
    "trace_from_requests",
    "write_trace",
]
