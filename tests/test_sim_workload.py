"""Workload generator: determinism, prefix structure, multimodal labels, validation."""

from __future__ import annotations

import itertools
import math
import re

import pytest

from hkv.blocks import Modality
from hkv.errors import HkvError
from hkv.sim.trace import load_trace, write_trace
from hkv.sim.workload import WorkloadSpec, generate, overlay_modalities

SMALL = {"num_sessions": 60}


def test_same_seed_same_trace_other_seed_other_trace():
    assert generate(seed=1, **SMALL) == generate(seed=1, **SMALL)
    assert generate(seed=1, **SMALL).requests != generate(seed=2, **SMALL).requests


def test_requests_are_valid_mooncake_lines(tmp_path):
    trace = generate(WorkloadSpec.multimodal(seed=3, **SMALL))
    for r in trace.requests:
        assert len(r.hash_ids) == math.ceil(r.input_length / trace.block_tokens)
    timestamps = [r.timestamp_ms for r in trace.requests]
    assert timestamps == sorted(timestamps)
    assert load_trace(write_trace(trace.requests, tmp_path / "w.jsonl")).requests == trace.requests


def test_a_turn_extends_the_previous_prompt():
    trace = generate(seed=4, mean_turns=4, rag_fraction=0, long_doc_fraction=0, **SMALL)
    by_session: dict = {}
    for r in trace.requests:
        by_session.setdefault(r.session, []).append(r)
    pairs = [pair for turns in by_session.values() for pair in itertools.pairwise(turns)]
    assert pairs
    for earlier, later in pairs:
        full = earlier.input_length // trace.block_tokens
        assert later.hash_ids[:full] == earlier.hash_ids[:full]
        assert later.input_length > earlier.input_length + earlier.output_length


def test_sessions_share_system_prompts():
    trace = generate(seed=5, num_system_prompts=2, **SMALL)
    first_blocks = {r.hash_ids[0] for r in trace.requests}
    assert len(first_blocks) <= 2


def test_multimodal_workload_labels_user_blocks_not_system_prompts():
    spec = WorkloadSpec.multimodal(
        seed=6, num_sessions=200, system_tokens_median=4000.0, length_sigma=0.1
    )
    trace = generate(spec)
    labels = [m for r in trace.requests if r.modalities for m in r.modalities]
    assert Modality.VISION in labels and Modality.AUDIO in labels
    assert all(r.modalities is None or r.modalities[0] is Modality.TEXT for r in trace.requests)


def test_overlay_on_a_text_trace_keeps_ids_and_spares_first_blocks():
    base = generate(seed=7, **SMALL)
    labelled = overlay_modalities(base, seed=1, image_request_fraction=1.0)
    assert [r.hash_ids for r in labelled.requests] == [r.hash_ids for r in base.requests]
    assert any(r.modalities for r in labelled.requests)
    first: dict = {}
    for r in labelled.requests:
        labels = r.modalities or [Modality.TEXT] * len(r.hash_ids)
        for key, label in zip(r.hash_ids, labels, strict=True):
            assert first.setdefault(key, label) is label  # a block keeps its first label
        assert r.modalities is None or r.modalities[0] is Modality.TEXT


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_sessions", 0, r"workload.num_sessions: got 0; expected an integer in \[1, 100,000"),
        ("rag_fraction", 1.5, r"workload.rag_fraction: got 1.5; expected a number in \[0, 1\]"),
        ("think_time_s", -1.0, r"workload.think_time_s: got -1.0; expected a number in \[1e-06"),
        ("image_tokens_max", 5, "image_tokens_max: got 5; expected >= image_tokens_min"),
        # a huge median would have asked the namer for ~1e305 blocks
        ("user_tokens_median", 1e308, r"workload.user_tokens_median: got 1e\+308; expected a"),
    ],
)
def test_bad_spec_fields_are_named(field, value, message):
    with pytest.raises(HkvError, match=message):
        WorkloadSpec(**{field: value})


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(HkvError, match="unknown preset 'x'; valid: chat, doc_qa, multimodal"):
        WorkloadSpec.preset("x")


@pytest.mark.parametrize(
    ("knob", "message"),
    [
        ({"image_tokens_median": 0}, "overlay.image_tokens_median: got 0; expected a number > 0"),
        ({"image_tokens_median": math.nan}, "overlay.image_tokens_median: got nan"),
        ({"image_tokens_median": 1e308}, "overlay.image_tokens_median: got 1e+308"),
        ({"seed": -1}, "overlay.seed: got -1; expected an integer in [0,"),
        ({"seed": 1.5}, "overlay.seed: got 1.5; expected an integer"),
        ({"image_tokens_sigma": -1}, "overlay.image_tokens_sigma: got -1; expected a number in"),
        ({"image_tokens_range": (4600, 10)}, "overlay.image_tokens_range: got (4600, 10)"),
        ({"image_tokens_range": (-10, -1)}, "overlay.image_tokens_range: got (-10, -1)"),
        ({"image_tokens_range": (10,)}, "overlay.image_tokens_range: got (10,)"),
        ({"image_request_fraction": "0.3"}, "overlay.image_request_fraction: got '0.3'"),
        ({"audio_request_fraction": math.nan}, "overlay.audio_request_fraction: got nan"),
    ],
)
def test_bad_overlay_arguments_are_named(knob, message):
    """Each was a raw exception (math domain error, numpy's ValueError, a TypeError) or, for a
    reversed or negative image-token range, silently accepted."""
    base = generate(seed=7, **SMALL)
    with pytest.raises(HkvError, match=re.escape(message)):
        overlay_modalities(base, **{"image_request_fraction": 1.0, **knob})


def test_overlay_arguments_at_their_edges_still_label():
    base = generate(seed=7, **SMALL)
    fixed = overlay_modalities(base, image_tokens_sigma=0, image_tokens_range=(512, 512))
    assert any(r.modalities for r in fixed.requests)
