"""How the adapter hands the chunks vLLM inserted over to the hkv policy (`HkvCachePolicy.sync`).

Each chunk goes in with its meta (noted at its store miss, else worked out from the key) unless
the policy declined it, when it is set aside (`bypassed`) and evicted first. A policy that
reads no metadata and admits everything takes the whole run in one `insert_all`. Where vLLM
passes no request at insert (0.26 to 0.32), every other policy whose verdicts are all known
(asked at the store miss, or admitted by a policy that admits everything, now or always) takes
the run in one `insert_each`; where one is not, and the policy's answer may depend on the
inserts before it, it is asked and told key by key, in order.
"""

from __future__ import annotations

from itertools import compress
from typing import Any


def hand_over(adapter: Any, keys: list[Any], req_context) -> None:
    """Insert `keys` (new chunks, in order) into `adapter.policy`, or set them aside."""
    shared, policy = adapter.shared_meta, adapter.policy
    adapter.settle()
    if shared is not None and adapter.admits_all:
        _aside(adapter, policy.insert_all(keys, shared))
        return
    if shared is None and req_context is None:
        hand_over_noted(adapter, keys)
        return
    admits_all = adapter.admits_all
    bulk = not admits_all and policy.admits_now  # then one `insert_each`: no call between
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
        elif insert(key, meta):
            adapter.bypassed[key] = None  # refused (`_aside`)
    if taken:
        _aside(adapter, policy.insert_each(taken, metas))


def hand_over_noted(adapter: Any, keys: list[Any]) -> None:
    """`hand_over` without a request (vLLM 0.26 to 0.32): each key's meta is the one noted at
    its miss (else worked out from the key) and its verdict the one kept then (`decided`); the
    same pops, metas, set-asides and inserts, in the containers' own loops and one
    `insert_each`, where every verdict is known; otherwise key by key."""
    absent = (None,) * len(keys)
    policy = adapter.policy
    metas = list(map(adapter.pending_meta.pop, keys, absent))
    if not all(metas):  # not noted: worked out from the key alone (a meta is never falsy)
        metas = [m or adapter.meta(k, None) for k, m in zip(keys, metas, strict=True)]
    verdicts = absent
    if adapter.decided and not adapter.admits_all:
        verdicts = list(map(adapter.decided.pop, keys, absent))
    if not adapter.admits_all and not policy.admits_now and None in verdicts:
        _one_by_one(adapter, keys, metas, verdicts)  # asked now, after the inserts before
        return
    if False in verdicts:  # asked at the miss, and the policy said no (`admit` gives bools)
        declined = [v is False for v in verdicts]
        adapter.bypassed.update(dict.fromkeys(compress(keys, declined)))
        kept = [not d for d in declined]
        keys, metas = list(compress(keys, kept)), list(compress(metas, kept))
    if keys:
        _aside(adapter, policy.insert_each(keys, metas))


def _one_by_one(adapter: Any, keys: list, metas: list, verdicts) -> None:
    """Each key inserted or set aside in turn, the policy asked where no verdict was kept."""
    policy = adapter.policy
    for key, meta, admitted in zip(keys, metas, verdicts, strict=True):
        if admitted is None:
            admitted = policy.admit(key, meta)
        if not admitted or policy.insert(key, meta):
            adapter.bypassed[key] = None


def _aside(adapter: Any, refused: Any) -> None:
    """Keys the policy refused at insert, set aside and evicted first: hkv's `lru` run from C
    (`NativeLeader`) refuses a key whose 64-bit id another resident key holds (two keys alike in
    their first 8 bytes, after the group's mix); a Python policy refuses none (None)."""
    if refused:
        adapter.bypassed.update(dict.fromkeys(refused))
