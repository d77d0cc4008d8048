"""Start and stop one `vllm serve` process (the policy is fixed at start)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.vllm_serve import HOOK
from bench.vllm_serve.client import health
from bench.vllm_serve.disk import max_model_len, transfer_json
from hkv.planning.flags import Translation

MODEL_NAME = "minimax-m2.5-8l"


def serve_command(args, policy: str, port: int, flags: Translation | None = None) -> list[str]:
    """`vllm serve` as its console script runs it, with the offline bench's engine settings;
    with `flags` (`disk.tier_flags`: a disk tier), the `--kv-transfer-config` `hkv flags` gives."""
    if flags is None:
        extra = {"cpu_bytes_to_use": int(args.cpu_gib * (1 << 30)), "eviction_policy": policy}
        transfer = json.dumps(
            {
                "kv_connector": "OffloadingConnector",
                "kv_role": "kv_both",
                "kv_connector_extra_config": extra,
            }
        )
    else:
        transfer = transfer_json(flags)
    return [
        *(sys.executable, "-c", "from vllm.entrypoints.cli.main import main; main()", "serve"),
        str(args.model),
        *("--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port)),
        *("--load-format", "dummy", "--skip-tokenizer-init", "--enforce-eager"),
        *("--kv-cache-memory-bytes", str(int(args.gpu_kv_gib * (1 << 30)))),
        *("--max-model-len", str(max_model_len(args.variant))),
        *("--max-num-batched-tokens", "8192", "--max-num-seqs", "16"),
        *("--enable-prefix-caching", "--seed", "0", "--enable-prompt-tokens-details"),
        "--disable-uvicorn-access-log",
        *("--kv-transfer-config", transfer),
    ]


def server_env(args, stats: Path, flags: Translation | None = None) -> dict[str, str]:
    """The environment: hkv from the installed package folder `--hkv-package` (not this
    repository), the engine-side counters, the rig's own `PYTHONPATH` after them; with `flags`,
    the environment `hkv flags` puts before `vllm serve` (`PYTHONHASHSEED=0`)."""
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    here = {str(Path.cwd()), ".", ""}
    rest = [p for p in rest if p not in here]  # the repository's hkv must not be the one found
    paths = [str(HOOK), str(Path(args.hkv_package).resolve()), *rest]
    return (
        os.environ
        | {
            "PYTHONPATH": os.pathsep.join(paths),
            "HKV_SERVE_STATS": str(stats),
            "HKV_BLOCK_TOKENS": "16",
            "VLLM_SERVER_DEV_MODE": "1",  # /reset_prefix_cache, to empty both tiers after warm-up
        }
        | (flags.env if flags is not None else {})
    )


class Server:
    """`vllm serve` in its own process group, output to `log`."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.started = time.perf_counter()
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd="/tmp",
                start_new_session=True,
            )

    def wait_ready(self, port: int, timeout: float) -> float:
        """Seconds until `/health` answers 200; raises if the process dies or time runs out."""
        while time.perf_counter() - self.started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({self.proc.returncode}); see {self.log}")
            if health(port):
                return time.perf_counter() - self.started
            time.sleep(1.0)
        raise RuntimeError(f"vllm serve not ready after {timeout:.0f} s; see {self.log}")

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGINT to the group, then SIGKILL after `grace` seconds; the exit status."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        with contextlib.suppress(ProcessLookupError):  # engine children left in the group
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode
