"""hkv inside a running `vllm serve`, driven over HTTP by a multi-turn client, per policy.

What a user does: hkv installed as a package (`pip install --no-deps --target DIR .`, DIR on the
server's `PYTHONPATH`: vLLM finds hkv's policies through its `vllm.general_plugins` entry
point, not through this repository), then `vllm serve` with the OffloadingConnector naming the
policy, then an OpenAI-compatible client. Here the server is the rig's vLLM 0.26 on one H200
serving the 8-layer MiniMax-M2.5-dims config with dummy weights; the client replays the anchor
sessions (`hkv.sim.anchor`, the same token streams and waves as `bench.vllm_gpu`), each wave's
requests concurrently, streamed, with the multimodal variant's image spans in
`kv_transfer_params` (`hkv_modalities`).

    python -m bench.vllm_serve run --policy lru,arc,hkv_auto,hkv_modality_aware --cpu-gib 8 \\
        --variant mm --out out/vllm_serve/serve.json      # on the GPU machine (rig sourced)
    python -m bench.vllm_serve fold out/vllm_serve/serve.json \\
        --out data/results/vllm_serve_h200.json

With hkv's disk tier behind the CPU tier (`bench/vllm_serve/disk.py`: the server's
`--kv-transfer-config` is what `hkv flags --disk-size G --disk-dir D` prints), on the long-context
sessions, then again on the directory the first server left:

    python -m bench.vllm_serve run --policy lru --cpu-gib 8 --variant long --disk-gib 32 \\
        --disk-dir /tmp/hkv_serve_disk --out out/vllm_serve/disk.json
    python -m bench.vllm_serve run --policy lru --cpu-gib 8 --variant long --disk-gib 32 \\
        --disk-dir /tmp/hkv_serve_disk --keep-dir --out out/vllm_serve/disk_restart.json

One server per policy (the policy is fixed at start). Per policy: time to start, TTFT p50 / p90
/ p99 (first streamed token), cached share of prompt tokens (`usage.prompt_tokens_details.
cached_tokens`: GPU prefix hits plus CPU-tier hits, as vLLM's `num_cached_tokens` offline),
throughput, and, counted inside the engine process by `hook/sitecustomize.py`, blocks loaded,
stored and evicted and failed stores, plus which class served the policy and where hkv was
imported from. After the workload, malformed `hkv_modalities` are sent beside a well-formed
request: every answer's status, the server's health afterwards and hkv's warnings in its log are
recorded.
"""

from pathlib import Path

HOOK = Path(__file__).resolve().parent / "hook"
"""Folder with the engine-side counters' `sitecustomize.py` (on the server's `PYTHONPATH`)."""
