"""Storage: where KV blocks live and how they move between the GPU, pinned host RAM and disk.

- `layout`: `BlockLayout` (a block's shape and bytes) and `SlotPool` (free slots); torch-free
- `formats`: the cold formats (fp16/bf16/q8/q6/q4) and their bits per value; torch-free
- `disk`: `DiskTier`, checksummed slots in one locked file, read with pread; torch-free
- `tiers`: `GpuTier` and `HostTier` (pinned, pageable fallback), bounded slot pools (torch)
- `quant`: cold-format encode/decode and their measured error (torch)
- `transfer`: batched gather -> bulk copy -> scatter on side streams; CPU fallback (torch)
- `records`: a held block's record, access results, counters
- `table`: `BlockTable`, which blocks are held where, with their records; torch-free
- `mover`: `Mover`, the moves between tiers (room, demotion, loads, keep caps)
- `manager`: `HybridKVCacheManager`, admit / access / pin / demote over the table and mover

Nothing here is imported by `import hkv`: the torch-based modules load when imported.
"""
