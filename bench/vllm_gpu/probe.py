"""How fast the host runs around each engine run (`run --host-probe`), and what each run cost.

Identical runs of one policy in one engine differ by up to a third in wall time on the GPU
machines (`vllm_h200_time_dccd834.json`: lru 11.0 s to 14.2 s), slow spells lasting over several
runs. `idle_rate` runs a fixed piece of Python (dictionary updates over a few thousand keys,
`CHUNK_KEYS` x `CHUNK_ROUNDS` a chunk) in the engine's own process while the engine is idle, for
`IDLE_S` seconds just before and just after a run: chunks a second, how fast the host ran
around that run. It is measured while the engine is idle, not beside it: a process of its own
running the same loop on another core while a replay ran (a 2-vCPU VM) slowed to about half its
idle rate, and more beside `auto` than beside lru, so a rate taken during a run depends on the
policy it is meant to see past. `hkv.report.engine_noise.speed_adjusted` compares policies at
equal idle rate. On the H200 it explained none of the noise (`vllm_h200_time_81e0b9c.json`),
hence off by default: there the engine process's own CPU seconds over a run (`process_cpu_s`,
recorded for every run, with the host's steal time from `/proc/stat`) follow its wall time
run for run, and so does the policies' own pure-Python time: the same work runs slower in a
slow run, while the engine runs, and not while it is idle.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

CHUNK_KEYS = 2048
CHUNK_ROUNDS = 8
"""One chunk: `CHUNK_ROUNDS` passes of a dictionary update over `CHUNK_KEYS` bytes keys (about a
millisecond on the machines seen), the kind of work vLLM's scheduler and the policies do."""
IDLE_S = 0.5
"""Seconds of chunks before and after each run (two seconds an engine's round of two)."""
_KEYS = [i.to_bytes(8, "little") for i in range(CHUNK_KEYS)]


def idle_rate(seconds: float = IDLE_S) -> float:
    """Chunks a second this thread runs over about `seconds` (at least one chunk)."""
    table: dict[bytes, int] = {}
    done, start = 0, time.perf_counter()
    while True:
        for _ in range(CHUNK_ROUNDS):
            for key in _KEYS:
                table[key] = table.get(key, 0) + 1
        done += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def around(run, enabled: bool = True, seconds: float = IDLE_S):
    """`run()`'s result, and the idle rates just before and after it (None, None where off)."""
    if not enabled:
        return run(), (None, None)
    before = idle_rate(seconds)
    out = run()
    return out, (before, idle_rate(seconds))


def process_cpu_s() -> float:
    """This process's user and system CPU seconds so far, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def steal_s(stat: Path = Path("/proc/stat")) -> float | None:
    """Seconds the hypervisor took from this host's CPUs so far (all CPUs summed), or None."""
    try:
        fields = stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")
