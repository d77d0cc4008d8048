"""hkv inside transformers' `model.generate` (imports torch and transformers).

- `cache`: `HkvCache` (a `Cache` whose layers keep KV in hkv blocks) and `HkvSessionStore`
- `kv_layer`: `HkvLayer`, one layer's KV as blocks plus a tail
- `kv_blocks`: their block store: settings, streaming slots, next-layer prefetch
- `graphs`: `StaticBlockGraphs`, CUDA graphs of the feed-forward blocks for short forwards
"""

from hkv.integrations.transformers.cache import HkvCache, HkvSessionStore
from hkv.integrations.transformers.graphs import StaticBlockGraphs
from hkv.integrations.transformers.kv_blocks import HkvCacheSettings

__all__ = ["HkvCache", "HkvCacheSettings", "HkvSessionStore", "StaticBlockGraphs"]
