"""hkv's disk tier inside vLLM's own `TieringOffloadingManager`, driven through its
scheduler-side calls, with host memory standing in for the GPU's blocks.

The spec and the manager are vLLM's (`OffloadingSpecFactory.create_spec` on a
`TieringOffloadingSpec` config, the tier loaded by `module_path`); a "GPU store" writes a
chunk's bytes into the CPU tier's row that `prepare_store` gives, as vLLM's worker would.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("vllm.v1.kv_offload.tiering.manager")

from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory

from hkv.errors import HkvError
from hkv.integrations.vllm.tier import HkvDiskTier
from hkv.storage.disk_store import FILE_NAME

BLOCK_BYTES = 16 * 1024  # one chunk of one 16-token block
CPU_CHUNKS = 8
STEP = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())


def tiering_config(tier: dict) -> dict:
    return {
        "spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": CPU_CHUNKS * BLOCK_BYTES,
        "secondary_tiers": [tier],
    }


def make_manager(extra: dict, events: bool = False):
    config = OffloadingConfig(
        groups=(OffloadingGroupConfig(16, ("layer0",), 0),),
        worker_kv_bytes_per_block=BLOCK_BYTES,
        enable_kv_cache_events=events,
        extra_config=extra,
        engine_id=uuid.uuid4().hex[:8],
        model=OffloadingModelConfig("minimax-m2.5", "bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(0, 1, 1, 1, 1, 1, 0, 1, None, True),
    )
    return OffloadingSpecFactory.create_spec(config).get_manager()


def hkv_tier(path: Path, **settings) -> dict:
    tier = {"type": "HkvDiskTier", "module_path": "hkv.integrations.vllm.tier", "path": str(path)}
    return tier | {"disk_bytes": 16 * (BLOCK_BYTES + 4096) + 8192, "admission": "all"} | settings


def key(i: int) -> bytes:
    return i.to_bytes(32, "big") + (0).to_bytes(4, "big")


def payload(i: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 256, BLOCK_BYTES, dtype=np.uint8)


def settle(manager) -> None:
    for _ in range(5000):
        manager.on_schedule_end(STEP)
        if not manager.has_pending_work():
            return
        time.sleep(0.001)
    raise AssertionError("the tier's jobs never finished")


def store(manager, ids: list[int], req: str, prompt_tokens: int | None = None) -> None:
    """One request computes chunks `ids` on the 'GPU' and vLLM stores them in the CPU tier."""
    ctx = ReqContext(req_id=req)
    for n, i in enumerate(ids, 1):
        ctx.set_offload_key_position(key(i), 16 * n if prompt_tokens is None else prompt_tokens)
    manager.on_new_request(ctx)
    out = manager.prepare_store([key(i) for i in ids], ctx)
    assert out is not None
    view = np.frombuffer(manager.primary_tier.get_kv_memoryview(), dtype=np.uint8)
    for k, row in zip(out.keys_to_store, out.store_spec.block_ids, strict=True):
        i = int.from_bytes(k[:32], "big")
        view[int(row) * BLOCK_BYTES : (int(row) + 1) * BLOCK_BYTES] = payload(i)
    manager.complete_store(out.keys_to_store, ctx)
    manager.on_request_finished(ctx)
    settle(manager)


def fetch(manager, i: int, prompt_tokens: int | None = None) -> np.ndarray | None:
    """The chunk's bytes as the GPU would load them, or None when vLLM would recompute it."""
    ctx = ReqContext(req_id=f"read-{i}-{uuid.uuid4().hex[:4]}")
    if prompt_tokens is not None:
        ctx.set_offload_key_position(key(i), prompt_tokens)
    manager.on_new_request(ctx)
    result = manager.lookup(key(i), ctx)
    if result is LookupResult.HIT_PENDING or result is LookupResult.RETRY:
        settle(manager)
        result = manager.lookup(key(i), ctx)
    data = None
    if result is LookupResult.HIT:
        spec = manager.prepare_load([key(i)], ctx)
        view = np.frombuffer(manager.primary_tier.get_kv_memoryview(), dtype=np.uint8)
        row = int(spec.block_ids[0])
        data = view[row * BLOCK_BYTES : (row + 1) * BLOCK_BYTES].copy()
        manager.complete_load([key(i)], ctx)
    manager.on_request_finished(ctx)
    settle(manager)
    return data


