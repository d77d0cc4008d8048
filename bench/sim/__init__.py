"""Models only a benchmark runs, kept out of the installed package.

- `two_tier`: the anchor's requests through a GPU prefix cache over a CPU tier, the prediction
  `python -m bench.vllm_gpu_sim` compares with the H200 engine (`bench.auto_candidates` too);
- `ceiling`: `lru` behind an admission oracle, what a perfect reuse predictor could buy
  (`python -m bench.admission_ceiling`).
"""
