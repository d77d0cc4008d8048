"""End to end in transformers: `HkvCache` against `DynamicCache` on one GPU.

    python -m bench.e2e --out data/results/e2e_h200.json      # on an H200 host
    python -m bench.e2e --quick --out /tmp/e2e_cpu.json       # CPU-sized smoke run

Model: MiniMax-M2.5's architecture with its attention dimensions (hidden 3072, 48 query heads,
8 KV heads, head_dim 128, partial RoPE, qk-norm) and its per-token expert compute (8 experts
active per token, intermediate 1536), but `--layers` layers (default 8) and 16 routed experts
instead of 256 (memory), random bf16 weights. KV per token per layer is the real model's
(4 KiB), and so is the compute per token per layer, so per-layer ratios of transfer to compute
are the real ones; a 62-layer model moves and computes 62/layers times more per token.

1. `decode`, one long sequence: prefill `context` random tokens, then time `--decode-steps`
   greedy steps. DynamicCache, then HkvCache with 100/50/32/10 % of the KV blocks hot (lossless
   cold blocks in pinned host RAM, LRU, 1 sink + 2 recent blocks pinned per layer, the next
   layer's cold blocks prefetched while a layer computes). Every step attends over the whole
   context, so every cold block crosses the host link once per token: the PCIe-bound case.
2. `sessions`, many conversations: `count` sessions of `context` tokens each, served turn by
   turn (batch 1, sessions in a fixed order, `rounds` rounds); a turn sends `turn_tokens` new
   tokens and decodes `decode_tokens`. DynamicCache keeps every session's KV on the GPU, and so
   does StaticCache (one preallocated cache per session, the fair baseline); hkv's
   `HkvSessionStore` keeps a GPU pool of a fraction of all sessions' KV: a finished session's
   blocks stay in it until their slots are wanted, the next session is prefetched on the copy
   streams (demoting the sessions that finished longest ago to host RAM) while the current one
   decodes. `sessions_lockstep` runs DynamicCache, StaticCache and hkv at each hot fraction
   side by side, turn by turn, rotating which goes first, `--repeats` times with fresh caches:
   each hkv row gives the median and spread over repeats of its time against each baseline and
   against the faster of the two in the same repeat, the resident KV saved (after the setup)
   and the peak (resident plus the most one turn took). `sessions` (each cache alone, paired
   with a DynamicCache run just before it) is kept for its nvitop memory view.
   `sessions_lockstep_graphed` is the same with the model's feed-forward blocks replayed from
   CUDA graphs for every cache (`hkv.integrations.transformers.StaticBlockGraphs`, at one token
   and at `turn_tokens`): the eager model's launches no longer set the pace of a step.
3. `multi_turn_ttft`: turn 1 prefills a `prefix`-token prompt and ends (`finish_turn` parks the
   KV); turn 2 adds `--turn-tokens` new tokens. `restore_ttft_s`: from host RAM; `restore_disk_
   ttft_s`: from the disk tier (host arena of a few blocks, the file's page cache dropped
   first); `recompute_ttft_s`: a fresh DynamicCache prefills prefix + new tokens. Median of
   `--repeats` after one untimed round; the cost model's estimate for real MiniMax-M2.5 beside.
   On a GPU each repeat also times restore from host, recompute and the resident floor with
   the feed-forward blocks graphed at `--turn-tokens` (`graphed`): the eager 64-token forward
   over a resident 8K prefix is bound by the host launching kernels, not by the GPU.

Memory is measured, never computed, over each case's start (weights loaded, earlier cases
collected, PyTorch's cache emptied): the allocator's view (`torch.cuda.memory_allocated` when
the KV is in place, `max_memory_allocated` during the timed phase) and the driver's view
(nvitop's device memory used, with PyTorch's cache; its peak sampled every 5 ms on a thread).
`kv_resident_*`: what the KV holds between steps (DynamicCache: all of it; hkv: the GPU pool
and the tails); `kv_peak_*`: the most the timed phase needed (plus activations, assembled
layers, the dynamic cache's concatenation copies).

Modules: `model` (the model, its inputs, `Memory`), `decode` (1 and the profile), `sessions`
(2), `ttft` (3), `__main__` (the CLI and the results file).

`--profile CONTEXT` prints torch.profiler tables of a few decode steps (DynamicCache and an
all-hot HkvCache) instead of running the benchmark.
"""
