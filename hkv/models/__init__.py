"""What a model is, as far as its KV cache goes: read from its Hugging Face `config.json`.

- `layers`: layer kinds (full attention, sliding window, MLA, linear) and layer groups
- `hf_config`: the config's fields, read with errors that name them
- `model_spec`: `ModelSpec`: layer groups, KV bytes per token, parameter counts; `ModelSpec.load`
  takes a path or the name of a shipped config (a folder here: minimax-m2.5, gpt-oss-120b,
  deepseek-v3; see README.md)

A base type: the cost model, planning, the reports and the integrations read it; it imports only
the standard library and `hkv.errors` / `hkv.inputs`.
"""

from hkv.models.layers import LayerGroup, LayerKind
from hkv.models.model_spec import ModelSpec, shipped_models

__all__ = ["LayerGroup", "LayerKind", "ModelSpec", "shipped_models"]
