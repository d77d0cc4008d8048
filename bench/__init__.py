"""hkv's benchmarks, one module (or package) each, run as `python -m bench.<name>`.

They measure; the logic they measure lives in `hkv` (the anchor workload in `hkv.sim.anchor`,
the two-tier model in `hkv.sim.two_tier`), and every results file they write carries
`hkv.report`'s provenance keys. Nothing here is imported by `hkv`.
"""
