# The article's `--hybrid-kv-cache-config custom_hybrid_config.py`, in the article's own form.
# `from vllm import HybridKVCacheConfig` fails in every vLLM release; hkv answers that one import
# with its own class while it reads this file, so the file works unchanged:
#     hkv flags -- --hybrid-kv-cache-config data/configs/custom_hybrid_config.py ...
from vllm import HybridKVCacheConfig

config = HybridKVCacheConfig(
    offload_strategy="modality_aware",
    modality_configs={
        "vision": {"offload_priority": 0.8, "quantization": "q6", "max_keep_blocks": 512},
        "text": {"offload_priority": 0.3, "quantization": "q8", "max_keep_blocks": 2048},
        "audio": {"offload_priority": 0.6, "quantization": "fp16", "max_keep_blocks": 256},
    },
    cost_model_params={
        "transfer_cost_gpu_to_cpu": 0.15,
        "transfer_cost_cpu_to_gpu": 0.12,
        "computation_cost_per_block": 0.5,
    },
)
