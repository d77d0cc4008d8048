"""`auto`: the expert whose shadow tier has hit the most lately runs the tier."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, islice
from operator import not_
from typing import Any

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.policies.base import EMPTY, EvictionPolicy, Key, check_float, check_int, paused_gc
from hkv.policies.held import Held, Owed
from hkv.policies.history import History, Recent
from hkv.policies.leader import held_aside, native_first
from hkv.policies.native import Columns, merged, sampled
from hkv.policies.retired import Retired
from hkv.policies.shadow import EXPERTS, ShadowSet, make_expert

DEFAULT_EXPERTS = tuple(label for label in EXPERTS if label != "arc")
"""Every expert but hkv's `arc` (an expert on request): when it was left out (hkv a6b2a96) the
suite's and held-out cells missed the bar in 1 of 32 and 9 of 112 without it, 2 and 11 with it
(`auto_candidates_noarc.json`)."""
LEAN_EXPERTS = ("lru", "lru+st2", "lip")
"""`experts="lean"`: vLLM's own two and `lip`, three shadows for eight (docs/policies.md, Lean)."""
DEFAULT_FIRST = "lip"
"""The expert that runs the tier until the shadows agree on another (`first` left unset): the
first of `experts` where they do not include it."""
PER_BLOCK_FIRST = "depth_lfu_static"
"""What runs the tier, `first` left unset, where no request's end is ever reported (the per-block
replay, the block manager): no shadow runs there, so the first expert runs it throughout, and
`lip`, which keeps the sessions it met first whatever comes after, is no tier to keep for good
(the README's tour trace at 2,000 blocks, per block: 37.7 % hits as `lip`, 48.6 % as this)."""
UNSAMPLED_ONLY = frozenset({"predictive"})
"""Experts left out of sampled shadows: `predictive` counts its labels in absolute numbers, so a
sampled shadow of it learns as another policy would (see `AutoPolicy`)."""
HISTORY_TIERS = 2  # a sampled `auto` keeps this many tier-sizes of requests to rebuild from


