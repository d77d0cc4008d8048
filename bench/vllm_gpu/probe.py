"""How fast the host runs while each engine run goes on: a yardstick beside the engine.

Identical runs of one policy in one engine differ by up to a third in wall time on the H200
machine (`vllm_h200_time_dccd834.json`: lru 11.0 s to 14.2 s, and its policy time, pure CPU
work, 0.16 s to 0.23 s with it), which hides a few percent between policies unless many rounds
run. Whether that is the host (other tenants, clock speed: every process slows alike) or the
engine itself cannot be told from the engine's own clocks. `HostProbe` runs a fixed piece of
Python (dictionary updates over a few thousand keys, `CHUNK_KEYS` x `CHUNK_ROUNDS`) over and over
in a child process on a core of its own, stamping the monotonic clock after each chunk into a
shared ring (`mmap`, no pipe, no thread in the engine's process); after a run the engine reads
the chunks done between its start and end: `rate`, chunks a second. Beside it, per run, the
engine process's own CPU seconds (`resource.getrusage`) and the host's steal time
(`/proc/stat`). A rate that falls where the walls rise says the host, not the policy, slowed the
run (`hkv.report.bench_vllm_auto.speed_adjusted` then compares policies at equal host speed).

`python -m bench.vllm_gpu.probe RING SLOTS CPU` is the child.
"""

from __future__ import annotations

import mmap
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHUNK_KEYS = 2048
CHUNK_ROUNDS = 8
"""One chunk: `CHUNK_ROUNDS` passes of a dictionary update over `CHUNK_KEYS` bytes keys (about
a millisecond on the machines seen), the kind of work vLLM's scheduler and the policies do."""
SLOTS = 1 << 18
"""Chunk stamps the ring keeps (minutes of them): a run is read after it ends."""
MIN_CPUS = 4
"""Fewer CPUs than this: no probe (it would take a core the engine needs)."""
HEADER = struct.Struct("<q")  # chunks done so far
STAMP = struct.Struct("<d")  # a chunk's end, time.monotonic()


class HostProbe:
    """The child process and its ring; `rate(start, end)` after each run, `close()` at the end."""

    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        size = HEADER.size + slots * STAMP.size
        handle, name = tempfile.mkstemp(prefix="hkv-probe-", suffix=".ring")
        try:
            os.ftruncate(handle, size)
            self._ring = mmap.mmap(handle, size)
        finally:
            os.close(handle)
        self._path = Path(name)
        cpu = max(os.sched_getaffinity(0))  # the engine's threads start low
        command = [sys.executable, "-m", "bench.vllm_gpu.probe", name, str(slots), str(cpu)]
        self._child = subprocess.Popen(command)
        self._wait_first()

    def _wait_first(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while HEADER.unpack_from(self._ring, 0)[0] == 0:
            if self._child.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the host probe did not start (python -m bench.vllm_gpu.probe)")
            time.sleep(0.01)

    def rate(self, start: float, end: float) -> float | None:
        """Chunks a second that ended between `start` and `end` (`time.monotonic()`), or None
        when the ring no longer reaches back to `start` or the window holds under two."""
        if end <= start:
            return None
        done = HEADER.unpack_from(self._ring, 0)[0]
        inside, reached = [], False
        for i in range(done - 1, max(0, done - self.slots) - 1, -1):  # newest first
            stamp = STAMP.unpack_from(self._ring, HEADER.size + (i % self.slots) * STAMP.size)[0]
            if stamp < start:
                reached = True
                break
            if stamp <= end:
                inside.append(stamp)
        if not reached or len(inside) < 2:
            return None
        return (len(inside) - 1) / (inside[0] - inside[-1])

    def close(self) -> None:
        if self._child.poll() is None:
            self._child.terminate()
            self._child.wait(timeout=10)
        self._ring.close()
        self._path.unlink(missing_ok=True)


def start(enabled: bool = True) -> HostProbe | None:
    """A running probe, or None where it is off or the host has under `MIN_CPUS` CPUs."""
    if not enabled or len(os.sched_getaffinity(0)) < MIN_CPUS:
        return None
    return HostProbe()


def process_cpu_s() -> float:
    """This process's user and system CPU seconds so far, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def steal_s(stat: Path = Path("/proc/stat")) -> float | None:
    """Seconds the hypervisor took from this host's CPUs so far (all CPUs summed), or None."""
    try:
        fields = stat.read_text().splitlines()[0].split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def run_chunks(ring: mmap.mmap, slots: int, chunks: int | None = None) -> None:
    """The child's loop: chunk after chunk, each stamped into `ring` (`chunks`: stop after so
    many; None: until terminated, or until its parent is gone)."""
    keys = [i.to_bytes(8, "little") for i in range(CHUNK_KEYS)]
    table: dict[bytes, int] = {}
    done, parent = 0, os.getppid()
    while chunks is None or done < chunks:
        if done % 256 == 0 and chunks is None and os.getppid() != parent:
            return  # the engine died without closing the probe
        for _ in range(CHUNK_ROUNDS):
            for key in keys:
                table[key] = table.get(key, 0) + 1
        STAMP.pack_into(ring, HEADER.size + (done % slots) * STAMP.size, time.monotonic())
        done += 1
        HEADER.pack_into(ring, 0, done)


def main(argv: list[str]) -> int:
    path, slots, cpu = argv[0], int(argv[1]), int(argv[2])
    os.sched_setaffinity(0, {cpu})
    with open(path, "r+b") as handle:
        ring = mmap.mmap(handle.fileno(), 0)
    run_chunks(ring, slots)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
