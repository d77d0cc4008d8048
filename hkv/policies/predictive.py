"""An online learned policy: will a block be referenced again within the tier's horizon?"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from hkv.blocks import BlockMeta, Modality
from hkv.policies.base import EvictionPolicy, Key, check_float, check_int
from hkv.policies.queue import QueuePolicy

_DEPTHS, _COUNTS, _GAPS = 8, 4, 8
MODALITY_INDEX = {Modality.TEXT: 0, Modality.VISION: 1, Modality.AUDIO: 2}
"""A modality's index in a bucket (and in the native shadows' blocks)."""
_COARSE = _COUNTS * _GAPS * 2  # (references so far, last gap, extends): the prior of a bucket
_BUCKETS = _DEPTHS * 3 * _COARSE
# The two parts of a bucket that depend on the reference, looked up on the path of every one
# (`_bucket` says how they add up), each by a bit length (at most 64: ages and block indices
# below 2**64). (depth x 3 + modality) x _COARSE, by modality, then by the bit length of the
# block's index in its sequence (the depth, capped)
_FINE = {
    modality: tuple((min(bits, _DEPTHS - 1) * 3 + index) * _COARSE for bits in range(65))
    for modality, index in MODALITY_INDEX.items()
}
# (references so far x _GAPS + gap) x 2, by references so far (3: 3 or more), then by the bit
# length of the age of the previous one in eighths of a horizon (the gap is one more, capped;
# gap 0 is "no previous reference")
_EARLIER = tuple(
    tuple((references * _GAPS + min(bits + 1, _GAPS - 1)) * 2 for bits in range(65))
    for references in range(_COUNTS)
)
_PRIOR_WEIGHT = 4.0  # pseudo-labels a bucket borrows from its coarse parent
# of a history record: [clock, bucket (None once labelled), references so far, key]
_CLOCK = itemgetter(0)


@dataclass(eq=False)
class PredictivePolicy(QueuePolicy):
    """Predicts, per block, whether it returns within the tier's horizon; learns online.

    In the spirit of Hawkeye (Jain & Lin, ISCA 2016) with a bucketed estimator instead of a PC-
    indexed predictor. Time is the tier's own clock: one tick per stored block. The horizon is
    `horizon_factor x capacity_blocks` ticks, about how long an unreferenced block survives
    under LRU. Every reference (insert or touch) is filed under a bucket of what the policy
    sees then: depth in the prefix chain (log2 of `meta.position / meta.tokens`, 8 buckets),
    references so far (0, 1, 2, 3+), the gap since the previous one (log2 of gap / horizon, 8
    buckets), modality, and whether the request extended an earlier one (its first stored
    block is not at position 0: the blocks before it were cached). A request starts where
    positions restart or after `after_request`.

    Labels are causal: a bucket earns a positive label when the block is referenced again
    within the horizon, a negative one when it is referenced later or when the horizon passes
    without a reference (found by a sweep over a log of references, every horizon or 256 stores).
    Each bucket's estimate `p` is (positives + 4 x its coarse parent's rate) / (labels + 4); the
    table is rebuilt every `update_every` labels (the model's update cadence), and all counts
    halve every `window x horizon` labels (its state window). History is kept for blocks seen
    within the last `8 x horizon` ticks.

    Eviction: blocks predicted not to return (`p < friendly_threshold`) sit in an averse queue
    that is emptied first, then friendly blocks go least recently used first; a friendly block
    unreferenced for a whole horizon is demoted to the averse queue's eviction end (its
    prediction has failed). This is "farthest predicted next use" at two levels of resolution.
    Admission: when the tier is full, a block whose bucket has at least `min_samples` labels
    and `p < admit_threshold` is not stored, and neither is the rest of its request's chain
    (a prefix cache cannot serve a block whose parent is missing).
    """

    horizon_factor: float = 1.0
    friendly_threshold: float = 0.25
    admit_threshold: float = 0.02
    min_samples: int = 64
    update_every: int = 512
    window: int = 16
    name = "predictive"
    # Running requests' chains not ranked (vLLM 0.33): its queues are reuse-distance buckets,
    # not recency; a request's blocks are ordered when it ends (`after_request`).
    evict_chains = EvictionPolicy.evict_chains

    def validate(self) -> None:
        check_float(self.name, "horizon_factor", self.horizon_factor, 0.0, 64.0, open_low=True)
        check_float(self.name, "friendly_threshold", self.friendly_threshold, 0.0, 1.0)
        check_float(self.name, "admit_threshold", self.admit_threshold, 0.0, 1.0)
        check_int(self.name, "min_samples", self.min_samples, 1)
        check_int(self.name, "update_every", self.update_every, 1)
        check_int(self.name, "window", self.window, 1)

    def reset(self) -> None:
        self._averse: OrderedDict[Key, BlockMeta] = OrderedDict()  # evicted first, oldest first
        self._friendly: OrderedDict[Key, BlockMeta] = OrderedDict()  # least recently used first
        self._queues = (self._averse, self._friendly)
        self._horizon = max(1, round(self.horizon_factor * self.capacity_blocks))
        self._sweep_every = min(256, self._horizon)
        self._clock = self._labels = self._halved_at = 0
        # key -> the record of its latest reference: [clock, bucket, count, key]; the bucket
        # becomes None once labelled (by the key's next reference or by the sweep)
        self._seen: dict[Key, list] = {}
        self._log: list[list] = []  # every reference's record, oldest first
        self._log_at = 0  # entries before it are past the horizon (labelled)
        self._drop_at = 0  # entries before it are past 8 horizons (the log is trimmed there)
        self._expiring: list[list] = []  # the entries the sweep labelled, oldest first
        self._expiring_at = 0  # of those, the ones before it were scanned for forgetting
        self._kept: list[list] = []  # of those, the ones kept for a resident key
        # labels since the last rebuild, in order: the bucket of each, and of each positive one
        self._labelled: list[int] = []
        self._returned: list[int] = []
        self._pos, self._num = np.zeros(_BUCKETS), np.zeros(_BUCKETS)
        self._coarse_pos, self._coarse_num = np.zeros(_COARSE), np.zeros(_COARSE)
        self._p = np.ones(_BUCKETS)  # optimistic until labels arrive: behaves as LRU
        self._trusted = np.zeros(_BUCKETS, dtype=bool)
        # per bucket, what the hot paths read (from `_p` and `_trusted` at each rebuild):
        # whether a block filed there goes to the friendly queue, and whether admission declines
        self._friendly_at = [True] * _BUCKETS
        self._declined_at = [False] * _BUCKETS
        self._request_last = -1  # position of the request's last offered block
        self._extends = 0
        self._declining = False
        self._pending: dict[Key, int] = {}  # admitted key -> its bucket

    # -- features and labels --------------------------------------------------------------
    # `touch_all`, on the path of every hit, computes the same bucket inline
    def _bucket(self, record: list | None, meta: BlockMeta) -> int:
        """The bucket of a reference to a block whose latest reference is `record` (None:
        none remembered): (depth x 3 + modality) x _COARSE + (references so far x _GAPS +
        gap) x 2 + extends, the first term from `_FINE` and the second from `_EARLIER`."""
        bucket = _FINE[meta.modality][(meta.position // (meta.tokens or 1)).bit_length()]
        if record is not None:
            count = record[2]
            age = (self._clock - record[0]) * 8 // self._horizon
            bucket += _EARLIER[count if count < 3 else 3][age.bit_length()]
        return bucket + self._extends

    def _label(self, bucket: int, returned: bool) -> None:
        """A label for `bucket`, filed for the next rebuild (nothing reads the counts before)."""
        labelled = self._labelled
        labelled.append(bucket)
        if returned:
            self._returned.append(bucket)
        if len(labelled) == self.update_every:
            self._refresh_model()

    def _label_negatives(self, buckets: list[int]) -> None:
        """`_label(bucket, False)` for each of `buckets` in order, a rebuild's worth at a time."""
        labelled, every = self._labelled, self.update_every
        while len(labelled) + len(buckets) >= every:
            room = every - len(labelled)
            labelled.extend(buckets[:room])
            buckets = buckets[room:]
            self._refresh_model()
            labelled = self._labelled
        labelled.extend(buckets)

    def _add_labels(self, pos: np.ndarray, num: np.ndarray, coarse_pos, coarse_num) -> None:
        """Add the labels filed since the last rebuild to the given count tables, in place.
        `np.add.at` adds 1.0 once per label, in order: the same sums as adding them one at a
        time."""
        labelled = np.array(self._labelled, dtype=np.intp)
        returned = np.array(self._returned, dtype=np.intp)
        np.add.at(pos, returned, 1.0)
        np.add.at(num, labelled, 1.0)
        np.add.at(coarse_pos, returned % _COARSE, 1.0)
        np.add.at(coarse_num, labelled % _COARSE, 1.0)

    def _refresh_model(self) -> None:
        """Rebuild the prediction table (batched: once per `update_every` labels)."""
        self._add_labels(self._pos, self._num, self._coarse_pos, self._coarse_num)
        self._labels = labels = self._labels + len(self._labelled)
        self._labelled, self._returned = [], []
        if labels - self._halved_at >= self.window * self._horizon:
            self._halved_at = labels
            for table in (self._pos, self._num, self._coarse_pos, self._coarse_num):
                table *= 0.5
        cpos, cnum, weight = self._coarse_pos, self._coarse_num, _PRIOR_WEIGHT
        total = sum(cnum.tolist())  # in order, as Python adds them (numpy's sum pairs them)
        base = sum(cpos.tolist()) / total if total else 1.0
        # elementwise in numpy (the same IEEE operations as the Python expressions), per bucket
        # of `_BUCKETS // _COARSE` fine buckets under each coarse one
        prior = (cpos + weight * base) / (cnum + weight)
        num = self._num.reshape(-1, _COARSE)
        pos = self._pos.reshape(-1, _COARSE)
        self._p = p = ((pos + weight * prior) / (num + weight)).ravel()
        self._trusted = trusted = (cnum + num >= self.min_samples).ravel()
        self._friendly_at = (p >= self.friendly_threshold).tolist()
        self._declined_at = (trusted & (p < self.admit_threshold)).tolist()

    def _sweep(self) -> None:
        """Negative labels for references the horizon has passed without a return; forget
        blocks not seen for 8 horizons (resident ones are kept). The log's clocks never
        decrease, so each pass ends where a binary search says."""
        log, at, clock = self._log, self._log_at, self._clock
        end = bisect_left(log, clock - self._horizon, at, key=_CLOCK)
        negatives, expiring = [], self._expiring
        for record in log[at:end]:
            if record[1] is not None:  # its key's latest reference, not yet labelled
                negatives.append(record[1])
                record[1] = None
                expiring.append(record)
        self._label_negatives(negatives)
        self._forget(end)

    def _forget(self, end: int) -> None:
        """Forget the history of keys whose latest reference is past 8 horizons, unless the
        key is resident (then checked again every sweep until the log is trimmed: `_kept`).
        Only a reference that the sweep labelled can still be its key's latest by then (one
        labelled by the key's next reference never is again): those are `_expiring`, in log
        order, and each is scanned once. `end`: where the labelled part of the log ends."""
        log, expiring, oldest = self._log, self._expiring, self._clock - 8 * self._horizon
        first = self._expiring_at
        last = bisect_left(expiring, oldest, first, key=_CLOCK)
        seen, averse, friendly = self._seen, self._averse, self._friendly
        kept = []
        for record in (*self._kept, *expiring[first:last]):
            key = record[3]
            if seen.get(key) is record:
                if key in averse or key in friendly:
                    kept.append(record)
                else:
                    del seen[key]
        stop = bisect_left(log, oldest, self._drop_at, end, key=_CLOCK)
        if stop > 1024:
            del log[:stop], expiring[:last]
            end, stop, last, kept = end - stop, 0, 0, []
        self._log_at, self._drop_at, self._expiring_at, self._kept = end, stop, last, kept

    # -- the policy -----------------------------------------------------------------------
    def admit(self, key: Key, meta: BlockMeta) -> bool:
        """Decline blocks predicted not to return within the horizon, and the rest of their
        request's chain, once the tier is full and the prediction rests on enough labels."""
        position, last = meta.position, self._request_last
        if position <= last or last < 0:  # the first block of a request
            self._extends = int(position > 0)
            self._declining = False
        self._request_last = position
        bucket = self._bucket(self._seen.get(key), meta)
        pending = self._pending
        if len(pending) > self.capacity_blocks:
            pending.clear()  # admitted keys whose store never happened
        pending[key] = bucket
        if self._declining:
            return False
        if len(self._averse) + len(self._friendly) < self.capacity_blocks:
            return True
        if self._declined_at[bucket]:  # full: judged
            self._declining = True
            return False
        return True

    def insert(self, key: Key, meta: BlockMeta) -> None:
        averse, friendly = self._averse, self._friendly
        size = len(averse) + len(friendly)
        if size >= self.capacity_blocks or key in averse or key in friendly:
            self._check_insert(key, size, key in averse or key in friendly)  # raises
        seen, clock = self._seen, self._clock
        record = seen.get(key)
        bucket = self._pending.pop(key, None)
        if bucket is None:
            bucket = self._bucket(record, meta)
        count = 1
        if record is not None:  # the key's latest reference, labelled now if not yet
            count += record[2]
            if record[1] is not None:
                self._label(record[1], clock - record[0] <= self._horizon)
                record[1] = None
        seen[key] = record = [clock, bucket, count, key]
        self._log.append(record)
        (friendly if self._friendly_at[bucket] else averse)[key] = meta
        self._clock = clock = clock + 1
        if not clock % self._sweep_every:
            self._sweep()
            self._demote_stale()

    def touch(self, key: Key) -> None:
        self.touch_all((key,))

    def touch_all(self, keys: Iterable[Key]) -> None:
        """A reference to each resident key of `keys`, in order: `_bucket`, then the labelling
        and filing of `insert`, inline, with one lookup of each key's history (the path every
        hit takes: the replay touches a request's hit prefix in one call)."""
        averse, friendly, seen, log = self._averse, self._friendly, self._seen, self._log
        clock, horizon, extends = self._clock, self._horizon, self._extends
        for key in keys:
            meta = averse.pop(key, None)
            if meta is None:
                meta = friendly.pop(key, None)
                if meta is None:
                    continue
            record = seen.get(key)
            fine = _FINE[meta.modality][(meta.position // (meta.tokens or 1)).bit_length()]
            bucket = fine + extends
            if record is None:
                count = 1
            else:
                age, count = clock - record[0], record[2]
                bucket += _EARLIER[count if count < 3 else 3][(age * 8 // horizon).bit_length()]
                if record[1] is not None:  # `_label`, inline
                    labelled = self._labelled
                    labelled.append(record[1])
                    if age <= horizon:
                        self._returned.append(record[1])
                    record[1] = None
                    if len(labelled) == self.update_every:
                        self._refresh_model()
                count += 1
            seen[key] = record = [clock, bucket, count, key]
            log.append(record)
            (friendly if self._friendly_at[bucket] else averse)[key] = meta

    def after_request(self, stored, reused) -> None:
        super().after_request(stored, reused)
        self._request_last = -1  # the next offer starts a request

    def _demote_stale(self) -> None:
        """Friendly blocks unreferenced for a horizon go to the averse queue's eviction end."""
        friendly, averse, seen = self._friendly, self._averse, self._seen
        oldest = self._clock - self._horizon
        while friendly:
            key = next(iter(friendly))
            if seen[key][0] >= oldest:
                break
            averse[key] = friendly.pop(key)
            averse.move_to_end(key, last=False)

    def restore_native(self, state: dict, keys, metas) -> None:
        """Take the whole state of a native shadow of this policy (`Shadows.predictive_state`,
        a fresh policy of the same capacity and default fields): `keys` and `metas` give the
        key and meta of each id it names. A log entry whose serial is its key's latest record's
        is that record (one object, as `_forget` tests by identity); the others were labelled."""
        records: dict[int, list] = {}
        seen = {}
        for key, clock, bucket, count, serial in zip(*state["seen"], strict=True):
            seen[keys[key]] = records[serial] = [clock, bucket, count, keys[key]]

        def entries(name: str) -> list[list]:
            out = []
            for clock, key, serial in zip(*state[name], strict=True):
                record = records.get(serial)
                if record is None:
                    record = records[serial] = [clock, None, 0, keys[key]]
                out.append(record)
            return out

        self._seen, self._log = seen, entries("log")
        self._expiring, self._kept = entries("expiring"), entries("kept")
        for name in ("clock", "labels", "halved_at", "log_at", "drop_at", "expiring_at"):
            setattr(self, f"_{name}", state[name])
        self._request_last, self._extends = state["request_last"], state["extends"]
        self._declining = bool(state["declining"])
        self._labelled, self._returned = list(state["labelled"]), list(state["returned"])
        for name in ("pos", "num", "coarse_pos", "coarse_num", "p"):
            setattr(self, f"_{name}", np.array(state[name], dtype=float))
        self._trusted = np.array(state["trusted"], dtype=bool)
        self._friendly_at = (self._p >= self.friendly_threshold).tolist()
        self._declined_at = (self._trusted & (self._p < self.admit_threshold)).tolist()
        self._pending = {keys[key]: bucket for key, bucket in state["pending"].items()}
        self._averse = OrderedDict((keys[k], metas[k]) for k in state["averse"][0])
        self._friendly = OrderedDict((keys[k], metas[k]) for k in state["friendly"][0])
        self._queues = (self._averse, self._friendly)

    # -- read-only view of what the model learned (for reports; decisions do not use it) ----
    def learned_table(self) -> list[dict]:
        """One row per bucket that holds labels: its features, its estimate `p` (as of the
        last table rebuild), its (decayed) label count and positives, and whether admission
        trusts it. `references` is the references before this one (0: a first reference)."""
        modalities = {index: modality.value for modality, index in MODALITY_INDEX.items()}
        positives, labels = self._pos.copy(), self._num.copy()
        self._add_labels(positives, labels, self._coarse_pos.copy(), self._coarse_num.copy())
        pos, num_labels = positives.tolist(), labels.tolist()
        p, trusted = self._p.tolist(), self._trusted.tolist()
        rows = []
        for bucket, num in enumerate(num_labels):
            if not num:
                continue
            fine, coarse = divmod(bucket, _COARSE)
            rest, extends = divmod(coarse, 2)
            references, gap = divmod(rest, _GAPS)
            depth, modality = divmod(fine, 3)
            rows.append(
                {
                    "depth": depth,
                    "modality": modalities[modality],
                    "references": references,
                    "gap": gap,
                    "extends": bool(extends),
                    "p": p[bucket],
                    "labels": num,
                    "positives": pos[bucket],
                    "trusted": trusted[bucket],
                }
            )
        return rows