@dataclass(eq=False)
class AutoPolicy(EvictionPolicy):
    """Follow the leader: every expert policy runs in a shadow tier; the best lately runs the real
    one.

    No single policy wins everywhere (hkv's policy suite: vLLM's `lru` + `store_threshold` 2 leads
    on Mooncake's trace, a frequency-per-depth ranking on small tiers under shared prompts, plain
    `lru` on strongly skewed sessions at large tiers). So `auto` does not guess the regime: each
    expert (`experts`, labels of `shadow.EXPERTS`) replays every request in a shadow tier of the
    same capacity that holds keys only, and scores its prefix hits, decayed with a half-life of
    `half_life` x `capacity_blocks` block references. The tier itself is run by one live instance of
    the leading expert, so its decisions, admission included, are the leader's own. It starts as
    `first`, by default `lip` (LRU insertion: a new block is the next to go until it is reused),
    which holds the first sessions of a cycle whole from its first round, where waiting for the
    shadows to agree costs a round-robin workload a whole round (whole sessions are what turn hits
    into time: docs/policies.md). When another expert's score passes the leader's by more than
    `margin` of the (decayed) references (0.005: half a point of hit rate), the tier switches: the
    new expert's shadow is copied, with its whole learned state, as the live instance; blocks the
    shadow holds that the tier does not are dropped from the copy (a tier cannot conjure them) and
    owed (`held.Owed`: stored again, each is referenced as the shadow's hit), and blocks the tier
    holds that the shadow had given up are kept aside and evicted first (at once with `confirm` 1;
    after n requests in a row with `confirm` n: 2 or 3 left more held-out cells behind,
    `auto_candidates_confirm.json` in data/results/).
    This is the multi-expert idea of ACME and LeCaR (Ari et al., "ACME: Adaptive Caching Using
    Multiple Experts", WDAS 2002; Vietri et al., "Driving Cache Replacement with ML-based LeCaR",
    HotStorage 2018) made exact for a prefix tier: a shadow hits what its expert alone would, and
    the tier is its leader's whole policy, not a blend.

    Causal: the shadows see each request after it ends and nothing later. Cost: each request is
    replayed once per expert (eight by default), in C where hkv's extension is built (one C call a
    request end: `ShadowSet.replay_columns`; an exact tier's hits read there, its store left to a
    background thread while the caller goes on, where more than one CPU may run it). A tier larger
    than `sample_above` blocks has its shadows sampled, as miniature simulations do (Waldspurger et
    al., "Cache Modeling and Optimization using Miniature Simulations", USENIX ATC 2017): each
    shadow holds `sample_blocks` blocks and sees only the keys whose hash falls in the same fraction
    (`sample_blocks / capacity_blocks`) of the hash space, so its hits estimate the full tier's at
    that fraction of the cost (stored on a background thread in C while the engine goes on, their
    hits count at the next request's end, in Python too: `ShadowSet.replay_columns`'s `deferred`).
    That holds for a policy whose behaviour scales with the tier; `predictive` counts its labels in
    absolute numbers, so a sampled shadow of it would learn more slowly than the full tier: it has
    no sampled shadow (it never leads a sampled tier unless it is `first`; docs/policies.md gives
    what sampling cost and saved). A prefix cache's blocks come and go in chains, and a sampled
    request's hits are counted up to its first sampled miss. Sampled shadows hold too few keys to
    run the tier, so at a switch the new leader is built by replaying the last requests
    (`HISTORY_TIERS` tier-sizes of block references, kept whole) through a full tier of its own,
    which gives it the recency, frequencies, ghosts and admission counts that window teaches, then
    fitted to the tier as a copied shadow is, paid at the switch only; an expert that led within
    that window resumes its last live instance, caught up since (`retired.Retired`). A rebuild
    is replayed in C on the shadows' background thread from the request end that decides it, and
    leads from the next score, caught up on the requests between (`rebuild.Rebuild`; the same
    decisions in Python); what is left of it on the caller's thread still stalls the engine, so
    it waits for a lead held `confirm_rebuild` requests in a row, by `margin_rebuild` (2 points,
    against `margin`'s 0.5), over `evidence_rebuild` x `sample_blocks` sampled references
    (docs/policies.md).

    The shadows replay a request when `after_request(stored, reused)` reports it: its absent blocks
    are those named by `note_misses` (vLLM's adapter: every store miss, also when the store then
    fails) or, where no caller notes misses (hkv's replay), those offered to `admit`; its other
    blocks are the reused ones (vLLM 0.26 reports a request at its lookup, its misses noted just
    before). Where no end of request is ever reported (the per-block replay of docs/design.md §2,
    the block manager), the shadows never run and `auto` is its `first` expert throughout. No
    caller that reports request ends pins blocks (vLLM pins none): a leader copied at a switch
    holds its shadow's metas, unpinned, so such a caller's pins would not hold after a switch.
    """

    cost_model: Any = field(default=None, repr=False)
    config: Any = field(default=None, repr=False)
    experts: tuple[str, ...] = DEFAULT_EXPERTS
    half_life: float = 20.0
    margin: float = 0.005
    confirm: int = 1
    confirm_rebuild: int = 2
    margin_rebuild: float = 0.02
    evidence_rebuild: float = 0.35
    first: str | None = None
    sample_blocks: int = 1024
    sample_above: int = 8192
    native: bool = True
    name = "auto"
    context_fields = ("cost_model", "config")
    takes_reused_metas = True  # `after_request`'s `metas`

    def validate(self) -> None:
        self.experts = LEAN_EXPERTS if self.experts == "lean" else self.experts
        if isinstance(self.experts, str) or not isinstance(self.experts, Sequence):
            raise HkvError(f"auto.experts: got {self.experts!r}; expected \"lean\" or a list of "
                           "expert names")  # fmt: skip
        self.experts = tuple(self.experts)
        if not self.experts:
            raise HkvError("auto.experts: got none; expected at least one expert name")
        self._first_given = self.first is not None
        if self.first is None:
            self.first = DEFAULT_FIRST if DEFAULT_FIRST in self.experts else self.experts[0]
        for label in self.experts:
            if label not in EXPERTS:
                valid = ", ".join(EXPERTS)
                raise HkvError(f"auto.experts: unknown expert {label!r}; valid: {valid}")
        if self.first not in self.experts:
            raise HkvError(f"auto.first: got {self.first!r}; expected one of auto.experts")
        check_float(self.name, "half_life", self.half_life, 0.0, open_low=True)
        check_float(self.name, "margin", self.margin, 0.0, 1.0)
        check_float(self.name, "margin_rebuild", self.margin_rebuild, 0.0, 1.0)
        check_float(self.name, "evidence_rebuild", self.evidence_rebuild, 0.0, 64.0)
        check_int(self.name, "confirm", self.confirm, 1)
        check_int(self.name, "confirm_rebuild", self.confirm_rebuild, 1)
        check_int(self.name, "sample_blocks", self.sample_blocks, 64)
        check_int(self.name, "sample_above", self.sample_above, self.sample_blocks)
        if not isinstance(self.native, bool):
            raise HkvError(f"auto.native: got {self.native!r}; expected true or false")

    def reset(self) -> None:
        capacity = self.capacity_blocks
        context = {"cost_model": self.cost_model, "config": self.config}
        self._sampled = capacity > self.sample_above
        rate = self.sample_blocks / capacity if self._sampled else 1.0
        self._threshold = round(rate * (1 << 64))  # a key is sampled when its bits are below
        self._shadow_blocks = max(1, round(rate * capacity)) if self._sampled else capacity
        skip = UNSAMPLED_ONLY if self._sampled else frozenset()
        self._shadows = ShadowSet(self.experts, self._shadow_blocks, context, native=self.native,
                                  skip=skip, keys=not self._sampled)  # fmt: skip
        self._history = History(HISTORY_TIERS * capacity)  # sampled: the last requests
        self._retired = Retired(self._history)  # sampled: the leaders left, and when
        self._scores = [0.0 if p else -math.inf for p in self._shadows.present]  # none: never leads
        self._refs = 0.0  # decayed block references, the scores' denominator
        self._leader = self.experts.index(self.first)
        self._live = make_expert(self.first, capacity, **context)
        self._aside: dict[Key, BlockMeta] = {}  # held, but given up by the leader: evicted first
        self._held, self._owed = Held(), Owed()  # every held key's meta; what a switch owes
        self._declined = Recent(capacity + 64)  # recent misses the leader declined
        self._pending: Columns = ([], [])  # misses since the last request's end: keys, metas
        self._noted = False  # misses come from `note_misses` (vLLM), not from `admit`
        self._ended = False  # a request's end was reported (`after_request`)
        self._last_admitted: int | None = -1  # the last miss's position; None: caller known
        self.switches = 0
        self._lead = (-1, 0, 0, 0)  # who leads: requests, refs ahead by margin; by margin_rebuild
        self._coming: tuple | None = None  # a rebuild begun: it leads from the next score

    @property
    def leader(self) -> str:
        """The expert running the tier now."""
        return self.experts[self._leader]

    def scores(self) -> dict[str, float]:
        """Each expert's recent prefix hit rate in its shadow tier (decayed)."""
        refs = self._refs or 1.0
        pairs = zip(self.experts, self._scores, self._shadows.present, strict=True)
        return {label: score / refs for label, score, present in pairs if present}

    def __len__(self) -> int:
        return len(self._aside) + len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live or key in self._aside

    def __iter__(self) -> Iterator[Key]:
        return chain(self._aside, self._live)

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        """The leader decides; the miss is kept for the shadows unless `note_misses` names
        misses (then it already has)."""
        if not self._noted:
            if not self._ended and self._last_admitted is not None:
                self._per_block_caller(meta.position)
            self._keep([key], [meta])
        if self._live.admit(key, meta):
            return True
        self._declined.keep(((key, meta),))
        return False

    def admit_each(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> list[bool]:
        """`admit` of each; where misses are noted, the leader's verdicts in one call."""
        if not self._noted:
            return super().admit_each(keys, metas)
        verdicts = self._live.admit_each(keys, metas)
        if not all(verdicts):
            self._declined.keep(compress(zip(keys, metas, strict=True), map(not_, verdicts)))
        return verdicts

    @property
    def admits_now(self) -> bool:
        """Where misses are noted (then `admit` keeps none), as the leader admits."""
        return self._noted and self._live.admits_everything

    def _per_block_caller(self, position: int) -> None:
        """A second request begins (a first miss no deeper than the last) with no end of request
        between: a per-block caller; `PER_BLOCK_FIRST` runs the tier (`first` unset) from here."""
        if position > self._last_admitted:
            self._last_admitted = position
            return
        self._last_admitted = None
        if self._first_given or PER_BLOCK_FIRST not in self.experts:
            return
        context = {"cost_model": self.cost_model, "config": self.config}
        live = make_expert(PER_BLOCK_FIRST, self.capacity_blocks, **context)
        for key, meta in self._held.of(self._live).items():
            if key in self._live and live.admit(key, meta):
                live.insert(key, meta)
        self._live, self._leader = live, self.experts.index(PER_BLOCK_FIRST)

    def note_misses(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> None:
        if not self._noted and self._shadows.native:  # vLLM pins nothing: lead from C
            self._live = native_first(self._live, self.leader, self.capacity_blocks)
            self._held.fit(self._live, self._held.of(self._live), self._aside, True)
        self._noted = True
        self._keep(keys, metas)

    def _keep(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> None:
        if len(self._pending[0]) > 4 * self.capacity_blocks + 1024:
            self._pending = ([], [])  # misses of requests whose end never came
        self._pending[0].extend(keys)
        self._pending[1].extend(metas)

    def insert(self, key: Key, meta: BlockMeta) -> None:
        live, aside = self._live, self._aside
        # with nothing aside, the leader's own checks (room, a new key) are the tier's
        if aside and (key in aside or key in live or len(self) >= self.capacity_blocks):
            self._check_insert(key, len(self), key in self)  # raises
        refused = live.insert(key, meta)  # room: the keys aside hold it; refused (NativeLeader):
        if refused:  # its id is another key's, so it is kept outside the leader
            aside[key] = meta
        self._held.add((key,), (meta,), live, refused)
        if key in self._owed.keys:  # settled with the request's others, at the next call
            self._owed.stored.append(key)

    def insert_each(self, keys: Sequence[Key], metas: Sequence[BlockMeta]) -> None:
        aside = self._aside  # a key aside, or no room in the tier: its checks, key by key
        if aside and (len(self) + len(keys) > self.capacity_blocks
                      or not aside.keys().isdisjoint(keys)):  # fmt: skip
            super().insert_each(keys, metas)
            self._owed.settle((), self._live)
            return
        refused = self._live.insert_each(keys, metas)  # NativeLeader's refusals, as `insert`
        self._held.add(keys, metas, self._live, refused)  # (a dict again where one is refused)
        aside.update((key, self._held.metas[key]) for key in refused or ())  # refused: set aside
        if self._owed.stored or not self._owed.keys.isdisjoint(keys):  # (the last switch's)
            self._owed.settle(keys, self._live)

    def touch(self, key: Key) -> None:
        self._live.touch(key)

    def touch_all(self, keys) -> None:
        self._live.touch_all(keys)

    def refresh_all(self, keys) -> None:
        self._live.refresh_all(keys)

    def remove(self, key: Key) -> None:
        if self._aside.pop(key, None) is None:
            self._live.remove(key)
        self._held.drop((key,), self._live, self._aside)

    def evict(self, n: int, protected: Collection[Key] = EMPTY) -> list[Key] | None:
        """The keys set aside first (oldest first), then the leader's own victims."""
        if n <= 0:
            return []
        self._owed.settle((), self._live)  # (blocks stored one at a time: `insert`)
        first = []
        if self._aside:  # the first n that may go, without a scan of every key aside
            aside = self._aside.items()
            first = list(islice((k for k, m in aside if k not in protected and not m.pinned), n))
        rest = self._live.evict(n - len(first), protected) if len(first) < n else []
        if rest is None:
            return None
        for key in first:
            del self._aside[key]
        self._held.drop(chain(first, rest), self._live, self._aside)
        return first + rest if first else rest

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key], metas=None) -> None:
        """The leader hears of the request; every shadow replays it; the lead may change (the
        reused blocks' `metas`: the caller's, vLLM 0.26's text by position, else those kept)."""
        self._ended = True
        aside, live = self._aside, self._live
        self._owed.settle((), live)  # (blocks stored one at a time: `insert`)
        if aside and not aside.keys().isdisjoint(reused):  # held aside and wanted again: the
            back = list(dict.fromkeys(key for key in reused if key in aside))  # leader takes it
            refused = live.insert_each(back, [aside.pop(key) for key in back])  # (room)
            aside.update((key, self._held.of(live)[key]) for key in refused or ())
            self._held.taken_back()
            self._held.settle(live, aside)
        live.after_request(stored, reused)
        pending, self._pending = self._pending, ([], [])
        if not self.capacity_blocks:
            return
        reused = reused if isinstance(reused, list) else list(reused)
        found = self._held.known(reused, self._declined, live) if metas is None else (reused, metas)
        threshold = self._threshold if self._sampled else None
        if threshold is not None and (pending[0] or found[0]):  # kept whole (merged at a rebuild)
            self._history.remember(pending, found)
        shadows, deferred = self._shadows, self._sampled
        if shadows.fused:  # merged, sampled and replayed in one C call
            out = shadows.replay_columns(pending, found, threshold, deferred=deferred)
        else:
            if threshold is not None:
                pending, found = sampled(pending, threshold), sampled(found, threshold)
            request = merged(pending, found) if pending[0] or found[0] else None
            out = (shadows.replay(request), len(request)) if request else None
            out = shadows.defer(out) if deferred else out
        if out is not None:
            self._score(*out)

    def _score(self, hits_of: list[int], refs: int) -> None:
        """Each expert's score decays by `refs` block references and adds its hits (a rebuild
        the last score began leads first)."""
        if self._coming is not None:
            self._switch(*self._coming)
        decay = 0.5 ** (refs / (self.half_life * self._shadow_blocks))
        pairs = zip(self._scores, hits_of, self._shadows.present, strict=True)
        self._scores = scores = [s * decay + hits if p else s for s, hits, p in pairs]
        self._refs = self._refs * decay + refs
        best = scores.index(max(scores))  # the first of the best
        lead = scores[best] - scores[self._leader]
        if lead <= self.margin * self._refs:
            self._lead = (-1, 0, 0, 0)
            return
        held, seen, strong = self._lead[1:] if self._lead[0] == best else (0, 0, 0)
        strong = strong + 1 if lead > self.margin_rebuild * self._refs else 0
        self._lead = (best, held + 1, seen + refs, strong)
        if self._sampled and self._retired.resumable(best) is None:  # a rebuild: a lead that holds
            evidence = self.evidence_rebuild * self._shadow_blocks
            ready = strong >= max(self.confirm, self.confirm_rebuild) and seen + refs >= evidence
        else:
            ready = held + 1 >= self.confirm
        if ready:
            self._lead = (-1, 0, 0, 0)
            self._switch(best)

    def _switch(self, best: int, coming: tuple | None = None) -> None:
        """The tier is run from now on by a copy of expert `best`'s shadow (sampled shadows: by
        the expert replayed over the last requests, begun now and leading from the next score,
        `coming`), fitted to the tier; one of `LIVE_IN_C` in C where misses are
        noted (vLLM, which pins nothing: a `NativeLeader` reads no pin)."""
        resumed = self._sampled and self._retired.resumable(best) is not None
        self._coming = None
        if self._sampled and not resumed and coming is None:
            self._coming = best, self._retired.coming((best, self.experts[best]), self._shadows,
                                                      self.capacity_blocks)  # fmt: skip
            return
        with paused_gc():  # thousands of new objects, no cycle among them
            held = self._held.of(self._live)
            context = {"cost_model": self.cost_model, "config": self.config}
            if self._sampled:  # rebuilt from the requests kept, or resumed
                live = self._retired.rebuilt(
                    (best, self.experts[best]),
                    (self._leader, self._live),
                    self._shadows,
                    self.capacity_blocks,
                    held,
                    context,
                    coming,
                )
            else:
                memo = {id(value): value for value in context.values()}
                live = self._shadows.copied(best, memo, live=self._noted, held=held)
            self._aside = held_aside(live, held)  # (what `live` holds that `held` has not: gone)
            self._held.fit(live, held, self._aside, not resumed)
            self._owed.owe(None if self._sampled else self._shadows, best, held)
        self._live, self._leader = live, best
        self.switches += 1
