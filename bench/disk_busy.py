"""The disk tier's slot I/O beside a busy interpreter: C (`hkv.storage._slots`) against Python.

Inside vLLM the disk tier's reader threads share the process with the engine, whose thread
keeps the GIL busy; a reader in Python gives the GIL up at each system call and checksum and
waits up to the switch interval to take it back. This bench writes `--chunks` chunks of
`--chunk-kib` into a `DiskTier` (as `HkvDiskTier` does, `raw`, crc32) and reads them back from
the page cache into one buffer in `--threads` parts, idle and with a pure-Python thread
spinning beside the readers, the C and Python paths taking turns; each time is the best of
`--repeats`. The page cache is kept: the point is the CPU side of a load, not the drive.

    python -m bench.disk_busy        # data/results/disk_busy_cpu.json
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from hkv.report import save_results
from hkv.storage import slot_io
from hkv.storage.disk import DiskTier

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def busy_interpreter(on: bool):
    """A thread running Python bytecode throughout (an engine's scheduler stands for it)."""
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    thread = threading.Thread(target=spin, daemon=True)
    if on:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if on:
            thread.join()


def timed_load(tier: DiskTier, n: int, chunk: int, threads: int, out: np.ndarray) -> float:
    """Seconds to read slots 0..n-1 into `out` in `threads` parts, all checked."""
    step = -(-n // threads)
    parts = [range(i, min(n, i + step)) for i in range(0, n, step)]
    with ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        futures = [
            pool.submit(tier.read_many, [(s, s, "raw") for s in p], out, [s * chunk for s in p])
            for p in parts
        ]
        problems = [x for f in futures for x in f.result()]
        seconds = time.perf_counter() - start
    if any(p is not None for p in problems):
        raise SystemExit(f"a slot read back lost: {next(p for p in problems if p)}")
    return seconds


def case(tier: DiskTier, args, native: bool, busy: bool, threads: int, out) -> float:
    saved = slot_io._slots
    if not native:
        slot_io._slots = None
    try:
        with busy_interpreter(busy):
            return min(
                timed_load(tier, args.chunks, args.chunk_kib << 10, threads, out)
                for _ in range(args.repeats)
            )
    finally:
        slot_io._slots = saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.disk_busy", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--chunks", type=int, default=1024)
    parser.add_argument("--chunk-kib", type=int, default=512, help="the H200 rig's: 512")
    parser.add_argument("--threads", default="1,8", help="reader threads (the tier uses 8)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "data/results/disk_busy_cpu.json")
    args = parser.parse_args(argv)
    if not slot_io.built():
        raise SystemExit("hkv.storage._slots is not built here: `pip install -e .` builds it")
    chunk = args.chunk_kib << 10
    data = np.random.default_rng(0).integers(0, 256, args.chunks * chunk, dtype=np.uint8)
    out = np.empty_like(data)
    rows = []
    with tempfile.TemporaryDirectory() as folder, DiskTier(
        Path(folder) / "busy.kv", args.chunks, chunk
    ) as tier:  # fmt: skip
        tier.write_many(
            [(i, i, "raw", data[i * chunk : (i + 1) * chunk]) for i in range(args.chunks)]
        )
        for threads in [int(t) for t in args.threads.split(",")]:
            for busy in (False, True):
                row = {"threads": threads, "busy": busy}
                for native in (True, False):  # alternating within each cell
                    s = case(tier, args, native, busy, threads, out)
                    row["c_ms_per_chunk" if native else "python_ms_per_chunk"] = (
                        1e3 * s / args.chunks
                    )
                row["c_speedup"] = row["python_ms_per_chunk"] / row["c_ms_per_chunk"]
                rows.append(row)
                print(row)
    if not np.array_equal(out, data):
        raise SystemExit("the chunks read back differ from those written")
    save_results(args.out, {"rows": rows}, generated_by="python -m bench.disk_busy",
                 parameters={k: v for k, v in vars(args).items() if k != "out"})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
