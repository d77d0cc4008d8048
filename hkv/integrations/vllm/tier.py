"""hkv's disk tier inside vLLM's tiered offloading: bounded, cost-aware, restart-safe.

vLLM's `TieringOffloadingSpec` keeps a CPU primary tier and hands every chunk stored there to
each secondary tier (write-through); a secondary hit is copied back to the CPU tier before the
GPU reads it. `HkvDiskTier` is such a secondary tier, loaded by vLLM's own `SecondaryTierFactory`
(by `module_path` on vLLM >= 0.32; on 0.26 by the name `register()` gives it):

    "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
      "cpu_bytes_to_use": 8589934592,
      "secondary_tiers": [{"type": "HkvDiskTier", "module_path": "hkv.integrations.vllm.tier",
                           "path": "/nvme/hkv", "disk_bytes": 34359738368}]}

What it adds to vLLM's `fs` tier (one file per chunk, no bound, every chunk written):
- a bound: one preallocated file of `disk_bytes` at most (`hkv.storage.disk_store`); when full,
  an hkv `policy` (default `cost_aware`) evicts, a pinned chunk is never reused;
- admission by the cost model (`admission: "cost"`, the default): a chunk is written only if
  its request's prompt reaches `CostModel.disk_crossover_tokens`, the shortest prefix that loads
  from this disk faster than the GPU recomputes it; `"all"` writes everything, as `fs` does;
- integrity: a checksum per slot; a torn, truncated or corrupt chunk is reported lost (the
  request recomputes it), never served;
- restart: the index is rebuilt from the file when the model, dtype and geometry match; one
  server per directory (a second one is refused with one line naming the owner's pid).

Chunks stay in the bytes vLLM gave them (`raw`): a secondary tier sees a chunk as one row of
the CPU tier's memoryview, with neither dtype nor tensor layout, and must give back the same
bytes, so the per-modality lossy formats (q8 / q6) of hkv's own block manager do not apply here.

Block hashes must be the same in the next process for a restart to find anything: vLLM 0.26
seeds them randomly unless `PYTHONHASHSEED` is set (`hkv flags` sets it); a warning says so.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Collection, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np
from vllm.v1.kv_offload.base import LookupResult, OffloadingEvent, RequestOffloadingContext
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager

from hkv.blocks import BlockMeta, Tier
from hkv.integrations.vllm.tier_config import (
    MEASURED_CHUNKS,
    TierSettings,
    chunk_cost,
    identity,
    measured_crossover,
    read_speed,
    write_speed,
)
from hkv.storage.disk_store import digest, open_store

try:  # vLLM >= 0.32 names the medium of a tier (metrics label hits by it)
    from vllm.v1.kv_offload.base import Medium

    _STORAGE: Any = Medium.STORAGE
except ImportError:  # vLLM 0.26
    Medium, _STORAGE = None, "STORAGE"

log = logging.getLogger("vllm.hkv.tier")
_RESULT_FIELDS = {f.name for f in dataclasses.fields(JobResult)}
READERS = 8
"""Threads reading chunks back (writes keep one thread: `DiskTier` orders a batch's flags)."""
PRIOR_CHUNKS = 1024
"""The weight of the speed an earlier run measured, in chunks of this run's loads."""
TIMED_CHUNKS = 1 << 16
"""The most chunks the measured speed averages over (older loads fade past it)."""


class HkvDiskTier(SecondaryTierManager):
    """A bounded disk tier of vLLM's tiered offloading (see the module docstring)."""

    if Medium is not None:
        medium: ClassVar[Any] = Medium.STORAGE

    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str, **config):
        detector = config.pop("backpressure_detector", None)
        config.pop("module_path", None)  # vLLM 0.26 passes it on
        extra = (detector,) if detector is not None else ()
        super().__init__(offloading_spec, primary_kv_view, tier_type, *extra)
        self.settings = TierSettings.from_config(config)
        self.chunk_bytes = int(primary_kv_view.strides[0])
        self._kv = np.frombuffer(primary_kv_view, dtype=np.uint8)
        self.chunk_tokens = _chunk_tokens(offloading_spec)
        self.cost, self.crossover_tokens = chunk_cost(offloading_spec, self.settings)
        self._events = self._event_list(offloading_spec)
        self.store = open_store(
            self.settings.path,
            self.settings.disk_bytes,
            self.chunk_bytes,
            identity(offloading_spec, self.chunk_bytes),
            self.settings.policy_factory(self.cost),
            BlockMeta(tokens=self.chunk_tokens, tier=Tier.DISK),
        )
        self.store.page_cache = self.settings.page_cache
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="hkv_tier_write")
        self._reader = ThreadPoolExecutor(READERS, thread_name_prefix="hkv_tier_read")
        self._jobs: dict[int, tuple[Future, str, Any, float]] = {}
        self._done: list[JobResult] = []
        self._prompt: dict[str, tuple[int, int]] = {}  # req id -> (keys seen, prompt tokens)
        self._longest_prompt = 0
        self.counts = dict.fromkeys(
            ("refused_admission", "declined_hits", "loads", "load_chunks"), 0
        )
        self.load_s = self.load_io_s = 0.0
        self.model_crossover_tokens = self.crossover_tokens
        self.per_chunk_s = read_speed(self.settings.path)  # measured by an earlier run
        prior = PRIOR_CHUNKS if self.per_chunk_s is not None else 0
        self._measured = ((self.per_chunk_s or 0.0) * prior, prior)  # seconds, chunks
        self._follow_measured_speed()
        _warn_unstable_hashes()
        log.info(
            "hkv disk tier at %s: %d chunks of %d bytes (bound %d bytes), admission %s from "
            "%s tokens, %d chunks found",
            self.settings.path, len(self.store.tier._flags), self.chunk_bytes,
            self.settings.disk_bytes, self.settings.admission, self.crossover_tokens,
            len(self.store),
        )  # fmt: skip

    def _event_list(self, spec: Any) -> list[OffloadingEvent] | None:
        events_config = getattr(spec, "kv_events_config", None)
        enabled = getattr(events_config, "enable_kv_cache_events", False)
        return [] if self.settings.enable_kv_events and enabled else None

    # ---- scheduler-side calls -------------------------------------------------------------
    def on_new_request(self, req_context: Any) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def lookup(self, key: bytes, req_context: Any) -> LookupResult:
        """A hit only where loading it beats recomputing: a request whose prompt is known to be
        shorter than the crossover recomputes (vLLM would otherwise load every hit it finds)."""
        if digest(key) not in self.store:
            return LookupResult.MISS
        if self.settings.admission == "cost" and not self._beats_recompute(req_context):
            self.counts["declined_hits"] += 1
            return LookupResult.MISS
        return LookupResult.HIT

    def touch(self, keys: Collection[bytes], req_context: Any) -> None:
        """The prompt's length (0.26 touches a whole prompt); not a reference: the policy ranks
        chunks by this tier's own stores and loads (vLLM's `fs` tier ignores touches too), as
        0.26 touches each prompt twice a request and a key's digest costs a hash."""
        if keys:
            self._note_prompt(req_context, len(keys) * self.chunk_tokens)

    def submit_store(self, job: Any) -> None:
        keys = list(job.keys)
        if not self._admits(job.req_context, keys):
            self.counts["refused_admission"] += len(keys)
            self._done.append(_result(job.job_id, True, transfer_bytes=0))
            return
        ids = _chunk_ids(job)
        position = _positions(job.req_context)
        items = [(k, self._meta(position, k)) for k in keys]
        reserved = self.store.reserve(items)
        if not reserved:
            self._done.append(_result(job.job_id, True, transfer_bytes=0))
            return
        row_of = {digest(k): int(i) for k, i in zip(keys, ids, strict=True)}
        buffers = [self._row(row_of[d]) for d, _, _ in reserved]
        future = self._writer.submit(self.store.write, reserved, buffers)
        self._jobs[job.job_id] = ([future], "store", reserved, time.monotonic())

    def submit_load(self, job: Any) -> None:
        """Reads go to `READERS` threads in parts: one thread keeps one read in flight, and an
        NVMe drive needs several to reach its bandwidth."""
        keys, ids = list(job.keys), _chunk_ids(job)
        pinned = self.store.pin(keys)
        found = [
            (p, int(i) * self.chunk_bytes, k)
            for p, i, k in zip(pinned, ids, keys, strict=True)
            if p
        ]
        parts = _parts(found)
        futures = [
            self._reader.submit(
                _timed, self.store.read, [p for p, _, _ in part], self._kv, [o for _, o, _ in part]
            )
            for part in parts
        ]
        self._jobs[job.job_id] = (futures, "load", (found, len(keys)), time.monotonic())

    def get_finished_jobs(self) -> Iterable[JobResult]:
        done, self._done = self._done, []
        for job_id in [j for j, (fs, *_) in self._jobs.items() if all(f.done() for f in fs)]:
            futures, kind, payload, started = self._jobs.pop(job_id)
            finish = self._finish_store if kind == "store" else self._finish_load
            done.append(finish(job_id, futures, payload, time.monotonic() - started))
        return done

    def _finish_store(self, job_id: int, futures: list[Future], reserved: Any, seconds: float):
        error = futures[0].exception()
        if error is not None:
            log.warning(
                "hkv disk tier: a store failed (%s); its chunks stay in the CPU tier", error
            )
        self.store.finish_write(reserved, ok=error is None)
        if error is None and self._events is not None:
            keys = [self.store._keys[d] for d, _, _ in reserved if d in self.store._keys]
            self._events.append(OffloadingEvent(keys=keys, medium=_STORAGE, removed=False))
        nbytes = 0 if error else len(reserved) * self.chunk_bytes
        return _result(job_id, error is None, transfer_time=seconds, transfer_bytes=nbytes)

    def _finish_load(self, job_id: int, futures: list[Future], payload: Any, seconds: float):
        found, asked = payload
        problems, failed, spans = [], [], []
        for future, part in zip(futures, _parts(found), strict=True):
            error = future.exception()
            if error is not None:  # the read itself failed: the chunks stay, this load fails
                log.warning("hkv disk tier: a read failed (%s); its chunks are recomputed", error)
                problems += [None] * len(part)
                failed += [True] * len(part)
                continue
            got, start, end = future.result()
            problems += got
            failed += [problem is not None for problem in got]
            spans.append((start, end))
        self.store.finish_read([p for p, _, _ in found], problems)  # drops the lost ones
        ok = [k for (_, _, k), bad in zip(found, failed, strict=True) if not bad]
        self.counts["loads"] += 1
        self.counts["load_chunks"] += len(ok)
        self.load_s += seconds
        # the readers' own seconds (they run in parallel), not the wait for the scheduler's poll
        io_s = max(e for _, e in spans) - min(b for b, _ in spans) if spans else 0.0
        self.load_io_s += io_s
        if len(ok) >= MEASURED_CHUNKS:
            self._note_speed(io_s / len(ok), len(ok))
        nbytes = len(ok) * self.chunk_bytes
        if len(ok) == asked:
            return _result(job_id, True, transfer_time=seconds, transfer_bytes=nbytes)
        return _result(
            job_id, False, successful_keys=tuple(ok) or None, transfer_time=seconds,
            transfer_bytes=nbytes,
        )  # fmt: skip

    def take_events(self) -> Iterable[OffloadingEvent]:
        if self._events is None:
            return ()
        if self.store.evicted:
            evicted, self.store.evicted = self.store.evicted, []
            self._events.append(OffloadingEvent(keys=evicted, medium=_STORAGE, removed=True))
        events, self._events = self._events, []
        return events

    def has_pending_work(self) -> bool:
        return bool(self._jobs or self._done)

    def on_request_finished(self, req_context: Any) -> None:
        self._prompt.pop(req_context.req_id, None)

    def drain_jobs(self) -> None:
        for futures, *_ in list(self._jobs.values()):
            for future in futures:
                future.exception()  # waits; the result is read by get_finished_jobs

    def shutdown(self) -> None:
        self._writer.shutdown(wait=True)
        self._reader.shutdown(wait=True)
        self.store.close()
        self._kv = None  # vLLM closes the CPU tier's mmap after this: no view may remain

    # ---- helpers -------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """What the tier did: chunks written, refused, evicted, lost; loads and their seconds
        against the cost model's estimate; the file's size against the bound."""
        per_chunk = self.cost.load_s(BlockMeta(tokens=self.chunk_tokens, tier=Tier.DISK))
        return {
            **self.store.counts,
            **self.counts,
            "resident_chunks": len(self.store),
            "file_bytes": self.store.file_bytes,
            "disk_bytes": self.settings.disk_bytes,
            "chunk_bytes": self.chunk_bytes,
            "crossover_tokens": self.crossover_tokens,
            "model_crossover_tokens": self.model_crossover_tokens,
            "measured_chunk_s": self.per_chunk_s,
            "load_s": self.load_s,
            "load_io_s": self.load_io_s,
            "model_load_s": per_chunk * self.counts["load_chunks"],
        }

    def _row(self, chunk_id: int) -> memoryview:
        start = chunk_id * self.chunk_bytes
        return memoryview(self._kv[start : start + self.chunk_bytes])

    def _meta(self, position: dict | None, key: bytes) -> BlockMeta:
        end = position.get(key) if position else None
        start = max(0, end - self.chunk_tokens) if end else 0
        return BlockMeta(tokens=self.chunk_tokens, position=start, tier=Tier.DISK)

    def _note_prompt(self, req_context: Any, tokens: int) -> None:
        seen, known = self._prompt.get(req_context.req_id, (0, 0))
        self._prompt[req_context.req_id] = (seen, max(known, tokens))
        self._longest_prompt = max(self._longest_prompt, tokens)

    def _admits(self, req_context: Any, keys: list[bytes]) -> bool:
        if self.settings.admission == "all":
            return True
        if self.crossover_tokens is None:
            return False
        return self._prompt_tokens(req_context) >= self.crossover_tokens

    def _beats_recompute(self, req_context: Any) -> bool:
        """False when this request's chunks load slower than they recompute: no crossover at
        all, or a prompt known to be shorter; where the prompt is not known yet (vLLM 0.26
        looks a request up before it touches it), the longest prompt seen so far stands in."""
        if self.crossover_tokens is None:
            return False
        known = self._prompt_tokens(req_context) or self._longest_prompt
        return known >= self.crossover_tokens

    def _prompt_tokens(self, req_context: Any) -> int:
        positions = _positions(req_context)
        req_id = req_context.req_id
        seen, known = self._prompt.get(req_id, (0, 0))
        if positions and len(positions) != seen:  # vLLM >= 0.32: every prompt key's end token
            known = max(known, max(positions.values()))
            self._prompt[req_id] = (len(positions), known)
            self._longest_prompt = max(self._longest_prompt, known)
        return known

    def _note_speed(self, per_chunk_s: float, chunks: int = MEASURED_CHUNKS) -> None:
        """Fold a load's seconds per chunk into the measured speed, weighted by its chunks (an
        earlier run's speed counts as `PRIOR_CHUNKS`, all of it as `TIMED_CHUNKS` at most, so
        the speed follows a drive that changes), and persist it beside the tier file."""
        seconds, count = self._measured
        seconds, count = seconds + per_chunk_s * chunks, count + chunks
        if count > TIMED_CHUNKS:
            seconds, count = seconds * TIMED_CHUNKS / count, TIMED_CHUNKS
        self._measured = (seconds, count)
        self.per_chunk_s = seconds / count
        self._follow_measured_speed()
        if (why := write_speed(self.settings.path, self.per_chunk_s)) is not None:
            log.warning("hkv disk tier: the measured speed was not saved: %s", why)

    def _follow_measured_speed(self) -> None:
        """Admit and serve by the crossover the measured loads imply, once any were timed
        (`admission: cost` without a hand-set `min_prefix_tokens`)."""
        if self.per_chunk_s is None or self.settings.admission != "cost":
            return
        if self.settings.min_prefix_tokens is not None:
            return
        before = self.crossover_tokens
        self.crossover_tokens = measured_crossover(
            self.cost, self.chunk_bytes, self.chunk_tokens, self.per_chunk_s
        )
        if before != self.crossover_tokens:
            log.info(
                "hkv disk tier: loads take %.3f ms a chunk here; disk beats recomputing from "
                "%s tokens (the profile said %s)", 1e3 * self.per_chunk_s,
                self.crossover_tokens, self.model_crossover_tokens,
            )  # fmt: skip


def _timed(read: Any, *args: Any) -> tuple[Any, float, float]:
    """`read(*args)` in a reader thread, with when it started and ended (monotonic)."""
    start = time.monotonic()
    return read(*args), start, time.monotonic()


def _parts(found: list) -> list[list]:
    """A load's chunks cut into at most `READERS` consecutive parts."""
    step = max(1, -(-len(found) // READERS))
    return [found[i : i + step] for i in range(0, len(found), step)]


def _positions(req_context: Any) -> dict | None:
    """vLLM >= 0.32 notes the end token of each of a request's keys on its context."""
    return getattr(req_context, "_offload_key_positions", None)


def _chunk_ids(job: Any) -> Any:
    ids = getattr(job, "chunk_ids", None)
    return job.block_ids if ids is None else ids  # vLLM 0.26 calls them block_ids


def _chunk_tokens(spec: Any) -> int:
    """Tokens in one offloaded chunk (the largest over KV-cache groups)."""
    return max(spec.tokens_per_block) * int(spec.blocks_per_chunk)


def _result(job_id: int, success: bool, **fields: Any) -> JobResult:
    """A `JobResult` with the fields this vLLM has (0.26: job id and success only)."""
    return JobResult(job_id=job_id, success=success, **{
        k: v for k, v in fields.items() if k in _RESULT_FIELDS
    })  # fmt: skip


def _warn_unstable_hashes() -> None:
    if os.environ.get("PYTHONHASHSEED") is None:
        log.warning(
            "hkv disk tier: PYTHONHASHSEED is not set: on vLLM 0.26, and with a non-sha256 "
            "prefix-caching hash on any version, block hashes change with every process and a "
            "restart finds nothing on disk; start vLLM with PYTHONHASHSEED=0"
        )
