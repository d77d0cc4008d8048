"""Mooncake-format traces: round trip, optional fields, and errors that name the line."""

from __future__ import annotations

import json
import os
import re

import pytest

from hkv.blocks import Modality
from hkv.errors import HkvError
from hkv.sim.trace import Request, load_trace, trace_from_requests, write_trace
from hkv.sim.workload import generate


def line(**fields) -> str:
    base = {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]}
    return json.dumps({**base, **fields})


def write(tmp_path, *lines: str):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_round_trip_keeps_optional_fields(tmp_path):
    requests = [
        Request(0, 1000, 5, (1, 2)),
        Request(7, 1500, 3, (1, 2, 3), (Modality.TEXT, Modality.TEXT, Modality.VISION), "s1"),
    ]
    trace = load_trace(write_trace(requests, tmp_path / "t.jsonl"))
    assert trace.requests == tuple(requests)
    assert trace.num_block_refs == 5 and trace.distinct_blocks() == 3


def test_unknown_fields_and_blank_lines_are_ignored(tmp_path):
    trace = load_trace(write(tmp_path, line(extra="x"), "", line(timestamp=3)))
    assert len(trace) == 2 and trace.requests[0].modalities is None


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{nope", "t.jsonl:2: not valid JSON"),
        ("[1, 2]", "t.jsonl:2: expected a JSON object"),
        (
            json.dumps({"timestamp": 0, "input_length": 5, "output_length": 1}),
            "missing field 'hash_ids'",
        ),
        (line(input_length=0), "input_length: got 0"),
        (line(hash_ids=[1]), r"1 hash_ids for input_length 1000; expected ceil\(1000 / 512\) = 2"),
        (line(hash_ids=[1, None]), "hash_ids: got None"),
        (line(modalities=["text"]), "modalities: got 1; expected a list of 2"),
        (line(modalities=["text", "smell"]), "unknown modality 'smell'"),
        (line(session=[1]), "session: got"),
    ],
)
def test_a_malformed_line_is_named(tmp_path, bad, message):
    with pytest.raises(HkvError, match=message) as info:
        load_trace(write(tmp_path, line(), bad))
    assert "t.jsonl:2:" in str(info.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(HkvError, match="trace: no such file"):
        load_trace(tmp_path / "none.jsonl")
    with pytest.raises(HkvError, match="holds no requests"):
        load_trace(write(tmp_path, ""))


def test_block_tokens_must_be_positive(tmp_path):
    with pytest.raises(HkvError, match="block_tokens"):
        load_trace(write(tmp_path, line()), block_tokens=0)


OK = Request(0, 16, 1, (1,))
"""A valid request at 16-token blocks."""


@pytest.mark.parametrize(
    ("requests", "block_tokens", "message"),
    [
        ([OK], 0, "block_tokens: got 0; expected an integer >= 1"),
        ([OK], -16, "block_tokens: got -16; expected an integer >= 1"),
        ([OK], 16.0, "block_tokens: got 16.0; expected an integer >= 1"),
        (
            [OK, Request(1, 16, 1, (1, 2, 3))],
            16,
            "request 1: 3 hash_ids for input_length 16; expected ceil(16 / 16) = 1",
        ),
        ([Request(0, 0, 1, ())], 16, "request 0: input_length: got 0; expected an integer in [1,"),
        ([Request(0, -16, 1, (1,))], 16, "request 0: input_length: got -16"),
        ([Request(0, 16.0, 1, (1,))], 16, "request 0: input_length: got 16.0"),
        ([Request(0, 16, -1, (1,))], 16, "request 0: output_length: got -1"),
        ([Request(float("nan"), 16, 1, (1,))], 16, "request 0: timestamp: got nan"),
        ([Request(0, 16, 1, 7)], 16, "request 0: hash_ids: got 7; expected a tuple"),
        (
            [Request(0, 32, 1, (1, 2), (Modality.TEXT,))],
            16,
            "request 0: modalities: got 1; expected None or 2 labels",
        ),
        (
            [OK, (0, 16, 1, (1,))],
            16,
            "request 1: got (0, 16, 1, (1,)); expected an hkv.sim.Request",
        ),
    ],
)
def test_trace_from_requests_refuses_what_load_trace_refuses(requests, block_tokens, message):
    """In-memory requests get `load_trace`'s checks (else simulate priced blocks of 0 or -16
    tokens and reported negative hit fractions), one error naming the request and field."""
    with pytest.raises(HkvError, match=re.escape(message)):
        trace_from_requests(requests, block_tokens=block_tokens)


def test_trace_from_requests_keeps_valid_requests():
    trace = generate(seed=1, num_sessions=20, image_turn_fraction=0.5)
    again = trace_from_requests(trace.requests, block_tokens=trace.block_tokens, source="x")
    assert again.requests == trace.requests and again.block_tokens == trace.block_tokens


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Request(0, 0, 1, ()), "write_trace: request 1: input_length: got 0"),
        (Request(float("nan"), 16, 1, (1,)), "write_trace: request 1: timestamp: got nan"),
        (Request(0, 16, 1, ((1, 2),)), "request 1: hash_ids: got (1, 2); expected integers"),
        (Request(0, 16, 1, (b"k",)), "request 1: hash_ids: got b'k'; expected integers"),
        (Request(0, 16, 1, (True,)), "request 1: hash_ids: got True; expected integers"),
        (Request(0, 16, 1, (1,), ("smell",)), "request 1: modalities: unknown modality 'smell'"),
        (Request(0, 16, 1, (1,), None, 1.5), "request 1: session: got 1.5"),
    ],
)
def test_write_trace_refuses_what_load_trace_would_and_keeps_the_old_file(tmp_path, bad, message):
    path = tmp_path / "t.jsonl"
    path.write_text("old\n")
    with pytest.raises(HkvError, match=re.escape(message)):
        write_trace([OK, bad], path)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["t.jsonl"]


def test_write_trace_checks_block_counts_when_given_the_block_size(tmp_path):
    requests = [Request(0, 16, 1, (1, 2))]
    with pytest.raises(HkvError, match=re.escape("request 0: 2 hash_ids for input_length 16")):
        write_trace(requests, tmp_path / "t.jsonl", block_tokens=16)
    assert not (tmp_path / "t.jsonl").exists()
    path = write_trace(requests, tmp_path / "t.jsonl", block_tokens=8)
    assert load_trace(path, block_tokens=8).requests == tuple(requests)


def test_labels_given_as_strings_are_written_as_their_names(tmp_path):
    requests = [Request(0, 32, 1, (1, 2), ("text", "vision"))]  # as hkv.sim.anchor labels
    trace = load_trace(write_trace(requests, tmp_path / "t.jsonl"), block_tokens=16)
    assert trace.requests[0].modalities == (Modality.TEXT, Modality.VISION)