def tier_of(manager) -> HkvDiskTier:
    (tier,) = manager.secondary_tiers
    return tier


@pytest.fixture
def manager(tmp_path):
    made = make_manager(tiering_config(hkv_tier(tmp_path / "tier")))
    yield made
    made.shutdown()


def test_stored_chunks_cascade_to_disk_and_come_back_after_the_cpu_tier_evicts_them(manager):
    for r in range(4):  # 24 chunks through a CPU tier of 8: the first ones leave it
        store(manager, list(range(6 * r, 6 * r + 6)), f"req{r}")
    stats = tier_of(manager).stats()
    assert stats["written"] == 24 and stats["resident_chunks"] == 24 - stats["evicted"] == 16
    assert manager.primary_tier.lookup(key(0), ReqContext("x")) is not LookupResult.HIT
    assert np.array_equal(fetch(manager, 0), payload(0))  # promoted from disk
    assert np.array_equal(fetch(manager, 23), payload(23))  # still in the CPU tier


def test_the_file_never_grows_past_its_bound_and_the_policy_evicts(tmp_path):
    bound = 10 * (BLOCK_BYTES + 4096)
    manager = make_manager(tiering_config(hkv_tier(tmp_path / "t", disk_bytes=bound)))
    try:
        sizes = []
        for r in range(8):
            store(manager, list(range(4 * r, 4 * r + 4)), f"req{r}")
            sizes.append(os.path.getsize(tmp_path / "t" / FILE_NAME))
        stats = tier_of(manager).stats()
        assert max(sizes) <= bound and stats["file_bytes"] <= bound
        assert stats["resident_chunks"] <= 9 and stats["evicted"] >= 32 - 9 - 1
        assert np.array_equal(fetch(manager, 31), payload(31))
        assert fetch(manager, 0) is None  # evicted everywhere: recomputed
    finally:
        manager.shutdown()


def test_a_restart_finds_the_chunks_and_serves_the_same_bytes(tmp_path):
    config = tiering_config(hkv_tier(tmp_path / "t"))
    first = make_manager(config)
    for r in range(3):
        store(first, list(range(4 * r, 4 * r + 4)), f"req{r}")
    before = tier_of(first).stats()["resident_chunks"]
    first.shutdown()
    second = make_manager(config)
    try:
        assert tier_of(second).stats()["restored"] == before == 12
        assert all(np.array_equal(fetch(second, i), payload(i)) for i in (0, 5, 11))
    finally:
        second.shutdown()


def test_after_a_restart_new_chunks_never_land_on_the_restored_ones(tmp_path):
    """The restarted tier writes and evicts around what it found: new chunks take free slots,
    and a restored chunk evicted when the file is full frees its slot once (found on the H200:
    a reopened file's slots were handed out again, and a restored chunk read as lost)."""
    config = tiering_config(hkv_tier(tmp_path / "t"))  # 16 chunks on disk
    first = make_manager(config)
    for r in range(3):
        store(first, list(range(4 * r, 4 * r + 4)), f"req{r}")
    first.shutdown()
    second = make_manager(config)
    try:
        store(second, list(range(100, 104)), "new")  # 4 free slots: no restored chunk moves
        assert all(np.array_equal(fetch(second, i), payload(i)) for i in range(12))
        assert tier_of(second).stats()["lost"] == 0
        for r in range(3):  # past the bound: the policy evicts restored chunks too
            store(second, list(range(200 + 4 * r, 204 + 4 * r)), f"more{r}")
        stats = tier_of(second).stats()
        assert stats["lost"] == 0 and stats["evicted"] >= 12 and stats["resident_chunks"] <= 16
        assert np.array_equal(fetch(second, 211), payload(211))
    finally:
        second.shutdown()


