"""Multi-turn sessions with skewed popularity: a few conversations come back again and again.

`hkv.sim.workload` draws sessions as arrivals with geometric turn counts, so every session is
about equally likely to return; here the next turn belongs to session `s` with probability
proportional to `1 / rank(s) ** zipf_exponent` (exponent 0: round robin in random order, larger:
a hot set). A turn's prompt is the session's previous prompt + its reply + new user text
(docs/design.md §6), after one of a few shared system prompts; a session whose prompt would pass
`max_input_tokens` starts a new conversation (same system prompt, fresh history). Blocks are
named by prefix hashing like the main generator (`workload._BlockNamer`), so equal prefixes
share ids. One seed gives one trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from hkv.errors import HkvError, is_number, reject_unknown, shown
from hkv.sim.trace import DEFAULT_BLOCK_TOKENS, MAX_TOKENS, Request, Trace
from hkv.sim.workload import MAX_BLOCK_REFS, _BlockNamer, _Segment


@dataclass(frozen=True)
class ZipfSessionSpec:
    """Knobs of the skewed-session generator (ranges in the comments; upper bounds in
    `_LIMITS`)."""

    seed: int = 0  # >= 0
    num_sessions: int = 200  # >= 1
    num_requests: int = 2000  # >= 1
    zipf_exponent: float = 1.0  # >= 0; 0 is uniform
    block_tokens: int = DEFAULT_BLOCK_TOKENS  # >= 1
    num_system_prompts: int = 4  # >= 1
    system_tokens: int = 1024  # >= 1
    user_tokens_median: float = 400.0  # > 0
    reply_tokens_median: float = 300.0  # > 0
    length_sigma: float = 0.6  # > 0, lognormal sigma of user and reply lengths
    max_input_tokens: int = 32768  # > system_tokens

    def __post_init__(self) -> None:
        ints = ("num_sessions", "num_requests", "block_tokens", "num_system_prompts")
        for name in ("seed", *ints, "system_tokens", "max_input_tokens"):
            value, low, high = getattr(self, name), int(name != "seed"), _LIMITS[name]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise HkvError(
                    f"zipf_sessions.{name}: got {shown(value)}; expected an integer in "
                    f"[{low}, {high:,}]"
                )
        for name in ("user_tokens_median", "reply_tokens_median", "length_sigma"):
            value, high = getattr(self, name), _LIMITS[name]
            ok = is_number(value)
            if not ok or not 0 < value <= high:  # NaN fails too
                raise HkvError(
                    f"zipf_sessions.{name}: got {shown(value)}; expected a number > 0 and "
                    f"<= {high:,}"
                )
        exponent = self.zipf_exponent
        if not isinstance(exponent, int | float) or not 0 <= exponent <= 100:
            raise HkvError(
                f"zipf_sessions.zipf_exponent: got {exponent!r}; expected a number in [0, 100]"
            )
        if self.max_input_tokens <= self.system_tokens:
            raise HkvError(
                f"zipf_sessions.max_input_tokens: got {self.max_input_tokens}; expected > "
                f"system_tokens ({self.system_tokens})"
            )


_LIMITS: dict[str, float] = {
    "seed": 2**63 - 1,
    "num_sessions": 100_000,
    "num_requests": MAX_BLOCK_REFS,  # each request holds a block at least
    "block_tokens": 1 << 16,
    "num_system_prompts": 100_000,
    "system_tokens": 1 << 22,
    "max_input_tokens": 1 << 22,
    "user_tokens_median": 1 << 20,
    "reply_tokens_median": 1 << 20,
    "length_sigma": 10,
}
"""Upper bounds (`WorkloadSpec`'s where it has the field), so that no setting asks for more
than a machine can generate; `generate_zipf_sessions` also caps the block references."""


def generate_zipf_sessions(
    spec: ZipfSessionSpec | None = None, *, max_block_refs: int | None = None, **overrides: Any
) -> Trace:
    """A trace of `spec.num_requests` turns over `spec.num_sessions` Zipf-popular sessions
    (`spec`, or `ZipfSessionSpec(**overrides)`; `overrides` replace fields of a given `spec`).

    `HkvError` when it would hold more than `max_block_refs` block references (default
    `hkv.sim.workload.MAX_BLOCK_REFS`)."""
    spec = _with_overrides(spec, overrides)
    cap = MAX_BLOCK_REFS if max_block_refs is None else max_block_refs
    num_block_refs = 0
    rng = np.random.default_rng(spec.seed)
    namer = _BlockNamer(spec.block_tokens)
    next_id = iter(range(1, 1 << 62))
    systems = [_Segment(next(next_id), spec.system_tokens) for _ in range(spec.num_system_prompts)]
    weights = 1.0 / np.arange(1, spec.num_sessions + 1) ** float(spec.zipf_exponent)
    picks = rng.choice(spec.num_sessions, size=spec.num_requests, p=weights / weights.sum())
    ranks = rng.permutation(spec.num_sessions)  # popularity is not the session id
    start = [systems[int(i)] for i in rng.integers(0, len(systems), spec.num_sessions)]
    prompts: dict[int, list[_Segment]] = {}

    def length(median: float) -> int:
        drawn = float(rng.lognormal(math.log(median), spec.length_sigma))
        return max(1, round(min(drawn, MAX_TOKENS)))  # (a length a trace file may hold)

    requests = []
    for index, pick in enumerate(picks):
        session = int(ranks[pick])
        user = _Segment(next(next_id), length(spec.user_tokens_median))
        prompt = [*prompts.get(session, [start[session]]), user]
        if sum(s.tokens for s in prompt) > spec.max_input_tokens:
            prompt = [start[session], user]  # a new conversation
        reply = _Segment(next(next_id), length(spec.reply_tokens_median))
        tokens = sum(s.tokens for s in prompt)
        num_block_refs += -(-tokens // spec.block_tokens)
        if num_block_refs > cap:
            raise HkvError(
                f"zipf_sessions: this spec makes more than {cap:,} block references (the cap; "
                f"it had by request {index + 1:,} of {spec.num_requests:,}); lower num_requests, "
                "max_input_tokens or the token medians, or raise block_tokens or max_block_refs"
            )
        ids, _ = namer.name(prompt)
        requests.append(Request(float(index), tokens, reply.tokens, ids, None, session))
        prompts[session] = [*prompt, reply]
    source = f"zipf_sessions(seed={spec.seed}, exponent={spec.zipf_exponent:g})"
    return Trace(tuple(requests), spec.block_tokens, source)


def _with_overrides(spec: ZipfSessionSpec | None, overrides: dict[str, Any]) -> ZipfSessionSpec:
    """`spec` (default `ZipfSessionSpec()`) with `overrides` applied, each a field of it (else
    one HkvError naming it)."""
    reject_unknown("zipf_sessions", overrides, [f.name for f in fields(ZipfSessionSpec)])
    if spec is None:
        return ZipfSessionSpec(**overrides)
    if not isinstance(spec, ZipfSessionSpec):
        raise HkvError(f"zipf_sessions: spec: got {shown(spec)}; expected a ZipfSessionSpec")
    return replace(spec, **overrides) if overrides else spec
