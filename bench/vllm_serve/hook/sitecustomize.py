"""Counters inside a `vllm serve` engine process, for `bench.vllm_serve` (never imported by hkv).

Put on `PYTHONPATH` of the server with `HKV_SERVE_STATS=<file>`: when vLLM's
`vllm.v1.kv_offload.cpu.manager` is imported, its `CPUOffloadingManager` is wrapped so that each
manager counts blocks loaded, stored and evicted and refused stores (`prepare_store` returned
None), and a daemon thread rewrites `<file>` (atomically, twice a second) with them and with
what served the policy: its class, module, hyperparameters and the file hkv was imported from.
Standard library only; without `HKV_SERVE_STATS` it does nothing. The counting is
`bench.vllm_gpu.timers.ManagerCounter`'s, written again here: the repository is kept off the
server's path (hkv must come from its installed copy) and the project loads no code by file path.
"""

import os
import sys

_TARGET = "vllm.v1.kv_offload.cpu.manager"


def _install(path: str) -> None:
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, import_path, target=None):
            if name != _TARGET:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            exec_module = spec.loader.exec_module

            def patched(module):
                exec_module(module)
                _wrap(module.CPUOffloadingManager, path)

            spec.loader.exec_module = patched
            return spec

    sys.meta_path.insert(0, Finder())


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