def test_a_second_server_on_the_directory_is_refused_in_one_line(tmp_path):
    config = tiering_config(hkv_tier(tmp_path / "t"))
    first = make_manager(config)
    try:
        with pytest.raises(HkvError, match="in use by another disk tier") as caught:
            make_manager(config)
        assert "\n" not in str(caught.value)
    finally:
        first.shutdown()


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_chunk_is_a_miss_never_wrong_data(tmp_path, damage):
    manager = make_manager(tiering_config(hkv_tier(tmp_path / "t")))
    try:
        for r in range(3):  # chunks 0-3 are on disk only now
            store(manager, list(range(4 * r, 4 * r + 4)), f"req{r}")
        path = tmp_path / "t" / FILE_NAME
        store_ = tier_of(manager).store
        from hkv.storage.disk_store import digest

        slot = store_._slot_of[digest(key(1))]
        at = store_.tier._offset(slot) + 64 + 100
        with open(path, "r+b") as f:
            if damage == "flip":
                f.seek(at)
                byte = f.read(1)
                f.seek(at)
                f.write(bytes([byte[0] ^ 0xFF]))
            else:
                f.truncate(at)
        assert fetch(manager, 1) is None
        assert tier_of(manager).stats()["lost"] == 1
        assert np.array_equal(fetch(manager, 0), payload(0))  # before the damage: intact
    finally:
        manager.shutdown()


def test_cost_admission_writes_only_prompts_past_the_crossover(tmp_path):
    tier = hkv_tier(tmp_path / "t", admission="cost", min_prefix_tokens=128)
    manager = make_manager(tiering_config(tier))
    try:
        store(manager, [1, 2, 3], "short", prompt_tokens=64)
        store(manager, [4, 5, 6], "long", prompt_tokens=256)
        stats = tier_of(manager).stats()
        assert stats["refused_admission"] == 3 and stats["written"] == 3
    finally:
        manager.shutdown()


def test_vllms_fs_tier_grows_past_the_bound_that_hkvs_keeps(tmp_path):
    bound = 10 * (BLOCK_BYTES + 4096)
    fs = make_manager(tiering_config({"type": "fs", "root_dir": str(tmp_path / "fs")}))
    hkv = make_manager(tiering_config(hkv_tier(tmp_path / "hkv", disk_bytes=bound)))
    try:
        for r in range(8):
            for manager in (fs, hkv):
                store(manager, list(range(4 * r, 4 * r + 4)), f"req{r}")
        fs_bytes = sum(p.stat().st_size for p in (tmp_path / "fs").rglob("*.bin"))
        hkv_bytes = os.path.getsize(tmp_path / "hkv" / FILE_NAME)
        assert fs_bytes >= 32 * BLOCK_BYTES > bound >= hkv_bytes
    finally:
        fs.shutdown()
        hkv.shutdown()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"disk_bytes": -1}, "disk_bytes"),
        ({"admission": "some"}, "admission"),
        ({"policy": "belady"}, "policy"),
        ({"colour": "red"}, "hkv disk tier: unknown field 'colour'; accepted fields: path, "),
        ({"disk_bytes": 100}, "holds no chunk"),
        ({"page_cache": "no"}, "page_cache: got 'no'; expected true or false"),
        ({"enable_kv_events": "yes"}, "enable_kv_events"),
        ({"locality": 5}, "locality"),
        ({"policy_params": ["x"]}, "policy_params"),
    ],
)
def test_bad_settings_fail_at_start_with_what_to_do(tmp_path, setting, message):
    with pytest.raises(HkvError, match=message):
        make_manager(tiering_config(hkv_tier(tmp_path / "t", **setting)))


def test_a_path_with_a_nul_byte_fails_at_start_with_what_to_do(tmp_path):
    with pytest.raises(HkvError, match="path: .* NUL byte; give a directory"):
        make_manager(tiering_config(hkv_tier(tmp_path / "t") | {"path": f"{tmp_path}/a\0b"}))


def test_a_hit_that_loads_slower_than_it_recomputes_is_declined(tmp_path):
    tier = hkv_tier(tmp_path / "t", admission="cost", min_prefix_tokens=128)
    manager = make_manager(tiering_config(tier))
    try:
        for r in range(3):  # 12 chunks of long prompts: the first 4 end up on disk only
            store(manager, list(range(4 * r, 4 * r + 4)), f"req{r}", prompt_tokens=256)
        ctx = ReqContext(req_id="short")
        ctx.set_offload_key_position(key(0), 64)  # a prompt of 64 tokens reuses chunk 0
        manager.on_new_request(ctx)
        assert manager.lookup(key(0), ctx) is LookupResult.MISS
        assert tier_of(manager).stats()["declined_hits"] == 1
        assert np.array_equal(fetch(manager, 0, prompt_tokens=256), payload(0))
    finally:
        manager.shutdown()


