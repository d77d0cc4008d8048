"""Replay a trace through one policy-managed cache tier and count what prefix caching saves.

Semantics (docs/design.md §2, exact so that results compare with any other implementation):
requests run in file order; a request's hits are the longest prefix of its `hash_ids` that is
resident; then every block of the request, in order, is touched if resident, else offered to the
policy (`admit`) and, if admitted, inserted, evicting one block first when the tier is full.
A request never evicts its own blocks (they are `protected`); when nothing else can go, the block
is not stored. Every reference therefore reaches the policy exactly once, as a `touch` (resident)
or an `admit` (absent): offline policies (`belady`) follow the trace through these calls.

`store="per_request"` models vLLM's CPU tier (`CPUOffloadingManager`) with hkv's adapter
instead (`hkv.policies.tier.VllmTier`): a request's missing blocks are offered (`admit`) in
order, the tier evicts what they need in one call (`evict(n)`, all or nothing: if it cannot,
none of them is stored), stores them all (a block the policy declined outside the policy, first
to be evicted, as vLLM stores it anyway; only vLLM's `store_threshold` refuses a store), and
only then the policy hears of the request (`after_request(stored, reused)`: vLLM records
accesses when the request finishes), which gives chains up from the tail, as vLLM's own lru and
arc do and as hkv's vLLM adapter calls it.
`bench/vllm_replay.py` checks this mode against vLLM's manager. Offline policies need the
per-block order and do not run in this mode.

Costs: a hit block is loaded from `tier` when that is cheaper than recomputing it
(`CostModel.decide`), saving its recompute time and spending its load time; otherwise it is
recomputed and saves nothing (`hits_recomputed`).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hkv.blocks import BlockMeta, Tier
from hkv.cost import CostModel
from hkv.errors import HkvError
from hkv.policies import EvictionPolicy, get_policy_class, make_policy, policy_names
from hkv.policies.tier import VllmTier
from hkv.sim.trace import Trace


@dataclass(frozen=True)
class ReplayResult:
    """Counts of one replay; `to_dict()` is one object of `hkv simulate --json`."""

    policy: str
    capacity_blocks: int
    requests: int
    block_refs: int
    block_hits: int
    block_hit_rate: float
    prefix_token_hit_frac: float
    recompute_s_saved: float
    load_s: float
    bytes_loaded: int
    evictions: int
    inserts: int
    declined: int
    store_failed: int
    hits_recomputed: int
    tier: str
    elapsed_s: float
    hyperparameters: dict[str, Any] = field(default_factory=dict)

    @property
    def refs_per_s(self) -> float:
        return self.block_refs / self.elapsed_s if self.elapsed_s > 0 else float("inf")

    @property
    def net_s_saved(self) -> float:
        return self.recompute_s_saved - self.load_s

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["refs_per_s"] = round(self.refs_per_s)
        out["net_s_saved"] = self.net_s_saved
        return out


def replay(
    trace: Trace,
    policy: EvictionPolicy,
    *,
    cost_model: CostModel | None = None,
    tier: Tier = Tier.HOST,
    cold_format: str = "auto",
    label: str | None = None,
    store: str = "per_block",
) -> ReplayResult:
    """Run `trace` through `policy` (fresh or not: it is not cleared) and count hits and costs.

    Without `cost_model` the cost fields are zero. `label` names the result (default: the
    policy's registry name). `store` is `per_block` (docs/design.md §2) or `per_request`
    (vLLM's tier).
    """
    loops = {"per_block": _replay_loop, "per_request": _replay_loop_per_request}
    if store not in loops:
        raise HkvError(f"store: got {store!r}; expected per_block or per_request")
    tier = Tier.parse(tier)  # ("disk" or 2 as Tier.DISK)
    if store == "per_request" and type(policy).offline:
        raise HkvError(f"store: {policy.name!r} is an offline policy; it needs store per_block")
    costs = _BlockCosts(cost_model, tier, cold_format)
    counts = loops[store](trace, policy, tier, costs)
    elapsed_s = counts.pop("elapsed_s")
    refs = counts["block_refs"]
    return ReplayResult(
        policy=label or policy.name,
        capacity_blocks=policy.capacity_blocks,
        requests=len(trace),
        block_hit_rate=counts["block_hits"] / refs if refs else 0.0,
        tier=tier.name.lower(),
        elapsed_s=elapsed_s,
        hyperparameters=policy.hyperparameters(),
        **counts,
    )


class _BlockCosts:
    """Per-block (saved_s, load_s, bytes, recomputed) of a hit, cached by block shape."""

    def __init__(self, cost_model: CostModel | None, tier: Tier, cold_format: str):
        self.cost_model, self.tier, self.cold_format = cost_model, tier, cold_format
        self._by_shape: dict[tuple, tuple[float, float, int, int]] = {}

    def of(self, meta: BlockMeta) -> tuple[float, float, int, int]:
        shape = (meta.tokens, meta.position, meta.modality)
        cost = self._by_shape.get(shape)
        if cost is None:
            cost = self._by_shape[shape] = self._compute(meta)
        return cost

    def _compute(self, meta: BlockMeta) -> tuple[float, float, int, int]:
        if self.cost_model is None:
            return (0.0, 0.0, 0, 0)
        decision = self.cost_model.decide(meta, self.tier, self.cold_format)
        if decision.action == "recompute":
            return (0.0, 0.0, 0, 1)
        nbytes = self.cost_model.block_bytes(meta, self.cold_format)
        return (decision.recompute_s, decision.load_s, nbytes, 0)


class _Tally:
    """What a replay sums over its requests: references, hits and what the hits saved and cost.

    `resident` is the keys held. `metas` is filled as blocks are first seen (a block keeps the
    label of its first appearance) and `block_cost` as they are first hit, priced by that meta:
    most blocks of a trace are never hit, and pricing is most of what a first sight would cost.
    Blocks of one shape (index in the request, tokens, modality) share one meta (and its
    price): nothing in a replay changes a meta, and most blocks of a trace are first seen at
    one of a few hundred shapes."""

    def __init__(self, trace: Trace, policy: EvictionPolicy, tier: Tier, costs: _BlockCosts):
        self.block_tokens, self.tier, self.costs = trace.block_tokens, tier, costs
        self.resident: set[Hashable] = set(policy)
        self.metas: dict[Hashable, BlockMeta] = {}
        self.block_cost: dict[Hashable, tuple[float, float, int, int]] = {}
        self.shapes: dict[tuple, BlockMeta] = {}
        self.refs = self.hits = self.hit_tokens = self.input_tokens = 0
        self.bytes_loaded = self.recomputed = 0
        self.saved_s = self.load_s = 0.0
        self.start = time.perf_counter()

    def meta(self, request, index: int, key: Hashable) -> BlockMeta:
        """The block's meta (made on first sight: `Request.block_meta`)."""
        meta = self.metas.get(key)
        if meta is None:
            # the two fields `block_meta` takes from the request beside the index
            block_tokens = self.block_tokens
            tail = request.input_length - index * block_tokens
            modality = None if request.modalities is None else request.modalities[index]
            shape = (index, tail if tail < block_tokens else block_tokens, modality)
            meta = self.shapes.get(shape)
            if meta is None:
                meta = self.shapes[shape] = request.block_meta(index, block_tokens, self.tier)
            self.metas[key] = meta
        return meta

    def lookup(self, request) -> int:
        """Count the request's hits (its longest resident prefix) and their costs."""
        resident, block_cost = self.resident, self.block_cost
        num_hit = nbytes = recomputed = 0
        saved_s = load_s = 0.0
        for key in request.hash_ids:
            if key not in resident:
                break
            cost = block_cost.get(key)
            if cost is None:  # its first hit
                cost = block_cost[key] = self.costs.of(self.meta(request, num_hit, key))
            saved_s += cost[0]
            load_s += cost[1]
            nbytes += cost[2]
            recomputed += cost[3]
            num_hit += 1
        self.saved_s += saved_s
        self.load_s += load_s
        self.bytes_loaded += nbytes
        self.recomputed += recomputed
        self.refs += len(request.hash_ids)
        self.hits += num_hit
        self.input_tokens += request.input_length
        self.hit_tokens += min(num_hit * self.block_tokens, request.input_length)
        return num_hit

    def totals(self) -> dict[str, Any]:
        return {
            "elapsed_s": time.perf_counter() - self.start,
            "block_refs": self.refs,
            "block_hits": self.hits,
            "prefix_token_hit_frac": (
                self.hit_tokens / self.input_tokens if self.input_tokens else 0.0
            ),
            "recompute_s_saved": self.saved_s,
            "load_s": self.load_s,
            "bytes_loaded": self.bytes_loaded,
            "hits_recomputed": self.recomputed,
        }


def _replay_loop(trace: Trace, policy: EvictionPolicy, tier: Tier, costs: _BlockCosts) -> dict:
    """docs/design.md §2: after the lookup, each block in order is touched or stored (one eviction
    at a time, never of a block of the request being stored). The hit prefix is touched in one
    `touch_all` (the same calls in the same order: the blocks before the first miss are all
    resident). Plain locals on the hot path: a block already met takes its meta from the tally's
    dict without a call, and `admit` is not called where the policy admits everything
    (`admits_everything`)."""
    tally = _Tally(trace, policy, tier, costs)
    touch, touch_all, insert, evict = policy.touch, policy.touch_all, policy.insert, policy.evict
    admit = None if policy.admits_everything else policy.admit
    capacity, resident = policy.capacity_blocks, tally.resident
    lookup, metas, meta_of = tally.lookup, tally.metas, tally.meta
    inserts = evictions = declined = failed = 0
    for request in trace.requests:
        num_hit = lookup(request)
        ids = request.hash_ids
        protected = None
        # how many resident keys are the request's (never a victim: they are protected)
        num_mine = len(resident.intersection(ids))
        if num_hit:
            touch_all(ids[:num_hit])
        for index, key in enumerate(ids[num_hit:], num_hit):
            if key in resident:
                touch(key)
                continue
            meta = metas.get(key)
            if meta is None:
                meta = meta_of(request, index, key)
            if admit is not None and not admit(key, meta):
                declined += 1
                continue
            if len(resident) >= capacity:
                if num_mine >= len(resident):  # every resident block is the request's own:
                    failed += 1  # no policy has a victim (evict would scan them all for none:
                    continue  # once per missing block, quadratic in the request's length)
                if protected is None:
                    protected = frozenset(ids)
                victims = evict(1, protected)  # exactly one key, or None
                if victims is None:
                    failed += 1
                    continue
                resident.remove(victims[0])
                evictions += 1
            insert(key, meta)
            resident.add(key)
            num_mine += 1
            inserts += 1
    counts = {"evictions": evictions, "inserts": inserts, "declined": declined}
    return tally.totals() | counts | {"store_failed": failed}


def _replay_loop_per_request(
    trace: Trace, policy: EvictionPolicy, tier: Tier, costs: _BlockCosts
) -> dict:
    """`store="per_request"`: each request stored as vLLM's CPU tier stores it (`VllmTier`:
    one all-or-nothing eviction, declined blocks kept aside, touches at its end)."""
    tally = _Tally(trace, policy, tier, costs)
    vllm = tally.resident = VllmTier(policy)
    totals = dict.fromkeys(("evictions", "inserts", "declined", "store_failed"), 0)
    meta = tally.meta
    for request in trace.requests:
        tally.lookup(request)
        pairs = [(key, meta(request, i, key)) for i, key in enumerate(request.hash_ids)]
        stored, declined, evicted, failed = vllm.store(pairs)
        totals["inserts"] += len(stored)
        totals["declined"] += declined
        totals["evictions"] += evicted
        totals["store_failed"] += failed
    return tally.totals() | totals


def simulate(
    trace: Trace,
    policies: Sequence[str] | str,
    capacity_blocks: int,
    *,
    cost_model: CostModel | None = None,
    config: Any = None,
    tier: Tier = Tier.HOST,
    store_threshold: int = 1,
    hyperparameters: dict[str, dict[str, Any]] | None = None,
    store: str = "per_block",
) -> list[ReplayResult]:
    """Replay `trace` once per policy name (`"all"`: every registered policy) at one capacity.

    Each policy is built by `make_policy` with the run's context: the trace's reference stream
    (`future`, taken by `belady`), `cost_model` and `config` (a `HybridKVCacheConfig`, taken by
    `modality_aware`). `store_threshold >= 2` wraps every policy in vLLM's admission filter.
    """
    from hkv.policies.admission import StoreThreshold

    if policies == "all":  # offline yardsticks need the per-block order
        names = policy_names(online_only=store == "per_request")
    else:
        names = [policies] if isinstance(policies, str) else list(policies)
    for name in names:
        get_policy_class(name)  # unknown names fail before any work, listing the valid ones
    bad = isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, int)
    if bad or capacity_blocks < 1:
        raise HkvError(f"capacity_blocks: got {capacity_blocks!r}; expected an integer >= 1")
    _check_run_settings(names, store_threshold, hyperparameters)
    if not len(trace):
        raise HkvError("trace: it holds no requests; nothing to simulate")
    needs_future = any(get_policy_class(name).offline for name in names)
    future = trace.reference_stream() if needs_future else None
    results = []
    for name in names:
        params = (hyperparameters or {}).get(name, {})
        policy = make_policy(
            name, capacity_blocks, cost_model=cost_model, config=config, future=future, **params
        )
        label = name
        if store_threshold >= 2:
            policy = StoreThreshold(capacity_blocks, inner=policy, threshold=store_threshold)
            label = f"{name}+st{store_threshold}"
        results.append(
            replay(trace, policy, cost_model=cost_model, tier=tier, label=label, store=store)
        )
    return results


def _check_run_settings(names: list[str], store_threshold: Any, hyperparameters: Any) -> None:
    """`simulate`'s `store_threshold` (an integer >= 1) and `hyperparameters` (policy name ->
    its mapping, each a policy being run: a misspelt name would run the defaults unsaid)."""
    bad = isinstance(store_threshold, bool) or not isinstance(store_threshold, int)
    if bad or store_threshold < 1:
        raise HkvError(f"store_threshold: got {store_threshold!r}; expected an integer >= 1")
    if hyperparameters is None:
        return
    if not isinstance(hyperparameters, Mapping):
        raise HkvError(f"hyperparameters: got {type(hyperparameters).__name__}; expected a "
                       "mapping of policy name -> its hyperparameters")  # fmt: skip
    for name, params in hyperparameters.items():
        if name not in names:
            raise HkvError(f"hyperparameters: {name!r} is not a policy of this run "
                           f"({', '.join(names)})")  # fmt: skip
        if not isinstance(params, Mapping):
            raise HkvError(f"hyperparameters[{name!r}]: got {params!r}; expected a mapping of "
                           "hyperparameter -> value")  # fmt: skip
