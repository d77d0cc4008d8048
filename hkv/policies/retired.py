"""The leaders a sampled `auto` left, and how a switch there builds its new leader (the
`AutoPolicy` docstring says why a sampled tier's leader is rebuilt from the requests kept)."""

from __future__ import annotations

from typing import Any

from hkv.policies.base import EvictionPolicy
from hkv.policies.history import History, kept, whole
from hkv.policies.rebuild import rebuilt_in_c
from hkv.policies.shadow import ShadowSet, make_expert
from hkv.policies.tier import VllmTier


class Retired(dict):
    """A sampled `auto`'s leaders it switched away from, by expert index: (the live instance,
    `history.remembered` when it left), while the history still holds the requests since."""

    def __init__(self, history: History) -> None:
        super().__init__()
        self.history = history

    def resumable(self, best: int) -> tuple[EvictionPolicy, int] | None:
        """Expert `best`'s last live instance and when it retired, if within the history."""
        retired = self.get(best)
        return retired if retired is not None and retired[1] >= self.history.oldest else None

    def coming(self, best: tuple[int, str], shadows: ShadowSet, capacity: int) -> tuple:
        """Expert `best` ((index, label)) rebuilt from the requests kept, begun now: replayed in
        C on the shadows' background thread where they run there (`rebuild.Rebuild`), for
        `rebuilt` to finish at the next request's end, when the engine has gone on meanwhile."""
        entries = self.history.entries()
        begun = _rebuilt(shadows, best[1], capacity, kept(entries), background=True)
        return entries, self.history.remembered, begun

    def rebuilt(self, best: tuple[int, str], leaving: tuple[int, EvictionPolicy],
                shadows: ShadowSet, capacity: int, held: dict, context: dict[str, Any],
                coming: tuple | None = None) -> EvictionPolicy:  # fmt: skip
        """Expert `best` ((index, label); the leader `leaving`, (index, instance), retires) as
        it would run the tier now: its last live instance, if it led within the history kept,
        caught up on the requests since (a flip back after a few requests then costs those
        requests, not a replay of the whole history), otherwise the rebuild `coming` began
        (the requests kept then, and those kept since), else a new one replayed over the
        history (in C for the experts of `rebuild.HANDED_OVER` where the shadows run:
        `rebuild.rebuilt_in_c`, where a prefix-value one stays as the live leader,
        `leader.NativeLeader`; the same decisions as the Python replay's)."""
        history = self.history
        (index, label), retired = best, self.resumable(best[0])
        self[leaving[0]] = (leaving[1], history.remembered)
        self.pop(index, None)
        if coming is not None:
            entries, since, begun = coming
            more = history.entries(since)
            if begun is not None:
                policy, requests = begun.finished(kept(more), held), ()
            else:
                policy, requests = make_expert(label, capacity, **context), entries + more
            requests = map(whole, requests)
        elif retired is not None:
            policy, since = retired
            requests = history.whole(since)
        else:  # replayed in C where the shadows run there and the expert can be handed over
            policy = _rebuilt(shadows, label, capacity, history.kept(), held=held)
            requests = iter(()) if policy is not None else history.whole()
            if policy is None:  # (a policy holding nothing is falsy: `is None`, not `or`)
                policy = make_expert(label, capacity, **context)
        tier = VllmTier(policy, refuses=False)
        for request in requests:
            tier.store(request)
        for index in [i for i, (_, left) in self.items() if left < history.oldest]:
            del self[index]
        return tier.policy


def _rebuilt(shadows: ShadowSet, label: str, capacity: int, requests, **how):
    """`rebuilt_in_c(live=True)` with what the shadows share (`how`: its other keywords); None
    where they do not run in C."""
    shared = shadows.rebuild_context()
    if shared is None:
        return None
    return rebuilt_in_c(label, capacity, requests, live=True, **shared, **how)
