"""A streaming OpenAI-completions client on the standard library, and the anchor's waves."""

from __future__ import annotations

import http.client
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hkv.sim.anchor import TOKEN_HIGH, Workload


def complete(port: int, body: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
    """One streamed `/v1/completions`: status, TTFT (first streamed token), end-to-end time,
    prompt and cached tokens from the final usage chunk; `error` with the body on a non-200."""
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    start = time.perf_counter()
    row: dict[str, Any] = {"status": None, "ttft_s": None, "cached_tokens": None}
    try:
        conn.request(
            "POST", "/v1/completions", json.dumps(payload), {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        row["status"] = response.status
        if response.status != 200:
            row["error"] = response.read().decode(errors="replace")[:500]
            return row
        for raw in response:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("choices") and row["ttft_s"] is None:
                row["ttft_s"] = time.perf_counter() - start
            if usage := chunk.get("usage"):
                row["prompt_tokens"] = usage.get("prompt_tokens")
                row["completion_tokens"] = usage.get("completion_tokens")
                details = usage.get("prompt_tokens_details") or {}
                row["cached_tokens"] = details.get("cached_tokens")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
        row["e2e_s"] = time.perf_counter() - start
    return row


def body(model: str, tokens: list[int], max_tokens: int, transfer: dict | None) -> dict:
    out = {"model": model, "prompt": tokens, "max_tokens": max_tokens, "temperature": 0.0}
    out["ignore_eos"] = True
    if transfer:
        out["kv_transfer_params"] = transfer
    return out


def concurrently(port: int, bodies: list[dict]) -> list[dict]:
    """The requests at once, one thread each; their rows in order."""
    with ThreadPoolExecutor(max_workers=max(len(bodies), 1)) as pool:
        return list(pool.map(lambda b: complete(port, b), bodies))


def warm_up(port: int, model: str, w: Workload) -> list[dict]:
    """The offline bench's warm-up (`bench.vllm_gpu.engine.warm_up`) over HTTP: token ids the
    workload never uses, 3k / 9k / 17k tokens one at a time, then four at once."""
    rng = random.Random(12345)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(TOKEN_HIGH, 199000) for _ in range(n)]

    rows = [complete(port, body(model, prompt(n), w.max_tokens, None)) for n in (3000, 9000, 17000)]
    rows += concurrently(
        port, [body(model, prompt(2000 + 37 * i), w.max_tokens, None) for i in range(4)]
    )
    return rows


def run_waves(port: int, model: str, w: Workload, sessions, waves) -> tuple[list[dict], float]:
    """Every wave's requests concurrently, waves one after another (as `LLM.generate` of one
    wave offline); rows in submission order and the wall time."""
    rows = []
    start = time.perf_counter()
    for wave_index, wave in enumerate(waves):
        bodies = []
        for session, turn in wave:
            length = sessions[session].prompt_lens[turn]
            spans = [[a, min(b, length), m] for a, b, m in sessions[session].spans if a < length]
            transfer = {"hkv_modalities": spans} if spans else None
            bodies.append(body(model, sessions[session].tokens[:length], w.max_tokens, transfer))
        for (session, turn), row in zip(wave, concurrently(port, bodies), strict=True):
            rows.append(
                {
                    "wave": wave_index,
                    "session": session,
                    "turn": turn,
                    "prompt_len": sessions[session].prompt_lens[turn],
                    **row,
                }
            )
    return rows, time.perf_counter() - start


MALFORMED_SPANS = {
    "not a list": {"start": 0},
    "wrong types": [["0", 64, "vision"]],
    "past the prompt": [[0, 10**9, "vision"]],
    "unknown modality": [[0, 64, "smell"]],
    "start after end": [[64, 16, "audio"]],
}
"""`hkv_modalities` values a careless client might send (the bad-input probe)."""


def probe_bad_input(port: int, model: str, w: Workload) -> dict[str, Any]:
    """Malformed `hkv_modalities` sent at once beside a well-formed request, then the health."""
    rng = random.Random(777)
    bodies, names = [], [*MALFORMED_SPANS, "well-formed"]
    for spans in [*MALFORMED_SPANS.values(), [[0, 256, "vision"]]]:
        tokens = [rng.randrange(TOKEN_HIGH, 199000) for _ in range(2048)]
        bodies.append(body(model, tokens, w.max_tokens, {"hkv_modalities": spans}))
    rows = concurrently(port, bodies)
    out = {
        name: {k: row.get(k) for k in ("status", "error", "ttft_s")}
        for name, row in zip(names, rows, strict=True)
    }
    return {"requests": out, "healthy_after": health(port)}


def call(port: int, method: str, path: str, timeout: float = 60.0) -> tuple[int | None, str]:
    """One request without a body: the status (None when the server did not answer) and the
    body (or the connection's error)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            conn.close()
    except OSError as exc:
        return None, str(exc)


def health(port: int) -> bool:
    return call(port, "GET", "/health", timeout=5)[0] == 200


def reset_caches(port: int, attempts: int = 10) -> dict:
    """Empty the GPU prefix cache and the CPU tier (vLLM's dev endpoint; `reset_external` is
    the connector's tier) and with it the policy's state; retried while transfers still hold
    blocks (vLLM then answers `success: false`)."""
    # `reset_external` names the connector's tier in vLLM's router; `reset_connector` is
    # the offline API's name for it, sent too in case a release's router takes that one
    path = "/reset_prefix_cache?reset_running_requests=true&reset_external=true"
    path += "&reset_connector=true"
    for attempt in range(1, attempts + 1):
        status, text = call(port, "POST", path)
        text = text[:200]
        if status == 200 and '"success":true' in text.replace(" ", ""):
            return {"status": status, "success": True, "attempts": attempt}
        time.sleep(1.0)
    return {"status": status, "success": False, "attempts": attempts, "body": text}


def metrics(port: int) -> dict[str, float]:
    """vLLM's Prometheus counters about offloading and prefix caching, summed over labels."""
    status, text = call(port, "GET", "/metrics", timeout=10)
    if status != 200:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not any(w in line for w in ("offload", "prefix_cache")):
            continue
        name, _, value = line.rpartition(" ")
        name = name.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out
