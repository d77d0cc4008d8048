"""Counters inside a `vllm serve` engine process, for `bench.vllm_serve` (never imported by hkv).

Put on `PYTHONPATH` of the server with `HKV_SERVE_STATS=<file>`: when vLLM's
`vllm.v1.kv_offload.cpu.manager` is imported, its `CPUOffloadingManager` is wrapped so that each
manager counts blocks loaded, stored and evicted and refused stores (`prepare_store` returned
None), and a daemon thread rewrites `<file>` (atomically, twice a second) with them and with
what served the policy: its class, module, hyperparameters and the file hkv was imported from.
Standard library only; without `HKV_SERVE_STATS` it does nothing. The counting is
`bench.vllm_gpu.timers.ManagerCounter`'s, written again here: the repository is kept off the
server's path (hkv must come from its installed copy) and the project loads no code by file path.

With tiered offloading (`vllm.v1.kv_offload.tiering.manager`: the CPU manager is its primary
tier), the counts above stay the GPU's loads and stores: the primary tier's rows read for a
secondary tier (`prepare_read`, an alias of `prepare_load` on vLLM 0.26) and written back from
one (`prepare_write`, an alias of `prepare_store`) are counted apart (`cascade_read_blocks`,
`promoted_blocks`, `failed_promotions`). The file also holds each secondary tier's `stats()`
where it has one (hkv's `HkvDiskTier`), under `secondary_tiers`, and the stores hkv's 0.26
guard let through (`late_stores_guarded`, None without the guard).
"""

import os
import sys

_CPU = "vllm.v1.kv_offload.cpu.manager"
_TIERING = "vllm.v1.kv_offload.tiering.manager"


def _install(path: str) -> None:
    _patch_on_import(_CPU, lambda module: _wrap(module.CPUOffloadingManager, path))
    _patch_on_import(_TIERING, lambda module: _wrap_tiering(module.TieringOffloadingManager))


def _patch_on_import(target: str, patch) -> None:
    """`patch(module)` right after `target` is first imported."""
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, import_path, target_module=None):
            if name != target:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            exec_module = spec.loader.exec_module

            def patched(module):
                exec_module(module)
                patch(module)

            spec.loader.exec_module = patched
            return spec

    sys.meta_path.insert(0, Finder())


def _wrap_tiering(manager_cls) -> None:
    """The tiering manager tells its primary (CPU) tier where it is, for the snapshot, and the
    primary tier's reads and writes for secondary tiers are counted apart from the GPU's."""
    init = manager_cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        primary = self.primary_tier
        primary._hkv_serve_tiering = self
        counts = getattr(primary, "_hkv_serve_counts", None)
        if counts is None:
            return
        load, store = primary._hkv_serve_originals
        mine = primary.__dict__
        if mine.get("prepare_read") is not mine.get("prepare_load"):
            load = primary.prepare_read  # its own method (vLLM 0.32), not the alias (0.26)
        if mine.get("prepare_write") is not mine.get("prepare_store"):
            store = primary.prepare_write
        counts |= {"cascade_read_blocks": 0, "promoted_blocks": 0, "failed_promotions": 0}

        def read(keys, *a, **k):
            counts["cascade_read_blocks"] += len(keys)
            return load(keys, *a, **k)

        def write(keys, *a, **k):
            out = store(keys, *a, **k)
            if out is None:
                counts["failed_promotions"] += 1
            else:
                counts["promoted_blocks"] += len(out.keys_to_store)
            return out

        primary.prepare_read, primary.prepare_write = read, write

    manager_cls.__init__ = __init__


def _tiers(tiering) -> dict:
    """Each secondary tier's class, type and `stats()` (where it has one); nothing without
    tiering."""
    if tiering is None:
        return {}
    out = []
    for tier in list(tiering.secondary_tiers):
        one = {"class": type(tier).__name__, "tier_type": str(getattr(tier, "tier_type", ""))}
        try:
            one |= tier.stats() if hasattr(tier, "stats") else {}
        except Exception as exc:  # a counter read mid-update: said, not fatal
            one["stats_error"] = f"{type(exc).__name__}: {exc}"
        out.append(one)
    late = getattr(tiering, "hkv_late_stores", None)
    return {"secondary_tiers": out, "late_stores_guarded": late}


def _wrap(manager_cls, path: str) -> None:
    import json
    import threading
    import time

    init = manager_cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        counts = {"loaded_blocks": 0, "stored_blocks": 0, "evicted_blocks": 0}
        counts |= {"failed_stores": 0, "store_calls": 0}
        prepare_load, prepare_store = self.prepare_load, self.prepare_store

        def load(keys, *a, **k):
            counts["loaded_blocks"] += len(keys)
            return prepare_load(keys, *a, **k)

        def store(keys, *a, **k):
            out = prepare_store(keys, *a, **k)
            counts["store_calls"] += 1
            if out is None:
                counts["failed_stores"] += 1
            else:
                counts["stored_blocks"] += len(out.keys_to_store)
                counts["evicted_blocks"] += len(out.evicted_keys)
            return out

        self._hkv_serve_originals, self._hkv_serve_counts = (prepare_load, prepare_store), counts
        self.prepare_load, self.prepare_store = load, store

        def snapshot() -> dict:
            policy = self._policy
            inner = getattr(policy, "policy", None)  # hkv's adapter: the hkv policy in it
            hkv = sys.modules.get("hkv")
            return {
                "pid": os.getpid(),
                "time": time.time(),
                "policy_class": type(policy).__name__,
                "policy_module": type(policy).__module__,
                "hkv_file": getattr(hkv, "__file__", None),
                "cpu_blocks": getattr(self, "_num_blocks", None),
                "policy_switches": getattr(inner, "switches", 0),
                "hkv_hyperparameters": inner.hyperparameters() if inner is not None else None,
                **counts,
                **_tiers(getattr(self, "_hkv_serve_tiering", None)),
            }

        def write_forever() -> None:
            while True:
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w") as f:
                    json.dump(snapshot(), f)
                os.replace(tmp, path)
                time.sleep(0.5)

        threading.Thread(target=write_forever, name="hkv-serve-stats", daemon=True).start()

    manager_cls.__init__ = __init__


if os.environ.get("HKV_SERVE_STATS"):
    _install(os.environ["HKV_SERVE_STATS"])
