"""`HkvCachePolicy`: a vLLM `CachePolicy` that delegates every decision to an hkv policy.

What the adapter adds to the policy (the package docstring says how vLLM finds it):
- Chunks being written (`ref_cnt == -1`) or read (`ref_cnt > 0`) are never offered for eviction:
  the adapter keeps them in a set (`busy`), filled at `insert` and by vLLM's `mark_non_evictable`
  and emptied by `mark_evictable` (both hooks exist in 0.26 and 0.32+; they are the set's own
  methods, so vLLM calls no Python code for them), and `evict` hands the policy `busy` plus
  vLLM's `protected` as one set: skipping a busy chunk is a set lookup, not a Python call.
- Inserts in batches: vLLM calls `insert` for every chunk it stores; without a request context
  (0.26 to 0.32) it is the chunk dictionary's own `__setitem__`, and the policy is told of the
  new chunks in one `insert_all` at its next decision (`sync`), in the same order and between
  the same decisions as one by one, so its decisions are unchanged. vLLM 0.33 passes the
  storing request to `insert`: the adapter's own `insert` then hands each chunk over at once,
  with the position and modality the request gives it.
- Admission control: vLLM has already allocated a chunk when it calls `insert`, so a block the
  policy declines is still stored, but outside the policy, and is the first to be evicted. A
  policy that admits everything for now (`auto`, as its leader does) is asked nothing.
- Block metadata (`request`): the position from vLLM's per-request key positions, the modality
  from the request's `kv_transfer_params`, the token count from the config.
- One access per request: 0.32+ reports it when the request finishes (`on_request_finished`);
  0.26 touches a request's whole prompt at lookup and after every store, so there the first
  touch counts and later ones only note metadata (`compat026`). The request's resident blocks
  are touched tail first and, in 0.32+, the ones it stored re-ranked tail first
  (`EvictionPolicy.after_request`), as vLLM's own lru and arc re-rank a request's keys: a prefix
  cache serves a block only when every block before it is served, so the head of a chain is then
  the most recent and the policy gives up chains from the tail. hkv's replay
  (`store="per_request"`) makes the same call, which is what lets the simulator predict the
  adapter inside vLLM.
- A running request's blocks (vLLM 0.33, which passes the request and its key positions to
  `insert` and `on_request_access`) go deepest first, at the rank of the request's oldest
  block, as 0.33's lru ranks them: a prefix still being stored keeps its head (`chains`; for
  the policies that rank chains, `EvictionPolicy.evict_chains`). The resident blocks a running
  request reuses join its chain and are re-ranked when it first shows them, not referenced:
  hkv still counts one access per request, at its end, as its simulator does.
- Hyperparameters: `hkv_policy_params` in the connector's extra config (`settings`).
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from functools import cache
from itertools import compress, filterfalse, groupby, islice
from operator import attrgetter
from typing import Any

from vllm.v1.kv_offload.cpu.policies.base import CachePolicy

from hkv.blocks import BlockMeta, Tier
from hkv.errors import HkvError
from hkv.integrations.vllm.chains import Chains
from hkv.integrations.vllm.compat026 import touch_request
from hkv.integrations.vllm.handover import hand_over
from hkv.integrations.vllm.request import block_meta, block_metas, in_prefix_order
from hkv.integrations.vllm.settings import adapter_settings
from hkv.policies import make_policy, online_policy_class, policy_names
from hkv.policies.leader import vllms_lru
from hkv.policies.native import prefix_split, split_stored

PREFIX = "hkv_"
PACKAGE = "hkv.integrations.vllm"  # where vLLM looks the classes up (`cache_policy_module_path`)
DEFAULT_BLOCK_TOKENS = 16


class HkvCachePolicy(CachePolicy):
    """A vLLM `CachePolicy` that delegates every decision to an hkv `EvictionPolicy`.

    Subclasses set `hkv_policy` (a registered name); `hkv_<name>` classes are made on demand.
    Works with the `insert(key, status)` of vLLM 0.26-0.32 and with a `req_context` argument,
    with 0.32+'s access hooks (`on_store_miss`, `on_request_finished`) and with 0.26's
    whole-request `touch` (`compat026.touch_request`), which stands in for them there.
    """

    hkv_policy: str = "lru"

    def __init__(self, cache_capacity: int, **settings: Any):
        super().__init__(cache_capacity)
        self.cache_capacity = cache_capacity  # vLLM 0.26's base __init__ does not keep it
        self.settings = adapter_settings() | settings
        self.block_tokens = int(self.settings.get("block_tokens", DEFAULT_BLOCK_TOKENS))
        self.chunks: dict[Any, Any] = {}
        self.busy: set[Any] = set()  # chunks being written or read: never eviction candidates
        # vLLM calls these for every block of every request: they are the containers' own
        # methods (a third of the cost of a Python method around them); neither is rebound.
        self.get = self.chunks.get
        self.mark_evictable = self.busy.discard  # ref_cnt became 0: a store or the loads ended
        self.mark_non_evictable = self.busy.add  # ref_cnt left 0: a load began
        self.synced = 0  # chunks the policy has been told of (`sync`): the first `synced`
        if _insert_takes_no_context():
            self.insert = self.chunks.__setitem__  # the policy learns of it at `sync`
        self.bypassed: OrderedDict[Any, None] = OrderedDict()
        self.pending_meta: dict[Any, BlockMeta] = {}
        self.decided: dict[Any, bool] = {}  # admission asked at the store miss, by key
        self.unrecorded = False  # noted keys admitted with no verdict in `decided` (`settle`)
        self.text_metas: list[BlockMeta] = []  # shared per-position text metas
        self.span_metas: dict[Any, list[BlockMeta]] = {}  # and marked blocks', by modality
        self.touched_requests: OrderedDict[str, int] = OrderedDict()  # vLLM 0.26: keys seen
        self.policy = vllms_lru(  # hkv's lru from C where built: nothing is pinned here
            make_policy(
                self.hkv_policy,
                cache_capacity,
                cost_model=self.settings.get("cost_model"),
                config=self.settings.get("config"),
                **self.settings.get("policy_params", {}),
            )
        )
        self.admits_all = self.policy.admits_everything  # then no `admit` call per insert
        self.ranks_chains = self.policy.ranks_chains
        self.chains = Chains(self.busy)  # running requests' blocks (vLLM 0.33: `chains`)
        # A policy that reads no metadata gets one shared meta: no position or modality is
        # worked out for its blocks, at lookup or at insert.
        self.shared_meta = (
            None if self.policy.reads_meta else BlockMeta(self.block_tokens, tier=Tier.HOST)
        )

    # -- what vLLM calls ------------------------------------------------------------------------
    def get(self, key):
        """vLLM's abstract `get`; each instance binds the chunk dict's own `get` over it in
        `__init__` (vLLM calls it for every block of every lookup)."""
        return self.chunks.get(key)

    def insert(self, key, chunk, req_context=None) -> None:
        """vLLM with `req_context` at insert: hand the chunk over at once. Without it (0.26 to
        0.32), `insert` is the chunk dictionary's own `__setitem__` (see `sync`)."""
        self.sync()
        self.chunks[key] = chunk
        self.synced += 1
        if chunk.ref_cnt:  # -1: vLLM inserts a chunk before writing it
            self.busy.add(key)
        self._hand_over([key], req_context)
        if self.ranks_chains and req_context is not None and key not in self.bypassed:
            self._join_chain((key,), req_context)

    def _join_chain(self, keys: Sequence[Any], req_context) -> list[Any]:
        """The keys, each at its position, join their running request's chain; those that
        did (none without positions)."""
        get = getattr(req_context, "get_offload_key_position", None)
        if get is None:
            return []
        chains = self.chains
        if req_context is not chains.last_context:  # vLLM inserts a request's keys in a row
            chains.last_context, chains.last_chain = req_context, chains.of_request(req_context)
        chain = chains.last_chain
        if chain is None:
            return []
        join = self.chains.join
        return [key for key in keys if (end := get(key)) is not None and join(key, end, chain)]

    def sync(self) -> None:
        """Tell the policy of the chunks vLLM inserted since its last decision, in order.

        vLLM inserts every chunk it stores, one call each; the policy need not hear of them
        until it next decides (`touch`, `evict`, `remove`), so `insert` costs vLLM no Python
        and the policy gets them in one `insert_all`. It is told the same inserts in the same
        order between the same decisions as if told one by one. New chunks are the last ones
        of `chunks` (a dict keeps insertion order; removal leaves the others' order alone), and
        those still being written or already being read (`ref_cnt != 0`) are busy.
        """
        chunks = self.chunks
        new = len(chunks) - self.synced
        if new <= 0:
            return
        newest_first = list(islice(reversed(chunks), new))
        self.synced = len(chunks)
        refs = map(_REF_CNT, islice(reversed(chunks.values()), new))
        self.busy.update(compress(newest_first, refs))
        newest_first.reverse()
        self._hand_over(newest_first, None)

    def _hand_over(self, keys: list[Any], req_context) -> None:
        """Insert new chunks into the policy (or set them aside when it declines them)."""
        hand_over(self, keys, req_context)

    def remove(self, key) -> None:
        self.sync()
        if self.chunks.pop(key, None) is not None:
            self.synced -= 1
        self.busy.discard(key)
        self.bypassed.pop(key, None)
        self.chains.leave((key,))
        self.policy.remove(key)

    def touch(self, keys: Iterable[Any], req_context=None) -> None:
        """vLLM's explicit touch (its tiering manager passes one on to every tier), as vLLM's
        lru and arc make it: the keys are touched tail first, so the first one ends the most
        recent; a chunk still being written (`ref_cnt == -1`) is re-ranked (`refresh_all`), not
        referenced, as vLLM's arc keeps it in T1. Runs of either kind keep their order."""
        keys = keys if isinstance(keys, list | tuple) else list(keys)
        if req_context is not None and not hasattr(req_context, "get_offload_key_position"):
            touch_request(self, keys, req_context)
            return
        self.sync()
        if self.chains.chain_of:  # ranked on their own now, as vLLM's lru ranks a touch
            self.chains.leave(keys)
        chunks, policy = self.chunks, self.policy
        if self.busy.isdisjoint(keys):  # no chunk being written (those are busy): one run, in C
            policy.touch_all(keys[::-1])
            return
        for pending, run in groupby(
            reversed(keys), lambda k: k in chunks and _REF_CNT(chunks[k]) < 0
        ):
            (policy.refresh_all if pending else policy.touch_all)(list(run))

    def on_store_miss(self, keys: Iterable[Any], req_context=None) -> None:
        """Keys about to be inserted: note their metadata, since vLLM's `insert` has no context,
        and ask the policy's admission now, before vLLM evicts room for them, as hkv's replay
        does (asked at `insert`, after the eviction, a policy would always find room).

        A store miss is not a reference to a resident block, so nothing is touched.
        """
        if self.shared_meta is not None and self.admits_all:
            return  # the policy reads no metadata and admits everything
        keys = list(keys)
        pending, limit = self.pending_meta, 4 * self.cache_capacity
        if len(pending) > limit or len(self.decided) > limit:
            pending.clear()  # stores that never happened (a refused prepare_store)
            self.decided.clear()
        if self.shared_meta is None:
            metas = block_metas(
                keys, req_context, self.block_tokens, self.text_metas, self.span_metas
            )
            before = len(pending)
            pending.update(zip(keys, metas, strict=True))
            if len(pending) - before != len(keys):  # a key given twice: its last meta
                metas = list(map(pending.__getitem__, keys))
        else:
            metas = [self.shared_meta] * len(keys)
        self.note_misses(keys, metas)

    def note_misses(self, keys: list[Any], metas: list[BlockMeta]) -> None:
        """Tell the policy of a request's store misses, `keys` and their `metas` (if it
        listens) and take its admission decisions for them, used when vLLM inserts them
        (`_hand_over`)."""
        self.sync()
        policy = self.policy
        if policy.notes_misses:
            policy.note_misses(keys, metas)
        if self.admits_all:
            return
        if not policy.admits_now:  # a key again: a later request's offer, asked afresh
            self.settle()
            self.decided.update(zip(keys, policy.admit_each(keys, metas), strict=True))
        elif self.decided:  # `auto` led by a policy that admits everything: no call a key
            self.decided.update(dict.fromkeys(keys, True))
        else:  # nor a verdict kept, until the policy no longer admits everything (`settle`)
            self.unrecorded = True

    def settle(self) -> None:
        """Once the policy no longer admits everything now (`auto` switched), the keys noted
        while it did and kept no verdict (`note_misses`) get theirs, as kept at their miss:
        admitted. Every noted key is in `pending_meta` until its insert (or both are cleared)."""
        if self.unrecorded and not self.policy.admits_now:
            self.unrecorded = False
            decided = self.decided
            for key in self.pending_meta:
                decided.setdefault(key, True)

    def on_request_access(self, keys: Iterable[Any], req_context) -> None:
        """vLLM 0.33: keys a running request shows for the first time. The resident ones join
        its chain and are re-ranked now, tail first (`refresh_all`: not a reference, which is
        counted at the request's end), as vLLM's lru raises them to the request's rank: a
        prefix the request reuses then outlives the tail it stores."""
        if not self.ranks_chains:
            return
        self.sync()
        policy = self.policy
        joined = self._join_chain([key for key in keys if key in policy], req_context)
        if joined:
            policy.refresh_all(joined[::-1])

    def on_request_finished(
        self, key_groups: Sequence[Sequence[Any]], insertion_only_keys, reused_keys, req_context
    ) -> None:
        """One access per request, as in hkv's replay: the policy hears which of the request's
        blocks it stored and which were resident before it (`after_request`, each in prefix
        order); blocks it only inserted are not touched (their insert was their reference), or
        frequency-based policies would count them twice, but re-ranked so that chains go from
        the tail.

        A hybrid model's request has one chain per KV-cache group (full attention, sliding
        window, ...), and a prefix hit needs every group's head. The groups' keys are therefore
        ranked as one chain, by token position across the groups (ties in group order), as
        vLLM's own lru and arc rank them: every group's tail goes before any group's head.
        Ranked group by group, the first group's whole chain would go before the last group's
        tail."""
        self.sync()
        positions = getattr(req_context, "_offload_key_positions", None)
        split = None
        if type(positions) is dict and isinstance(insertion_only_keys, set | frozenset):
            split = prefix_split(key_groups, positions, insertion_only_keys)  # one C call
        if split is None:
            keys = [key for group in key_groups for key in group]
            split = split_stored(in_prefix_order(keys, req_context), insertion_only_keys)
        self.policy.after_request(*split)
        if self.chains.chain_of:
            self.chains.finish(req_context)

    def evict(self, n: int, protected):
        if n <= 0:
            return []
        # The resident ones of `protected` join `busy` for this call only: O(len(protected)),
        # where a union would copy `busy` (thousands of chunks in flight) on every eviction.
        self.sync()
        busy = self.busy
        added = (self.chunks.keys() & _as_set(protected)) - busy if protected else ()
        busy.update(added)
        first: list[Any] = []
        try:
            first = self._first_victims(n, busy)
            busy.update(first)  # the policy picks the others
            rest = self._policy_evict(n - len(first), busy) if len(first) < n else []
        finally:
            busy.difference_update(added)
            busy.difference_update(first)
        if rest is None:
            return None  # nothing changed: the policy refused and no bypassed key was taken
        for key in first:
            if key in self.bypassed:
                del self.bypassed[key]
            else:
                self.policy.remove(key)
        if first and self.chains.chain_of:
            self.chains.leave(first)
        victims = first + rest if first else rest
        self.synced -= len(victims)
        return list(zip(victims, map(self.chunks.pop, victims), strict=True))

    def _first_victims(self, n: int, unevictable: set[Any]) -> list[Any]:
        """Blocks that go before the policy's choice: those it declined, then stale chains'."""
        first = self._bypassed_victims(n, unevictable) if self.bypassed else []
        if self.chains.stale and len(first) < n:
            first += self.chains.stale_victims(n - len(first))
        return first

    def _policy_evict(self, n: int, unevictable: set[Any]) -> list[Any] | None:
        """The policy's victims; a running request's blocks go deepest first (`chains`)."""
        chains = self.chains
        if not chains.chain_of:
            return self.policy.evict(n, unevictable)
        victims = self.policy.evict_chains(n, unevictable, chains.stand_ins())
        if victims:
            chains.evicted(victims)
        return victims

    def _bypassed_victims(self, n: int, unevictable: set[Any]) -> list[Any]:
        """Up to `n` evictable blocks that the policy declined, oldest first."""
        return list(islice(filterfalse(unevictable.__contains__, self.bypassed), n))

    def clear(self) -> None:
        self.synced = 0
        self.chunks.clear()
        self.busy.clear()
        self.bypassed.clear()
        self.pending_meta.clear()
        self.decided.clear()
        self.unrecorded = False
        self.touched_requests.clear()
        self.chains.clear()
        self.policy.clear()

    def meta(self, key, req_context) -> BlockMeta:
        return block_meta(key, req_context, self.block_tokens)


