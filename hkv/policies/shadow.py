"""The experts `auto` shadows: each a policy (with its hyperparameters and vLLM's store filter).

`auto` runs each in a shadow tier (`hkv.policies.tier.VllmTier`, holding keys only), which
stores a request as vLLM's CPU tier does and as hkv's `store="per_request"` replay does, so an
expert's shadow hits exactly what the expert alone would hit on the same requests.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from itertools import compress
from operator import attrgetter
from typing import Any

from hkv.blocks import BlockMeta
from hkv.errors import HkvError
from hkv.policies import native as ext
from hkv.policies.admission import StoreThreshold
from hkv.policies.base import EvictionPolicy, Key
from hkv.policies.leader import LIVE_IN_C, NativeLeader
from hkv.policies.native import Columns
from hkv.policies.predictive import MODALITY_INDEX
from hkv.policies.registry import make_policy
from hkv.policies.tier import VllmTier, replay_request

_POSITION, _TOKENS = attrgetter("position"), attrgetter("tokens")
_MODALITY = attrgetter("modality")


EXPERTS: dict[str, tuple[str, dict[str, Any], int]] = {
    "lru": ("lru", {}, 1),
    "lru+st2": ("lru", {}, 2),
    "arc": ("arc", {}, 1),
    "s3fifo": ("s3fifo", {}, 1),
    "cost_aware": ("cost_aware", {}, 1),
    "depth_lfu": ("depth_lfu", {"bypass": False}, 1),
    "depth_lfu_static": ("depth_lfu", {"aging": False, "bypass": False}, 1),
    "predictive": ("predictive", {}, 1),
    "lip": ("bip", {"bip_every": 0}, 1),
}
"""Expert label -> (registered policy, its hyperparameters, store threshold): vLLM's `lru`,
`lru` with `store_threshold` 2 and (hkv's) `arc`, and hkv's own policies, the learned
`predictive` among them. `lip` is `bip` with no insert ever at the recent end: LRU insertion
(LIP, Qureshi et al., ISCA 2007), a new block placed where it is the next to go, so a tier
that sessions cycle through keeps the first of them whole instead of the heads of all."""


def make_expert(label: str, capacity_blocks: int, **context: Any) -> EvictionPolicy:
    """The policy an expert label names, with the run's context (`cost_model`, `config`)."""
    if label not in EXPERTS:
        raise HkvError(f"auto.experts: unknown expert {label!r}; valid: {', '.join(EXPERTS)}")
    name, params, threshold = EXPERTS[label]
    policy = make_policy(name, capacity_blocks, **context, **params)
    if threshold > 1:
        policy = StoreThreshold(capacity_blocks, inner=policy, threshold=threshold)
    return policy


class ShadowSet:
    """Each expert's shadow tier, for `auto`: in C (`hkv.policies.native`) for the experts the
    extension has, where `native` and it is built; a Python `VllmTier` for the others. Both
    make the same decisions (tests/test_native_shadows.py). Labels in `skip` get no shadow."""

    def __init__(
        self, labels, blocks: int, context: dict, *, native: bool, skip=frozenset(), keys=False
    ):
        native = native and blocks >= 1  # (a tier too small for a block: no native shadow)
        fast = [i for i, label in enumerate(labels) if native and label in ext.LABELS]
        fast = [i for i in fast if labels[i] not in skip]
        self.blocks = blocks  # each shadow tier's capacity
        self.present = [label not in skip for label in labels]
        self.tiers = [
            None
            if label in skip or i in fast
            else VllmTier(make_expert(label, blocks, **context), refuses=False)
            for i, label in enumerate(labels)
        ]
        self._fast = fast
        self._python = any(tier is not None for tier in self.tiers)
        self._own: dict[tuple, BlockMeta] = {}  # the Python shadows' metas, by shape
        self._native = ext.shadows([labels[i] for i in fast], blocks) if fast else None
        cost = "cost_aware" in [labels[i] for i in fast]
        self._value = make_expert("cost_aware", 1, **context).value if cost else None
        self._modal = "predictive" in [labels[i] for i in fast]  # it reads each block's modality
        self._worths: dict[tuple, float] = {}  # value() by (tokens, position, modality, tier)
        # with `keys`: each id the native shadows may name -> its key and meta, in C (`copied`)
        self._labels, self._context = list(labels), context
        self._keys = bool(keys and fast)
        self._prune_at = max(8 * blocks, PRUNE_FLOOR)
        self._deferred: tuple[list[int], int] | None = None  # `defer`'s request waiting

    @property
    def native(self) -> bool:
        """Whether any shadow runs in C."""
        return self._native is not None

    def policy(self, i: int) -> EvictionPolicy | None:
        """Expert `i`'s shadow policy (a Python shadow's; None for one in C)."""
        tier = self.tiers[i]
        return None if tier is None else tier.policy

    def unheld(self, i: int, held: dict) -> list[Key]:
        """The keys expert `i`'s shadow tier holds that dict `held` has not (`held.Owed`; a
        native one's through the ids kept, `keys`: none without them)."""
        tier = self.tiers[i]
        if tier is not None:
            return [key for key in tier if key not in held]
        if not self._keys or i not in self._fast:
            return []
        return self._native.held_keys(self._fast.index(i), held)

    def holds(self, i: int, key: Key) -> bool:
        """Whether expert `i`'s shadow tier holds `key` now."""
        return bool(self.holding(i, (key,)))

    def holding(self, i: int, keys: Sequence[Key]) -> list[Key]:
        """The keys of `keys` that expert `i`'s shadow tier holds now, in order (one C call)."""
        tier = self.tiers[i]
        if tier is not None:
            return [key for key in keys if key in tier]
        return self._native.holding(self._fast.index(i), keys) if i in self._fast else []

    def copied(self, i: int, memo: dict, *, live=False, held=None, registry=None) -> EvictionPolicy:
        """A copy of expert `i`'s shadow policy, with its whole learned state: a Python shadow
        deep-copied (`memo`: objects shared, not copied), a native one handed to a fresh Python
        policy (the ids it names mapped back by the keys kept: `keys` at construction); with
        `live`, a native one of `leader.LIVE_IN_C` cloned in C and run there, a `NativeLeader`
        holding only the keys in `held` (unless None), as `rebuilt_in_c(live=True)` leaves one.
        `registry`: `Shadows.registry()` made already (by a caller copying every shadow)."""
        tier = self.tiers[i]
        if tier is not None:
            return copy.deepcopy(tier.policy, memo)
        if not self._keys:
            raise HkvError("ShadowSet.copied: a native shadow needs its keys kept (keys=True)")
        label, j = self._labels[i], self._fast.index(i)
        if live and label in LIVE_IN_C:  # held to a dict: its keys are the leader's
            twin = self._native.cloned(j)
            keys = None if isinstance(held, dict) else self._native.registry()[0]
            return NativeLeader(label, self.blocks, ext.leader(twin, keys, held),
                                self._value, self._worths, twin)  # fmt: skip
        policy = make_expert(label, self.blocks, **self._context)
        keys, metas = registry or self._native.registry()
        handed_over(policy, self._native, j, keys, _UnpinnedMetas(metas))  # as Python holds them
        return policy

    def rebuild_context(self) -> dict[str, Any] | None:
        """What `rebuild.rebuilt_in_c` shares with this set (its context, its memo of worths and
        cost_aware's `value`), as keywords; None where the shadows do not run in C."""
        if self._native is None:
            return None
        return {"context": self._context, "worths": self._worths, "value": self._value}

    def __deepcopy__(self, memo: dict) -> ShadowSet:
        """A copy that decides alike: Python shadows copied, native ones handed to Python
        policies in `VllmTier`s holding what they hold aside (C state cannot be copied)."""
        if self._native is not None and not self._keys:
            raise HkvError(
                "auto: a tier of more than sample_above blocks with native shadows cannot be "
                "copied (its sampled C shadows keep no keys to hand to Python); make the "
                "policy with native=False to copy it (the same decisions, slower)"
            )
        twin = copy.copy(self)
        memo[id(self)] = twin
        twin.tiers = [copy.deepcopy(tier, memo) for tier in self.tiers]
        if self._native is not None:
            keys, metas = registry = self._native.registry()
            for j, i in enumerate(self._fast):
                tier = twin.tiers[i] = VllmTier(self.copied(i, memo, registry=registry),
                                                refuses=False)  # fmt: skip
                tier.aside = {keys[k]: _unpinned(metas[k]) for k in self._native.aside(j)}
            twin._native, twin._fast, twin._keys, twin._python = None, [], False, True
            twin._deferred = self._all_hits(self._native.deferred())  # the C replay's result
        twin._worths, twin._own = dict(self._worths), {}
        return twin

    @property
    def fused(self) -> bool:
        """Whether every shadow runs in C: then `replay_columns` takes a request's end whole."""
        return self._native is not None and not self._python

    def replay_columns(self, misses: Columns, hits: Columns, threshold=None, *, deferred=False):
        """`replay(merged(misses, hits))` of the blocks whose key's bits are below `threshold`
        (None: all), misses and hits each `(keys, metas)`, in one C call (`fused` sets only):
        the merge, the sample, the ids, the columns and the registry of ids (`_keep`) included.
        Returns (each expert's hits, the blocks replayed), or None where no block is left.

        `deferred`: the shadows store the request on a background thread while the caller goes
        on, and what is returned is the previous deferred request's result, as `defer` returns
        it for shadows replayed in Python (the same decisions either way)."""
        native, modal = self._native, MODALITY_INDEX if self._modal else None
        out = native.replay_request(misses, hits, threshold, self._keys, self._value,
                                    self._worths, modal, deferred)  # fmt: skip
        if out is None:
            return None
        if self._keys and native.registry_size() > self._prune_at:
            self._prune(set())  # (this request is stored already)
        return self._all_hits(out)

    def _all_hits(self, out: tuple[list[int], int] | None) -> tuple[list[int], int] | None:
        """The native shadows' `(hits, refs)` with a count for each expert (0: no C shadow)."""
        if out is None or len(out[0]) == len(self.tiers):
            return out
        hits = [0] * len(self.tiers)
        for i, h in zip(self._fast, out[0], strict=True):
            hits[i] = h
        return hits, out[1]

    def defer(self, out: tuple[list[int], int] | None) -> tuple[list[int], int] | None:
        """A request's `(hits, blocks)` (None: nothing replayed) kept until the next request's
        end, which gets it back: what `replay_columns(..., deferred=True)` returns, for shadows
        replayed in Python."""
        out, self._deferred = self._deferred, out
        return out

    def replay(self, request: list) -> list[int]:
        """Store one request (`(key, meta)` pairs in prefix order) in every shadow tier: each
        expert's prefix hits there before the store (0 for an expert without a shadow)."""
        if self._python:  # a shadow never sees the tier's pins (the native ones cannot)
            unpinned = [(key, self._unpinned(meta)) for key, meta in request]
            hits = [0 if tier is None else replay_request(tier, unpinned) for tier in self.tiers]
        else:
            hits = [0] * len(self.tiers)
        if self._native is not None:
            request_keys, metas = ext.columns(request)
            ids = ext.key_ids(request_keys)
            if self._keys:
                self._keep(ids, request_keys, metas)
            fast_hits = self._native.replay(ids, *self._columns(metas))
            for i, h in zip(self._fast, fast_hits, strict=True):
                hits[i] = h
        return hits

    def _columns(self, metas: list[BlockMeta]) -> tuple:
        """What the native shadows read of each block: its position, its token count,
        cost_aware's value of it (None without cost_aware) and its modality's index (None
        without predictive)."""
        modalities = None
        if self._modal:
            modalities = list(map(MODALITY_INDEX.__getitem__, map(_MODALITY, metas)))
        positions, tokens = list(map(_POSITION, metas)), list(map(_TOKENS, metas))
        return positions, tokens, self._worth_of(metas), modalities

    def _keep(self, ids: list[int], keys: list, metas: list) -> None:
        """Remember each id's key and meta; past a bound (a few tiers, `PRUNE_FLOOR` at least),
        forget those no native shadow names any longer (resident, ghost, counted or tracked)."""
        self._native.register(ids, list(keys), list(metas))
        if self._native.registry_size() > self._prune_at:
            self._prune(set(ids))  # this request's: the shadows store them next

    def _prune(self, named: set[int]) -> None:
        """Forget the ids no native shadow names any longer (resident, ghost, counted, tracked
        or logged), beside `named`."""
        for j in range(len(self._fast)):
            named.update(self._native.aside(j))  # held aside (declined, in flight)
            state = self._native.prefix_state(j)
            learned = self._native.predictive_state(j) if state is None else None
            if learned is not None:  # resident, remembered, logged or pending
                for name in ("averse", "friendly", "seen"):
                    named.update(learned[name][0])
                named.update(*(learned[name][1] for name in ("log", "expiring", "kept")))
                named.update(learned["pending"])
            elif state is None:
                state = self._native.queues_state(j)
                named.update(*(value[0] for name, value in state.items() if name != "target"))
            else:
                named.update(*(state[f"{n}_keys"] for n in ("entry", "count", "epoch", "pending")))
        self._native.registry_keep(named)
        self._prune_at = 2 * self._native.registry_size() + max(8 * self.blocks, PRUNE_FLOOR)

    def _unpinned(self, meta: BlockMeta) -> BlockMeta:
        """The shadows' own meta of `meta`'s shape: one never-pinned instance per shape."""
        shape = (meta.tokens, meta.position, meta.modality, meta.tier)
        own = self._own.get(shape)
        if own is None:
            if len(self._own) > 1 << 16:
                self._own.clear()
            own = self._own[shape] = _unpinned(meta)
        return own

    def _worth_of(self, metas: list[BlockMeta]) -> list[float] | None:
        """cost_aware's value of each meta, worked out once per meta object (vLLM's adapter
        shares one a position) and remembered by shape as its `_observe` does."""
        value = self._value
        if value is None:
            return None
        ids = list(map(id, metas))  # (`metas` keeps every one alive: no id is reused)
        worths, of_id = self._worths, {}
        for i, meta in dict(zip(ids, metas, strict=True)).items():
            shape = (meta.tokens, meta.position, meta.modality, meta.tier)
            worth = worths.get(shape)
            if worth is None:
                worth = worths[shape] = value(meta)
            of_id[i] = worth
        return list(map(of_id.__getitem__, ids))


PRUNE_FLOOR = 1 << 16
"""Ids a full tier's native shadows may keep unpruned, however small the tier (`_keep`): a
prune reads every shadow's state, so a small tier that pruned at a few tier-sizes spent an
eighth of `auto`'s shadow time there (Mooncake's trace at 439 blocks, through vLLM's manager)."""


def handed_over(
    policy: EvictionPolicy, shadows, i: int, keys: dict, metas: dict, *, held=None
) -> None:
    """`policy` (fresh, of shadow `i`'s expert) takes the state of native shadow `i`: `keys`
    and `metas` give the key and meta of each id that state names; with `held`, a prefix-value
    expert's resident entries are only those whose key is in it (removing an entry changes
    nothing else there)."""
    state = shadows.prefix_state(i)
    learned = shadows.predictive_state(i) if state is None else None
    if learned is not None:
        policy.restore_native(learned, keys, metas)
    elif state is not None:
        if held is not None:
            kept = [keys[k] in held for k in state["entry_keys"]]
            for name in ("entry_keys", "entry_seqs", "entry_priorities"):
                state[name] = list(compress(state[name], kept))
        policy.restore(state, keys, metas)
    else:
        policy.restore_queues(shadows.queues_state(i), keys, metas)


def _unpinned(meta: BlockMeta) -> BlockMeta:
    """A shadow's own copy of a block's meta, never pinned: pins are the real tier's I/O
    state (hkv's block manager's), which no expert's shadow tier shares."""
    return BlockMeta(meta.tokens, meta.position, meta.modality, meta.tier)


class _UnpinnedMetas:
    """`metas` (id -> meta) read as a Python shadow holds them: never pinned."""

    __slots__ = ("metas",)

    def __init__(self, metas: dict[int, BlockMeta]) -> None:
        self.metas = metas

    def __getitem__(self, i: int) -> BlockMeta:
        return _unpinned(self.metas[i])
