"""What a switch of `auto` costs: its new leader rebuilt from the history, in Python and in C.

A sampled `auto` switching leader builds the new one by replaying the requests it kept (its
history, two tier-sizes of block references) through a full tier of that expert. This bench
takes the history `auto` holds at its first switch in the two-tier model of the H200 engine
(`bench.sim.two_tier`: the anchor, or its skewed variant, at a CPU tier of `--cpu-gib`), each
request as `auto` keeps it (its misses and the hits found, merged at the rebuild: in Python for
the Python replay, in C for the others, as `auto` does), and rebuilds every expert from it both
ways: a Python `VllmTier` replay, and a replay in hkv's C
extension whose state is handed to the Python policy (`hkv.policies.rebuild.rebuilt_in_c`, for
the experts of `HANDED_OVER`), and for the prefix-value experts a third: the replay in C kept
there as the live leader (`leader.NativeLeader`, what `auto` does since). For the experts
rebuilt in C, what the switch costs the caller as `auto` makes it (live in C where it can be,
held to a tier's worth of the history's latest blocks): the rebuild at once, against one begun on
the shadows' background thread and finished at the next score (`rebuild.Rebuild`: the caller's
start and finish, the replay between left out, as the engine's next step overlaps it). All run
with the garbage collector held off, as `auto` runs them (`paused_gc`); each time is the best of
`--repeats`, the ways alternating.

    python -m bench.auto_rebuild        # data/results/auto_rebuild_cpu.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from hkv.report import save_results

ROOT = Path(__file__).resolve().parent.parent


def history_at_first_switch(popularity: float, cpu_gib: float) -> tuple[list, int]:
    """The requests `auto` keeps when it first switches, as it keeps them (`History.kept`),
    and its tier's capacity in blocks."""
    import hkv.policies.auto as auto
    from bench.sim.two_tier import blocks_for_gib, predict
    from hkv.cost import CostModel
    from hkv.sim.anchor import Workload, trace_requests

    kept: list[tuple[list, int]] = []
    switch = auto.AutoPolicy._switch

    def spy(self, best, *coming):
        if not kept:
            kept.append((list(self._history.kept()), self.capacity_blocks))
        switch(self, best, *coming)

    auto.AutoPolicy._switch = spy
    try:
        requests, turns = trace_requests(workload=Workload(popularity=popularity))
        gpu = blocks_for_gib(4.0)
        predict("auto", blocks_for_gib(cpu_gib), gpu, requests, turns, CostModel.default())
    finally:
        auto.AutoPolicy._switch = switch
    if not kept:
        raise SystemExit(f"auto never switched at {cpu_gib:g} GiB (popularity {popularity:g})")
    return kept[0]


def rebuild_ms(label: str, history: list, capacity: int, native: bool, live=False) -> float | None:
    """Milliseconds to rebuild expert `label` from `history` (None: no hand-over from C); with
    `live`, kept in C where it is a prefix-value expert."""
    from hkv.policies.base import paused_gc
    from hkv.policies.native import merged
    from hkv.policies.rebuild import rebuilt_in_c
    from hkv.policies.shadow import make_expert
    from hkv.policies.tier import VllmTier

    with paused_gc():
        start = time.perf_counter()
        if native:
            if rebuilt_in_c(label, capacity, history, {}, live=live) is None:
                return None
        else:
            tier = VllmTier(make_expert(label, capacity), refuses=False)
            for request in history:  # (merged as `History.whole` merges it)
                tier.store(merged(*request) if isinstance(request, tuple) else request)
        return 1e3 * (time.perf_counter() - start)


def caller_ms(label: str, history: list, capacity: int, held: dict) -> tuple[float, float]:
    """What a switch's rebuild of `label` (live in C, held to `held`, as `auto` makes it) costs
    the caller: at once (`rebuilt_in_c`), and begun on the background thread and finished once
    its replay is done (`background=True`: the caller's start plus its finish, the replay's own
    time, which the engine's next step overlaps, left out): milliseconds, each way."""
    from hkv.policies.base import paused_gc
    from hkv.policies.rebuild import rebuilt_in_c

    with paused_gc():
        start = time.perf_counter()
        rebuilt_in_c(label, capacity, history, {}, live=True, held=held)
        at_once = time.perf_counter() - start
        start = time.perf_counter()
        begun = rebuilt_in_c(label, capacity, history, {}, live=True, background=True)
        begin = time.perf_counter() - start
        begun.wait()  # (the replay: not the caller's)
        start = time.perf_counter()
        begun.finished((), held)
        return 1e3 * at_once, 1e3 * (begin + time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.auto_rebuild", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--popularity", type=float, default=1.0, help="Zipf exponent")
    parser.add_argument("--cpu-gib", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/auto_rebuild_cpu.json")
    args = parser.parse_args(argv)
    from hkv.policies import native
    from hkv.policies.auto import UNSAMPLED_ONLY
    from hkv.policies.leader import PREFIX_EXPERTS
    from hkv.policies.native import merged
    from hkv.policies.shadow import EXPERTS

    if not native.built():
        raise SystemExit("hkv's C extension is not built here: `pip install -e .` builds it")
    history, capacity = history_at_first_switch(args.popularity, args.cpu_gib)
    rows: list[dict[str, Any]] = []
    for label in [e for e in EXPERTS if e not in UNSAMPLED_ONLY]:
        times: dict[str, list[float]] = {"python": [], "c": [], "c_live": []}
        for _ in range(args.repeats):
            times["python"].append(rebuild_ms(label, history, capacity, False))
            for way, live in (("c", False), ("c_live", True)):
                ms = rebuild_ms(label, history, capacity, True, live and label in PREFIX_EXPERTS)
                if ms is not None and (label in PREFIX_EXPERTS or not live):
                    times[way].append(ms)
        row: dict[str, Any] = {"expert": label, "python_ms": min(times["python"])}
        for way in ("c", "c_live"):
            row[f"{way}_ms"] = min(times[way]) if times[way] else None
        if row["c_ms"] is not None:  # the caller's share, held to what the tier would hold
            held = dict(merged(*history[-1]) if isinstance(history[-1], tuple) else history[-1])
            for request in reversed(history[:-1]):
                if len(held) >= capacity:
                    break
                pairs = merged(*request) if isinstance(request, tuple) else request
                held.update(pairs[: capacity - len(held)])
            ways = [caller_ms(label, history, capacity, held) for _ in range(args.repeats)]
            row["caller_at_once_ms"] = min(w[0] for w in ways)
            row["caller_begun_ms"] = min(w[1] for w in ways)
        rows.append(row)
        shown = {k: v if v is not None else float("nan") for k, v in row.items()}
        print(f"{label:>18}: Python {shown['python_ms']:6.1f} ms, C {shown['c_ms']:6.1f} ms, "
              f"kept in C {shown['c_live_ms']:6.1f} ms; the caller's as auto switches: "
              f"{shown.get('caller_at_once_ms', float('nan')):5.1f} ms at once, "
              f"{shown.get('caller_begun_ms', float('nan')):5.1f} ms begun on the thread"
              )  # fmt: skip
    results = {
        "capacity_blocks": capacity,
        "history_requests": len(history),
        "history_refs": sum(len(merged(*r) if isinstance(r, tuple) else r) for r in history),
        "rows": rows,
    }
    save_results(args.out, results, generated_by="python -m bench.auto_rebuild",
                 parameters={k: v for k, v in vars(args).items() if k != "out"})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
