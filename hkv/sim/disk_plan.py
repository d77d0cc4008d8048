"""How large a disk tier a trace wants: `recommend_disk_bytes` replays it at several sizes.

The replays are `hkv.sim.two_level` (a CPU tier in front of hkv's disk tier, vLLM's tiering
semantics), priced by a `CostModel` whose disk link may be set to a given bandwidth
(`with_disk_gbps`). Standard library only.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from hkv.cost import CostModel
from hkv.errors import HkvError, is_number
from hkv.sim.trace import Trace
from hkv.sim.two_level import chunk_bytes, disk_crossover, simulate_two_level


@dataclass(frozen=True)
class DiskRecommendation:
    """The disk size `recommend_disk_bytes` picked, and the replays it was picked from.

    `disk_bytes` is 0 when no size saves prefill time over the CPU tier alone. `ceiling_bytes`
    holds every distinct block the admission rule lets onto the disk (a larger disk never
    evicts, so it saves no more). `rows` are one `TwoLevelResult.to_dict()` per size tried,
    smallest first, each with `gain_s`: prefill seconds saved beyond the CPU tier alone."""

    disk_bytes: int
    ceiling_bytes: int
    disk_gbps: float
    crossover_tokens: int | None
    fraction: float
    reason: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def with_disk_gbps(cost_model: CostModel, disk_gbps: float) -> CostModel:
    """`cost_model` with its profile's disk link read at `disk_gbps` GB/s (its latency kept)."""
    ok = is_number(disk_gbps)
    if not ok or not math.isfinite(disk_gbps) or disk_gbps <= 0:
        raise HkvError(f"disk_gbps: got {disk_gbps!r}; expected a number > 0 (GB/s)")
    return dataclasses.replace(cost_model, profile=cost_model.profile.with_disk(disk_gbps))


def ceiling_bytes(trace: Trace, cost_model: CostModel, admission: str = "cost") -> int:
    """Bytes of every distinct block that `admission` would let onto the disk: the size past
    which a disk tier never evicts."""
    crossover = disk_crossover(cost_model, trace)
    if admission == "cost" and crossover is None:
        return 0
    floor = crossover if admission == "cost" else 0
    keys = {k for r in trace.requests if r.input_length >= floor for k in r.hash_ids}
    return len(keys) * chunk_bytes(cost_model, trace.block_tokens)


def recommend_disk_bytes(
    trace: Trace,
    cost_model: CostModel,
    cpu_bytes: int,
    *,
    cpu_policy: str = "lru",
    disk_policy: str = "cost_aware",
    admission: str = "cost",
    disk_gbps: float | None = None,
    fraction: float = 0.95,
    num_sizes: int = 8,
    refine_steps: int = 4,
) -> DiskRecommendation:
    """The smallest disk tier that saves at least `fraction` of the most prefill time any disk
    size saves on `trace`, behind a CPU tier of `cpu_bytes` (`cpu_policy`, vLLM's per-request
    stores), with `disk_policy` and `admission`, the disk read at `disk_gbps` GB/s (default: the
    cost model's profile).

    The rule: the gain of a size is the prefill seconds saved (CPU and disk hits, net of disk
    loads) beyond the CPU tier alone. Sizes tried: 0, the ceiling (`ceiling_bytes`) and
    `num_sizes - 1` halvings of it; the best gain among them is the target. The gain need not
    grow with the size (with `admission="all"` a larger disk can lose more to slow loads than it
    saves), which is why the target is the best size's gain, not the largest's. No gain above
    0: recommend 0, no disk tier. Else the smallest size tried reaching the target, refined by
    `refine_steps` bisections (in whole chunks) between it and the size below it, assuming the
    gain grows between them.
    """
    if disk_gbps is not None:
        cost_model = with_disk_gbps(cost_model, disk_gbps)
    _check_arguments(cpu_bytes, fraction, num_sizes, refine_steps, admission)
    chunk = chunk_bytes(cost_model, trace.block_tokens)
    cpu_blocks = cpu_bytes // chunk
    ceiling = ceiling_bytes(trace, cost_model, admission)
    replay = functools.partial(  # replay(disk_bytes) -> TwoLevelResult
        simulate_two_level,
        trace,
        cpu_policy,
        cpu_blocks,
        cost_model=cost_model,
        disk_policy=disk_policy,
        admission=admission,
    )
    sizes = sorted({0, *((ceiling >> k) // chunk * chunk for k in range(num_sizes))})
    results = {size: replay(size) for size in sizes}
    base = results[0].s_saved
    best = max(r.s_saved for r in results.values()) - base
    crossover = results[0].crossover_tokens
    pick = _pick(results, base, best, fraction, ceiling)
    if pick:
        pick = _refine(results, replay, base, fraction * best, pick, chunk, refine_steps)
    rows = [r.to_dict() | {"gain_s": r.s_saved - base} for _, r in sorted(results.items())]
    return DiskRecommendation(
        disk_bytes=pick,
        ceiling_bytes=ceiling,
        disk_gbps=cost_model.profile.links["disk"].to_gpu_gbps,
        crossover_tokens=crossover,
        fraction=fraction,
        reason=_reason(pick, results[pick].s_saved - base, best, ceiling, crossover),
        rows=rows,
    )


def _reason(pick: int, gain_s: float, best: float, ceiling: int, crossover: int | None) -> str:
    if pick:
        return (
            f"{pick / 2**30:.1f} GiB saves {gain_s:.1f} s of prefill over the CPU tier alone, "
            f"{gain_s / best:.0%} of the best size tried ({best:.1f} s)"
        )
    if crossover is None:
        return (
            "no disk tier: no prefix within the trace's longest prompt loads from disk faster "
            "than it recomputes"
        )
    if ceiling == 0:
        return f"no disk tier: no prompt reaches the disk crossover of {crossover:,} tokens"
    return f"no disk tier: the best size tried saves {best:.1f} s, nothing over the CPU tier alone"


def _pick(results, base, best, fraction, ceiling) -> int:
    """The smallest size tried whose gain reaches `fraction` of `best`; 0 when none gains."""
    if best <= 0 or ceiling == 0:
        return 0
    return min(size for size, r in results.items() if r.s_saved - base >= fraction * best)


def _refine(results, replay, base, target, pick, chunk, steps) -> int:
    """Bisect (in chunks) between `pick` and the largest size tried below it for the smallest
    size whose gain reaches `target`; every replay joins `results`."""
    low = max(size for size in results if size < pick)
    high = pick
    for _ in range(steps):
        middle = (low + high) // 2 // chunk * chunk
        if middle in (low, high):
            break
        results[middle] = replay(middle)
        if results[middle].s_saved - base >= target:
            high = middle
        else:
            low = middle
    return high


def _check_arguments(cpu_bytes, fraction, num_sizes, refine_steps, admission) -> None:
    checks = [
        ("cpu_bytes", cpu_bytes, isinstance(cpu_bytes, int) and cpu_bytes >= 0, "an integer >= 0"),
        ("fraction", fraction, isinstance(fraction, float | int) and 0 < fraction <= 1, "(0, 1]"),
        ("num_sizes", num_sizes, isinstance(num_sizes, int) and 1 <= num_sizes <= 40, "[1, 40]"),
        ("refine_steps", refine_steps, isinstance(refine_steps, int) and refine_steps >= 0, ">= 0"),
        ("admission", admission, admission in ("cost", "all"), "cost or all"),
    ]
    for name, value, ok, accepted in checks:
        if not ok or isinstance(value, bool):
            raise HkvError(f"{name}: got {value!r}; expected {accepted}")