_REF_CNT = attrgetter("ref_cnt")


@cache
def _insert_takes_no_context() -> bool:
    """Whether the running vLLM calls `CachePolicy.insert(key, chunk)` (0.26 to 0.32)."""
    try:
        parameters = inspect.signature(CachePolicy.insert).parameters
    except (TypeError, ValueError):
        return False
    return len(parameters) == 3  # self, key, chunk


def _as_set(keys: Iterable[Any]) -> set[Any] | frozenset[Any]:
    return keys if isinstance(keys, set | frozenset) else set(keys)


@cache
def policy_class(name: str) -> type[HkvCachePolicy]:
    """The vLLM `CachePolicy` class for hkv policy `name` (`hkv_` prefix optional)."""
    bare = name.removeprefix(PREFIX)
    if bare not in policy_names():
        valid = ", ".join(PREFIX + n for n in policy_names())
        raise AttributeError(
            f"hkv has no vLLM eviction policy {name!r}; set eviction_policy to one of {valid} "
            f"with cache_policy_module_path {PACKAGE!r}"
        )
    try:
        online_policy_class(bare, runner="vLLM")
    except HkvError as exc:
        raise AttributeError(f"eviction_policy {name!r}: {exc}") from None
    return type(PREFIX + bare, (HkvCachePolicy,), {"hkv_policy": bare, "__module__": PACKAGE})
