"""The generated workloads of the policy suite (`hkv.sim.suite`), each with an explicit seed.

- `anchor_round_robin`: the H200 benchmark's multi-turn anchor (`hkv.sim.anchor`: 8-16K-token
  first turns, 1-2K more per turn, sessions in a fresh random order each round, 16-token blocks);
- `zipf_sessions_a<exponent>`: multi-turn sessions whose popularity is Zipf-skewed
  (`hkv.sim.zipf_sessions`), at several exponents;
- `shared_prefix_rag`: the generator's `doc_qa` preset (shared system prompts and popular
  documents);
- `bursty`: chat sessions arriving in 20x bursts;
- `multimodal`: the `multimodal` preset (vision and audio blocks carry `modalities`).

`size="full"` is what `python -m bench.policy_suite` runs (each 10-60 K block references);
`size="ci"` the same shapes a few hundred requests small, for tests (seconds).
"""

from __future__ import annotations

from hkv.errors import HkvError
from hkv.sim.anchor import Workload, trace_requests
from hkv.sim.trace import Trace, trace_from_requests
from hkv.sim.workload import WorkloadSpec, generate
from hkv.sim.zipf_sessions import ZipfSessionSpec, generate_zipf_sessions

SIZES = {
    "full": {
        "anchor": {"sessions": 16},
        "zipf_requests": 1000,
        "zipf_sessions": 100,
        "sessions": 400,
    },
    # the anchor's shape with 1-2K-token first turns and 128-256 more tokens a turn
    "ci": {
        "anchor": {
            "sessions": 8,
            "first_min": 1024,
            "first_max": 2048,
            "delta_min": 128,
            "delta_max": 256,
        },
        "zipf_requests": 300,
        "zipf_sessions": 40,
        "sessions": 120,
    },
}
ZIPF_EXPONENTS = (0.5, 1.0, 1.5)


def anchor_trace(seed: int, **knobs: int) -> Trace:
    """The anchor workload (`anchor.Workload(**knobs)`) as a trace of its 16-token blocks."""
    workload = Workload(seed=seed, **knobs)
    requests, _ = trace_requests(workload=workload)
    source = f"anchor({', '.join(f'{k}={v}' for k, v in knobs.items())}, seed={seed})"
    return trace_from_requests(requests, block_tokens=workload.block_tokens, source=source)


def generated_workloads(size: str = "full", seed: int = 0) -> dict[str, Trace]:
    """The suite's generated workloads by name; workload `i` uses seed `seed + i`."""
    if size not in SIZES:
        raise HkvError(f"size: got {size!r}; expected one of {', '.join(SIZES)}")
    n = SIZES[size]
    traces = {"anchor_round_robin": anchor_trace(seed, **n["anchor"])}
    for i, exponent in enumerate(ZIPF_EXPONENTS, start=1):
        spec = ZipfSessionSpec(
            seed=seed + i,
            num_sessions=n["zipf_sessions"],
            num_requests=n["zipf_requests"],
            zipf_exponent=exponent,
        )
        traces[f"zipf_sessions_a{exponent:g}"] = generate_zipf_sessions(spec)
    sessions = n["sessions"]
    specs = {
        "shared_prefix_rag": WorkloadSpec.preset("doc_qa", seed=seed + 4, num_sessions=sessions),
        "bursty": WorkloadSpec(
            seed=seed + 5,
            num_sessions=sessions,
            burst_factor=20.0,
            burst_on_s=30.0,
            burst_off_s=90.0,
        ),
        "multimodal": WorkloadSpec.multimodal(seed=seed + 6, num_sessions=sessions),
    }
    for name, spec in specs.items():
        traces[name] = generate(spec)
    return traces
