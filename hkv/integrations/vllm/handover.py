"""How the adapter hands the chunks vLLM inserted over to the hkv policy (`HkvCachePolicy.sync`).

Each chunk goes in with its meta (noted at its store miss, else worked out from the key) unless
the policy declined it, when it is set aside (`bypassed`) and evicted first. A policy that
reads no metadata and admits everything takes the whole run in one `insert_all`; one that
admits everything now (`auto` led by such an expert) in one `insert_each`; any other is asked
and told key by key, in order, as its decisions may depend on the inserts before.
"""

from __future__ import annotations

from itertools import compress
from typing import Any


def hand_over(adapter: Any, keys: list[Any], req_context) -> None:
    """Insert `keys` (new chunks, in order) into `adapter.policy`, or set them aside."""
    shared, policy = adapter.shared_meta, adapter.policy
    adapter.settle()
    if shared is not None and adapter.admits_all:
        policy.insert_all(keys, shared)
        return
    admits_all = adapter.admits_all
    bulk = not admits_all and policy.admits_now  # then one `insert_each`: no call between
    if bulk and shared is None and req_context is None:
        hand_over_noted(adapter, keys)
        return
    pending, decided, insert = adapter.pending_meta, adapter.decided, policy.insert
    taken, metas = [], []
    for key in keys:
        meta = shared
        if meta is None:
            meta = pending.pop(key, None)
            if meta is None or req_context is not None:
                meta = adapter.meta(key, req_context)
        admitted = admits_all or decided.pop(key, None)
        if admitted is None:
            admitted = bulk or policy.admit(key, meta)
        if not admitted:
            adapter.bypassed[key] = None
        elif bulk:
            taken.append(key)
            metas.append(meta)
        else:
            insert(key, meta)
    if taken:
        policy.insert_each(taken, metas)


def hand_over_noted(adapter: Any, keys: list[Any]) -> None:
    """`hand_over` where the policy admits every block now and reads each one's noted meta
    (vLLM 0.26 to 0.32, no context at insert): the same pops, metas, set-asides and one
    `insert_each`, in the containers' own loops rather than one Python step a key."""
    absent = (None,) * len(keys)
    metas = list(map(adapter.pending_meta.pop, keys, absent))
    verdicts = list(map(adapter.decided.pop, keys, absent)) if adapter.decided else absent
    if not all(metas):  # not noted: worked out from the key alone (a meta is never falsy)
        metas = [m or adapter.meta(k, None) for k, m in zip(keys, metas, strict=True)]
    if False in verdicts:  # asked at the miss, and the policy said no (`admit` gives bools)
        declined = [v is False for v in verdicts]
        adapter.bypassed.update(dict.fromkeys(compress(keys, declined)))
        kept = [not d for d in declined]
        keys, metas = list(compress(keys, kept)), list(compress(metas, kept))
    if keys:
        adapter.policy.insert_each(keys, metas)
