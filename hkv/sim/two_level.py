"""Two levels of offloading: a CPU tier with a disk tier behind it, as vLLM's tiering runs them.

The model is vLLM's `TieringOffloadingManager` with a CPU primary tier and one secondary tier,
hkv's disk tier (`HkvDiskTier`), replayed one request at a time in trace order:

- Lookup: a request's hits are the longest prefix of its blocks held in either tier. A block of
  that prefix is a CPU hit where the CPU tier holds it, else a disk hit (vLLM asks the primary
  tier first, then the secondary tiers, chunk by chunk).
- Store and promotion: the request's blocks absent from the CPU tier, its disk hits among them
  (the promotion: a disk hit is copied back into the CPU tier), are stored in the CPU tier as
  vLLM's `CPUOffloadingManager` stores them with an hkv policy (`VllmTier`: one all-or-nothing
  eviction). When that store fails, nothing is promoted and the prefix ends at its first disk hit.
- Write-through: every block the request newly stored in the CPU tier is offered to the disk
  tier, in prefix order; promoted blocks are not (they are on disk already), nor is a block
  still on disk written again. A disk hit touches its block there (`HkvDiskTier` touches what it
  reads; vLLM 0.26, not 0.32, also touches a request's whole prompt in every tier).
- Admission, shared with `HkvDiskTier`: with `admission="cost"` the disk tier takes a request's
  blocks only when its prompt reaches `CostModel.disk_crossover_tokens(block_tokens)`, the
  shortest prefix that loads from disk faster than it recomputes; `"all"` takes every block
  (vLLM's own `fs` tier). What the rule refuses counts in `disk_refused`.
- The disk tier is bounded by bytes: it holds `disk_bytes // chunk_bytes` blocks (`chunk_bytes`:
  a full block's KV), so no mix of blocks passes the bound, under an hkv policy (default
  `cost_aware`) that sees `tier=DISK` metas. As `HkvDiskTier`'s store does, a request's new
  blocks are written together: one `evict(n)` for the room they need, then `insert` each;
  where the policy cannot evict `n`, the free slots take the first ones and the rest are
  refused (`disk_store_failed`). The policy's `admit` is not asked: the tier's admission is the
  cost rule above.
- Costs (`CostModel`): a CPU hit saves its recompute seconds minus its load from host memory, a
  disk hit its recompute seconds minus its load from disk (through host staging). vLLM loads
  every hit it finds, so a disk hit slower than recomputing saves a negative amount: that is
  what a store-everything disk tier costs. Writes run off the request's path and cost nothing.

`hkv.sim.disk_plan.recommend_disk_bytes` replays a trace at several disk sizes and picks one.
Standard library only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Hashable
from dataclasses import asdict, dataclass
from typing import Any

from hkv.blocks import BlockMeta, Tier
from hkv.cost import CostModel
from hkv.errors import HkvError
from hkv.planning.offload_spec import DISK_ADMISSIONS
from hkv.policies import EvictionPolicy, make_policy
from hkv.policies.registry import online_policy_class
from hkv.policies.tier import VllmTier
from hkv.sim.trace import Request, Trace

ADMISSIONS = DISK_ADMISSIONS  # the tier's own (`hkv.planning.offload_spec`)
"""`cost`: only requests whose prompt reaches the disk crossover; `all`: everything."""


@dataclass(frozen=True)
class TwoLevelResult:
    """Counts and seconds of one CPU + disk replay; `to_dict()` is `hkv simulate --json`'s object.

    Seconds come from the cost model: `prefill_s` is every prompt recomputed from scratch,
    `cpu_s_saved` and `disk_s_saved` what the hits of each tier saved (recompute minus load; the
    disk's may be negative), `disk_load_s` the disk hits' load time."""

    cpu_policy: str
    disk_policy: str
    admission: str
    crossover_tokens: int | None
    cpu_capacity_blocks: int
    disk_capacity_blocks: int
    disk_bound_bytes: int
    requests: int
    block_refs: int
    cpu_hits: int
    disk_hits: int
    promotions_failed: int
    cached_tokens: int
    input_tokens: int
    prefill_s: float
    cpu_s_saved: float
    disk_recompute_s: float
    disk_load_s: float
    disk_blocks_written: int
    disk_bytes_written: int
    disk_peak_bytes: int
    disk_evictions: int
    disk_refused: int
    disk_store_failed: int
    cpu_inserts: int
    cpu_evictions: int
    cpu_store_failed: int
    elapsed_s: float

    @property
    def disk_s_saved(self) -> float:
        return self.disk_recompute_s - self.disk_load_s

    @property
    def s_saved(self) -> float:
        """Prefill seconds saved by both tiers."""
        return self.cpu_s_saved + self.disk_s_saved

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cached_token_frac"] = (
            self.cached_tokens / self.input_tokens if self.input_tokens else 0
        )
        out["disk_s_saved"] = self.disk_s_saved
        out["s_saved"] = self.s_saved
        out["prefill_frac_saved"] = self.s_saved / self.prefill_s if self.prefill_s else 0.0
        return out


_Priced = tuple[BlockMeta, BlockMeta, tuple[float, float, float, int]]


class _Prices:
    """Per block shape (index, tokens, modality): its host and disk metas and
    (recompute_s, host load_s, disk load_s, disk bytes), made once."""

    def __init__(self, cost_model: CostModel, block_tokens: int):
        self.cost_model, self.block_tokens = cost_model, block_tokens
        self._by_shape: dict[tuple, _Priced] = {}

    def of(self, request: Request, index: int) -> _Priced:
        """(host meta, disk meta, prices) of block `index` of `request`."""
        tail = request.input_length - index * self.block_tokens
        modality = None if request.modalities is None else request.modalities[index]
        shape = (index, min(tail, self.block_tokens), modality)
        found = self._by_shape.get(shape)
        if found is None:
            host = request.block_meta(index, self.block_tokens, Tier.HOST)
            disk = dataclasses.replace(host, tier=Tier.DISK)
            model = self.cost_model
            price = (
                model.recompute_s(host),
                model.load_s(host, Tier.HOST),
                model.load_s(disk, Tier.DISK),
                model.block_bytes(disk),
            )
            found = self._by_shape[shape] = (host, disk, price)
        return found


class _DiskTier:
    """The disk tier as `HkvDiskTier`'s store keeps it (`hkv.storage.disk_store`): `policy` over
    whole chunks, the bytes of what it holds, and the admission rule (a request reaches the disk
    when its prompt has `min_prompt_tokens`; None: never)."""

    def __init__(self, policy: EvictionPolicy, bound_bytes: int, min_prompt_tokens: int | None):
        self.policy, self.bound_bytes = policy, bound_bytes
        self.min_prompt_tokens = min_prompt_tokens
        self.bytes_of: dict[Hashable, int] = {}  # resident key -> its bytes
        self.resident_bytes = self.peak_bytes = self.bytes_written = 0
        self.written = self.evictions = self.refused = self.failed = 0

    def __contains__(self, key: object) -> bool:
        return key in self.bytes_of

    def admits(self, request: Request) -> bool:
        floor = self.min_prompt_tokens
        return floor is not None and request.input_length >= floor

    def write(self, request: Request, offered: list[tuple[Hashable, BlockMeta, int]]) -> None:
        """Offer `(key, disk meta, bytes)` of `request`'s newly cached blocks, in prefix order:
        the ones not on disk get slots, the policy evicting what they need in one call; where it
        cannot, they take the free slots and the rest are refused from the tail."""
        if not self.admits(request):
            self.refused += len(offered)
            return
        bytes_of = self.bytes_of
        new = list(
            {key: (key, meta, n) for key, meta, n in offered if key not in bytes_of}.values()
        )
        capacity = self.policy.capacity_blocks
        need = len(new) - (capacity - len(bytes_of))
        if need > 0 and not self._evict(need):
            free = capacity - len(bytes_of)
            self.failed += len(new) - free
            new = new[:free]
        for key, meta, nbytes in new:
            self.policy.insert(key, meta)
            bytes_of[key] = nbytes
            self.bytes_written += nbytes
            self.resident_bytes += nbytes
        self.written += len(new)
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes)

    def _evict(self, n: int) -> bool:
        """Evict `n` blocks (none is pinned: promotions have finished); False if it cannot."""
        victims = self.policy.evict(n)
        if victims is None:
            return False
        for key in victims:
            self.resident_bytes -= self.bytes_of.pop(key)
        self.evictions += n
        return True


class TwoLevelReplay:
    """A CPU tier (`cpu_policy`, run as vLLM's `VllmTier`) in front of a disk tier of
    `disk_bytes` run by `disk_policy` (a policy of `disk_bytes // chunk_bytes` blocks); see the
    module docstring. `step` replays one request; `result` sums them."""

    def __init__(
        self,
        trace: Trace,
        cpu_policy: EvictionPolicy,
        disk_policy: EvictionPolicy,
        cost_model: CostModel,
        *,
        disk_bytes: int,
        admission: str = "cost",
    ):
        if admission not in ADMISSIONS:
            raise HkvError(f"admission: got {admission!r}; expected one of {', '.join(ADMISSIONS)}")
        self.trace, self.cost_model, self.admission = trace, cost_model, admission
        self.cpu = VllmTier(cpu_policy)
        self.crossover_tokens = disk_crossover(cost_model, trace)
        floor = self.crossover_tokens if admission == "cost" else 0
        self.disk = _DiskTier(disk_policy, disk_bytes, floor)
        self.prices = _Prices(cost_model, trace.block_tokens)
        self.counts = dict.fromkeys(("cpu_hits", "disk_hits", "promotions_failed"), 0)
        self.counts |= dict.fromkeys(("cpu_inserts", "cpu_evictions", "cpu_store_failed"), 0)
        self.counts |= dict.fromkeys(("cached_tokens", "input_tokens", "block_refs"), 0)
        self.seconds = dict.fromkeys(("prefill_s", "cpu_s_saved", "disk_recompute_s"), 0.0)
        self.seconds["disk_load_s"] = 0.0
        self.start = time.perf_counter()

    def step(self, request: Request) -> tuple[int, int]:
        """Replay one request; returns its (CPU hits, disk hits)."""
        blocks = [self.prices.of(request, i) for i in range(len(request.hash_ids))]
        num_cpu, disk_ids = self._lookup(request)
        new = self._store(request, blocks)
        if new is None and disk_ids:  # promotion failed: the prefix ends at the first disk hit
            self.counts["promotions_failed"] += len(disk_ids)
            num_cpu, disk_ids = disk_ids[0], []
        hits = num_cpu + len(disk_ids)
        self._price(request, blocks, hits, disk_ids)
        self.disk.policy.touch_all(request.hash_ids[i] for i in disk_ids)
        promoted = {request.hash_ids[i] for i in disk_ids}
        offered = [
            (key, blocks[i][1], blocks[i][2][3])
            for i, key in enumerate(request.hash_ids)
            if key in (new or ()) and key not in promoted
        ]
        if offered:
            self.disk.write(request, offered)
        return num_cpu, len(disk_ids)

    def _lookup(self, request: Request) -> tuple[int, list[int]]:
        """CPU hits and the indices of the disk hits of the request's longest held prefix."""
        cpu, disk = self.cpu, self.disk
        num_cpu, disk_ids = 0, []
        for index, key in enumerate(request.hash_ids):
            if key in cpu:
                num_cpu += 1
            elif key in disk:
                disk_ids.append(index)
            else:
                break
        return num_cpu, disk_ids

    def _store(self, request: Request, blocks: list) -> set[Hashable] | None:
        """Store the request in the CPU tier; the keys it newly holds, or None if it failed."""
        cpu = self.cpu
        missing = [key for key in dict.fromkeys(request.hash_ids) if key not in cpu]
        pairs = [(key, blocks[i][0]) for i, key in enumerate(request.hash_ids)]
        _, _, evicted, failed = cpu.store(pairs)
        self.counts["cpu_evictions"] += evicted
        self.counts["cpu_store_failed"] += failed
        if failed:
            return None
        new = {key for key in missing if key in cpu}
        self.counts["cpu_inserts"] += len(new)
        return new

    def _price(self, request: Request, blocks: list, hits: int, disk_ids: list[int]) -> None:
        """Add the request's prefill seconds and what its `hits` saved, by tier."""
        seconds, counts = self.seconds, self.counts
        on_disk = set(disk_ids)
        for index, (_, _, (recompute_s, host_load_s, disk_load_s, _)) in enumerate(blocks):
            seconds["prefill_s"] += recompute_s
            if index >= hits:
                continue
            if index in on_disk:
                seconds["disk_recompute_s"] += recompute_s
                seconds["disk_load_s"] += disk_load_s
            else:
                seconds["cpu_s_saved"] += recompute_s - host_load_s
        counts["cpu_hits"] += hits - len(disk_ids)
        counts["disk_hits"] += len(disk_ids)
        counts["block_refs"] += len(blocks)
        counts["input_tokens"] += request.input_length
        counts["cached_tokens"] += min(hits * self.trace.block_tokens, request.input_length)

    def result(self) -> TwoLevelResult:
        disk = self.disk
        return TwoLevelResult(
            cpu_policy=self.cpu.policy.name,
            disk_policy=disk.policy.name,
            admission=self.admission,
            crossover_tokens=self.crossover_tokens,
            cpu_capacity_blocks=self.cpu.capacity_blocks,
            disk_capacity_blocks=disk.policy.capacity_blocks,
            disk_bound_bytes=disk.bound_bytes,
            requests=len(self.trace),
            disk_blocks_written=disk.written,
            disk_bytes_written=disk.bytes_written,
            disk_peak_bytes=disk.peak_bytes,
            disk_evictions=disk.evictions,
            disk_refused=disk.refused,
            disk_store_failed=disk.failed,
            elapsed_s=time.perf_counter() - self.start,
            **self.counts,
            **self.seconds,
        )


def chunk_bytes(cost_model: CostModel, block_tokens: int) -> int:
    """Bytes of one full block's KV: the disk tier's unit."""
    return cost_model.block_bytes(BlockMeta(tokens=block_tokens, tier=Tier.DISK))


def disk_crossover(cost_model: CostModel, trace: Trace) -> int | None:
    """`CostModel.disk_crossover_tokens` at the trace's block size, searched up to a million
    tokens or the trace's longest prompt if longer (None: no prefix that long pays)."""
    longest = max(r.input_length for r in trace.requests)
    return cost_model.disk_crossover_tokens(trace.block_tokens, max(longest, 1 << 20))


def simulate_two_level(
    trace: Trace,
    cpu_policy: str,
    cpu_capacity_blocks: int,
    disk_bytes: int,
    *,
    cost_model: CostModel,
    disk_policy: str = "cost_aware",
    admission: str = "cost",
    config: Any = None,
) -> TwoLevelResult:
    """Replay `trace` through a CPU tier of `cpu_capacity_blocks` blocks run by `cpu_policy`
    and a disk tier of `disk_bytes` run by `disk_policy` (both registered online policies),
    with `admission` `cost` or `all` (module docstring)."""
    for flag, name in (("cpu policy", cpu_policy), ("disk policy", disk_policy)):
        try:
            online_policy_class(name, runner="the CPU + disk replay")
        except HkvError as exc:
            raise HkvError(f"{flag}: {exc}") from None
    bad = isinstance(disk_bytes, bool) or not isinstance(disk_bytes, int) or disk_bytes < 0
    if bad:
        raise HkvError(f"disk_bytes: got {disk_bytes!r}; expected an integer >= 0")
    context = {"cost_model": cost_model, "config": config}
    disk_blocks = disk_bytes // chunk_bytes(cost_model, trace.block_tokens)
    tiers = TwoLevelReplay(
        trace,
        make_policy(cpu_policy, cpu_capacity_blocks, **context),
        make_policy(disk_policy, disk_blocks, **context),
        cost_model,
        disk_bytes=disk_bytes,
        admission=admission,
    )
    for request in trace.requests:
        tiers.step(request)
    return tiers.result()
