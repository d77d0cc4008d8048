"""Timers the GPU benchmark wraps around vLLM's objects: the policy's methods, the engine's
steps, and the offloading manager's loads and stores."""

from __future__ import annotations

import statistics
import time


class PolicyTimer:
    """Times every method call on one `CachePolicy` instance (wrapping its bound methods).

    `per_method[name]` is `[seconds, calls]`; `seconds` and `calls` are their totals. The
    recorded seconds include the timer's own cost inside each measured interval (a clock read and
    the call through the wrapper); `measure_overhead` measures it in this process, and the
    results report `policy_s` both raw and net of it.
    """

    METHODS = ("get", "insert", "remove", "touch", "evict", "clear")
    OPTIONAL = ("mark_evictable", "mark_non_evictable", "on_store_miss", "on_request_finished")

    def __init__(self, policy) -> None:
        self.policy = policy
        self.per_method: dict[str, list] = {}
        self.overhead: dict[str, float] | None = None  # `measure_overhead()`, set by the caller
        for name in self.METHODS + self.OPTIONAL:
            if hasattr(policy, name):
                cell = self.per_method[name] = [0.0, 0]
                setattr(policy, name, self._timed(getattr(policy, name), cell))

    def snapshot(self) -> dict:
        """Totals and per-method `(seconds, calls)` now, for differences over a run."""
        methods = {name: tuple(cell) for name, cell in self.per_method.items()}
        return {"policy_s": self.seconds, "policy_calls": self.calls, "methods": methods}

    @property
    def seconds(self) -> float:
        return sum(cell[0] for cell in self.per_method.values())

    @property
    def calls(self) -> int:
        return sum(cell[1] for cell in self.per_method.values())

    @staticmethod
    def _timed(method, cell: list):
        clock = time.perf_counter

        def timed(*args, **kwargs):
            start = clock()
            try:
                return method(*args, **kwargs)
            finally:
                cell[0] += clock() - start
                cell[1] += 1

        return timed

    @classmethod
    def measure_overhead(cls, calls: int = 200_000, rounds: int = 5) -> dict[str, float]:
        """The timer's cost per call, in seconds, measured here on a method that does nothing.

        `recorded_s`: what one wrapped call of the no-op adds to `seconds` beyond the no-op's own
        bare call (subtract it per call for the policy's net time). `added_s`: all the wrapper
        adds to its caller (also counted in the step time). Medians of `rounds` rounds.
        """

        class Probe:
            def get(self, key):
                return None

        bare = Probe().get
        recorded, added = [], []
        for _ in range(rounds):
            cell = [0.0, 0]
            wrapped = cls._timed(bare, cell)
            loop_s = _loop_seconds(None, calls)
            bare_s = _loop_seconds(bare, calls) - loop_s
            wrapped_s = _loop_seconds(wrapped, calls) - loop_s
            recorded.append((cell[0] - bare_s) / calls)
            added.append((wrapped_s - bare_s) / calls)
        return {
            "recorded_s": max(0.0, statistics.median(recorded)),
            "added_s": max(0.0, statistics.median(added)),
        }


def _loop_seconds(function, calls: int) -> float:
    """Seconds for `calls` calls of `function(None)` in a plain loop (just the loop if None)."""
    start = time.perf_counter()
    if function is None:
        for _ in range(calls):
            pass
    else:
        for _ in range(calls):
            function(None)
    return time.perf_counter() - start


class StepTimer:
    """Counts and times the engine's steps (the in-process `EngineCore.step_fn`)."""

    def __init__(self, engine_core) -> None:
        self.seconds = 0.0
        self.steps = 0
        step = engine_core.step_fn

        def timed():
            start = time.perf_counter()
            out = step()
            self.seconds += time.perf_counter() - start
            self.steps += 1
            return out

        engine_core.step_fn = timed


class ManagerCounter:
    """Blocks loaded and stored and refused stores, counted at vLLM's offloading manager."""

    def __init__(self, manager) -> None:
        self.loaded_blocks = self.stored_blocks = self.evicted_blocks = self.failed_stores = 0
        prepare_load, prepare_store = manager.prepare_load, manager.prepare_store

        def load(keys, *args, **kwargs):
            self.loaded_blocks += len(keys)
            return prepare_load(keys, *args, **kwargs)

        def store(keys, *args, **kwargs):
            out = prepare_store(keys, *args, **kwargs)
            if out is None:
                self.failed_stores += 1
            else:
                self.stored_blocks += len(out.keys_to_store)
                self.evicted_blocks += len(out.evicted_keys)
            return out

        manager.prepare_load, manager.prepare_store = load, store

    def snapshot(self) -> dict:
        return dict(vars(self))


class GcTimer:
    """Python's cyclic garbage collector in this process: each generation's collections and
    their seconds (`gc.callbacks`), wherever they ran: a policy that makes many objects can
    set off collections that land outside its own calls, and so outside `policy_s`."""

    def __init__(self) -> None:
        import gc

        self.gc_collections = self.gc_s = self.gc_gen2_s = 0.0
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        seconds = time.perf_counter() - self._start
        self.gc_collections += 1
        self.gc_s += seconds
        if info.get("generation") == 2:
            self.gc_gen2_s += seconds

    def snapshot(self) -> dict:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


INNER_PARTS = ("_score", "_switch", "after_request", "note_misses", "evict", "touch_all")
"""Methods of an hkv policy timed inside the adapter's calls (`auto`: `_score` is its shadows'
replay of a request, `_switch` a change of leader)."""


def time_inner_parts(policy) -> dict[str, list]:
    """Wrap the hkv policy's own `INNER_PARTS` it has; returns name -> [seconds, calls], and
    for `auto` "leaders": its first leader, then each switch as [request (its `_score` calls
    so far), new leader, seconds: a sampled rebuild's at its start and at its finish]."""
    if policy is None:
        return {}
    cells = {}
    for name in INNER_PARTS:
        method = getattr(policy, name, None)
        if method is not None:
            cells[name] = [0.0, 0]
            setattr(policy, name, PolicyTimer._timed(method, cells[name]))
    if "_switch" in cells and hasattr(policy, "leader"):
        timed, log = policy._switch, [policy.leader]
        cells["leaders"] = log

        begun = [0.0]  # the caller's seconds at the start of a rebuild not leading yet

        def switch(best: int, *coming) -> None:
            before, switches = cells["_switch"][0], policy.switches
            timed(best, *coming)
            begun[0] += cells["_switch"][0] - before
            if policy.switches != switches:  # (not a sampled rebuild begun: it leads later)
                log.append([cells["_score"][1], policy.leader, round(begun[0], 4)])
                begun[0] = 0.0

        policy._switch = switch
    return cells
