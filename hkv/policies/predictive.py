"""An online learned policy: will a block be referenced again within the tier's horizon?"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from hkv.blocks import BlockMeta, Modality
from hkv.policies.base import Key, check_float, check_int
from hkv.policies.queue import QueuePolicy

_DEPTHS, _COUNTS, _GAPS = 8, 4, 8
_MODALITIES = {Modality.TEXT: 0, Modality.VISION: 1, Modality.AUDIO: 2}
_TEXT = Modality.TEXT
_COARSE = _COUNTS * _GAPS * 2  # (references so far, last gap, extends): the prior of a bucket
_BUCKETS = _DEPTHS * 3 * _COARSE
_PRIOR_WEIGHT = 4.0  # pseudo-labels a bucket borrows from its coarse parent
_CLOCK = itemgetter(0)  # of a history record: [clock, bucket or None, count, key]


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
        self._drop_at = 0  # entries before it are past 8 horizons (scanned for forgetting)
        self._kept: list[list] = []  # of those, the ones kept for a resident key
        # labels since the last rebuild, in order: the bucket of each, and of each positive one
        self._labelled: list[int] = []
        self._returned: list[int] = []
        self._pos, self._num = np.zeros(_BUCKETS), np.zeros(_BUCKETS)
        self._coarse_pos, self._coarse_num = np.zeros(_COARSE), np.zeros(_COARSE)
        self._p = [1.0] * _BUCKETS  # optimistic until labels arrive: behaves as LRU
        self._trusted = [False] * _BUCKETS
        self._request_last = -1  # position of the request's last offered block
        self._extends = 0
        self._declining = False
        self._pending: dict[Key, int] = {}  # admitted key -> its bucket

    # -- features and labels --------------------------------------------------------------
    def _bucket(self, key: Key, meta: BlockMeta) -> int:
        record = self._seen.get(key)
        if record is None:
            coarse = self._extends
        else:
            gap = (self._clock - record[0]) * 8 // self._horizon
            gap_bucket = min(gap.bit_length() + 1, _GAPS - 1)  # 0: no earlier reference
            coarse = (min(record[2], 3) * _GAPS + gap_bucket) * 2 + self._extends
        depth = min((meta.position // (meta.tokens or 1)).bit_length(), _DEPTHS - 1)
        return (depth * 3 + _MODALITIES[meta.modality]) * _COARSE + coarse

    def _record(self, key: Key, bucket: int) -> None:
        """A reference to `key` now, filed under `bucket`; labels its previous reference."""
        seen, clock = self._seen, self._clock
        record = seen.get(key)
        count = 1
        if record is not None:
            count += record[2]
            if record[1] is not None:
                self._label(record[1], clock - record[0] <= self._horizon)
                record[1] = None
        seen[key] = record = [clock, bucket, count, key]
        self._log.append(record)

    def _label(self, bucket: int, returned: bool) -> None:
        """A label for `bucket`, filed for the next rebuild (nothing reads the counts before)."""
        labelled = self._labelled
        labelled.append(bucket)
        if returned:
            self._returned.append(bucket)
        if len(labelled) == self.update_every:
            self._refresh_model()

    def _counted(self) -> tuple[np.ndarray, ...]:
        """(pos, num, coarse_pos, coarse_num): the counts with the labels filed since the last
        rebuild added. `np.add.at` adds 1.0 once per label, in order: the same sums as adding
        them one at a time."""
        labelled = np.array(self._labelled, dtype=np.intp)
        returned = np.array(self._returned, dtype=np.intp)
        counts = []
        for table, buckets in (
            (self._pos, returned),
            (self._num, labelled),
            (self._coarse_pos, returned % _COARSE),
            (self._coarse_num, labelled % _COARSE),
        ):
            table = table.copy()
            np.add.at(table, buckets, 1.0)
            counts.append(table)
        return tuple(counts)

    def _refresh_model(self) -> None:
        """Rebuild the prediction table (batched: once per `update_every` labels)."""
        self._pos, self._num, self._coarse_pos, self._coarse_num = self._counted()
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
        self._p = ((pos + weight * prior) / (num + weight)).ravel().tolist()
        self._trusted = (cnum + num >= self.min_samples).ravel().tolist()

    def _sweep(self) -> None:
        """Negative labels for references the horizon has passed without a return; forget
        blocks not seen for 8 horizons (resident ones are kept). The log's clocks never
        decrease, so each pass ends where a binary search says."""
        log, at, clock = self._log, self._log_at, self._clock
        end = bisect_left(log, clock - self._horizon, at, key=_CLOCK)
        label = self._label
        for record in log[at:end]:
            if record[1] is not None:  # its key's latest reference, not yet labelled
                label(record[1], False)
                record[1] = None
        # forgetting: an entry past 8 horizons goes with its key's history unless the key was
        # referenced since (it never goes then) or is resident (checked again every sweep
        # until the log is trimmed: `_kept`); each entry is scanned once
        seen, averse, friendly = self._seen, self._averse, self._friendly
        drop = self._drop_at
        stop = bisect_left(log, clock - 8 * self._horizon, drop, end, key=_CLOCK)
        kept = []
        for record in (*self._kept, *log[drop:stop]):
            key = record[3]
            if seen.get(key) is record:
                if key in averse or key in friendly:
                    kept.append(record)
                else:
                    del seen[key]
        if stop > 1024:
            del log[:stop]
            end, stop, kept = end - stop, 0, []
        self._log_at, self._drop_at, self._kept = end, stop, kept

    # -- the policy -----------------------------------------------------------------------
    def _new_request(self, position: int) -> None:
        self._extends = int(position > 0)
        self._declining = False

    def admit(self, key: Key, meta: BlockMeta) -> bool:
        """Decline blocks predicted not to return within the horizon, and the rest of their
        request's chain, once the tier is full and the prediction rests on enough labels."""
        position = meta.position
        if position <= self._request_last or self._request_last < 0:
            self._new_request(position)
        self._request_last = position
        bucket = self._bucket(key, meta)
        pending = self._pending
        if len(pending) > self.capacity_blocks:
            pending.clear()  # admitted keys whose store never happened
        pending[key] = bucket
        if self._declining:
            return False
        if len(self._averse) + len(self._friendly) < self.capacity_blocks:
            return True
        if self._trusted[bucket] and self._p[bucket] < self.admit_threshold:  # full: judged
            self._declining = True
            return False
        return True

    def insert(self, key: Key, meta: BlockMeta) -> None:
        averse, friendly = self._averse, self._friendly
        size = len(averse) + len(friendly)
        if size >= self.capacity_blocks or key in averse or key in friendly:
            self._check_insert(key, size, key in averse or key in friendly)  # raises
        bucket = self._pending.pop(key, None)
        if bucket is None:
            bucket = self._bucket(key, meta)
        self._record(key, bucket)
        (friendly if self._p[bucket] >= self.friendly_threshold else averse)[key] = meta
        self._clock = clock = self._clock + 1
        if not clock % self._sweep_every:
            self._sweep()
            self._demote_stale()

    def touch(self, key: Key) -> None:
        """A reference to a resident block: `_bucket` then `_record` with one lookup of the
        key's history (the same bucket and labels), on the path every hit takes."""
        meta = self._averse.pop(key, None)
        if meta is None:
            meta = self._friendly.pop(key, None)
            if meta is None:
                return
        seen, clock = self._seen, self._clock
        record = seen.get(key)
        depth = (meta.position // (meta.tokens or 1)).bit_length()
        modality = meta.modality
        mod = 0 if modality is _TEXT else _MODALITIES[modality]
        bucket = ((depth if depth < _DEPTHS else _DEPTHS - 1) * 3 + mod) * _COARSE + self._extends
        if record is None:
            count = 1
        else:
            age, count = clock - record[0], record[2]
            gap_bucket = (age * 8 // self._horizon).bit_length() + 1
            gap_bucket = gap_bucket if gap_bucket < _GAPS else _GAPS - 1
            bucket += ((count if count < 3 else 3) * _GAPS + gap_bucket) * 2
            if record[1] is not None:
                self._label(record[1], age <= self._horizon)
                record[1] = None
            count += 1
        seen[key] = record = [clock, bucket, count, key]
        self._log.append(record)
        friendly = self._p[bucket] >= self.friendly_threshold
        (self._friendly if friendly else self._averse)[key] = meta

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

    # -- read-only view of what the model learned (for reports; decisions do not use it) ----
    def learned_table(self) -> list[dict]:
        """One row per bucket that holds labels: its features, its estimate `p` (as of the
        last table rebuild), its (decayed) label count and positives, and whether admission
        trusts it. `references` is the references before this one (0: a first reference)."""
        modalities = {index: modality.value for modality, index in _MODALITIES.items()}
        pos, num_labels = (counts.tolist() for counts in self._counted()[:2])
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
                    "p": self._p[bucket],
                    "labels": num,
                    "positives": pos[bucket],
                    "trusted": self._trusted[bucket],
                }
            )
        return rows
