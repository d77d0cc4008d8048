"""Synthetic serving workloads in Mooncake format: sessions, shared prefixes, documents, images.

A prompt is a list of segments (system prompt, documents, user text, images, audio, earlier
replies), each a run of tokens with an id. Blocks are cut every `block_tokens` tokens and named by
prefix hashing, like a serving engine: a block's id is determined by its parent block's id and
the segment pieces it holds, so two prompts share block `i` exactly when their first `i + 1`
blocks hold the same tokens. The partial last block of a prompt gets its own id; when the next
turn extends the prompt that block becomes full with different content, and a new id.

What is generated (all knobs are `WorkloadSpec` fields; one seed gives one file):
- sessions arrive as a Poisson process whose rate jumps `burst_factor`-fold during bursts
  (on/off periods, exponential lengths); turns of a session follow after think times;
- chat sessions: a system prompt (drawn Zipf-like from a shared pool), then turns; each turn's
  prompt is the previous prompt + its reply + new user text (docs/design.md §6);
- RAG sessions: system prompt + 1-3 documents from a shared Zipf-popular pool + a question;
- one-off long-document requests: unique long contexts nobody reuses (scans);
- multimodal overlay: a user turn carries images (tokens per image lognormal, median 570,
  clipped to [10, 4600], ServeGen's multimodal image statistics; the real PMF is bimodal around
  ~250 and ~1,200, the lognormal keeps the median and range, not the modes) and optionally audio.
  A block is labelled with the modality that holds most of its tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hkv.blocks import Modality
from hkv.errors import HkvError, is_number, shown
from hkv.sim.trace import MAX_TOKENS, Request, Trace
from hkv.sim.workload_spec import _TOKENS_MAX, PRESETS, WorkloadSpec, _check_field

__all__ = ["MAX_BLOCK_REFS", "PRESETS", "WorkloadSpec", "generate", "overlay_modalities"]

MAX_BLOCK_REFS = 1_000_000
"""The most block references `generate` makes by default (~35,000 chat sessions at 512-token
blocks, a few seconds): a spec asking for more is refused while it is generated, not after
minutes. Pass `max_block_refs` to `generate` for a larger trace."""
MAX_SEGMENT_TOKENS = MAX_TOKENS
"""Lognormal lengths are clipped here (sigma 10 reaches e**60), so token sums stay exact ints and
a reply's `output_length` stays one a trace file may hold (`hkv.sim.trace.MAX_TOKENS`)."""


@dataclass(frozen=True, slots=True)
class _Segment:
    """A run of tokens that is identical wherever it appears (same id, same tokens)."""

    seg_id: int
    tokens: int
    modality: Modality = Modality.TEXT


class _BlockNamer:
    """Prefix-hash naming: (parent block id, pieces it holds) -> small integer id."""

    def __init__(self, block_tokens: int):
        self.block_tokens = block_tokens
        self._ids: dict[tuple, int] = {}

    def name(self, segments: list[_Segment]) -> tuple[tuple[int, ...], tuple[Modality, ...]]:
        """Block ids and labels of a prompt made of `segments`, in order."""
        ids: list[int] = []
        labels: list[Modality] = []
        parent: int | None = None
        pieces: list[tuple[int, int, int]] = []
        weights: dict[Modality, int] = {}
        room = self.block_tokens
        for seg in segments:
            offset = 0
            while offset < seg.tokens:
                take = min(room, seg.tokens - offset)
                pieces.append((seg.seg_id, offset, take))
                weights[seg.modality] = weights.get(seg.modality, 0) + take
                offset += take
                room -= take
                if room == 0:
                    parent = self._close(parent, pieces, weights, ids, labels)
                    pieces, weights, room = [], {}, self.block_tokens
        if pieces:
            self._close(parent, pieces, weights, ids, labels)
        return tuple(ids), tuple(labels)

    def _close(self, parent, pieces, weights, ids, labels) -> int:
        key = (parent, tuple(pieces))
        block_id = self._ids.setdefault(key, len(self._ids))
        ids.append(block_id)
        labels.append(max(weights, key=weights.__getitem__))
        return block_id


