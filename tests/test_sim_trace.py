"""Mooncake-format traces: round trip, optional fields, and errors that name the line."""

from __future__ import annotations

import json

import pytest

from hkv.blocks import Modality
from hkv.errors import HkvError
from hkv.sim.trace import Request, load_trace, write_trace


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
