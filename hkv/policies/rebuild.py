"""A switch's new leader replayed in C from the requests a sampled `auto` kept: at once
(`rebuilt_in_c`), or begun on the shadows' background thread and finished a request later
(`Rebuild`), so that the engine does not wait for the replay."""

from __future__ import annotations

from hkv.errors import HkvError
from hkv.policies import native as ext
from hkv.policies.base import EvictionPolicy
from hkv.policies.leader import LIVE_IN_C, NativeLeader
from hkv.policies.native import NO_BLOCKS, columns
from hkv.policies.shadow import handed_over, make_expert

HANDED_OVER = frozenset(
    {"arc", "cost_aware", "depth_lfu", "depth_lfu_static", "lip", "lru", "lru+st2", "s3fifo"}
)
"""The experts a switch rebuilds in C and hands to Python (`rebuilt_in_c`), faster than their
Python replay (`python -m bench.auto_rebuild`, data/results/auto_rebuild_cpu.json): every
native one but `predictive`, which a sampled tier never shadows (`lru` and `s3fifo` since the C
map's slots hold their key, bfd8e41). A full tier's switch hands over every C shadow (`copied`)."""


class Rebuild:
    """Expert `label` storing requests in a C tier of its own, as `VllmTier(expert,
    refuses=False)` would (`rebuilt_in_c` says what a request may be): `begin` reads the
    requests and leaves their replay to the shadows' background thread (in the caller, at once,
    where the shadows run no thread: `HKV_SHADOW_THREAD=0`); `finished` stores more requests after
    them and gives the policy. The same decisions either way, and as `rebuilt_in_c`'s."""

    def __init__(self, label: str, capacity_blocks: int, context: dict, *, worths=None,
                 live=False, registers=True, value=None) -> None:  # fmt: skip
        self.label, self.capacity = label, capacity_blocks
        self.live = live and label in LIVE_IN_C
        self.registers = registers or not self.live  # a NativeLeader held to a dict needs none
        self.context = context
        self.native = ext.shadows([label], capacity_blocks)
        if value is None and label == "cost_aware":  # (its value reads the model's config)
            value = make_expert(label, 1, **context).value
        self.value = value if label == "cost_aware" else None
        self.worths = {} if worths is None else worths  # cost_aware's values by shape

    def _kept(self, requests) -> list:
        out = []
        for request in requests:
            if not isinstance(request, tuple):
                request = columns(request), NO_BLOCKS
            out.append(request)
        return out

    def begin(self, requests) -> Rebuild:
        self.native.replay_batch(self._kept(requests), self.registers, self.value, self.worths,
                                 None)  # fmt: skip
        return self

    def wait(self) -> None:
        """Until the replay begun is done (`finished` waits for it too)."""
        self.native.sizes()  # (every call on the shadows waits for their thread first)

    def finished(self, more=(), held=None) -> EvictionPolicy:
        """The policy, once `more` requests are stored after those begun; `held` as in
        `rebuilt_in_c` (a dict where the rebuild kept no keys)."""
        native = self.native
        if not self.registers and not isinstance(held, dict):
            raise HkvError("Rebuild.finished: a live leader rebuilt without its keys needs "
                           "the held keys as a dict: pass held={key: meta, ...}, the blocks the "
                           "tier holds")  # fmt: skip
        for misses, found in self._kept(more):
            native.replay_request(misses, found, None, self.registers, self.value, self.worths,
                                  None)  # fmt: skip
        keys, metas = native.registry() if self.registers else (None, None)
        if self.live:
            return NativeLeader(self.label, self.capacity, ext.leader(native, keys, held),
                                self.value, self.worths, native)  # fmt: skip
        policy = make_expert(self.label, self.capacity, **self.context)
        handed_over(policy, native, 0, keys, metas, held=held)
        return policy


def rebuilt_in_c(label: str, capacity_blocks: int, requests, context: dict, *, worths=None,
                 held=None, live=False, background=False, value=None):  # fmt: skip
    """Expert `label` after storing `requests` in a tier of its own, as `VllmTier(expert,
    refuses=False)` would leave it, replayed in C and handed to its Python policy; None where
    the extension is not built or the expert is not one of `HANDED_OVER`. Each request is its
    `(key, meta)` pairs in prefix order (a list), or its misses and the hits found (a tuple of
    two `(keys, metas)`, as `History.kept` gives them), merged as `merged` does, in C.
    `worths`, `value`: a memo of cost_aware's values by shape to share, and its `value` (a
    `ShadowSet`'s: made once, it reads the model's config); `held`: the
    keys the tier holds, where only those may stay resident (the prefix-value experts' other
    entries are not made, as if made and removed); `live`: one of `leader.LIVE_IN_C` stays in C,
    as a `leader.NativeLeader` (the same decisions). `background`: the `Rebuild` begun, its
    replay on the shadows' background thread, for the caller to finish (`held`, a dict, then)."""
    if label not in ext.LABELS or label not in HANDED_OVER:
        return None
    registers = not (live and (background or isinstance(held, dict)))
    rebuild = Rebuild(label, capacity_blocks, context, worths=worths, live=live,
                      registers=registers, value=value).begin(requests)  # fmt: skip
    return rebuild if background else rebuild.finished((), held)
