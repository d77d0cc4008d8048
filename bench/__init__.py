"""hkv's benchmarks, one module (or package) each, run as `python -m bench.<name>`.

They measure; the logic they measure lives in `hkv` (the anchor workload in `hkv.sim.anchor`),
and every results file they write carries `hkv.report`'s provenance keys. Models only a
benchmark runs live in `bench.sim` (the two-tier model, the admission ceiling), outside the
installed package. Nothing here is imported by `hkv`.
"""
