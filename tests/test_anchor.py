"""The anchor workload's parameters (`hkv.sim.anchor.Workload`) and its trace requests: user
mistakes are one `HkvError`. (Its token stream, waves and images are tested with the GPU
benchmark, in tests/test_vllm_gpu_bench.py.)"""

from __future__ import annotations

import math
import re

import pytest

from hkv.errors import HkvError
from hkv.sim import anchor, load_trace, write_trace
from hkv.sim.suite_workloads import anchor_trace

SMALL = {"sessions": 2, "turns": 2, "first_min": 64, "first_max": 128, "delta_min": 16}


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"sessions": 0}, "Workload.sessions: got 0; expected an integer >= 1"),
        ({"turns": 2.0}, "Workload.turns: got 2.0; expected an integer >= 1"),
        ({"wave": True}, "Workload.wave: got True; expected an integer >= 1"),
        ({"first_max": None}, "Workload.first_max: got None; expected an integer >= 1"),
        ({"popularity": -1}, "Workload.popularity: got -1; expected a Zipf exponent in [0, 8]"),
        ({"first_max": 100, "first_min": 200}, "Workload: first_max/delta_max (100/2048)"),
        ({"image_median_tokens": 0}, "Workload.image_median_tokens: got 0; expected a number"),
        ({"image_median_tokens": -5}, "Workload.image_median_tokens: got -5"),
        ({"image_median_tokens": math.nan}, "Workload.image_median_tokens: got nan"),
    ],
)
def test_a_bad_workload_is_one_hkv_error(knobs, message):
    """These raised a plain ValueError, or `math domain error` once images were drawn."""
    with pytest.raises(HkvError, match=re.escape(message)):
        anchor.Workload(**knobs)


def test_a_trace_of_first_turns_shorter_than_a_block_is_refused():
    """`first_min < block_tokens` gave requests of `input_length` 0, which `load_trace` (and
    now `trace_from_requests`) refuses; the trace says so where it is made."""
    short = anchor.Workload(sessions=1, turns=1, first_min=3, first_max=5)
    with pytest.raises(HkvError, match=re.escape("Workload.first_min: got 3; expected >= bl")):
        anchor.trace_requests(workload=short)
    with pytest.raises(HkvError, match="Workload.first_min: got 3"):
        anchor_trace(0, sessions=1, turns=1, first_min=3, first_max=5)
    assert anchor.build_sessions(short)[0][0].prompt_lens[0] <= 5  # the sessions still build


def test_the_anchor_trace_round_trips_through_a_file(tmp_path):
    trace = anchor_trace(0, images=True, image_median_tokens=40, **SMALL)
    path = write_trace(trace.requests, tmp_path / "a.jsonl", block_tokens=trace.block_tokens)
    assert load_trace(path, block_tokens=trace.block_tokens).requests == trace.requests
    assert any(m == "vision" for r in trace.requests for m in r.modalities)
