"""The anchor multi-turn workload of the GPU benchmark (`python -m bench.vllm_gpu`), and one of
the policy suite's generated workloads (`hkv suite`, `hkv.sim.suite_workloads`).

The rig's anchor (../shared/gpu-vllm/anchor_bench.py, same seed and random stream, so the token
sequences are identical): `sessions` conversations of `turns` turns; turn 0 is 8-16K random token
ids, each later turn re-sends the previous prompt plus 1-2K new tokens (replies are not
appended); rounds go turn by turn, sessions in a fresh random order each round, in waves of
`wave` concurrent requests. The multimodal variant marks spans of each turn's new tokens as
images (`images=True`); the tokens stay the same. `trace_requests` gives it as hkv trace
requests. Standard library only, besides hkv's trace type and error.
"""

from __future__ import annotations

import hashlib
import math
import random
from array import array
from dataclasses import asdict, dataclass, field

from hkv.errors import HkvError, is_number
from hkv.sim.trace import Request

TOKEN_LOW, TOKEN_HIGH = 1000, 150000
"""Workload token ids (the anchor's range); warm-up prompts use ids above it."""


@dataclass(frozen=True)
class Workload:
    """The anchor workload's parameters; `images` adds the multimodal overlay."""

    sessions: int = 32
    turns: int = 4
    wave: int = 4
    first_min: int = 8192
    first_max: int = 16384
    delta_min: int = 1024
    delta_max: int = 2048
    max_tokens: int = 16
    seed: int = 0
    images: bool = False
    image_seed: int = 1
    image_median_tokens: int = 570
    block_tokens: int = 16
    popularity: float = 0.0

    def __post_init__(self) -> None:
        counts = ("sessions", "turns", "wave", "first_min", "first_max", "delta_min", "delta_max")
        for name in (*counts, "block_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise HkvError(f"Workload.{name}: got {value!r}; expected an integer >= 1")
        if not isinstance(self.popularity, int | float) or not 0 <= self.popularity <= 8:
            raise HkvError(
                f"Workload.popularity: got {self.popularity!r}; expected a Zipf exponent in [0, 8]"
            )
        median = self.image_median_tokens
        ok = is_number(median)
        if not ok or not 0 < median < math.inf:
            raise HkvError(
                f"Workload.image_median_tokens: got {median!r}; expected a number of tokens > 0"
            )
        if self.first_max < self.first_min or self.delta_max < self.delta_min:
            raise HkvError(
                f"Workload: first_max/delta_max ({self.first_max}/{self.delta_max}) must be >= "
                f"first_min/delta_min ({self.first_min}/{self.delta_min})"
            )


@dataclass(frozen=True)
class Session:
    """One conversation: all its tokens, the prompt length of each turn, and its image spans."""

    tokens: list[int]
    prompt_lens: list[int]
    spans: list[tuple[int, int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class TurnRequest:
    """One request of the sequence, in submission order."""

    index: int
    wave: int
    session: int
    turn: int
    prompt_len: int
    spans: list[tuple[int, int, str]]


def build_sessions(w: Workload) -> tuple[list[Session], list[list[tuple[int, int]]]]:
    """Sessions and waves `[[(session, turn), ...], ...]`, the anchor's random stream exactly."""
    rng = random.Random(w.seed)
    drafts = []
    for _ in range(w.sessions):
        first = rng.randint(w.first_min, w.first_max)
        deltas = [rng.randint(w.delta_min, w.delta_max) for _ in range(w.turns - 1)]
        total = first + sum(deltas)
        tokens = [rng.randrange(TOKEN_LOW, TOKEN_HIGH) for _ in range(total)]
        lens = [first]
        for delta in deltas:
            lens.append(lens[-1] + delta)
        drafts.append((tokens, lens))
    waves = popular_waves(w) if w.popularity else []
    for turn in range(w.turns if not w.popularity else 0):
        order = list(range(w.sessions))
        rng.shuffle(order)
        for start in range(0, len(order), w.wave):
            waves.append([(s, turn) for s in order[start : start + w.wave]])
    image_rng = random.Random(w.image_seed)  # its own stream: the tokens stay the anchor's
    sessions = [
        Session(tokens, lens, image_spans(lens, w, image_rng) if w.images else [])
        for tokens, lens in drafts
    ]
    return sessions, waves


def popular_waves(w: Workload) -> list[list[tuple[int, int]]]:
    """The skewed variant's waves: as many requests as the anchor's, each wave `wave` distinct
    sessions drawn by Zipf popularity (exponent `popularity`, ranks in a random order; its own
    random stream, so the sessions' tokens stay the anchor's). A session drawn goes to its next
    turn; one drawn after its last turn sends its last prompt again (a popular conversation or
    document asked about once more)."""
    rng = random.Random(w.seed + 7919)
    ranks = list(range(w.sessions))
    rng.shuffle(ranks)
    weights = [1.0 / (1 + ranks[s]) ** w.popularity for s in range(w.sessions)]
    visits = [0] * w.sessions
    waves, left = [], w.sessions * w.turns
    while left:
        wave: list[int] = []
        while len(wave) < min(w.wave, left, w.sessions):
            (session,) = rng.choices(range(w.sessions), weights)
            if session not in wave:
                wave.append(session)
        waves.append([(s, min(visits[s], w.turns - 1)) for s in wave])
        for s in wave:
            visits[s] += 1
        left -= len(wave)
    return waves


def image_spans(prompt_lens: list[int], w: Workload, rng: random.Random) -> list:
    """Image spans in each turn's new tokens: 1-4 in turn 0, one in half the later turns.

    Sizes are log-normal around `image_median_tokens` (ServeGen's image-token median is ~570),
    clipped to [64, 4600] and to the slot each image is drawn in (a turn's new tokens are cut
    into equal slots, one image per slot, so images never overlap).
    """
    spans = []
    start = 0
    for turn, end in enumerate(prompt_lens):
        count = rng.randint(1, 4) if turn == 0 else int(rng.random() < 0.5)
        slot = (end - start) // max(count, 1)
        for i in range(count):
            size = round(rng.lognormvariate(math.log(w.image_median_tokens), 0.6))
            size = min(max(64, min(size, 4600)), slot - 1)
            if size < 1:
                continue  # a turn too short to hold an image (only in small test workloads)
            first = start + i * slot + rng.randrange(0, slot - size)
            spans.append((first, first + size, "vision"))
        start = end
    return spans


def request_sequence(w: Workload) -> tuple[list[Session], list[TurnRequest]]:
    """The sessions and every request in submission order (wave by wave)."""
    sessions, waves = build_sessions(w)
    requests = []
    for wave_index, wave in enumerate(waves):
        for session, turn in wave:
            length = sessions[session].prompt_lens[turn]
            spans = [(a, min(b, length), m) for a, b, m in sessions[session].spans if a < length]
            requests.append(TurnRequest(len(requests), wave_index, session, turn, length, spans))
    return sessions, requests


def block_hash_chain(tokens: list[int], block_tokens: int) -> list[int]:
    """Ids of the full blocks of `tokens`, each hashing its parent's id and its own tokens.

    Like vLLM's prefix-cache hashes: equal prefixes give equal ids, a partial last block has
    none (vLLM neither caches nor offloads it).
    """
    ids, parent = [], b""
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        block = array("q", tokens[start : start + block_tokens]).tobytes()
        parent = hashlib.blake2b(parent + block, digest_size=8).digest()
        ids.append(int.from_bytes(parent, "big"))
    return ids


def block_modalities(spans, num_blocks: int, block_tokens: int) -> list[str]:
    """Label per block: a block overlapping a marked span takes its label (the adapter's rule)."""
    labels = ["text"] * num_blocks
    for start, end, label in spans:
        for index in range(start // block_tokens, min(num_blocks, -(-end // block_tokens))):
            labels[index] = label
    return labels


def workload_summary(w: Workload) -> dict:
    """The workload's parameters with its request, token, block and image counts."""
    sessions, requests = request_sequence(w)
    blocks = sum(s.prompt_lens[-1] // w.block_tokens for s in sessions)
    image_tokens = sum(b - a for s in sessions for a, b, _ in s.spans)
    return {
        **asdict(w),
        "requests": len(requests),
        "prompt_tokens": sum(r.prompt_len for r in requests),
        "distinct_full_blocks": blocks,
        "image_tokens": image_tokens,
        "image_spans": sum(len(s.spans) for s in sessions),
    }


def trace_requests(images: bool = False, workload=None) -> tuple[list[Request], list]:
    """The GPU benchmark's request sequence as hkv trace requests, plus its `TurnRequest`s.

    `workload` (an `anchor.Workload`) defaults to the benchmark's, with `images` as given.
    `HkvError` when its first turns may be shorter than a block (a request of no full block
    is not a trace request).
    """
    w = workload or Workload(images=images)
    if w.first_min < w.block_tokens:
        raise HkvError(
            f"Workload.first_min: got {w.first_min}; expected >= block_tokens "
            f"({w.block_tokens}), as every trace request needs a full block"
        )
    images = w.images
    sessions, turn_requests = request_sequence(w)
    chains = [block_hash_chain(s.tokens, w.block_tokens) for s in sessions]
    requests = []
    for r in turn_requests:
        num_blocks = r.prompt_len // w.block_tokens
        labels = block_modalities(r.spans, num_blocks, w.block_tokens) if images else None
        requests.append(
            Request(
                timestamp_ms=float(r.index),
                input_length=num_blocks * w.block_tokens,
                output_length=w.max_tokens,
                hash_ids=tuple(chains[r.session][:num_blocks]),
                modalities=tuple(labels) if labels else None,
                session=r.session,
            )
        )
    return requests, turn_requests
