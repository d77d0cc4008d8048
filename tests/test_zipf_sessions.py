"""The skewed-session generator (`hkv.sim.zipf_sessions`): overrides, bounds, the block cap.
(Its shape, seeding and skew are tested with the suite, in tests/test_suite.py.)"""

from __future__ import annotations

import math
import re

import pytest

from hkv.errors import HkvError
from hkv.sim.zipf_sessions import ZipfSessionSpec, generate_zipf_sessions


def test_overrides_apply_on_top_of_a_given_spec():
    """They were dropped silently when a spec was given too (`generate` applies them)."""
    trace = generate_zipf_sessions(ZipfSessionSpec(num_requests=10), num_requests=3, seed=9)
    assert len(trace) == 3 and trace.source == "zipf_sessions(seed=9, exponent=1)"
    spec = ZipfSessionSpec(seed=9, num_requests=3)
    assert trace == generate_zipf_sessions(spec) == generate_zipf_sessions(**spec.__dict__)
    kept = generate_zipf_sessions(ZipfSessionSpec(num_requests=10, zipf_exponent=2), seed=9)
    assert len(kept) == 10 and "exponent=2" in kept.source


def test_an_unknown_override_is_named():
    with pytest.raises(HkvError, match="zipf_sessions: unknown field 'sessions'; accepted fields"):
        generate_zipf_sessions(ZipfSessionSpec(), sessions=3)
    with pytest.raises(HkvError, match="zipf_sessions: unknown field 'sessions'"):
        generate_zipf_sessions(sessions=3)
    with pytest.raises(HkvError, match="spec: got 3; expected a ZipfSessionSpec"):
        generate_zipf_sessions(3)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "num_sessions",
            10**9,
            "num_sessions: got 1000000000; expected an integer in [1, 100,000]",
        ),
        ("num_requests", 10**12, "num_requests: got 1000000000000; expected an integer in [1,"),
        ("num_requests", 0, "num_requests: got 0; expected an integer in [1,"),
        ("seed", -1, "seed: got -1; expected an integer in [0,"),
        ("block_tokens", 1 << 20, "block_tokens: got 1048576; expected an integer in [1, 65,536]"),
        ("num_system_prompts", 10**7, "num_system_prompts: got 10000000; expected an integer in"),
        ("max_input_tokens", 1 << 40, "max_input_tokens: got 1099511627776; expected an integer"),
        ("length_sigma", 1e6, "length_sigma: got 1000000.0; expected a number > 0 and <= 10"),
        ("length_sigma", 1000, "length_sigma: got 1000; expected a number > 0 and <= 10"),
        ("user_tokens_median", 1e308, "user_tokens_median: got 1e+308; expected a number > 0"),
        ("reply_tokens_median", math.nan, "reply_tokens_median: got nan; expected a number > 0"),
        ("reply_tokens_median", True, "reply_tokens_median: got True; expected a number > 0"),
    ],
)
def test_a_field_past_its_bound_is_named(field, value, message):
    """Without upper bounds these ran out of memory (10**9 sessions were OOM-killed) or raised
    OverflowError / MemoryError from inside the generator."""
    with pytest.raises(HkvError, match=re.escape(f"zipf_sessions.{message}")):
        ZipfSessionSpec(**{field: value})
    with pytest.raises(HkvError, match=re.escape(f"zipf_sessions.{message}")):
        generate_zipf_sessions(**{"num_requests": 5, field: value})


def test_every_value_the_suite_and_defaults_use_is_in_bounds():
    ZipfSessionSpec(seed=2**63 - 1, num_sessions=100_000, block_tokens=1 << 16, length_sigma=10)
    assert len(generate_zipf_sessions(ZipfSessionSpec(seed=3, num_sessions=5, num_requests=40)))


def test_a_spec_past_the_block_reference_cap_is_refused_while_it_is_generated():
    with pytest.raises(HkvError, match="more than 1,000,000 block references"):
        generate_zipf_sessions(length_sigma=10, num_requests=200)
    with pytest.raises(HkvError, match=r"more than 100 block references \(the cap; it had by"):
        generate_zipf_sessions(num_requests=50, max_block_refs=100)
    assert generate_zipf_sessions(num_requests=50, max_block_refs=10_000).num_block_refs <= 10_000