def test_loads_measured_slow_stop_admission_and_are_remembered(tmp_path):
    config = tiering_config(hkv_tier(tmp_path / "t", admission="cost"))
    first = make_manager(config)
    try:
        tier = tier_of(first)
        fast = tier.crossover_tokens
        tier._note_speed(1.0)  # a chunk took a second: no prompt is long enough for the disk
        assert fast is not None and (tier.crossover_tokens is None or tier.crossover_tokens > fast)
        store(first, [1, 2, 3], "req", prompt_tokens=fast)
        assert tier.stats()["written"] == 0 and tier.stats()["refused_admission"] == 3
    finally:
        first.shutdown()
    second = make_manager(config)
    try:
        assert tier_of(second).stats()["measured_chunk_s"] == 1.0
        assert tier_of(second).crossover_tokens == tier.crossover_tokens
    finally:
        second.shutdown()


def test_load_speed_is_the_readers_time_not_the_wait_for_the_schedulers_poll(tmp_path, monkeypatch):
    """A load's chunks are timed in the reader threads: the engine polling for finished jobs
    only once its step ends (seconds, on a long prefill) does not make the drive look slow, and
    one load counts by its chunks, so a small slow one cannot swing the crossover."""
    import hkv.integrations.vllm.tier as tier_module

    monkeypatch.setattr(tier_module, "MEASURED_CHUNKS", 4)
    manager = make_manager(tiering_config(hkv_tier(tmp_path / "t")))
    try:
        store(manager, list(range(8)), "req")  # 8 chunks on disk (admission "all")
        tier = tier_of(manager)
        job = SimpleNamespace(job_id=10**6, keys=[key(i) for i in range(8)],
                              chunk_ids=list(range(8)), req_context=ReqContext("x"))  # fmt: skip
        tier.submit_load(job)
        time.sleep(0.4)  # a scheduler step: nothing asks for finished jobs meanwhile
        for _ in range(100):
            if any(r.job_id == job.job_id for r in tier.get_finished_jobs()):
                break
            time.sleep(0.01)
        stats = tier.stats()
        assert stats["load_s"] >= 0.4 and stats["load_io_s"] < 0.2
        assert stats["measured_chunk_s"] == pytest.approx(stats["load_io_s"] / 8)
        fast = stats["measured_chunk_s"]
        tier._note_speed(0.1, 4)  # a small slow load moves the estimate by its weight only
        assert tier.stats()["measured_chunk_s"] == pytest.approx((8 * fast + 0.4) / 12)
    finally:
        manager.shutdown()


def test_without_a_known_prompt_the_longest_seen_decides(tmp_path):
    """vLLM 0.26 looks a request up before it touches its prompt: until then the tier judges
    by the longest prompt it has seen."""
    tier = hkv_tier(tmp_path / "t", admission="cost", min_prefix_tokens=128)
    manager = make_manager(tiering_config(tier))
    try:
        for r in range(3):
            store(manager, list(range(4 * r, 4 * r + 4)), f"req{r}", prompt_tokens=256)
        hkv = tier_of(manager)
        unknown = ReqContext(req_id="unknown")
        assert hkv._beats_recompute(unknown)  # 256 tokens seen, crossover 128
        hkv.crossover_tokens = 512  # as if loads were measured slower
        assert not hkv._beats_recompute(ReqContext(req_id="unknown2"))
    finally:
        manager.shutdown()


def test_stores_and_evictions_reach_vllms_kv_events(tmp_path):
    bound = 10 * (BLOCK_BYTES + 4096)
    tier = hkv_tier(tmp_path / "t", disk_bytes=bound, enable_kv_events=True)
    manager = make_manager(tiering_config(tier), events=True)
    try:
        for r in range(4):
            store(manager, list(range(4 * r, 4 * r + 4)), f"req{r}")
        events = [e for e in manager.take_events() if str(e.medium).endswith("STORAGE")]
        stored = {k for e in events if not e.removed for k in e.keys}
        removed = {k for e in events if e.removed for k in e.keys}
        assert stored == {key(i) for i in range(16)}
        assert len(removed) == tier_of(manager).stats()["evicted"] > 0
    finally:
        manager.shutdown()