class _Generator:
    """One run of the generator: owns the RNG, the shared pools and the segment counter."""

    def __init__(self, spec: WorkloadSpec, max_block_refs: int):
        self.spec = spec
        self.max_block_refs = max_block_refs
        self.num_block_refs = 0
        self.rng = np.random.default_rng(spec.seed)
        self.namer = _BlockNamer(spec.block_tokens)
        self._next_seg = 0
        self.system_prompts = [
            self.segment(self.length(spec.system_tokens_median))
            for _ in range(spec.num_system_prompts)
        ]
        self.documents = [
            self.segment(self.length(spec.document_tokens_median))
            for _ in range(spec.num_documents)
        ]
        self.system_pop = _zipf_weights(spec.num_system_prompts, spec.zipf_exponent)
        self.document_pop = _zipf_weights(spec.num_documents, spec.zipf_exponent)

    def segment(self, tokens: int, modality: Modality = Modality.TEXT) -> _Segment:
        self._next_seg += 1
        return _Segment(self._next_seg, tokens, modality)

    def length(self, median: float, sigma: float | None = None) -> int:
        sigma = self.spec.length_sigma if sigma is None else sigma
        drawn = float(self.rng.lognormal(math.log(median), sigma))
        return max(1, round(min(drawn, MAX_SEGMENT_TOKENS)))

    def arrivals(self) -> np.ndarray:
        """Session start times (s): Poisson, `burst_factor` times faster during on-periods."""
        spec, rng = self.spec, self.rng
        times, now, bursting = [], 0.0, False
        period_end = rng.exponential(spec.burst_off_s)
        while len(times) < spec.num_sessions:
            rate = spec.session_rate_per_s * (spec.burst_factor if bursting else 1.0)
            gap = rng.exponential(1.0 / rate)
            if now + gap > period_end:
                now, bursting = period_end, not bursting
                period_end = now + rng.exponential(
                    spec.burst_on_s if bursting else spec.burst_off_s
                )
                continue
            now += gap
            times.append(now)
        return np.asarray(times)

    def user_turn(self) -> list[_Segment]:
        """New user content of one turn: maybe images, maybe audio, then text."""
        spec, rng = self.spec, self.rng
        parts = []
        if rng.random() < spec.image_turn_fraction:
            for _ in range(int(rng.geometric(1.0 / spec.mean_images_per_turn))):
                tokens = self.length(spec.image_tokens_median, spec.image_tokens_sigma)
                tokens = int(np.clip(tokens, spec.image_tokens_min, spec.image_tokens_max))
                parts.append(self.segment(tokens, Modality.VISION))
        if rng.random() < spec.audio_turn_fraction:
            parts.append(self.segment(self.length(spec.audio_tokens_median), Modality.AUDIO))
        parts.append(self.segment(self.length(spec.user_tokens_median)))
        return parts

    def session(self, session_id: int, start_s: float) -> list[Request]:
        spec, rng = self.spec, self.rng
        kind = rng.random()
        system = self.system_prompts[rng.choice(spec.num_system_prompts, p=self.system_pop)]
        if kind < spec.long_doc_fraction:
            return self.long_document(system, start_s, session_id)
        prompt = [system]
        mean_turns = spec.mean_turns
        if kind < spec.long_doc_fraction + spec.rag_fraction:
            count = min(int(rng.integers(1, 4)), spec.num_documents)
            picks = rng.choice(spec.num_documents, size=count, replace=False, p=self.document_pop)
            prompt += [self.documents[i] for i in picks]
            mean_turns = spec.rag_mean_turns
        turns = int(rng.geometric(1.0 / mean_turns))
        requests, now = [], start_s
        for _ in range(turns):
            prompt = prompt + self.user_turn()
            if sum(s.tokens for s in prompt) > spec.max_input_tokens:
                break
            request = self.request(prompt, now, session_id)
            requests.append(request)
            prompt = [*prompt, self.segment(request.output_length)]
            now += rng.exponential(spec.think_time_s)
        return requests

    def long_document(self, system: _Segment, start_s: float, session_id: int) -> list[Request]:
        """A one-off long document and a question; the document is cut to what fits within
        `max_input_tokens` (no request when the system prompt and question alone pass it)."""
        document = self.segment(self.length(self.spec.long_doc_tokens_median))
        question = self.segment(self.length(self.spec.user_tokens_median))
        room = self.spec.max_input_tokens - system.tokens - question.tokens
        if room < 1:
            return []
        document = replace(document, tokens=min(document.tokens, room))
        return [self.request([system, document, question], start_s, session_id)]

    def request(self, prompt: list[_Segment], time_s: float, session_id: int) -> Request:
        tokens = sum(s.tokens for s in prompt)
        self.num_block_refs += -(-tokens // self.spec.block_tokens)
        if self.num_block_refs > self.max_block_refs:
            raise HkvError(
                f"workload: this spec makes more than {self.max_block_refs:,} block references "
                f"(the cap; it had by session {session_id + 1:,} of {self.spec.num_sessions:,}); "
                "lower num_sessions, max_input_tokens or the token medians, or raise block_tokens"
            )
        ids, labels = self.namer.name(prompt)
        modalities = labels if any(m is not Modality.TEXT for m in labels) else None
        return Request(
            timestamp_ms=round(time_s * 1000),
            input_length=tokens,
            output_length=self.length(self.spec.output_tokens_median),
            hash_ids=ids,
            modalities=modalities,
            session=session_id,
        )


def _zipf_weights(n: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent  # int64 ** 100 wraps
    return weights / weights.sum()


def generate(
    spec: WorkloadSpec | None = None, *, max_block_refs: int | None = None, **overrides: Any
) -> Trace:
    """Generate a workload (`spec`, or `WorkloadSpec(**overrides)`); same seed, same trace.

    `HkvError` when it would hold more than `max_block_refs` block references, or no request
    at all (every prompt longer than `max_input_tokens`); `max_block_refs` defaults to
    `MAX_BLOCK_REFS`."""
    if spec is None:
        spec = WorkloadSpec(**overrides)
    elif overrides:
        spec = WorkloadSpec(**{**spec.to_dict(), **overrides})
    gen = _Generator(spec, MAX_BLOCK_REFS if max_block_refs is None else max_block_refs)
    requests = []
    for session_id, start_s in enumerate(gen.arrivals()):
        requests += gen.session(session_id, float(start_s))
    if not requests:
        raise HkvError(
            f"workload: no prompt fits max_input_tokens={spec.max_input_tokens:,} (system "
            f"prompts alone have a median of {spec.system_tokens_median:g} tokens); raise "
            "max_input_tokens or lower system_tokens_median and the other medians"
        )
    requests.sort(key=lambda r: r.timestamp_ms)  # stable: a session's turns keep their order
    return Trace(tuple(requests), spec.block_tokens, f"generated(seed={spec.seed})")


def overlay_modalities(
    trace: Trace,
    *,
    seed: int = 0,
    image_request_fraction: float = 0.3,
    audio_request_fraction: float = 0.0,
    image_tokens_median: float = 570.0,
    image_tokens_sigma: float = 1.0,
    image_tokens_range: tuple[int, int] = (10, 4600),
) -> Trace:
    """Label blocks of a text trace as vision / audio without changing its `hash_ids`.

    Only a request's new user-turn blocks are labelled: the blocks after the longest prefix
    already seen earlier in the trace, never the first block of a request (a shared system
    prompt starts there) and never a block seen before (it keeps its first label). A chosen
    request gets one image of `ceil(tokens / block_tokens)` blocks at the start of its new part,
    tokens drawn like the generator's; audio likewise. The hit rate of the base trace is
    unchanged because ids are; only costs and modality-aware decisions see the labels.
    """
    fractions = (image_request_fraction, audio_request_fraction)
    _check_overlay(seed, fractions, image_tokens_median, image_tokens_sigma, image_tokens_range)
    rng = np.random.default_rng(seed)
    low, high = image_tokens_range
    seen: dict = {}  # block id -> the label of its first appearance
    requests = []
    for request in trace.requests:
        ids = request.hash_ids
        start = 0
        while start < len(ids) and ids[start] in seen:
            start += 1
        start = max(start, 1)
        labels = list(request.modalities or [Modality.TEXT] * len(ids))
        labels = [seen.get(key, label) for key, label in zip(ids, labels, strict=True)]
        for modality, fraction in (
            (Modality.VISION, image_request_fraction),
            (Modality.AUDIO, audio_request_fraction),
        ):
            if start < len(ids) and rng.random() < fraction:
                tokens = float(rng.lognormal(math.log(image_tokens_median), image_tokens_sigma))
                blocks = math.ceil(min(max(tokens, low), high) / trace.block_tokens)
                for index in range(start, min(start + blocks, len(ids))):
                    if ids[index] not in seen:
                        labels[index] = modality
                start += blocks
        for key, label in zip(ids, labels, strict=True):
            seen.setdefault(key, label)
        changed = any(m is not Modality.TEXT for m in labels)
        requests.append(replace(request, modalities=tuple(labels) if changed else None))
    return Trace(tuple(requests), trace.block_tokens, f"{trace.source}+overlay(seed={seed})")


def _check_overlay(seed, fractions, median, sigma, token_range) -> None:
    """`overlay_modalities`' arguments, each in the range `WorkloadSpec` gives its like (an
    image-token sigma of 0 is allowed: every image has the median's tokens)."""
    _check_field("seed", seed, "int", prefix="overlay")
    names = ("image_request_fraction", "audio_request_fraction")
    for name, value in zip(names, fractions, strict=True):
        ok = is_number(value)
        if not ok or not 0 <= value <= 1:
            raise HkvError(f"overlay.{name}: got {shown(value)}; expected a number in [0, 1]")
    _check_field("image_tokens_median", median, "float", prefix="overlay")
    ok = is_number(sigma)
    if not ok or not 0 <= sigma <= 10:
        raise HkvError(
            f"overlay.image_tokens_sigma: got {shown(sigma)}; expected a number in [0, 10]"
        )
    pair = isinstance(token_range, tuple | list) and len(token_range) == 2
    numbers = pair and all(is_number(v) for v in token_range)
    if not numbers or not 1 <= token_range[0] <= token_range[1] <= _TOKENS_MAX:
        raise HkvError(
            f"overlay.image_tokens_range: got {shown(token_range)}; expected (low, high) tokens "
            f"with 1 <= low <= high <= {_TOKENS_MAX:,}"
        )
