"""`auto`, the recommended default: the learned predictor where it pays, LRU where it does not."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from hkv.policies.base import Key, check_int
from hkv.policies.predictive import PredictivePolicy

_PSEL_MAX = 1 << 14


@dataclass(eq=False)
class AutoPolicy(PredictivePolicy):
    """Set dueling (Qureshi et al., ISCA 2007, as `dip`) between plain LRU and `predictive`.

    Leader sets are conversations, not requests: a request belongs to the group of its chain's
    head block (hash of the key at the lowest position, `groups` groups), so every turn of a
    session, and every request on one shared prefix, is judged under the same policy and the
    misses a placement causes are charged to the side that made it. Group 0 always uses LRU
    (every block at the recent end), group 1 always the predictor; a saturating counter moves
    by a leader request's misses (its blocks offered for storage), and the other requests
    follow the side whose leaders miss less. The predictor learns from every request, so the
    followers switch back as soon as it pays.

    Admission is placement: on the predictor's side a block predicted not to return within the
    horizon is stored at the eviction end (the averse queue), never refused, so a wrong
    prediction costs one slot, not a chain. A request's side is known when it ends
    (`after_request`): its new blocks wait at the recent end until then, as under LRU.

    Why these two: LRU is what vLLM serves today and the floor `auto` must not fall below; the
    predictor subsumes what `arc` (frequency: references so far), `bip` (new blocks that do not
    come back go first) and `lru+store_threshold` (first references rarely return) each bet on,
    and learns which of those bets the traffic rewards.
    """

    groups: int = 8
    name = "auto"

    def validate(self) -> None:
        super().validate()
        check_int(self.name, "groups", self.groups, 3)

    def reset(self) -> None:
        super().reset()
        self._psel = _PSEL_MAX // 2
        self._offered = 0
        self._model_now = False

    def admit(self, key, meta) -> bool:
        """Files the miss (features, the duel's count); stores everything."""
        super().admit(key, meta)
        self._offered += 1
        return True

    def _declines(self, bucket: int) -> bool:
        return False

    def _is_friendly(self, bucket: int) -> bool:
        return not self._model_now or super()._is_friendly(bucket)

    def after_request(self, stored: Sequence[Key], reused: Sequence[Key]) -> None:
        group = self._group_of(stored, reused)
        misses, self._offered = self._offered, 0
        if group == 0:
            self._psel = min(self._psel + misses, _PSEL_MAX)  # LRU's leaders missed
        elif group == 1:
            self._psel = max(self._psel - misses, 0)
        self._model_now = group == 1 or (group > 1 and self._psel > _PSEL_MAX // 2)
        if self._model_now:
            self._place(stored)
        super().after_request(stored, reused)
        self._model_now = False  # until the next request's end, new blocks go in as LRU's

    def _group_of(self, stored: Sequence[Key], reused: Sequence[Key]) -> int:
        """The group of the request's chain head (its first block in prefix order)."""
        heads = [keys[0] for keys in (stored, reused) if keys]
        if not heads:
            return 2
        if len(heads) == 2:
            heads.sort(key=self._position)
        return zlib.crc32(repr(heads[0]).encode()) % self.groups  # stable across processes

    def _position(self, key: Key) -> int:
        meta = self._averse.get(key) or self._friendly.get(key)
        return meta.position if meta is not None else 1 << 62

    def _place(self, stored: Sequence[Key]) -> None:
        """The request's new blocks predicted not to return move to the averse queue."""
        friendly, averse, seen, p = self._friendly, self._averse, self._seen, self._p
        threshold = self.friendly_threshold
        for key in stored:
            record = seen.get(key)
            known = key in friendly and record is not None and record[1] is not None
            if known and p[record[1]] < threshold:
                averse[key] = friendly.pop(key)