def test_a_store_after_its_request_finished_kills_vllms_manager_and_runs_behind_the_guard(
    tmp_path,
):
    """vLLM 0.26's scheduler stores a request's last blocks after it told the tiering manager
    that the request finished (vLLM #49635): vLLM's manager raises `KeyError` in
    `prepare_store` there. This test fails once it no longer does; then the guard
    (`compat026.guard_late_stores`, applied by `HkvTieringOffloadingSpec` on 0.26) can go.
    Behind the guard the store runs, its block reaches the disk tier, and no state is left."""
    from vllm import __version__

    from hkv.integrations.vllm import compat026

    def finished_then_stored(manager) -> None:
        ctx = ReqContext(req_id="late")
        ctx.set_offload_key_position(key(1), 16)
        manager.on_new_request(ctx)
        manager.on_request_finished(ctx)
        out = manager.prepare_store([key(1)], ctx)
        view = np.frombuffer(manager.primary_tier.get_kv_memoryview(), dtype=np.uint8)
        row = int(out.store_spec.block_ids[0])
        view[row * BLOCK_BYTES : (row + 1) * BLOCK_BYTES] = payload(1)
        manager.complete_store(out.keys_to_store, ctx)
        settle(manager)

    plain = make_manager(tiering_config(hkv_tier(tmp_path / "plain")))
    with pytest.raises(KeyError):
        finished_then_stored(plain)
    guarded = make_manager(tiering_config(hkv_tier(tmp_path / "guarded")))
    compat026.guard_late_stores(guarded)
    compat026.guard_late_stores(guarded)  # get_manager may hand it out twice: one guard
    assert guarded.hkv_late_stores == 0
    finished_then_stored(guarded)
    assert guarded.hkv_late_stores == 1  # counted, so an engine run can show it fired
    assert guarded._req_state == {}
    assert tier_of(guarded).stats()["written"] == 1
    assert np.array_equal(fetch(guarded, 1), payload(1))
    major, minor = (int(p) for p in __version__.split(".")[:2])
    assert compat026.needs_late_store_guard() == ((major, minor) < (0, 27))


def test_a_read_that_fails_leaves_the_chunks_where_they_are(tmp_path, monkeypatch):
    """An I/O error while loading (EIO from the drive, once) fails that load, and vLLM
    recomputes; the chunks stay on disk and the next load serves their bytes. Only a chunk
    that fails its checks is dropped as lost (both were dropped before)."""
    import errno

    manager = make_manager(tiering_config(hkv_tier(tmp_path / "t")))
    try:
        for r in range(4):  # 24 chunks through a CPU tier of 8: chunk 0 is on disk only
            store(manager, list(range(6 * r, 6 * r + 6)), f"req{r}")
        tier, calls = tier_of(manager), []
        read = tier.store.read

        def flaky(*args):
            calls.append(1)
            if len(calls) == 1:
                raise OSError(errno.EIO, "Input/output error")
            return read(*args)

        monkeypatch.setattr(tier.store, "read", flaky)
        assert fetch(manager, 0) is None  # this load failed: recomputed
        assert calls and tier.stats()["lost"] == 0
        assert np.array_equal(fetch(manager, 0), payload(0))
    finally:
        manager.shutdown()


def test_a_speed_file_that_cannot_be_written_never_reaches_the_engines_poll(tmp_path, monkeypatch):
    """The measured load speed is saved beside the tier file from inside `get_finished_jobs`;
    a full disk there is a warning (it raised through vLLM's scheduler, and the jobs finished
    in the same poll were never reported)."""
    import errno

    import hkv.integrations.vllm.tier_config as tier_config

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    manager = make_manager(tiering_config(hkv_tier(tmp_path / "t")))
    try:
        monkeypatch.setattr(tier_config, "write_atomic", disk_full)
        tier = tier_of(manager)
        tier._note_speed(0.001, 64)
        assert tier.stats()["measured_chunk_s"] == pytest.approx(0.001)
        assert (
            tier_config.write_speed(str(tmp_path / "t"), 0.001)
            == "[Errno 28] No space left on device"
        )
    finally:
        manager.shutdown()
